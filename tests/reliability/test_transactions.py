"""Ordinary errors inside every write transaction, not only SIGKILL.

``VAULT_SEARCH_FAULT=txn:NAME=ACTION`` raises ``OSError`` (a full disk),
``KeyboardInterrupt`` (Ctrl-C) or an SQLite I/O error just before the named
transaction commits (indexer/faults.py). Whatever is raised: the CLI prints
one line (no traceback), the transaction is rolled back and SQLite's write
lock and the writer lock are free again in a long-lived process, and the next
sync completes and leaves exactly what a clean build leaves. Under `serve`,
one failed write does not stop live indexing.
"""

from __future__ import annotations

import fcntl
import json
import os
import sqlite3
import subprocess
import time
import urllib.request

import pytest
from conftest import CLI, SAMPLE_VAULT, copy_tree, start_server, write

from indexer import faults
from indexer.errors import VaultSearchError
from indexer.store import WRITE_TRANSACTIONS
from reliability.test_crash import snapshot
from vault_search import Index

MODEL = "hash:64"
ACTIONS = {"oserror": (OSError, 1), "interrupt": (KeyboardInterrupt, 130), "dberror": (VaultSearchError, 1)}
# Every transaction with every kind of error would be 21 CLI pairs; each
# transaction gets one action in turn, and the batch of notes gets all three.
CASES = [(name, list(ACTIONS)[i % 3]) for i, name in enumerate(WRITE_TRANSACTIONS)]
CASES += [("notes", a) for a in ACTIONS if ("notes", a) not in CASES]


def run_index(vault, index, fault=None, *args):
    env = {k: v for k, v in os.environ.items() if k != faults.ENV}
    if fault:
        env[faults.ENV] = fault
    return subprocess.run([str(CLI), "--vault", str(vault), "--index-dir", str(index), "index", "--model", MODEL,
                           *args], capture_output=True, text=True, env=env, timeout=300)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    base = tmp_path_factory.mktemp("txn")
    vault = copy_tree(SAMPLE_VAULT, base / "vault")
    assert run_index(vault, base / "ref").returncode == 0
    return vault, snapshot(base / "ref")


def lock_is_free(index) -> bool:
    """Another writer could start now: SQLite's write lock and write.lock are both free."""
    other = sqlite3.connect(index / "index.db", timeout=0.2, isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")
        other.execute("ROLLBACK")
    except sqlite3.OperationalError:
        return False
    finally:
        other.close()
    with open(index / "write.lock", "a+") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        fcntl.flock(fh, fcntl.LOCK_UN)
    return True


@pytest.mark.parametrize("name,action", CASES, ids=[f"{n}-{a}" for n, a in CASES])
def test_cli_error_inside_a_write_transaction(reference, tmp_path, name, action, ledger):
    vault, ref = reference
    index = tmp_path / "index"
    r = run_index(vault, index, f"txn:{name}={action}")
    assert r.returncode == ACTIONS[action][1], r
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "RecursionError" not in r.stderr
    again = run_index(vault, index)
    assert again.returncode == 0, again.stderr
    assert snapshot(index) == ref
    ledger.record("crash", f"{ACTIONS[action][0].__name__} raised inside a write transaction (`index`)",
                  "one-line error, rolled back; next index = clean build", tries=1)


@pytest.mark.parametrize("name", WRITE_TRANSACTIONS)
def test_in_process_error_releases_the_locks(reference, tmp_path, monkeypatch, name, ledger):
    """A long-lived writer (what `serve` and `watch` hold) survives a failed write."""
    vault, ref = reference
    index = tmp_path / "index"
    action = "oserror" if name != "finish" else "interrupt"
    faults.reset()
    monkeypatch.setenv(faults.ENV, f"txn:{name}={action}")
    idx = Index.open(vault, index, create=True)
    try:
        with pytest.raises(ACTIONS[action][0]):
            idx.sync(model=MODEL)
        assert not idx.conn.in_transaction
        assert lock_is_free(index)
        monkeypatch.delenv(faults.ENV)
        idx.sync(model=MODEL)   # the same object, as the watcher retries
    finally:
        idx.close()
        faults.reset()
    assert snapshot(index) == ref
    ledger.record("crash", "OSError or KeyboardInterrupt inside each write transaction (long-lived writer)",
                  "rolled back, SQLite and writer locks free, the next sync on the same object completes")


def _get(port, path):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=30) as response:
        return json.loads(response.read())


