"""Tune the ranking model (``vault_search/search/weights.py``) on measurements.

    python -m benchmarks.tune_fusion ../shared/eval --work /tmp/bench
    python -m benchmarks.tune_fusion ../shared/eval --work /tmp/bench --grid rrf_k=5,10 --grid title=0.5,1,2

What is tuned is what ships: each query goes through the engine's own
stages 1-3 once (``plan.prepare``, ``plan.plan_query``: coverage, the
cross-lingual rules, the side queries; ``lists.retriever_lists``: every list
the hybrid fuses, keyword, proximity, translated, vector, latent and title),
and its names and each candidate note's evidence are read once. Every
setting of the grid is then a ``weights.Model``: the query's weights come
from ``weights.fusion_weights`` under that model, and stages 4-6 run as in a
search (``fusion.rrf``, ``boosts.put_first``, ``relevance.cut``), so the
first ten notes are the ones the engine would show under that model. A
setting's depth cuts the lists computed at the deepest one (a shallower
search would read fewer chunks: an approximation below the deepest depth).

Scored by nDCG@10 and recall@10 on five runs: scifact (300 claims), and
xquad Chinese and English same-language and the two cross-lingual
directions (400 questions each); settings are listed by their mean nDCG@10
over the runs. The first run embeds scifact (about 40 minutes on 2 cores);
``--work`` keeps the indexes for the next.
"""

from __future__ import annotations

import argparse
import itertools
import sys
from dataclasses import dataclass, fields, replace
from pathlib import Path

from vault_search.fusion import Fused, rrf
from vault_search.hits import ChunkHit
from vault_search.options import SearchOptions
from vault_search.reader import Reader
from vault_search.search.boosts import NameMatch, name_matches, put_first
from vault_search.search.lists import first_chunks, retriever_lists
from vault_search.search.plan import QueryPlan, plan_query, prepare
from vault_search.search.relevance import Evidence, cut, evidence, evidence_head
from vault_search.search.weights import FUSION_DEPTH, MODEL, Model, fusion_weights

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
# The settings tried by default: the rank constant, the keyword list's base
# weight and the lists' depth (the rest of the model as it ships).
GRID = {"rrf_k": [5, 10, 20, 60], "keyword": [1.0, 1.5, 2.0]}
DEPTHS = [50, FUSION_DEPTH]
TOP = 10   # the page scored


@dataclass
class Query:
    """One query as the engine saw it before fusing, read once."""
    plan: QueryPlan
    lists: dict[str, list[ChunkHit]]
    named: list[NameMatch]            # the notes whose name it is
    openings: dict[int, int]          # ... and their first chunks
    proofs: dict[int, Evidence]       # every candidate note's evidence

    @classmethod
    def read(cls, reader: Reader, text: str, depth: int) -> Query:
        """Stages 1-3 of a default hybrid search for ``text``, its lists ``depth`` notes deep."""
        request = prepare(text, SearchOptions(mode="hybrid", limit=TOP, depth=depth), reader.config)
        with reader.snapshot():
            plan = plan_query(reader, request)
            lists = retriever_lists(reader, plan).lists
            named = name_matches(reader.conn, plan)
            openings = first_chunks(reader.conn, [m.note_id for m in named], plan.filters)
            # A note's evidence is the same under any weights: read once, for every candidate.
            every = put_first(rrf(lists, {}, MODEL.rrf_k), named, openings)
            proofs = evidence(reader.conn, plan, every, lists)
        return cls(plan, lists, named, openings, proofs)

    def ranking(self, model: Model, depth: int) -> list[Fused]:
        """The first TOP notes a search shows under ``model``, its lists ``depth`` notes deep."""
        lists = {name: hits[:depth] for name, hits in self.lists.items()}
        weights = fusion_weights(self.plan.features(lists), self.plan.options, model)
        fused = put_first(rrf(lists, weights.lists, weights.k), self.named, self.openings)
        return cut(self.plan, evidence_head(self.plan, fused), self.proofs).fused[:TOP]


