"""Fit the ranking model (vault_search/search/weights.py) on the development
pool, and say what each of its parameters and rules is worth.

    python -m benchmarks.pool run POOL.jsonl --traces TRACES.jsonl     # once: what each query's lists were
    python -m benchmarks.fit TRACES.jsonl [--cv] [--audit] [--write FILE]

The traces hold, for every hybrid query of the pool, the lists that voted
(notes, in order), the query's features and the notes its name is
(``search.fusion_inputs``). A candidate model is scored by fusing those lists
again with the product's own ``fusion_weights`` and ``rrf`` order (then the
named notes first, as ``run`` does): no search runs twice, so one
evaluation of all queries takes a fraction of a second.

The objective is the rule itself: the lower end of the 95% interval of the
MRR@10 gain over the shipped model, sets weighted equally (as the paired
test of benchmarks.pool weighs them), so a parameter moves only as far as
the test would keep the move (``--mean``: the plain mean MRR@10 of the sets,
which lets a large set's gain buy a small set's loss). ``--cv`` fits once per fold
with that fold left out (a vault, a conversation, a set) and scores the
fold with the model fitted without it: the cross-validated figures are the
ones to report. ``--audit`` takes each parameter or rule out in turn
(its list's weight to 0, its rule off) and runs the paired test on the
traces. ``--write FILE`` writes the model fitted on the whole pool, with the
date and the data it came from, where weights.py reads it.

The search is a deterministic coordinate search over a small grid per
parameter (a few rounds, best value kept, ties kept at the current value).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import sys
from collections import defaultdict
from dataclasses import dataclass, fields, replace
from pathlib import Path

import numpy as np

from benchmarks.pool import Verdict, paired, print_verdict, unit
from vault_search.fusion import TIE_DIGITS

# Each fitted parameter and the values the search tries (the current value is always tried too).
GRID: dict[str, tuple[float, ...]] = {
    "rrf_k": (2, 3, 5, 7, 10, 15, 20, 30, 45, 60, 100),
    "score_share": (0.0, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0),
    "keyword": (0.5, 0.7, 0.85, 1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 4.0),
    "full_coverage": (0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0),
    "coverage_power": (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0),
    "translated": (0.0, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 2.0),
    "foreign_keyword_share": (0.0, 0.25, 0.5, 0.75, 1.0),
    "title": (0.0, 0.25, 0.5, 1.0, 1.5, 2.0, 3.0),
}
ROUNDS = 3
LIMIT = 10          # results asked for, as benchmarks.pool asks


@dataclass
class Traces:
    """The pool's hybrid queries as arrays: one row per (query, note)."""
    sets: list[str]             # per query
    folds: list[str]
    ids: list[str]
    features: list              # per query: search.weights.QueryFeatures
    lists: list[str]            # the list names, one column each
    qrow: np.ndarray            # per row: its query
    rank: np.ndarray            # rows x lists: the note's rank in the list (inf when absent)
    score: np.ndarray           # rows x lists: the list's own score of the note (nan when absent)
    norm: np.ndarray            # rows x lists: that score min-max scaled within the query's list (0 when absent)
    minrank: np.ndarray         # per row: its best rank in any list where it is not a stand-in
    relevant: np.ndarray        # per row: grade > 0
    relevance: np.ndarray       # per row: what the default cut weighs of the note (Evidence.answers; 1.0 when named)
    named: np.ndarray           # per row: its place among the notes the query names (-1: none)
    named_count: np.ndarray     # per query: notes it names


def load_traces(path: str | Path) -> Traces:
    from vault_search.search.weights import QueryFeatures

    known = {f.name for f in fields(QueryFeatures)}
    sets, folds, ids, feats = [], [], [], []
    qrow, ranks, minrank, relevant, named, relevance = [], [], [], [], [], []
    names: dict[str, int] = {}
    named_count = []
    with open(path, encoding="utf-8") as fh:
        for q, line in enumerate(fh):
            t = json.loads(line)
            f = {name: value for name, value in t["features"].items() if name in known}   # an older trace's extras
            f["lists"] = tuple(f["lists"])
            sets.append(t["set"])
            folds.append(t["fold"])
            ids.append(t["id"])
            feats.append(QueryFeatures(**f))
            places = {int(n): i for i, (n, _) in enumerate(t["named"])}
            named_count.append(len(places))
            notes: dict[int, dict[str, int]] = defaultdict(dict)
            best: dict[int, float] = {}
            for name, hits in t["lists"].items():
                names.setdefault(name, len(names))
                for r, (note, score, stand_in) in enumerate(hits, 1):
                    notes[note][name] = (r, math.nan if stand_in else score)   # a stand-in's score is another list's
                    if not stand_in:
                        best[note] = min(best.get(note, math.inf), r)
            for note in places:
                notes.setdefault(note, {})
            rel = {int(n) for n, g in t["relevant"].items() if g > 0}
            proofs = {int(n): r for n, r in t["relevance"].items()}
            for note, where in notes.items():
                qrow.append(q)
                ranks.append(where)
                minrank.append(best.get(note, math.inf))
                relevant.append(note in rel)
                named.append(places.get(note, -1))
                relevance.append(1.0 if note in places else proofs.get(note, 0.0))
    rank = np.full((len(ranks), len(names)), np.inf)
    score = np.full((len(ranks), len(names)), np.nan)
    for i, where in enumerate(ranks):
        for name, (r, value) in where.items():
            rank[i, names[name]] = r
            score[i, names[name]] = value
    qrows = np.asarray(qrow)
    return Traces(sets, folds, ids, feats, list(names), qrows, rank, score, min_max(score, qrows, len(sets)),
                  np.asarray(minrank),
                  np.asarray(relevant), np.asarray(relevance), np.asarray(named), np.asarray(named_count))


