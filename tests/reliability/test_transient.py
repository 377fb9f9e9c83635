"""Transient errors are not deletions.

A note that cannot be read just now (EACCES, EIO: injected at the real
``open`` through ``VAULT_SEARCH_FAULT=read:N=errno:NAME``, since root reads
any file whatever its mode) keeps what the index had and is read again at the
next sync; a vault whose folders cannot be listed (file descriptors
exhausted, a real RLIMIT_NOFILE) deletes nothing. Only a path confirmed gone
(ENOENT) is deleted.
"""

from __future__ import annotations

import os
import resource

from conftest import run_cli as run
from conftest import write

from vault_search import Index


def note_count(vault, index) -> int:
    with Index.open(vault, index) as idx:
        return idx.status().notes


def fts_paths(vault, index, query) -> list[str]:
    with Index.open(vault, index) as idx:
        return [r.path for r in idx.search(query, mode="fts").results]


def test_a_note_unreadable_once_is_indexed_at_the_next_sync(vault, index_dir, ledger):
    r = run(vault, index_dir, "index", "--no-embed", fault="read:1=errno:EIO")
    assert r.returncode == 0, r.stderr
    assert "cannot read (Input/output error" in r.stderr and "tries again" in r.stderr
    total = len(list(vault.rglob("*.md"))) - len(list(vault.glob(".*/**/*.md")))
    assert note_count(vault, index_dir) == total - 1
    again = run(vault, index_dir, "index", "--no-embed")
    assert again.returncode == 0, again.stderr
    assert note_count(vault, index_dir) == total   # nothing about the file changed; it is read again all the same
    with Index.open(vault, index_dir) as idx:
        assert not [w for w in idx.status().warnings if "cannot read" in w["message"]]
    ledger.record("resources", "a new note unreadable once (EIO) during `index`",
                  "warned; indexed at the next sync although its mtime did not change")


def test_an_edited_note_unreadable_once_keeps_its_last_version(vault, index_dir, ledger):
    note = write(vault / "Transient.md", "# Transient\n\nplatypusold lives here\n")
    assert run(vault, index_dir, "index", "--no-embed").returncode == 0
    note.write_text("# Transient\n\nplatypusnew lives here now\n", encoding="utf-8")
    r = run(vault, index_dir, "index", "--no-embed", fault="read:1=errno:EACCES")
    assert r.returncode == 0, r.stderr
    assert "Transient.md: cannot read (Permission denied" in r.stderr
    assert fts_paths(vault, index_dir, "platypusold") == ["Transient.md"]   # not deleted
    got = run(vault, index_dir, "get", "Transient.md")
    assert "platypusnew" in got.stdout
    assert run(vault, index_dir, "index", "--no-embed").returncode == 0
    assert fts_paths(vault, index_dir, "platypusnew") == ["Transient.md"]
    assert fts_paths(vault, index_dir, "platypusold") == []
    ledger.record("resources", "an edited note unreadable once (EACCES) during `index`",
                  "its last version stays searchable; the edit is indexed at the next sync")


def test_file_descriptors_exhausted_during_a_rescan_delete_nothing(vault, index_dir, ledger):
    idx = Index.open(vault, index_dir, create=True)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        first = idx.sync(embed=False)
        assert first.added > 10
        notes = idx.status().notes
        # The limit is on descriptor numbers: the lowest free one is left for
        # the writer lock; listing the vault then finds none (EMFILE).
        # (listdir's own descriptor, the lowest free number, is listed as used.)
        used = {int(fd) for fd in os.listdir("/proc/self/fd")}
        free = [n for n in range(max(used) + 2) if n not in used]
        resource.setrlimit(resource.RLIMIT_NOFILE, (free[0], hard))
        try:
            report = idx.sync(embed=False)
        finally:
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        assert report.deleted == 0
        assert any("cannot read" in m for _, m in report.warnings), report.warnings
        assert idx.status().notes == notes
        assert idx.sync(embed=False).deleted == 0
        (vault / "Notes" / "Reading" / "Deep Work.md").unlink()
        assert idx.sync(embed=False).deleted == 1   # a note that is really gone still goes
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        idx.close()
    ledger.record("resources", "file descriptors exhausted during a rescan (EMFILE)",
                  "nothing deleted; the next rescan completes; a really deleted note still goes")


def test_an_empty_vault_folder_deletes_nothing(vault, index_dir, tmp_path, ledger):
    """An unmounted drive leaves an empty mount point behind."""
    assert run(vault, index_dir, "index", "--no-embed").returncode == 0
    notes = note_count(vault, index_dir)
    away = tmp_path / "away"
    away.mkdir()
    for entry in list(vault.iterdir()):
        entry.rename(away / entry.name)
    r = run(vault, index_dir, "index", "--no-embed")
    assert r.returncode == 0 and "the vault folder is empty" in r.stderr and "0 deleted" in r.stdout, r
    assert note_count(vault, index_dir) == notes
    for entry in list(away.iterdir()):
        entry.rename(vault / entry.name)
    r = run(vault, index_dir, "index", "--no-embed")
    # Moved back, each note is as it was: nothing re-parsed (a file whose inode the move changed is re-hashed)
    assert r.returncode == 0 and f"{notes} notes scanned: 0 added, 0 updated, 0 deleted" in r.stdout, r.stdout
    ledger.record("resources", "the vault folder empty (an unmounted drive)",
                  "nothing deleted, a one-line warning; everything unchanged once it is back")
