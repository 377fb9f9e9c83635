"""`index --rebuild` builds beside the live index and swaps it in only when
complete: a bad model name, an error, Ctrl-C or SIGKILL during the rebuild
leave the old index searchable and unchanged."""

from __future__ import annotations

import signal

from conftest import SAMPLE_VAULT, copy_tree, write
from conftest import run_cli as run

from reliability.test_crash import snapshot

MODEL = "hash:64"


def hits(vault, index, query):
    r = run(vault, index, "search", query, "--mode", "fts", "--format", "paths", "--no-server")
    assert r.returncode == 0, r.stderr
    return r.stdout.split()


def prepared(tmp_path):
    vault = copy_tree(SAMPLE_VAULT, tmp_path / "vault")
    index = tmp_path / "index"
    assert run(vault, index, "index", "--model", MODEL).returncode == 0
    before = snapshot(index)
    # A change the rebuild would pick up, so "unchanged" is visible.
    write(vault / "Later.md", "# Later\n\nnumbatlater only after a rebuild\n")
    return vault, index, before


def test_rebuild_with_a_bad_model_keeps_the_old_index(tmp_path, ledger):
    vault, index, before = prepared(tmp_path)
    r = run(vault, index, "index", "--rebuild", "--model", "bogus")
    assert r.returncode != 0 and "unknown model 'bogus'" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert snapshot(index) == before
    assert hits(vault, index, "数据库") and not hits(vault, index, "numbatlater")
    assert not (index / "rebuild").exists()
    ledger.record("versions", "`index --rebuild --model bogus`",
                  "refused in one line; the old index is untouched and searchable")


def test_interrupted_or_failed_rebuild_keeps_the_old_index(tmp_path, ledger):
    vault, index, before = prepared(tmp_path)
    for fault, code in (("txn:notes=interrupt", 130), ("txn:embeddings=oserror", 1), ("swap=errno:EIO", 1)):
        r = run(vault, index, "index", "--rebuild", fault=fault)
        assert r.returncode == code, (fault, r)
        assert snapshot(index) == before, fault
        assert not (index / "rebuild").exists(), fault
    assert hits(vault, index, "数据库") and not hits(vault, index, "numbatlater")
    ledger.record("crash", "Ctrl-C, disk full or an I/O error during `index --rebuild`",
                  "the rebuild is discarded; the old index is unchanged and searchable", tries=3)


def test_killed_rebuild_keeps_the_old_index_and_the_next_rebuild_completes(tmp_path, ledger):
    vault, index, before = prepared(tmp_path)
    for point in ("fts-batch", "embed-batch", "swap"):
        r = run(vault, index, "index", "--rebuild", fault=point)
        assert r.returncode == -signal.SIGKILL, r
        assert snapshot(index) == before, point
        assert hits(vault, index, "数据库") and not hits(vault, index, "numbatlater")
    done = run(vault, index, "index", "--rebuild")
    assert done.returncode == 0, done.stderr
    assert hits(vault, index, "numbatlater") == ["Later.md"]
    assert not (index / "rebuild").exists()
    clean = tmp_path / "clean"
    assert run(vault, clean, "index", "--model", MODEL).returncode == 0
    assert snapshot(index) == snapshot(clean)   # the rebuild kept the model, and equals a clean build
    ledger.record("crash", "SIGKILL during `index --rebuild` (FTS batch, embedding, swap)",
                  "the old index is unchanged and searchable; the next rebuild equals a clean build", tries=3)


def test_a_second_rebuild_is_refused_while_one_runs(tmp_path, ledger):
    from vault_search import Index

    vault, index, before = prepared(tmp_path)
    running = Index.open(vault, index, rebuild=True)   # a rebuild under way (not yet synced)
    try:
        r = run(vault, index, "index", "--rebuild")
        assert r.returncode == 1 and "a rebuild of this index is already running" in r.stderr, r
        assert (index / "rebuild").exists()   # the running one's files are untouched
    finally:
        running.close()
    assert snapshot(index) == before
    done = run(vault, index, "index", "--rebuild")
    assert done.returncode == 0, done.stderr
    assert hits(vault, index, "numbatlater") == ["Later.md"]
    ledger.record("concurrency", "two `index --rebuild` at once",
                  "the second is refused in one line; the first's files are untouched")