def min_max(score: np.ndarray, qrow: np.ndarray, nq: int) -> np.ndarray:
    """Each list's scores scaled to 0-1 within each query (``fusion.min_max``); 0 where absent."""
    out = np.zeros_like(score)
    for j in range(score.shape[1]):
        have = ~np.isnan(score[:, j])
        lo, hi = np.full(nq, np.inf), np.full(nq, -np.inf)
        np.minimum.at(lo, qrow[have], score[have, j])
        np.maximum.at(hi, qrow[have], score[have, j])
        span = np.where(hi > lo, hi - lo, 1.0)
        out[have, j] = (score[have, j] - lo[qrow[have]]) / span[qrow[have]]
    return out


def first_ranks(t: Traces, model) -> np.ndarray:
    """Each query's rank of its first relevant note under ``model`` (inf:
    not shown), as ``search.run`` orders and cuts: the fused order, the
    named notes first, then the default relevance cut of its head."""
    from vault_search.options import SearchOptions
    from vault_search.search.weights import fusion_weights

    options = SearchOptions()
    nq = len(t.sets)
    w = np.zeros((nq, len(t.lists)))
    k = np.zeros(nq)
    for q, features in enumerate(t.features):
        weights = fusion_weights(features, options, model)
        for name, value in weights.lists.items():
            w[q, t.lists.index(name)] = value
        k[q] = weights.k
    wr = w[t.qrow]
    return places(t, (wr / (k[t.qrow, None] + t.rank)).sum(axis=1) + model.score_share * (wr * t.norm).sum(axis=1))


def places(t: Traces, score: np.ndarray) -> np.ndarray:
    """Each query's rank of its first relevant note when its notes are
    ordered by ``score`` (see ``first_ranks``)."""
    from vault_search.search import relevance as cut

    nq = len(t.sets)
    key = np.where(t.named >= 0, 1e6 - t.named, np.round(score, TIE_DIGITS))   # the named notes first, in order
    # rrf's order: score, then the best rank in any list, then the order the notes came (lexsort is stable)
    order = np.lexsort((t.minrank, -key, t.qrow))
    q = t.qrow[order]
    start = np.searchsorted(q, np.arange(nq))
    pos = np.arange(len(order)) - start[q]
    rel = t.relevance[order]
    head = pos < max(cut.EVIDENCE_DEPTH * LIMIT, cut.MIN_EVIDENCE_NOTES)
    best = np.zeros(nq)
    np.maximum.at(best, q[head], rel[head])
    guesses = pos < cut.WEAK_LIMIT
    guessed = np.zeros(nq)      # no guess with any evidence: the best that have some
    np.maximum.at(guessed, q[guesses], rel[guesses])
    evidenced = head & (rel > 0)
    count = np.cumsum(evidenced)
    count = count - (count[start] - evidenced[start])[q]     # 1-based place among the rows with evidence
    kept = np.where(best[q] >= cut.STRONG_RELEVANCE, head & (rel >= cut.DEFAULT_MIN_RELEVANCE),
                    np.where(guessed[q] > 0, guesses, evidenced & (count <= cut.WEAK_LIMIT)))
    place = np.cumsum(kept)
    place = place - (place[start] - kept[start])[q]     # 1-based place among the kept rows
    found = kept & t.relevant[order]
    first = np.full(nq, np.inf)
    np.minimum.at(first, q[found], place[found].astype(float))
    return first


def per_query(t: Traces, model) -> dict[tuple[str, str], dict[str, float]]:
    ranks = first_ranks(t, model)
    return {(s, i): {"mrr@10": 1.0 / r if r <= 10 else 0.0, "hit@1": float(r == 1)}
            for s, i, r in zip(t.sets, t.ids, ranks)}


