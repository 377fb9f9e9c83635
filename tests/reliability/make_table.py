"""Run the fault-injection and hostile-input tests and write the
reliability table of docs/reliability.md from what they recorded.

    .venv/bin/python tests/reliability/make_table.py          # rewrites docs/reliability.md between the markers
    .venv/bin/python tests/reliability/make_table.py --print  # only prints the table

The table is written only when every test passed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SUITES = ["tests/reliability", "tests/test_live.py", "tests/test_rerank.py", "tests/test_bad_input.py",
          "tests/test_vectors.py", "tests/test_progressive_embedding.py", "tests/test_cli_safety.py", "tests/test_cli_messages.py",
          "tests/test_parse_budget.py", "tests/test_index_permissions.py", "tests/test_vault_discovery.py",
          "tests/test_hostile_round3.py", "tests/test_cross_site.py", "tests/test_pack.py", "tests/test_browser.py"]
START, END = "<!-- reliability-table:start -->", "<!-- reliability-table:end -->"
AREAS = ["crash", "vectors", "resources", "corruption", "versions", "concurrency", "hostile input", "security"]


def table(rows: list[dict]) -> str:
    rows = sorted(rows, key=lambda r: (AREAS.index(r["area"]) if r["area"] in AREAS else 99, r["fault"]))
    lines = ["| area | fault or hostile input | tries | outcome |", "|---|---|---|---|"]
    lines += [f"| {r['area']} | {r['fault']} | {r['tries']} | {r['outcome']} |" for r in rows]
    total = sum(r["tries"] for r in rows)
    return "\n".join(lines) + f"\n\n{len(rows)} kinds of fault, {total} tries, all with the outcome shown."


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--print", action="store_true", help="print the table instead of updating docs/reliability.md")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        ledger = Path(tmp) / "ledger.json"
        env = {**os.environ, "VAULT_SEARCH_RELIABILITY_LEDGER": str(ledger)}
        proc = subprocess.run([sys.executable, "-m", "pytest", "-q", *SUITES], cwd=REPO, env=env)
        if proc.returncode != 0 or not ledger.exists():
            print("tests failed: the table was not written", file=sys.stderr)
            return 1
        data = json.loads(ledger.read_text(encoding="utf-8"))
    text = table(data["rows"])
    if args.print:
        print(text)
        return 0
    page = REPO / "docs" / "reliability.md"
    content = page.read_text(encoding="utf-8")
    head, _, rest = content.partition(START)
    _, _, tail = rest.partition(END)
    if not rest:
        print(f"docs/reliability.md has no {START} marker", file=sys.stderr)
        return 1
    page.write_text(f"{head}{START}\n{text}\n{END}{tail}", encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
