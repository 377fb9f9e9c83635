"""The embedding cache that outlives an index (indexer/embed_cache.py): a
rebuild, a second index or a copied note embeds nothing it embedded before;
damaged rows and files are detected and never trusted; the file stays
bounded; a cache that fails never fails an index."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import zlib

import numpy as np
import pytest
from conftest import CLI, copy_tree, run_cli, write

from indexer.embed_cache import CACHE_FILE, OLD_CACHE_FILE, EmbeddingCache, text_digest

MODEL = "hash:64"


def index(vault, index_dir, *args, env=None):
    proc = subprocess.run([str(CLI), "--vault", str(vault), "--index-dir", str(index_dir), "index", "--json",
                           "--model", MODEL, *args], capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)["embedding"], proc.stderr


def paths(vault, index_dir, query):
    proc = subprocess.run([str(CLI), "--vault", str(vault), "--index-dir", str(index_dir), "search", query,
                           "--mode", "vector", "--format", "paths", "--no-server"], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.split()


def test_a_rebuild_and_a_second_index_embed_nothing_twice(vault, tmp_path):
    first, _ = index(vault, tmp_path / "a")
    assert first["embedded"] > 20 and first["cached"] == 0
    before = paths(vault, tmp_path / "a", "数据库 索引")
    again, _ = index(vault, tmp_path / "a", "--rebuild")
    other, _ = index(vault, tmp_path / "b")
    assert (again["embedded"], again["cached"], again["reused"]) == (0, 0, first["embedded"])
    assert (other["embedded"], other["cached"], other["reused"]) == (0, first["embedded"], 0)
    assert paths(vault, tmp_path / "a", "数据库 索引") == paths(vault, tmp_path / "b", "数据库 索引") == before


def test_a_note_copied_into_another_vault_takes_its_vectors_from_the_cache(vault, tmp_path):
    index(vault, tmp_path / "a")
    other = tmp_path / "other"
    note = next(p for p in sorted(vault.rglob("*.md")) if not any(part.startswith(".") for part in p.parts))
    write(other / note.name, note.read_bytes())
    copied, _ = index(other, tmp_path / "b")
    assert copied["embedded"] == 0 and copied["cached"] >= 1, (note, copied)


def test_a_damaged_row_is_embedded_again_and_a_damaged_file_is_set_aside(vault, tmp_path, own_embedding_cache):
    first, _ = index(vault, tmp_path / "a")
    db = own_embedding_cache / CACHE_FILE
    with sqlite3.connect(db) as conn:   # one vector flipped, its CRC left as it was
        digest, blob = conn.execute("SELECT digest, vector FROM vectors LIMIT 1").fetchone()
        conn.execute("UPDATE vectors SET vector = ? WHERE digest = ?", (bytes(b ^ 0xFF for b in blob), digest))
    again, _ = index(vault, tmp_path / "b")
    assert (again["embedded"], again["cached"]) == (1, first["embedded"] - 1)
    assert paths(vault, tmp_path / "b", "数据库 索引") == paths(vault, tmp_path / "a", "数据库 索引")

    for suffix in ("-wal", "-shm"):
        (own_embedding_cache / (CACHE_FILE + suffix)).unlink(missing_ok=True)
    db.write_bytes(b"this is not a database" * 100)
    third, err = index(vault, tmp_path / "c")
    assert (third["embedded"], third["cached"]) == (first["embedded"], 0)
    assert any(p.name.startswith(CACHE_FILE + ".damaged-") for p in own_embedding_cache.iterdir())
    fourth, _ = index(vault, tmp_path / "d")
    assert (fourth["embedded"], fourth["cached"]) == (0, first["embedded"])


def test_the_cache_is_bounded_and_keeps_the_most_recently_used(tmp_path):
    cache = EmbeddingCache(tmp_path / CACHE_FILE, limit=10 ** 9)
    rng = np.random.default_rng(1)
    vectors = rng.normal(size=(400, 384)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    digests = [text_digest(f"text {i}") for i in range(400)]
    for start in range(0, 400, 100):
        cache.put("m", list(zip(digests[start:start + 100], vectors[start:start + 100])))
        cache.conn.execute("UPDATE vectors SET used = used - ? WHERE used > 1000", (1000 - start,))
    assert cache.get("m", 384, digests[:5])   # the oldest five, used again: now the newest
    cache.limit = cache.live_bytes() // 2
    dropped = cache.trim()
    assert dropped > 100 and cache.live_bytes() <= cache.limit
    kept = cache.get("m", 384, digests)
    assert set(digests[:5]) <= set(kept) and digests[5] not in kept and digests[-1] in kept
    assert np.array_equal(kept[digests[-1]], vectors[-1])
    assert cache.get("m", 128, digests[-3:]) == {}   # another dimension: never trusted
    assert cache.get("other model", 384, digests[-3:]) == {}
    cache.close()


@pytest.mark.parametrize("fault", ["cache-put=oserror", "cache-put=dberror", "cache-put=interrupt",
                                   "cache-put=kill"])
def test_a_failing_cache_never_fails_an_index_and_keeps_no_half_write(vault, tmp_path, fault, own_embedding_cache):
    clean, _ = index(vault, tmp_path / "clean", env=None)
    for name in list(own_embedding_cache.iterdir()):
        name.unlink()
    r = run_cli(vault, tmp_path / "a", "index", "--model", MODEL, fault=fault)
    if "interrupt" in fault:
        assert r.returncode == 130 and "interrupted" in r.stderr
    elif "kill" in fault:
        assert r.returncode == -9
    else:
        assert r.returncode == 0 and "embedding cache" in r.stderr and "not used" in r.stderr, r.stderr
    done, _ = index(vault, tmp_path / "a")
    assert done["waiting"] == 0 and done["rows"] == clean["rows"]
    assert paths(vault, tmp_path / "a", "数据库 索引") == paths(vault, tmp_path / "clean", "数据库 索引")
    with sqlite3.connect(own_embedding_cache / CACHE_FILE) as conn:
        bad = conn.execute("SELECT count(*) FROM vectors WHERE length(vector) != 4 * dim").fetchone()[0]
    assert bad == 0


def test_an_unwritable_cache_folder_leaves_the_index_alone(vault, tmp_path, monkeypatch):
    blocked = tmp_path / "blocked"
    blocked.write_text("a file where the cache folder should be")
    monkeypatch.setenv("VAULT_SEARCH_CACHE_DIR", str(blocked / "cache"))
    report, err = index(vault, tmp_path / "a")
    assert report["embedded"] > 20 and report["waiting"] == 0 and "embedding cache" in err


def test_cache_command_shows_and_clears(vault, tmp_path, own_embedding_cache):
    first, _ = index(vault, tmp_path / "a")
    shown = subprocess.run([str(CLI), "cache", "--json"], capture_output=True, text=True, check=True).stdout
    data = json.loads(shown)
    assert data["entries"] == first["embedded"] and data["path"] == str(own_embedding_cache / CACHE_FILE)
    assert list(data["models"].values()) == [first["embedded"]] and data["bytes"] > 0
    text = subprocess.run([str(CLI), "cache", "--clear"], capture_output=True, text=True, check=True).stdout
    assert f"cleared {first['embedded']} vectors" in text and "0 vectors" in text
    copy = copy_tree(vault, tmp_path / "v2")
    again, _ = index(copy, tmp_path / "b")
    assert again["embedded"] == first["embedded"]


def test_a_bad_cache_size_setting_falls_back_to_the_default(monkeypatch):
    from indexer.embed_cache import DEFAULT_MAX_MB, max_bytes

    for bad in ("nan", "inf", "1e400", "-inf", "abc"):
        monkeypatch.setenv("VAULT_SEARCH_CACHE_MB", bad)
        assert max_bytes() == int(DEFAULT_MAX_MB * 1024 * 1024), bad
    monkeypatch.setenv("VAULT_SEARCH_CACHE_MB", "0")
    assert max_bytes() == 0 and EmbeddingCache().broken.startswith("off")


def test_vectors_of_other_weights_under_the_same_name_are_never_reused(vault, tmp_path):
    from indexer.embed import HashEmbedder
    from indexer.vectors import embedding_pass
    from vault_search import Index

    class Retrained(HashEmbedder):
        def weights_stamp(self) -> str:
            return "weights-retrained"

    with Index.open(vault, tmp_path / "a", create=True, embedder=HashEmbedder(64)) as idx:
        first = idx.sync().embedding
    with Index.open(vault, tmp_path / "b", create=True, embedder=Retrained(64)) as idx:
        idx.sync(embed=False)
        again = embedding_pass(idx.conn, tmp_path / "b", Retrained(64))
    assert Retrained(64).fingerprint == HashEmbedder(64).fingerprint != Retrained(64).cache_key
    assert first.embedded > 20 and (again.embedded, again.cached) == (first.embedded, 0)


@pytest.mark.parametrize("action", ["interrupt", "oserror"])
def test_an_error_inside_the_cache_write_releases_every_lock_in_process(vault, index_dir, monkeypatch, action,
                                                                       own_embedding_cache):
    """KeyboardInterrupt or OSError raised inside the cache's write
    transaction, in the process that keeps going (a server's watcher): the
    index and the cache are both writable again and the next sync finishes."""
    from indexer import faults
    from indexer.embed import HashEmbedder
    from vault_search import Index

    monkeypatch.setenv("VAULT_SEARCH_FAULT", f"cache-put={action}")
    monkeypatch.setattr(faults, "_seen", {})
    with Index.open(vault, index_dir, create=True, embedder=HashEmbedder(64)) as idx:
        if action == "interrupt":
            with pytest.raises(KeyboardInterrupt):
                idx.sync()
        else:
            assert idx.sync().embedding.cached == 0   # the cache turned itself off for the run
        monkeypatch.delenv("VAULT_SEARCH_FAULT")
        done = idx.sync().embedding
        assert done.waiting == 0 and done.rows > 20
    with sqlite3.connect(own_embedding_cache / CACHE_FILE, timeout=0) as conn:   # no lock left behind
        conn.execute("BEGIN IMMEDIATE")
        conn.rollback()
    again, _ = index(vault, index_dir.parent / "again")
    assert again["waiting"] == 0


def test_a_rebuild_takes_the_live_index_vectors_that_the_cache_lacks(vault, tmp_path, own_embedding_cache):
    """`index --rebuild` after the cache lost its vectors (cleared, trimmed, or
    an index older than the cache) embeds nothing the live index holds; a
    damaged vector there is embedded again; with the cache off
    ($VAULT_SEARCH_CACHE_MB=0) the rebuild embeds everything afresh."""
    first, _ = index(vault, tmp_path / "a")
    before = paths(vault, tmp_path / "a", "数据库 索引")
    subprocess.run([str(CLI), "cache", "--clear"], capture_output=True, check=True)
    with sqlite3.connect(tmp_path / "a" / "index.db") as conn:   # one vector of the live index damaged
        h, blob = conn.execute("SELECT hash, vector FROM embeddings LIMIT 1").fetchone()
        conn.execute("UPDATE embeddings SET vector = ? WHERE hash = ?", (bytes(b ^ 0x0F for b in blob), h))
    again, err = index(vault, tmp_path / "a", "--rebuild")
    assert (again["embedded"], again["cached"], again["reused"]) == (1, 0, first["embedded"] - 1), err
    assert again["waiting"] == 0 and paths(vault, tmp_path / "a", "数据库 索引") == before
    proc = run_cli(vault, tmp_path / "a", "index", "--rebuild")
    assert proc.returncode == 0 and f"{first['embedded']} from the index it replaces" in proc.stdout, proc.stdout
    # What was taken from the index went into the cache too: a second index embeds nothing.
    other, _ = index(vault, tmp_path / "b")
    assert (other["embedded"], other["cached"]) == (0, first["embedded"])
    brand_new, err = index(vault, tmp_path / "c", "--rebuild")   # no live index to take from: no warning
    assert brand_new["cached"] == first["embedded"] and "could not be read" not in err, err

    off = {**os.environ, "VAULT_SEARCH_CACHE_MB": "0"}
    fresh, _ = index(vault, tmp_path / "a", "--rebuild", env=off)
    assert (fresh["embedded"], fresh["cached"], fresh["reused"]) == (first["embedded"], 0, 0)


def test_a_rebuild_takes_latent_terms_with_the_vectors(tmp_path, own_embedding_cache):
    from vault_search import Index

    vault = tmp_path / "v"
    for i in range(6):
        write(vault / f"note {i}.md", f"# Note {i}\n\nSome text about topic {i} and its details.\n")
    with Index.open(vault, tmp_path / "index", create=True) as idx:
        first = idx.sync(model="hash:64+latent").embedding
    EmbeddingCache().clear()
    with Index.open(vault, tmp_path / "index", rebuild=True) as idx:
        again = idx.sync().embedding
    assert first.embedded == 6 and (again.embedded, again.cached, again.reused, again.latent) == (0, 0, 6, 6)
    with sqlite3.connect(tmp_path / "index" / "index.db") as conn:
        assert conn.execute("SELECT count(*) FROM latent").fetchone()[0] == 6
        assert conn.execute("SELECT count(*) FROM embeddings").fetchone()[0] == 6


OLD_SCHEMA = """
CREATE TABLE vectors (model TEXT NOT NULL, digest BLOB NOT NULL, dim INTEGER NOT NULL, vector BLOB NOT NULL,
                      crc INTEGER NOT NULL, used INTEGER NOT NULL, PRIMARY KEY (model, digest)) WITHOUT ROWID;
CREATE INDEX vectors_used ON vectors (used);
"""


def _old_cache(folder, n, dim=384):
    """A cache file in the first format, as the last release wrote it."""
    rng = np.random.default_rng(2)
    vectors = rng.normal(size=(n, dim)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    digests = [text_digest(f"old {i}") for i in range(n)]
    with sqlite3.connect(folder / OLD_CACHE_FILE) as conn:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.executescript(OLD_SCHEMA)
        conn.executemany("INSERT INTO vectors VALUES (?, ?, ?, ?, ?, ?)",
                         [(f"model {i % 2}", d, dim, v.tobytes(), zlib.crc32(v.tobytes()), 1000 + i)
                          for i, (d, v) in enumerate(zip(digests, vectors))])
    return digests, vectors


def test_a_cache_of_the_first_format_is_moved_over_and_the_bound_counts_true(tmp_path):
    """The first format spilled each 1.6 KB row onto an overflow page (4.8 KB a
    vector); the cache's rows now fit its pages: 1 GB holds the 600k vectors
    of 384 dimensions the docs promise. An old file's vectors are moved over
    once, and the old file goes."""
    digests, vectors = _old_cache(tmp_path, 3000)
    cache = EmbeddingCache(tmp_path / CACHE_FILE, limit=10 ** 9)
    got = cache.get("model 1", 384, digests)
    assert sorted(got) == sorted(digests[1::2]) and np.array_equal(got[digests[5]], vectors[5])
    assert not (tmp_path / OLD_CACHE_FILE).exists()
    stats = cache.stats()
    assert stats.entries == 3000 and stats.models == {"model 0": 1500, "model 1": 1500}
    per_vector = stats.bytes / stats.entries
    assert per_vector < 1024 ** 3 / 600_000, per_vector
    cache.close()


def test_a_rebuild_never_takes_vectors_of_other_weights_at_the_same_path(vault, tmp_path, own_embedding_cache):
    """A model whose fingerprint does not name its weights (a
    sentence-transformers model at a path) may be retrained there: the index
    records no stamp of the weights, so a rebuild takes none of its vectors."""
    from indexer.embed import HashEmbedder
    from vault_search import Index

    class AtAPath(HashEmbedder):
        stamp = "weights-1"

        def weights_stamp(self) -> str:
            return self.stamp

    with Index.open(vault, tmp_path / "index", create=True, embedder=AtAPath(64)) as idx:
        first = idx.sync().embedding
    retrained = AtAPath(64)
    retrained.stamp = "weights-2"
    with Index.open(vault, tmp_path / "index", rebuild=True, embedder=retrained) as idx:
        again = idx.sync().embedding
    assert first.embedded > 20 and (again.embedded, again.cached, again.reused) == (first.embedded, 0, 0)


def test_an_error_inside_a_cache_write_forgets_the_model_ids_it_saw(tmp_path, monkeypatch):
    """A model's id made inside a transaction that rolled back is never
    used again (another model may get that id next)."""
    from indexer import faults

    cache = EmbeddingCache(tmp_path / CACHE_FILE, limit=10 ** 9)
    a, b = np.eye(8, dtype=np.float32)[0], np.eye(8, dtype=np.float32)[1]
    monkeypatch.setattr(faults, "_seen", {})
    monkeypatch.setenv("VAULT_SEARCH_FAULT", "cache-put=interrupt")
    with pytest.raises(KeyboardInterrupt):
        cache.put("model a", [(text_digest("x"), a)])
    monkeypatch.delenv("VAULT_SEARCH_FAULT")
    cache.put("model b", [(text_digest("x"), b)])
    cache.put("model a", [(text_digest("y"), a)])
    assert cache.get("model a", 8, [text_digest("x")]) == {}
    assert np.array_equal(cache.get("model b", 8, [text_digest("x")])[text_digest("x")], b)
    assert cache.stats().models == {"model a": 1, "model b": 1}
    cache.close()


def test_trim_keeps_recently_used_rows_that_share_pages_with_old_ones(tmp_path):
    """The least recently used rows scattered over pages that stay in use
    free few pages when deleted: the file is compacted, not emptied of
    rows someone used a moment ago."""
    cache = EmbeddingCache(tmp_path / CACHE_FILE, limit=10 ** 9)
    rng = np.random.default_rng(3)
    vectors = rng.normal(size=(2000, 384)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    digests = [text_digest(f"text {i}") for i in range(2000)]
    cache.put("m", list(zip(digests, vectors)))
    cache.conn.execute("UPDATE vectors SET used = CASE id % 2 WHEN 0 THEN 1000 + id ELSE 2000000000 END")
    cache.limit = int(cache.live_bytes() * 0.75)
    dropped = cache.trim()
    assert 0 < dropped <= 1000 and cache.live_bytes() <= cache.limit
    kept = cache.get("m", 384, digests)
    assert all(d in kept for d in digests[0::2]), "a recently used row was dropped"   # ids 1, 3, ... (1-based)
    cache.close()


@pytest.mark.parametrize("error", ["oserror", "interrupt", "dberror"])
def test_an_error_while_an_old_cache_is_moved_loses_none_of_it(tmp_path, monkeypatch, error):
    from indexer import faults

    digests, _ = _old_cache(tmp_path, 2500)
    monkeypatch.setattr(faults, "_seen", {})
    monkeypatch.setenv("VAULT_SEARCH_FAULT", f"cache-migrate:2={error}")   # inside the second batch
    if error == "interrupt":
        with pytest.raises(KeyboardInterrupt):
            EmbeddingCache(tmp_path / CACHE_FILE)
    else:   # a disk full while writing the new file: the old one is kept for the next run
        assert EmbeddingCache(tmp_path / CACHE_FILE).broken.startswith(("OSError", "OperationalError"))
    assert (tmp_path / OLD_CACHE_FILE).exists()
    monkeypatch.delenv("VAULT_SEARCH_FAULT")
    cache = EmbeddingCache(tmp_path / CACHE_FILE)
    assert len(cache.get("model 0", 384, digests)) == 1250 and cache.stats().entries == 2500
    assert not (tmp_path / OLD_CACHE_FILE).exists()
    cache.close()


def test_an_index_first_opened_by_serve_is_chunked_as_index_chunks_it(tmp_path):
    """`serve` makes its first, keyword-only sync before any embedding: its
    chunks are sized by the model's tokenizer all the same, so a later
    `index` finds the very chunks it would have made and embeds each once."""
    from indexer.embed import EmbedderError, HashEmbedder, TokenCounter
    from vault_search import Index
    from vault_search.options import SearchOptions
    from vault_search.service import SearchService

    class Counted(HashEmbedder):   # a tokenizer that counts far more than the estimate
        def token_counter(self) -> TokenCounter:
            return TokenCounter("words-x3", lambda text: 3 * len(text.split()))

    vault = tmp_path / "v"
    words = " ".join(f"word{i}" for i in range(120))
    for n in range(4):
        write(vault / f"long {n}.md", f"# Long {n}\n\n" + "\n\n".join(f"{words} part {p}." for p in range(4)) + "\n")

    def chunks(index_dir):
        with sqlite3.connect(index_dir / "index.db") as conn:
            return sorted(conn.execute("SELECT n.path, c.start_line, c.end_line, c.hash FROM chunks c "
                                       "JOIN notes n ON n.id = c.note_id"))

    service = SearchService(vault, tmp_path / "served", watch=False, warm=False, embedder=Counted(64))
    service.close()

    class Unloadable(HashEmbedder):   # a model that cannot load: keyword search still comes up
        def token_counter(self) -> TokenCounter:
            raise EmbedderError("the model's package is not installed (injected)")

    down = SearchService(vault, tmp_path / "down", watch=False, warm=False, embedder=Unloadable(64))
    try:
        assert down.search("word7 part", SearchOptions(mode="fts")).results
    finally:
        down.close()
    with Index.open(vault, tmp_path / "served", create=True, embedder=Counted(64)) as idx:
        later = idx.sync()
    with Index.open(vault, tmp_path / "indexed", create=True, embedder=Counted(64)) as idx:
        direct = idx.sync()
    assert chunks(tmp_path / "served") == chunks(tmp_path / "indexed") and len(chunks(tmp_path / "served")) > 8
    assert later.chunks_written == 0 and not later.full_rebuild
    assert later.embedding.embedded + later.embedding.cached == direct.embedding.embedded + direct.embedding.cached