def objective(t: Traces, ranks: np.ndarray, mask: np.ndarray) -> float:
    """MRR@10 averaged per set (sets weighted equally) over the queries in ``mask``."""
    rr = np.where(ranks <= 10, 1.0 / ranks, 0.0)
    sets = np.asarray(t.sets)
    return float(np.mean([rr[mask & (sets == s)].mean() for s in sorted(set(sets[mask]))]))


def lower_bound(t: Traces, ranks: np.ndarray, against: np.ndarray, mask: np.ndarray) -> float:
    """The rule as an objective, on the queries in ``mask``: the lower end of
    the 95% interval of the MRR@10 gain of ``ranks`` over ``against`` (sets
    weighted equally, the sets of one ``pool.unit`` group correlated
    question by question; a normal approximation of ``pool.paired``), or
    -1 when some set loses beyond its own noise (its interval below zero)."""
    gain = np.where(ranks <= 10, 1.0 / ranks, 0.0) - np.where(against <= 10, 1.0 / against, 0.0)
    sets = np.asarray(t.sets)
    names = sorted(set(sets[mask]))
    total, variance = 0.0, 0.0
    for group in sorted({unit(s, "")[0] for s in names}):
        members = [s for s in names if unit(s, "")[0] == group]
        sums: dict[str, float] = defaultdict(float)
        for s in members:
            rows = np.flatnonzero(mask & (sets == s))
            d = gain[rows]
            if len(d) > 1 and d.mean() + 1.96 * d.std(ddof=1) / np.sqrt(len(d)) < 0:
                return -1.0
            total += d.mean()
            for q, value in zip((t.ids[i] for i in rows), d):
                sums[unit(s, q)[1]] += value / len(d)
        per_question = np.fromiter(sums.values(), float) * len(sums)   # each set's mean is their mean
        variance += per_question.var(ddof=1) / len(sums) if len(sums) > 1 else 0.0
    return float(total / len(names) - 1.96 * np.sqrt(variance) / len(names))


def fit(t: Traces, start, mask: np.ndarray, grid: dict[str, tuple[float, ...]] = GRID, log=None,
        cautious: bool = True):
    """Coordinate search from ``start`` over ``grid`` on the queries in
    ``mask``. ``cautious`` (the default) maximises ``lower_bound`` against
    ``start``: a parameter moves only as far as the paired test would keep
    the move, so one large set's gain cannot buy a small set's loss;
    otherwise the mean ``objective``."""
    reference = first_ranks(t, start)

    def score_of(model) -> float:
        ranks = first_ranks(t, model)
        return lower_bound(t, ranks, reference, mask) if cautious else objective(t, ranks, mask)

    model, best = start, score_of(start)
    for _ in range(ROUNDS):
        moved = False
        for name, values in grid.items():
            for value in sorted(set(values) | {getattr(model, name)}):
                if value == getattr(model, name):
                    continue
                candidate = replace(model, **{name: value})
                score = score_of(candidate)
                if score > best + 1e-9:
                    model, best, moved = candidate, score, True
        if log:
            print(f"  round: {best:.4f} {model_values(model)}", file=log, flush=True)
        if not moved:
            break
    return model, best


def model_values(model) -> dict[str, float]:
    return {f.name: getattr(model, f.name) for f in fields(model) if f.name in GRID}


def cross_validate(t: Traces, start, grid: dict[str, tuple[float, ...]] = GRID, log=None,
                   cautious: bool = True) -> tuple[np.ndarray, dict[str, dict]]:
    """Each fold's ranks under the model fitted on every other fold."""
    folds = np.asarray(t.folds)
    ranks = np.full(len(t.sets), np.inf)
    fitted = {}
    for fold in sorted(set(t.folds)):
        model, score = fit(t, start, folds != fold, grid, cautious=cautious)
        ranks[folds == fold] = first_ranks(t, model)[folds == fold]
        fitted[fold] = model_values(model)
        if log:
            print(f"{fold}: trained {score:.4f}; {fitted[fold]}", file=log, flush=True)
    return ranks, fitted


def table(t: Traces, columns: dict[str, np.ndarray], file=None) -> None:
    """Per set: hit@1 and MRR@10 of each column of ranks."""
    file = file or sys.stdout
    sets = np.asarray(t.sets)
    print("| set | n | " + " | ".join(f"{c} hit@1 | {c} MRR@10" for c in columns) + " |", file=file)
    print("|---|---|" + "---|---|" * len(columns), file=file)
    rows = sorted(set(t.sets)) + ["mean of sets"]
    for s in rows:
        cells = [s, str(int((sets == s).sum())) if s in t.sets else str(len(sets))]
        for ranks in columns.values():
            if s in t.sets:
                r = ranks[sets == s]
                cells += [f"{(r == 1).mean():.3f}", f"{np.where(r <= 10, 1 / r, 0).mean():.3f}"]
            else:
                hit = np.mean([(ranks[sets == x] == 1).mean() for x in sorted(set(t.sets))])
                cells += [f"{hit:.3f}", f"{objective(t, ranks, np.ones(len(sets), bool)):.3f}"]
        print("| " + " | ".join(cells) + " |", file=file)


