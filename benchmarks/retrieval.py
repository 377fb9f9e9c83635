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


def build_index(dataset: Dataset, work: Path) -> tuple[Index, dict[str, str], float]:
    paths = write_vault(dataset, work / "vault")
    idx = Index.open(work / "vault", work / "index", create=True)
    t0 = time.perf_counter()
    idx.sync()
    return idx, paths, time.perf_counter() - t0


def evaluate(idx: Index, dataset: Dataset, paths: dict[str, str], mode: str, depth: int = 100) -> ModeResult:
    doc_of = {p: d for d, p in paths.items()}
    run: dict[str, list[tuple[str, float]]] = {}
    latencies = []
    sums = {f"recall@{k}": 0.0 for k in RECALL_KS} | {"mrr@10": 0.0, "ndcg@10": 0.0}
    for qid, text in dataset.queries.items():
        t0 = time.perf_counter()
        response = idx.search(text, mode=mode, limit=depth)
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
    ap.add_argument("--queries", type=int, help="sample this many queries (fixed --seed)")
    ap.add_argument("--seed", type=int, default=13)
    ap.add_argument("--modes", default="fts", help="comma-separated: fts (vector and hybrid come with embeddings)")
    ap.add_argument("--run-file", type=Path)
    ap.add_argument("--work", type=Path, help="keep the vault and index here instead of a temp folder")
    ap.add_argument("--json", action="store_true", help="print the numbers as JSON")
    args = ap.parse_args(argv)

    dataset = load_beir(args.dataset, args.split, args.lang, args.queries, args.seed)
    with tempfile.TemporaryDirectory(prefix="vs-bench-") as tmp:
        work = args.work or Path(tmp)
        idx, paths, index_s = build_index(dataset, work)
        with idx:
            results = [evaluate(idx, dataset, paths, mode) for mode in args.modes.split(",")]
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
    print(f"{dataset.name} split={args.split} lang={args.lang or 'all'}: {len(dataset.corpus)} docs, "
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
