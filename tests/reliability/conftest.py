"""The reliability suite's ledger: each test records the faults it injected
and what happened, so the README's "Reliability" table is generated from a
real run (python tests/reliability/make_table.py)."""

from __future__ import annotations

import json
import os
from collections import defaultdict

import pytest

LEDGER_ENV = "VAULT_SEARCH_RELIABILITY_LEDGER"


class Ledger:
    def __init__(self):
        self.rows: dict[tuple[str, str], dict] = defaultdict(lambda: {"tries": 0, "outcomes": set()})

    def record(self, area: str, fault: str, outcome: str, tries: int = 1) -> None:
        row = self.rows[(area, fault)]
        row["tries"] += tries
        row["outcomes"].add(outcome)


_LEDGER = Ledger()


@pytest.fixture
def ledger() -> Ledger:
    return _LEDGER


def pytest_sessionfinish(session, exitstatus):
    path = os.environ.get(LEDGER_ENV)
    if not path or not _LEDGER.rows:
        return
    rows = [{"area": a, "fault": f, "tries": r["tries"], "outcome": "; ".join(sorted(r["outcomes"]))}
            for (a, f), r in _LEDGER.rows.items()]
    with open(path, "w", encoding="utf-8") as fh:
        json.dump({"exitstatus": int(exitstatus), "rows": rows}, fh, ensure_ascii=False, indent=2)
