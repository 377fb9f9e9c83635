"""Crash safety: `vault-search index` killed with SIGKILL anywhere.

Deterministic kill points (indexer/faults.py: after the scan, between FTS
batches, before the final transaction, between embedding batches, between
the matrix files' renames and the db recording them) and kills at random
moments, on a first build and on an incremental update. After each kill:
SQLite's and FTS5's integrity checks pass, searching works and returns only
rows that exist, and the next `index` completes and leaves exactly what a
clean build of the same vault leaves.
"""

from __future__ import annotations

import hashlib
import os
import random
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import CLI, SAMPLE_VAULT, copy_tree, write

from vault_search import Index

MODEL = "hash:64"
WORDS_EN = ("index", "vector", "sqlite", "search", "note", "garden", "river", "engine", "kernel", "memory",
            "deploy", "budget", "travel", "reading", "python", "cluster", "backup", "journal", "market", "sleep")
WORDS_ZH = ("数据库", "索引", "笔记", "搜索", "向量", "分词", "部署", "读书", "旅行", "健康", "习惯", "预算",
            "内核", "集群", "备份", "日记", "市场", "睡眠", "写作", "效率")


def make_vault(folder: Path, notes: int = 460, seed: int = 1) -> Path:
    """The sample vault plus ``notes`` generated notes (three FTS batches),
    with links, tags, aliases and daily logs."""
    vault = copy_tree(SAMPLE_VAULT, folder)
    rng = random.Random(seed)
    for i in range(notes):
        words = " ".join(rng.choice(WORDS_EN + WORDS_ZH) for _ in range(rng.randint(20, 120)))
        links = " ".join(f"[[gen-{rng.randrange(notes)}]]" for _ in range(rng.randint(0, 3)))
        front = f"---\ntags: [gen/{i % 7}]\naliases: [alias-{i}]\n---\n" if i % 3 == 0 else ""
        body = f"# Generated {i}\n\n{words}\n\n## Part\n\n{words[::-1]}\n\n{links}\n"
        if i % 25 == 0:
            write(vault / "daily" / f"2026-10-{(i // 25) % 28 + 1:02d}.md",
                  f"# day\n\n### 09:{i % 60:02d} — entry\n{words}\n\n### 17:00 — later\n{words[:80]}\n")
        write(vault / "gen" / f"{i // 100}" / f"gen-{i}.md", front + body)
    return vault


def change_vault(vault: Path, seed: int = 2) -> None:
    """An incremental update: edits, deletions, additions and renames."""
    rng = random.Random(seed)
    files = sorted((vault / "gen").rglob("*.md"))
    for path in rng.sample(files, 30):
        path.write_text(path.read_text(encoding="utf-8") + f"\nedited {rng.random()}\n", encoding="utf-8")
    for path in rng.sample(files, 10):
        if path.exists():
            path.unlink()
    for i in range(10):
        write(vault / "gen" / "new" / f"new-{i}.md", f"# New {i}\n\nfresh words {i} [[gen-{i}]] 新的笔记\n")
    for path in [p for p in rng.sample(files, 5) if p.exists()]:
        path.rename(path.with_name("renamed-" + path.name))


def run_index(vault: Path, index: Path, fault: str | None = None, timeout: float = 300):
    env = {**os.environ}
    env.pop("VAULT_SEARCH_FAULT", None)
    if fault:
        env["VAULT_SEARCH_FAULT"] = fault
    return subprocess.run([str(CLI), "--vault", str(vault), "--index-dir", str(index), "index", "--model", MODEL],
                          capture_output=True, text=True, env=env, timeout=timeout)


