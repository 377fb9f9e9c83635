"""``vault-search bench FILE.jsonl``: how well your own vault's notes are found.

Each line of FILE.jsonl is one known item: ``{"query": "...", "targets":
["Folder/Note.md", ...]}`` (``targets`` may be one string; a target may be a
note's path, name or alias, as ``get`` reads it; ``id`` and ``kind`` are
optional, and a ``kind`` gets its own row). Every query runs through
``Index.search`` on the vault's own index, in each mode the index can serve,
and is scored as the development set is (``benchmarks/known_items.py``
scores with these functions): hit@1, MRR@10, R@10, per kind and overall,
then the misses (queries whose target is not first), so a person sees what
their vault fails to answer and why.
"""

from __future__ import annotations

import json
import os
import statistics
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from indexer.errors import NoteNotFoundError, UsageValueError

if TYPE_CHECKING:
    from .index import Index

K = 10   # ranks scored (MRR@10, R@10), and the limit asked for
# The development set's kinds, in the order of its README; any others follow by name.
KINDS = ("question", "paraphrase", "keyword", "crosslingual", "title-ish")
MODES = ("fts", "vector", "hybrid")
DEFAULT_MISSES = 10


@dataclass(frozen=True)
class KnownItem:
    id: str
    query: str
    kind: str
    targets: tuple[str, ...]
    lang: str = ""


# -- scoring ------------------------------------------------------------------------

def score_ranking(paths: list[str], targets: tuple[str, ...]) -> dict:
    """hit@1, MRR@10, R@10 and the first target's rank (None: not in the top 10)."""
    top, wanted = paths[:K], set(targets)
    rank = next((i + 1 for i, p in enumerate(top) if p in wanted), None)
    return {"hit@1": float(rank == 1), "mrr@10": 1.0 / rank if rank else 0.0,
            "r@10": len(set(top) & wanted) / len(wanted) if wanted else 0.0, "rank": rank}


def kind_order(kinds) -> list[str]:
    """The kinds present, in ``KINDS`` order, then any others by name."""
    present = set(kinds)
    return [k for k in KINDS if k in present] + sorted(present - set(KINDS))


def summarise(rows: list[dict]) -> dict[str, dict]:
    """Mean hit@1, MRR@10 and R@10 per kind (in ``KINDS`` order) and over all."""
    kinds = kind_order(r["kind"] for r in rows)
    groups = {k: [r for r in rows if r["kind"] == k] for k in kinds} | {"all": rows}
    return {k: {"n": len(g), **{m: round(sum(r[m] for r in g) / len(g), 4) if g else 0.0
                                for m in ("hit@1", "mrr@10", "r@10")}}
            for k, g in groups.items()}


def evaluate(idx: Index, items: list[KnownItem], mode: str | None) -> dict:
    """Every item through ``Index.search`` (``mode`` None: the default mode)."""
    rows, latencies, modes_seen, warned = [], [], set(), 0
    for item in items:
        t0 = time.perf_counter()
        response = idx.search(item.query, mode=mode, limit=K)
        latencies.append((time.perf_counter() - t0) * 1000)
        modes_seen.add(response.mode)
        warned += bool(response.warnings)
        paths = [r.path for r in response.results]
        rows.append({"id": item.id, "kind": item.kind, "query": item.query, "targets": list(item.targets),
                     "first": paths[0] if paths else None, **score_ranking(paths, item.targets)})
    return {"mode": "/".join(sorted(modes_seen)) or (mode or "-"), "metrics": summarise(rows),
            "latency_ms_p50": round(statistics.median(latencies), 2) if latencies else 0.0, "warned": warned,
            "rows": rows}


def misses(rows: list[dict], n: int) -> list[dict]:
    """The first ``n`` queries whose target is not the first result."""
    return [{k: r[k] for k in ("id", "kind", "query", "targets", "rank", "first")}
            for r in rows if not r["hit@1"]][:n]


# -- a user's own known items ---------------------------------------------------------