def test_serve_keeps_indexing_after_a_failed_write(tmp_path, ledger):
    vault = copy_tree(SAMPLE_VAULT, tmp_path / "vault")
    index = tmp_path / "index"
    assert run_index(vault, index).returncode == 0
    # The server's first sync finds nothing to write; the edit's batch is the
    # first "notes" transaction, and it fails once.
    proc, info = start_server(vault, index, env={faults.ENV: "txn:notes:1=oserror"})
    try:
        port = info["port"]
        write(vault / "fresh.md", "# Fresh\n\nquokkafault appears here\n")
        deadline = time.monotonic() + 30
        hits = []
        while time.monotonic() < deadline and not hits:
            hits = _get(port, "/search?q=quokkafault&mode=fts")["results"]
            time.sleep(0.2)
        assert [h["path"] for h in hits] == ["fresh.md"]
        status = _get(port, "/status")
        assert status["server"]["last_error"] is None
        # The CLI can write the same index while the server runs: no "database is locked".
        write(vault / "second.md", "# Second\n\nwombatfault\n")
        r = subprocess.run([str(CLI), "--vault", str(vault), "--index-dir", str(index), "index", "--no-embed"],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    assert "sync failed (will retry" in err and "No space left on device" in err, err
    assert "RecursionError" not in err and "damaged" not in err
    ledger.record("crash", "OSError inside a write transaction of `serve`",
                  "logged, retried; the edit is searchable, `index` beside it works")


@pytest.mark.parametrize("fault,error", [("fts-batch=oserror", OSError), ("txn:finish=interrupt", KeyboardInterrupt)])
def test_an_error_midway_through_a_rechunk_after_an_upgrade_is_redone_by_the_next_sync(
        reference, tmp_path, monkeypatch, fault, error):
    """A new chunker version re-chunks every note on the next sync (indexer/sync.py). An
    ordinary error halfway (a batch of notes committed, or at the last transaction) leaves
    the old version recorded, the locks free, and the next sync redoes the whole re-chunk:
    the index ends as a clean build."""
    from indexer.store import get_meta, set_meta

    vault, ref = reference
    index = tmp_path / "index"
    faults.reset()
    idx = Index.open(vault, index, create=True)
    try:
        idx.sync(model=MODEL)
        current = get_meta(idx.conn, "chunker_version")
        with idx.conn:
            set_meta(idx.conn, "chunker_version", "5/400/440/estimate")   # as an older release left it
            idx.conn.execute("UPDATE chunks_fts SET body = 'stale' WHERE rowid = (SELECT min(id) FROM chunks)")
        monkeypatch.setenv(faults.ENV, fault)
        with pytest.raises(error):
            idx.sync(model=MODEL)
        assert not idx.conn.in_transaction and lock_is_free(index)
        assert get_meta(idx.conn, "chunker_version") == "5/400/440/estimate"
        monkeypatch.delenv(faults.ENV)
        report = idx.sync(model=MODEL)
        assert report.full_rebuild and get_meta(idx.conn, "chunker_version") == current
    finally:
        idx.close()
        faults.reset()
    assert snapshot(index) == ref


@pytest.mark.parametrize("error", [OSError, KeyboardInterrupt])
def test_an_error_while_a_note_caught_mid_save_is_read_again(reference, tmp_path, monkeypatch, error):
    """A note read empty is read again after a pause (indexer/sync.py ``_read``).
    An ordinary error there (the disk failing on the second read, Ctrl-C during
    the pause) leaves no transaction open and both locks free; the next sync
    indexes the note and the index equals a clean build."""
    import builtins
    import errno
    import io

    from indexer import sync as sync_module

    vault, ref = reference
    index = tmp_path / "index"
    target = "Kyoto trip.md"
    reads = []

    def failing_open(path, mode="r", *args, **kwargs):
        if str(path).endswith(target) and "b" in mode:
            reads.append(path)
            if len(reads) == 1:
                return io.BytesIO(b"")                                  # caught mid-save
            raise OSError(errno.EIO, "Input/output error", str(path))    # the read again fails
        return builtins.open(path, mode, *args, **kwargs)

    def interrupted_pause(seconds):
        raise KeyboardInterrupt

    monkeypatch.setattr("indexer.sync.open", failing_open, raising=False)
    if error is KeyboardInterrupt:
        monkeypatch.setattr(sync_module.time, "sleep", interrupted_pause)
    idx = Index.open(vault, index, create=True)
    try:
        if error is KeyboardInterrupt:
            with pytest.raises(KeyboardInterrupt):
                idx.sync(model=MODEL)
            assert len(reads) == 1
        else:
            report = idx.sync(model=MODEL)   # the note is left for the next sync, with a warning
            assert len(reads) == 2 and any(target in path and "cannot read" in why for path, why in report.warnings)
        assert not idx.conn.in_transaction and lock_is_free(index)
        monkeypatch.undo()
        idx.sync(model=MODEL)
        assert [r.path for r in idx.search("tea ceremony", mode="fts").results][0] == "Notes/Travel/Kyoto trip.md"
    finally:
        idx.close()
    assert snapshot(index) == ref
