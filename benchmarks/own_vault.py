"""``vault-search bench FILE.jsonl``: how well your own vault's notes are found.

Each line of FILE.jsonl is one known item: ``{"query": "...", "targets":
["Folder/Note.md", ...]}`` (``targets`` may be one string; a target may be a
note's path, name or alias, as ``get`` reads it; ``id`` and ``kind`` are
optional, and a ``kind`` gets its own row). Every query runs through
``Index.search`` on the vault's own index, in each mode the index can serve,
and is scored like the development set (``known_items``): hit@1, MRR@10,
R@10, per kind and overall, then the misses (queries whose target is not
first), so a person sees what their vault fails to answer and why.
"""

from __future__ import annotations

import json
import os

from indexer.errors import NoteNotFoundError, UsageValueError
from vault_search import Index

from .known_items import MODES, KnownItem, evaluate, misses

DEFAULT_MISSES = 10


def load_items(path: str | os.PathLike) -> list[KnownItem]:
    """The known items of a user's file; a malformed line is a one-line error naming it."""
    items = []
    try:
        with open(path, encoding="utf-8") as fh:
            lines = fh.read().split("\n")   # not splitlines: JSON text may hold U+2028 and form feeds
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageValueError(f"{path}: cannot read it ({getattr(exc, 'strerror', None) or exc})") from None
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
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
        items.append(KnownItem(str(row.get("id") or f"line {n}"), row["query"], str(row.get("kind") or "-"),
                               tuple(targets)))
    if not items:
        raise UsageValueError(f"{path}: no known items in it")
    return items


def resolve_targets(idx: Index, items: list[KnownItem]) -> tuple[list[KnownItem], list[str]]:
    """Each target as the indexed path it names (a path, a name or an alias);
    a warning for each that names no note (that item scores 0 on it)."""
    from vault_search.files import AmbiguousNameError, indexed_path

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