def load_items(path: str | os.PathLike) -> list[KnownItem]:
    """The known items of a user's file; a malformed line is a one-line error naming it."""
    try:
        with open(path, encoding="utf-8") as fh:
            lines = fh.read().split("\n")   # not splitlines: JSON text may hold U+2028 and form feeds
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageValueError(f"{path}: cannot read it ({getattr(exc, 'strerror', None) or exc})") from None
    items = [_item(path, n, line) for n, line in enumerate(lines, 1) if line.strip()]
    if not items:
        raise UsageValueError(f"{path}: no known items in it")
    return items


def _item(path: str | os.PathLike, n: int, line: str) -> KnownItem:
    try:
        row = json.loads(line)
    except (ValueError, RecursionError) as exc:   # RecursionError: "[[[[..." nested past Python's stack
        why = exc.msg if isinstance(exc, json.JSONDecodeError) else \
            "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
        raise UsageValueError(f"{path}:{n}: not JSON ({why}); each line is "
                              '{"query": "...", "targets": ["Note.md"]}') from None
    targets = row.get("targets") if isinstance(row, dict) else None
    targets = [targets] if isinstance(targets, str) else targets
    if not isinstance(row, dict) or not isinstance(row.get("query"), str) or not row["query"].strip() \
            or not isinstance(targets, list) or not targets or not all(isinstance(t, str) for t in targets):
        raise UsageValueError(f'{path}:{n}: each line needs "query" (text) and "targets" (a path or a list '
                              "of paths)")
    return KnownItem(str(row.get("id") or f"line {n}"), row["query"], str(row.get("kind") or "-"), tuple(targets))


def resolve_targets(idx: Index, items: list[KnownItem]) -> tuple[list[KnownItem], list[str]]:
    """Each target as the indexed path it names (a path, a name or an alias);
    a warning for each that names no note (that item scores 0 on it)."""
    from .files import AmbiguousNameError, indexed_path

    out, warnings = [], []
    for item in items:
        targets = []
        for target in item.targets:
            try:
                targets.append(indexed_path(idx.conn, idx.config, target))
            except (NoteNotFoundError, UsageValueError, AmbiguousNameError) as exc:
                warnings.append(f"{item.id}: target {exc}")
                targets.append(target)
        out.append(KnownItem(item.id, item.query, item.kind, tuple(targets), item.lang))
    return out, warnings


def bench(idx: Index, items: list[KnownItem], modes: list[str] | None = None,
          n_misses: int = DEFAULT_MISSES) -> dict:
    """Every item in each mode (default: those the index serves): metrics per kind, latency and misses."""
    items, warnings = resolve_targets(idx, items)
    modes = modes or (list(MODES) if idx.has_vectors() else ["fts"])
    runs = {}
    for mode in modes:
        run = evaluate(idx, items, mode)
        runs[mode] = {"metrics": run["metrics"], "latency_ms_p50": run["latency_ms_p50"],
                      "misses": misses(run["rows"], n_misses)}
    return {"items": len(items), "modes": runs, "warnings": warnings}


def render(result: dict) -> str:
    """A table per mode (kinds as rows), then each mode's misses."""
    lines = []
    kinds = list(next(iter(result["modes"].values()))["metrics"]) if result["modes"] else []
    header = f"{'':<14}" + "".join(f"{mode:>26}" for mode in result["modes"])
    lines.append(f"{result['items']} known items; hit@1 / MRR@10 / R@10 per mode")
    lines.append(header)
    for kind in kinds:
        cells = []
        for run in result["modes"].values():
            m = run["metrics"][kind]
            cells.append(f"{m['hit@1']:.3f} / {m['mrr@10']:.3f} / {m['r@10']:.2f}")
        lines.append(f"{kind + ' (' + str(run['metrics'][kind]['n']) + ')':<14}" + "".join(f"{c:>26}" for c in cells))
    lines.append(f"{'p50 ms':<14}" + "".join(f"{run['latency_ms_p50']:>26.1f}" for run in result["modes"].values()))
    for mode, run in result["modes"].items():
        if run["misses"]:
            lines.append(f"\nmisses ({mode}): target not first")
            for m in run["misses"]:
                where = f"#{m['rank']}" if m["rank"] else "not in top 10"
                lines.append(f"  {m['id']}: {m['query']!r} -> {', '.join(m['targets'])} {where}; "
                             f"first: {m['first'] or 'nothing'}")
    for warning in result["warnings"]:
        lines.append(f"warning: {warning}")
    return "\n".join(lines)
