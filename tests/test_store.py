"""How SQLite errors read: only real damage asks for `index --rebuild`."""

from __future__ import annotations

import sqlite3

import pytest

from indexer.errors import IndexCorruptError, VaultSearchError
from indexer.store import describe_db_error


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
