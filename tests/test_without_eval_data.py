"""The suite without the shared evaluation data (``../shared/eval``, or
``VAULT_SEARCH_EVAL_DIR``), as in a fresh clone alone: every module is
collected, and the quality modules are skipped with the reason, never a
collection error that stops the run."""

import os
import re
import subprocess
import sys

from conftest import LEDGER_ENV, REPO

QUALITY_MODULES = {path.relative_to(REPO).as_posix() for path in (REPO / "tests").rglob("test_*.py")
                   if re.search(r"^pytestmark = pytest\.mark\.quality$", path.read_text(encoding="utf-8"), re.M)}


def test_without_the_evaluation_data_the_quality_modules_are_skipped(tmp_path):
    assert len(QUALITY_MODULES) >= 3, QUALITY_MODULES
    missing = tmp_path / "no-eval"
    env = {k: v for k, v in os.environ.items() if k != LEDGER_ENV}   # this run must not write the ledger
    env["VAULT_SEARCH_EVAL_DIR"] = str(missing)
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "-m", "quality",
                           "tests"], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "error" not in proc.stdout.splitlines()[-1], proc.stdout[-4000:]
    skipped = re.findall(r"^SKIPPED \[\d+\] (tests/\S+?\.py)(?::\d+)?: (.*)$", proc.stdout, re.M)
    assert {module for module, _ in skipped} == QUALITY_MODULES, proc.stdout[-4000:]
    assert {reason for _, reason in skipped} == {
        f"evaluation data not found at {missing} (set VAULT_SEARCH_EVAL_DIR)"}
    assert not re.search(r"\d+ passed", proc.stdout.splitlines()[-1])   # none ran against data it lacks