@dataclass
class Run:
    """One run's queries and their relevant documents."""
    queries: list[tuple[Query, dict[str, int]]]
    doc_of: dict[int, str]            # note id -> the corpus document it is

    def score(self, ranked: list[list[int]]) -> tuple[float, float]:
        """Mean nDCG@10 and recall@10 of each query's ranked note ids."""
        ndcg = rec = 0.0
        for (_, rel), notes in zip(self.queries, ranked):
            docs = [self.doc_of[n] for n in notes]
            ndcg += ndcg_at_k(docs, rel, TOP)
            rec += recall_at_k(docs, rel, TOP)
        return ndcg / len(self.queries), rec / len(self.queries)


def read_runs(eval_dir: Path, work: Path) -> dict[str, Run]:
    runs = {}
    for name, dataset, split, doc_lang, query_lang, folder, queries in RUNS:
        ds = load_beir(eval_dir / "datasets" / dataset, split, sample=queries, doc_lang=doc_lang,
                       query_lang=query_lang)
        idx, paths, _ = build_index(ds, work / folder, embed=True)
        doc_of_path = {p: d for d, p in paths.items()}
        doc_of = {nid: doc_of_path[p] for nid, p in idx.conn.execute("SELECT id, path FROM notes")}
        runs[name] = Run([(Query.read(idx, text, max(DEPTHS)), ds.qrels[qid]) for qid, text in ds.queries.items()],
                         doc_of)
        idx.close()
        print(f"{name}: {len(runs[name].queries)} queries read", file=sys.stderr)
    return runs


def settings(grid: dict[str, list[float]]) -> list[tuple[Model, int]]:
    """Every combination of the grid's values (a model each) with every depth."""
    names = list(grid)
    return [(replace(MODEL, **dict(zip(names, values))), depth)
            for values in itertools.product(*grid.values()) for depth in DEPTHS]


def parse_grid(specs: list[str]) -> dict[str, list[float]]:
    """``--grid NAME=V1,V2`` options as {model parameter: values}."""
    known = {f.name for f in fields(Model)}
    grid = {}
    for spec in specs:
        name, _, values = spec.partition("=")
        if name not in known or not values:
            raise SystemExit(f"--grid takes NAME=V1,V2 with NAME one of {', '.join(sorted(known))}: {spec!r}")
        grid[name] = [float(v) for v in values.split(",")]
    return grid


def print_baselines(runs: dict[str, Run]) -> None:
    """Each list alone, and the mean coverage, per run."""
    for name, run in runs.items():
        coverage = [q.plan.coverage or 0.0 for q, _ in run.queries]
        print(f"mean coverage {name}: {sum(coverage) / len(coverage):.3f}")
        for label in ("fts", "vector"):
            ndcg, rec = run.score([[h.note_id for h in q.lists.get(label, [])[:TOP]] for q, _ in run.queries])
            print(f"baseline {name:7s} {label:6s} nDCG@10 {ndcg:.4f} R@10 {rec:.3f}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.tune_fusion", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("eval_dir", type=Path, help="the shared eval folder (holding datasets/)")
    ap.add_argument("--work", type=Path, required=True, help="folder for the (reusable) indexes")
    ap.add_argument("--grid", action="append", default=[], metavar="NAME=V1,V2",
                    help="values of a weights.Model parameter to try (repeatable; default: "
                         + " ".join(f"{k}={','.join(map(str, v))}" for k, v in GRID.items()) + ")")
    args = ap.parse_args(argv)
    grid = parse_grid(args.grid) if args.grid else GRID
    runs = read_runs(args.eval_dir, args.work)
    print_baselines(runs)
    rows = []
    for model, depth in settings(grid):
        scores = {name: run.score([[f.note_id for f in q.ranking(model, depth)] for q, _ in run.queries])
                  for name, run in runs.items()}
        rows.append(((*(getattr(model, k) for k in grid), depth), scores))
    print(" ".join([*grid, "depth"]) + " | " + " | ".join(f"{n} nDCG R@10" for n in runs) + " | mean nDCG")
    rows.sort(key=lambda r: -sum(v[0] for v in r[1].values()))
    for params, scores in rows:
        mean = sum(v[0] for v in scores.values()) / len(scores)
        print(" ".join(str(p) for p in params) + " | " + " | ".join(f"{v[0]:.4f} {v[1]:.3f}" for v in scores.values())
              + f" | {mean:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
