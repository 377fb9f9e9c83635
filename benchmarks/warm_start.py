"""Warm means warm: the first query once `serve` says it is ready, against the next ones.

    python -m benchmarks.warm_start [VAULT] [--work DIR] [--embed] [--rounds N] [--lang zh|en] [--json]

Copies the vault (default: oldwinter-garden-zh) into ``--work`` (or a temp
folder) and indexes it once (keyword only unless ``--embed``; an index
already in ``--work`` is reused). Then, round by round, for each mode (fts,
and with ``--embed`` also hybrid and vector) and each language of the
question (Chinese, English): a fresh `vault-search serve`, and as soon as its
``server.json`` names it (the moment an agent may call it), one search over
HTTP, then FOLLOWING more, each a question this server has not seen. Every
question is new to its server. Questions differ in cost (0.5 to 5 ms by
keyword on the tasks docs), so the comparison is paired: round r asks the
same FOLLOWING + 1 questions rotated by r, so that over FOLLOWING + 1
rounds each question is once the first and otherwise one of the next.
Reported per mode and language: the first queries' and the next ones'
median, and the median over the questions of (its time as the first) /
(its median time as one of the next): issue 38's target is at most 1.3.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from .metrics import percentile
from .server_speed import prepared, ready, search_ms, vault_arguments
from .speed import EN_QUERIES, ZH_QUERIES

FOLLOWING = 5


def serve_once(base: list[str], index: Path, mode: str, queries: list[str], extra: list[str]) -> list[float]:
    """A fresh server's answer times (ms) to ``queries``, the first one asked
    the moment its server.json names it."""
    proc = subprocess.Popen(base + ["serve", *extra], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        port = ready(proc, index)["port"]
        return [search_ms(port, q, None if mode == "default" else mode) for q in queries]
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def summary(slot: dict[str, dict[str, list[float]]]) -> dict:
    """Medians of the first and the next queries, and the median of each
    question's first time over its own next times."""
    first = [ms for v in slot["first"].values() for ms in v]
    following = [ms for v in slot["next"].values() for ms in v]
    paired = [percentile(v, 50) / percentile(slot["next"][q], 50)
              for q, v in slot["first"].items() if slot["next"].get(q)]
    return {"first_ms": round(percentile(first, 50), 1), "next_ms": round(percentile(following, 50), 1),
            "ratio": round(percentile(paired, 50), 2) if paired else None}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.warm_start", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    vault_arguments(ap)
    ap.add_argument("--rounds", type=int, default=FOLLOWING + 1,
                    help="fresh servers per mode and language (a multiple of %(default)s pairs every question)")
    ap.add_argument("--modes", help="comma-separated, of fts, hybrid, vector and default "
                    "(no mode named: on a keyword index, keyword search with translation; default: fts, "
                    "and with --embed hybrid and vector too)")
    ap.add_argument("--lang", choices=("zh", "en"), action="append", help="only these questions (default: both)")
    ap.add_argument("--no-watch", action="store_true", help="serve --no-watch (no watcher starting beside the query)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)

    tmp = tempfile.mkdtemp(prefix="vs-warm-")
    work = args.work or Path(tmp)
    try:
        _, index, base = prepared(args.vault, work, args.embed)
        modes = args.modes.split(",") if args.modes else ["fts", "hybrid", "vector"] if args.embed else ["fts"]
        times: dict[str, dict[str, dict[str, list[float]]]] = {}
        for r in range(args.rounds):
            for mode in modes:
                for lang, pool in (("zh", ZH_QUERIES), ("en", EN_QUERIES)):
                    if args.lang and lang not in args.lang:
                        continue
                    asked = pool[:FOLLOWING + 1]
                    shift = r % len(asked)
                    queries = asked[shift:] + asked[:shift]
                    got = serve_once(base, index, mode, queries, ["--no-watch"] if args.no_watch else [])
                    slot = times.setdefault(f"{mode} {lang}", {"first": {}, "next": {}})
                    slot["first"].setdefault(queries[0], []).append(got[0])
                    for q, ms in zip(queries[1:], got[1:]):
                        slot["next"].setdefault(q, []).append(ms)
    finally:
        if not args.work:
            shutil.rmtree(tmp, ignore_errors=True)

    result = {"vault": str(args.vault), "rounds": args.rounds, "cpus": os.cpu_count(), "load": os.getloadavg()[0],
              "by": {name: summary(v) for name, v in times.items()}}
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"first query once `serve` is ready, against the next ones ({args.rounds} fresh servers each; "
          "ratio: each question as the first over itself as one of the next, median):")
    for name, v in result["by"].items():
        print(f"  {name:10s} first {v['first_ms']:7.1f} ms   next {v['next_ms']:7.1f} ms   x{v['ratio']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