def audit(t: Traces, model, file=None) -> dict[str, Verdict]:
    """Each parameter or rule taken out of ``model`` in turn, paired-tested against it."""
    file = file or sys.stdout
    outs = {
        "title list": {"title": 0.0},
        "translated list": {"translated": 0.0},
        "foreign question's keyword share": {"foreign_keyword_share": 0.0},
        "keyword weight by coverage": {"coverage_power": 0.0},
        "keyword base weight (1.0)": {"keyword": 1.0},
        "rank constant 60": {"rrf_k": 60.0},
    }
    base = per_query(t, model)
    verdicts = {}
    print("| rule | taken out by | MRR@10 gain of keeping it | 95% interval | |\n|---|---|---|---|---|", file=file)
    for name, change in outs.items():
        without = per_query(t, replace(model, **change))
        v = paired(without, base, "mrr@10")   # the gain of having the rule
        verdicts[name] = v
        losers = f" ({', '.join(v.losers)} loses beyond its noise with it)" if v.losers else ""
        print(f"| {name} | {', '.join(f'{k}={x}' for k, x in change.items())} | {v.gain:+.4f} | "
              f"[{v.low:+.4f}, {v.high:+.4f}] | {'shown' if v.keep else 'not shown'}{losers} |", file=file)
    return verdicts


def write_model(path: str | Path, model, t: Traces, traces_path: str) -> None:
    record = {"fitted": dt.date.today().isoformat(),
              "by": "python -m benchmarks.fit TRACES --write (benchmarks/README.md, 'The development pool')",
              "objective": "the lower end of the 95% interval of the MRR@10 gain over the model before, "
                           "sets weighted equally",
              "data": {"traces": Path(traces_path).name, "queries": len(t.sets),
                       "sets": {s: t.sets.count(s) for s in sorted(set(t.sets))}},
              "parameters": model_values(model)}
    Path(path).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    from vault_search.search.weights import MODEL

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("traces")
    ap.add_argument("--cv", action="store_true", help="leave-one-fold-out figures")
    ap.add_argument("--audit", action="store_true", help="paired test of each parameter and rule")
    ap.add_argument("--write", default=None, help="write the model fitted on the whole pool here")
    ap.add_argument("--params", default=",".join(GRID),
                    help="the parameters to fit, comma-separated (default: all of GRID); the rest stay as shipped")
    ap.add_argument("--mean", action="store_true",
                    help="maximise the mean MRR@10 of the sets, not the lower end of the gain's interval")
    args = ap.parse_args(argv)
    unknown = [name for name in args.params.split(",") if name and name not in GRID]
    if unknown:
        raise SystemExit(f"no such parameter: {', '.join(unknown)} (the fitted ones: {', '.join(GRID)})")
    if args.write and not args.cv:
        raise SystemExit("--write needs --cv: a model is written only when its cross-validated ranks pass the rule")
    grid = {name: GRID[name] for name in args.params.split(",") if name}
    t = load_traces(args.traces)
    everything = np.ones(len(t.sets), bool)
    print(f"{len(t.sets)} queries, {len(t.qrow)} (query, note) rows, lists {t.lists}", file=sys.stderr)
    current = first_ranks(t, MODEL)
    model, score = fit(t, MODEL, everything, grid, log=sys.stderr, cautious=not args.mean)
    columns = {"current": current, "fitted (in-sample)": first_ranks(t, model)}
    if args.cv:
        cv, fitted = cross_validate(t, MODEL, grid, log=sys.stderr, cautious=not args.mean)
        columns["fitted (cross-validated)"] = cv
        cvq = {(s, i): {"mrr@10": 1 / r if r <= 10 else 0.0} for s, i, r in zip(t.sets, t.ids, cv)}
        print("\nCross-validated fit against the current model (paired, MRR@10):")
        verdict = paired(per_query(t, MODEL), cvq, "mrr@10")
        print_verdict(verdict, "MRR@10")
    print(f"\nModel fitted on the whole pool: {model_values(model)} "
          f"({'lower end of the gain' if not args.mean else 'mean MRR@10'} {score:.4f})\n")
    table(t, columns)
    if args.audit:
        print("\n## Audit of the current model")
        audit(t, MODEL)
    if args.write:
        if not verdict.keep:
            print(f"\nnot written to {args.write}: the cross-validated fit does not pass the rule")
            return 1
        write_model(args.write, model, t, args.traces)
    return 0


if __name__ == "__main__":
    sys.exit(main())
