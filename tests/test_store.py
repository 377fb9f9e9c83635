"""How SQLite errors read: only real damage asks for `index --rebuild`; who may read the index; the one
transaction helper every database the project writes goes through."""

from __future__ import annotations

import os
import sqlite3
import stat

import pytest

from indexer import faults
from indexer.errors import IndexCorruptError, VaultSearchError
from indexer.store import (
    CACHE_TRANSACTIONS,
    QUERY_LOG_TRANSACTIONS,
    WRITE_TRANSACTIONS,
    describe_db_error,
    fault_point,
    private_dir,
    snapshot,
    transaction,
)


def _error(conn: sqlite3.Connection, sql: str) -> sqlite3.DatabaseError:
    with pytest.raises(sqlite3.DatabaseError) as caught:
        conn.execute(sql)
    return caught.value


def test_a_file_that_is_not_a_database_is_damage(tmp_path):
    path = tmp_path / "index.db"
    path.write_bytes(b"\x00garbage" * 512)
    exc = _error(sqlite3.connect(path), "SELECT * FROM sqlite_master")
    error = describe_db_error(exc, tmp_path)
    assert isinstance(error, IndexCorruptError)
    assert str(error).startswith("the index database is damaged (")
    assert str(error).endswith("run `vault-search index --rebuild`")


def test_any_other_sqlite_error_is_one_line_and_asks_to_run_index_again(tmp_path):
    exc = _error(sqlite3.connect(tmp_path / "index.db"), "SELECT * FROM no_such_table")
    error = describe_db_error(exc, tmp_path)
    assert type(error) is VaultSearchError
    assert str(error) == ("the index database reported an error (no such table: no_such_table); "
                          "run `vault-search index` again")
    assert "damaged" not in str(error) and "--rebuild" not in str(error)


def test_private_dir_makes_an_index_folder_private_and_says_so_only_when_notes_were_exposed(tmp_path):
    old = os.umask(0o022)
    try:
        folder = tmp_path / "made" / "index"
        assert private_dir(folder) is None
        assert (stat.S_IMODE(folder.stat().st_mode), stat.S_IMODE(folder.parent.stat().st_mode)) == (0o700, 0o755)
        # an index folder before its first db (serve's lock made it): tightened, nothing to say
        os.chmod(folder, 0o755)
        (folder / "serve.lock").touch(mode=0o644)
        assert private_dir(folder) is None
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700
        assert stat.S_IMODE((folder / "serve.lock").stat().st_mode) == 0o600
        (folder / "index.db").touch(mode=0o644)
        assert private_dir(folder) is None   # a 0700 folder: nobody else reaches its files
        os.chmod(folder, 0o750)
        assert private_dir(folder) == (f"tightened permissions of index folder {folder} (was 0750) "
                                       "so other users cannot read your notes")
        assert stat.S_IMODE((folder / "index.db").stat().st_mode) == 0o600
    finally:
        os.umask(old)


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="needs root to give a folder away")
def test_private_dir_leaves_another_users_folder_alone(tmp_path):
    folder = tmp_path / "theirs"
    folder.mkdir(mode=0o755)
    (folder / "index.db").touch(mode=0o644)
    os.chown(folder, 65534, 65534)
    assert private_dir(folder) is None
    assert stat.S_IMODE(folder.stat().st_mode) == 0o755
    assert stat.S_IMODE((folder / "index.db").stat().st_mode) == 0o644


def test_private_dir_keeps_a_read_only_index_folder_read_only(tmp_path):
    folder = tmp_path / "index"
    folder.mkdir()
    (folder / "index.db").touch(mode=0o444)
    os.chmod(folder, 0o555)
    try:
        assert "(was 0555)" in private_dir(folder)
        assert stat.S_IMODE(folder.stat().st_mode) == 0o500
        assert stat.S_IMODE((folder / "index.db").stat().st_mode) == 0o400
    finally:
        os.chmod(folder, 0o755)


def _db(path):
    conn = sqlite3.connect(path, isolation_level=None, timeout=0.2)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("CREATE TABLE IF NOT EXISTS t (x)")
    return conn


def _write_lock_is_free(path) -> bool:
    other = sqlite3.connect(path, isolation_level=None, timeout=0.2)
    try:
        other.execute("BEGIN IMMEDIATE")
        other.execute("ROLLBACK")
        return True
    except sqlite3.OperationalError:
        return False
    finally:
        other.close()


ALL_TRANSACTIONS = [*WRITE_TRANSACTIONS, *CACHE_TRANSACTIONS, *QUERY_LOG_TRANSACTIONS]


@pytest.mark.parametrize("name", ALL_TRANSACTIONS)
@pytest.mark.parametrize("error", [OSError, KeyboardInterrupt, sqlite3.OperationalError])
def test_an_error_at_the_fault_point_of_any_write_transaction_rolls_it_back(tmp_path, monkeypatch, name, error):
    """The index's, the embedding cache's and the query log's writes share one
    helper: an error just before COMMIT (where each has its fault point)
    leaves nothing written, no transaction open and SQLite's write lock free."""
    action = {OSError: "oserror", KeyboardInterrupt: "interrupt", sqlite3.OperationalError: "dberror"}[error]
    conn = _db(tmp_path / "x.db")
    faults.reset()
    monkeypatch.setenv(faults.ENV, f"{fault_point(name)}={action}")
    try:
        with pytest.raises(error):
            with transaction(conn, name):
                conn.execute("INSERT INTO t VALUES (1)")
        assert not conn.in_transaction and _write_lock_is_free(tmp_path / "x.db")
        assert conn.execute("SELECT count(*) FROM t").fetchone()[0] == 0
        monkeypatch.delenv(faults.ENV)
        with transaction(conn, name):
            conn.execute("INSERT INTO t VALUES (1)")
        assert conn.execute("SELECT count(*) FROM t").fetchone()[0] == 1
    finally:
        faults.reset()
        conn.close()


def test_the_index_transactions_keep_their_txn_fault_points_and_the_others_their_names():
    assert [fault_point(n) for n in WRITE_TRANSACTIONS] == [f"txn:{n}" for n in WRITE_TRANSACTIONS]
    assert fault_point("cache-put") == "cache-put" and fault_point("query-log") == "query-log"


def test_a_snapshot_reads_one_state_whatever_a_writer_commits_meanwhile(tmp_path):
    reader, writer = _db(tmp_path / "x.db"), _db(tmp_path / "x.db")
    try:
        with snapshot(reader):
            assert reader.execute("SELECT count(*) FROM t").fetchone()[0] == 0
            with transaction(writer, "notes"):
                writer.execute("INSERT INTO t VALUES (1)")
            assert reader.execute("SELECT count(*) FROM t").fetchone()[0] == 0
        assert not reader.in_transaction
        assert reader.execute("SELECT count(*) FROM t").fetchone()[0] == 1
        with pytest.raises(ValueError):
            with snapshot(reader):
                reader.execute("SELECT count(*) FROM t")
                raise ValueError("a failed read")
        assert not reader.in_transaction
    finally:
        reader.close()
        writer.close()