def kill_after(vault: Path, index: Path, delay: float) -> int:
    proc = subprocess.Popen([str(CLI), "--vault", str(vault), "--index-dir", str(index), "index", "--model", MODEL],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(delay)
    proc.send_signal(signal.SIGKILL)
    return proc.wait(timeout=60)


def snapshot(index: Path) -> dict:
    """Everything a search can see, by content (ids may differ between builds)."""
    conn = sqlite3.connect(index / "index.db")
    try:
        q = conn.execute
        path_of = dict(q("SELECT id, path FROM notes"))
        chunk_key = {cid: (path_of[nid], seq) for cid, nid, seq in q("SELECT id, note_id, seq FROM chunks")}
        fts = {chunk_key[r[0]]: r[1:] for r in q(
            "SELECT rowid, title, aliases, tags, headings, body FROM chunks_fts")}
        ids = np.load(index / "vectors.ids.npy")
        matrix = np.load(index / "vectors.npy")
        rows = sorted((chunk_key[int(cid)], hashlib.sha1(matrix[i].tobytes()).hexdigest())
                      for i, cid in enumerate(ids))
        return {
            "notes": sorted(q("SELECT path, hash, title, aliases, tags, links, metadata, date FROM notes")),
            "chunks": sorted((path_of[n], s, h, a, b, t, x, at) for n, s, h, a, b, t, x, at in q(
                "SELECT note_id, seq, heading, start_line, end_line, text, hash, at FROM chunks")),
            "fts": sorted(fts.items()),
            "tags": sorted((path_of[n], t) for n, t in q("SELECT note_id, tag FROM note_tags")),
            "links": sorted((path_of[s], line, tgt, sub, kind, path_of.get(t)) for s, line, tgt, sub, kind, t in q(
                "SELECT source_id, line, target, subpath, kind, target_id FROM links")),
            "names": sorted((path_of[n], k, kind) for n, k, kind in q("SELECT note_id, key, kind FROM names")),
            "dictionary": sorted(q("SELECT word, freq, settled FROM dictionary")),
            "embeddings": sorted(q("SELECT hash, vector FROM embeddings")),
            "matrix": rows,
        }
    finally:
        conn.close()


def check_after_kill(vault: Path, index: Path) -> str:
    """The invariants that must hold however the writer died; returns what state it found."""
    if not (index / "index.db").exists():
        return "nothing written yet"
    conn = sqlite3.connect(index / "index.db")
    try:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if "chunks_fts" not in tables:
            return "schema being created"
        conn.execute("INSERT INTO chunks_fts (chunks_fts, rank) VALUES ('integrity-check', 1)")
        # FTS rows and chunks agree one to one; every chunk belongs to a note
        assert conn.execute("SELECT count(*) FROM chunks_fts").fetchone()[0] == \
            conn.execute("SELECT count(*) FROM chunks").fetchone()[0]
        assert conn.execute("SELECT count(*) FROM chunks WHERE id NOT IN (SELECT rowid FROM chunks_fts) "
                            "OR note_id NOT IN (SELECT id FROM notes)").fetchone()[0] == 0
    finally:
        conn.close()
    with Index.open(vault, index) as idx:
        for query in ("数据库 索引", "garden river", "alias-3"):
            for mode in (("fts", "hybrid") if idx.has_vectors() else ("fts",)):
                response = idx.search(query, mode=mode, limit=20)
                for r in response.results:
                    assert (vault / r.path).exists() or r.path.startswith("gen/"), r.path
                    assert r.start_line <= r.end_line
        state = "vectors file stale (db copy served)" if idx.has_vectors() and idx.vectors().problem else "consistent"
    r = subprocess.run([str(CLI), "--vault", str(vault), "--index-dir", str(index), "search", "笔记", "--json",
                        "--no-server"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return state


@pytest.fixture(scope="module")
def builds(tmp_path_factory):
    """A first vault and its changed version, each with a clean reference build."""
    base = tmp_path_factory.mktemp("crash")
    first = make_vault(base / "first")
    t0 = time.monotonic()   # the first build's length sets the random kills' moments
    assert run_index(first, base / "ref-first").returncode == 0
    duration = time.monotonic() - t0
    changed = make_vault(base / "changed")
    change_vault(changed)
    assert run_index(changed, base / "ref-changed").returncode == 0
    return base, first, changed, snapshot(base / "ref-first"), snapshot(base / "ref-changed"), duration


POINTS = ["scan", "fts-batch:1", "fts-batch:2", "resolve", "embed-batch:1", "embed-batch:3", "matrix-ids",
          "matrix-files"]
# An update writes one FTS batch and one embedding batch: the second and third are never reached.
CASES = [(p, False) for p in POINTS] + [(p, True) for p in POINTS if p not in ("fts-batch:2", "embed-batch:3")]


@pytest.mark.parametrize("point,update", CASES, ids=[f"{p}-{'update' if u else 'first'}" for p, u in CASES])
def test_kill_at_a_fault_point(builds, tmp_path, point, update, ledger):
    base, first, changed, ref_first, ref_changed, _ = builds
    vault = copy_tree(first, tmp_path / "vault")
    index = tmp_path / "index"
    if update:
        assert run_index(vault, index).returncode == 0
        change_vault(vault)
    r = run_index(vault, index, fault=point)
    assert r.returncode == -signal.SIGKILL, (r.returncode, r.stderr[-500:])
    state = check_after_kill(vault, index)
    assert run_index(vault, index).returncode == 0
    assert snapshot(index) == (ref_changed if update else ref_first)
    with Index.open(vault, index) as idx:
        assert idx.vectors().problem is None
    ledger.record("crash", f"SIGKILL at `{point.split(':')[0]}` ({'update' if update else 'first build'})",
                  f"integrity ok, searchable ({state}), next index = clean build")


@pytest.mark.parametrize("trial", range(12))
def test_kill_at_a_random_moment(builds, tmp_path, trial, ledger):
    base, first, changed, ref_first, ref_changed, duration = builds
    rng = random.Random(100 + trial)
    update = trial % 2 == 1
    vault = copy_tree(first, tmp_path / "vault")
    index = tmp_path / "index"
    if update:
        assert run_index(vault, index).returncode == 0
        change_vault(vault)
    kill_after(vault, index, rng.uniform(0.05, duration * (0.5 if update else 1.0)))
    state = check_after_kill(vault, index)
    assert run_index(vault, index).returncode == 0
    assert snapshot(index) == (ref_changed if update else ref_first)
    ledger.record("crash", "SIGKILL at a random moment of `index`",
                  f"integrity ok, searchable ({state}), next index = clean build")
