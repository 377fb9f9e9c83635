"""Choose the hybrid fusion defaults (RRF k, depth, weights) from measurements.

    python -m benchmarks.tune_fusion ../shared/eval --work /tmp/bench

Each retriever's ranked list is computed once per query; every parameter
combination is then fused offline with the same ``rrf`` function the engine
uses, and scored by nDCG@10 and recall@10 on five runs: scifact (300
claims), and xquad Chinese and English same-language and the two
cross-lingual directions (400 questions each). Settings are listed by their
mean nDCG@10 over the five runs. The first run embeds scifact (about 40
minutes on 2 cores); ``--work`` keeps the indexes for the next.
"""

from __future__ import annotations

import argparse
import itertools
import sys
from pathlib import Path

from vault_search.filters import SearchFilters
from vault_search.fusion import rrf
from vault_search.keyword import term_coverage
from vault_search.query import fts_query
from vault_search.search import foreign_query, retriever_lists, side_queries

from .beir import load_beir
from .metrics import ndcg_at_k, recall_at_k
from .retrieval import build_index

RUNS = [  # (name, dataset, split, doc_lang, query_lang, work folder, queries)
    ("scifact", "scifact", "test", None, None, "scifact", None),
    ("zh", "xquad", "test_same_language", "zh", "zh", "xq-zh", 400),
    ("en", "xquad", "test_same_language", "en", "en", "xq-en", 400),
    ("en->zh", "xquad", "test_cross_language", "zh", "en", "xq-zh", 400),
    ("zh->en", "xquad", "test_cross_language", "en", "zh", "xq-en", 400),
]
DEPTH = 100


def lists_for(idx, text):
    """The keyword and vector lists, DEPTH notes each, as the hybrid computes
    them before fusing (the vector list steered by the query's translation
    when it has one), and the query's word coverage."""
    fq = fts_query(text, idx.segmenter)
    coverage = term_coverage(idx.conn, fq.terms)
    translation, near = side_queries(idx, text, fq, "hybrid", coverage, foreign_query(idx, fq))
    lists, _ = retriever_lists(idx, text, fq, SearchFilters(), "hybrid", DEPTH, translation, near)
    return lists["fts"], lists.get("vector", []), coverage


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.tune_fusion", description=__doc__)
    ap.add_argument("eval_dir", type=Path, help="the shared eval folder (holding datasets/)")
    ap.add_argument("--work", type=Path, required=True, help="folder for the (reusable) indexes")
    args = ap.parse_args(argv)

    cached = {}
    for name, dataset, split, doc_lang, query_lang, folder, queries in RUNS:
        ds = load_beir(args.eval_dir / "datasets" / dataset, split, sample=queries, doc_lang=doc_lang,
                       query_lang=query_lang)
        idx, paths, _ = build_index(ds, args.work / folder, embed=True)
        note_doc = {nid: p for nid, p in idx.conn.execute("SELECT id, path FROM notes")}
        doc_of = {p: d for d, p in paths.items()}
        per_query = []
        for qid, text in ds.queries.items():
            fts, vec, cov = lists_for(idx, text)
            per_query.append((fts, vec, ds.qrels[qid], cov))
        cached[name] = (per_query, note_doc, doc_of)
        idx.close()
        print(f"{name}: {len(per_query)} queries cached", file=sys.stderr)

    grid = list(itertools.product([5, 10, 20, 60], [50, 100], [0.5, 1.0, "cov", "cov2", "1.5cov2", "2cov2"], [1.0]))
    rows = []
    for k, depth, w_fts, w_vec in grid:
        scores = {}
        for name, (per_query, note_doc, doc_of) in cached.items():
            ndcg = rec = 0.0
            for fts, vec, rel, cov in per_query:
                w = {"cov": cov, "cov2": cov ** 2, "1.5cov2": 1.5 * cov ** 2, "2cov2": 2 * cov ** 2}.get(w_fts, w_fts)
                fused = rrf({"fts": fts[:depth], "vector": vec[:depth]}, {"fts": w, "vector": w_vec}, k)
                ranked = [doc_of[note_doc[f.note_id]] for f in fused[:10]]
                ndcg += ndcg_at_k(ranked, rel, 10)
                rec += recall_at_k(ranked, rel, 10)
            scores[name] = (ndcg / len(per_query), rec / len(per_query))
        rows.append(((k, depth, w_fts, w_vec), scores))
    for name, (per_query, note_doc, doc_of) in cached.items():
        print(f"mean coverage {name}: {sum(q[3] for q in per_query) / len(per_query):.3f}")
        for label, pick in (("fts", 0), ("vector", 1)):
            ndcg = sum(ndcg_at_k([doc_of[note_doc[h.note_id]] for h in q[pick][:10]], q[2], 10)
                       for q in per_query) / len(per_query)
            rec = sum(recall_at_k([doc_of[note_doc[h.note_id]] for h in q[pick][:10]], q[2], 10)
                      for q in per_query) / len(per_query)
            print(f"baseline {name:7s} {label:6s} nDCG@10 {ndcg:.4f} R@10 {rec:.3f}")
    print("k depth w_fts w_vec | " + " | ".join(f"{n} nDCG R@10" for n in cached) + " | mean nDCG")
    rows.sort(key=lambda r: -sum(v[0] for v in r[1].values()))
    for params, scores in rows:
        mean = sum(v[0] for v in scores.values()) / len(scores)
        print(" ".join(str(p) for p in params) + " | " + " | ".join(f"{v[0]:.4f} {v[1]:.3f}" for v in scores.values())
              + f" | {mean:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
