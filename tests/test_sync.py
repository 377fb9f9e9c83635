import os
import sqlite3

import pytest
from conftest import write

from indexer.segment import Segmenter
from indexer.store import get_meta, set_meta
from vault_search import Index


def sync(vault, index_dir):
    with Index.open(vault, index_dir, create=True) as idx:
        return idx.sync(embed=False)


def search_paths(vault, index_dir, query, **kw):
    with Index.open(vault, index_dir) as idx:
        return [r.path for r in idx.search(query, **kw).results]


def test_first_sync_then_nothing_changed(vault, index_dir):
    first = sync(vault, index_dir)
    assert first.added == 22 and first.chunks_written > 20
    assert not first.warnings
    second = sync(vault, index_dir)
    assert (second.added, second.updated, second.deleted, second.touched, second.chunks_written) == (0, 0, 0, 0, 0)
    assert second.unchanged == 22


def test_touch_without_change_rehashes_but_does_not_reparse(vault, index_dir):
    sync(vault, index_dir)
    note = vault / "Notes/Reading/Deep Work.md"
    st = note.stat()
    os.utime(note, ns=(st.st_atime_ns, st.st_mtime_ns + 5_000_000_000))
    report = sync(vault, index_dir)
    assert (report.touched, report.updated, report.chunks_written) == (1, 0, 0)
    assert sync(vault, index_dir).touched == 0  # the new mtime was recorded


def test_edit_add_delete_and_rename(vault, index_dir):
    sync(vault, index_dir)
    write(vault / "Notes/new note.md", "# New\nquetzalcoatl appears here\n")
    note = vault / "Notes/Reading/Deep Work.md"
    note.write_text(note.read_text(encoding="utf-8") + "\nAlso: archipelago.\n", encoding="utf-8")
    (vault / "Notes/Travel/Kyoto trip.md").unlink()
    report = sync(vault, index_dir)
    assert (report.added, report.updated, report.deleted) == (1, 1, 1)
    assert search_paths(vault, index_dir, "quetzalcoatl") == ["Notes/new note.md"]
    assert search_paths(vault, index_dir, "archipelago") == ["Notes/Reading/Deep Work.md"]
    assert "Notes/Travel/Kyoto trip.md" not in search_paths(vault, index_dir, "Kyoto Fushimi")

    os.rename(vault / "Notes/new note.md", vault / "Notes/renamed.md")
    report = sync(vault, index_dir)
    assert (report.added, report.deleted) == (1, 1)
    assert search_paths(vault, index_dir, "quetzalcoatl") == ["Notes/renamed.md"]
    with sqlite3.connect(index_dir / "index.db") as conn:
        # No orphans: every FTS row belongs to a chunk and every chunk to a note.
        assert conn.execute("SELECT count(*) FROM chunks_fts").fetchone() == \
            conn.execute("SELECT count(*) FROM chunks").fetchone()
        assert conn.execute("SELECT count(*) FROM chunks WHERE note_id NOT IN (SELECT id FROM notes)").fetchone() == (0,)


def test_segmenter_version_change_forces_resegmentation(vault, index_dir):
    sync(vault, index_dir)
    with Index.open(vault, index_dir) as idx:
        set_meta(idx.conn, "segmenter_version", "0/old")
    report = sync(vault, index_dir)
    assert report.full_rebuild and report.updated == 22
    with Index.open(vault, index_dir) as idx:
        assert get_meta(idx.conn, "segmenter_version") == Segmenter.version


def test_vault_names_join_the_dictionary_and_older_notes_are_resegmented(vault, index_dir):
    write(vault / "a/older.md", "# Older\n我们昨天讨论了琉璃光塔计划的进度。\n")
    sync(vault, index_dir)
    with sqlite3.connect(index_dir / "index.db") as conn:
        assert conn.execute("SELECT count(*) FROM chunks_fts WHERE chunks_fts MATCH '\"琉璃光塔\"'").fetchone() == (0,)
    # A new note is titled with the name: it joins the dictionary, and the
    # older note that mentions it is segmented again so the name matches whole.
    write(vault / "b/琉璃光塔.md", "---\naliases: [光塔计划]\n---\n项目说明。\n")
    report = sync(vault, index_dir)
    assert report.user_words_added >= 1 and report.resegmented >= 1
    with sqlite3.connect(index_dir / "index.db") as conn:
        words = dict(conn.execute("SELECT word, freq FROM dictionary"))
        assert "琉璃光塔" in words
        rows = conn.execute("SELECT c.note_id FROM chunks_fts JOIN chunks c ON c.id = chunks_fts.rowid "
                            "WHERE chunks_fts MATCH '\"琉璃光塔\"'").fetchall()
        assert len(rows) == 2
    assert search_paths(vault, index_dir, "琉璃光塔")[0] == "b/琉璃光塔.md"
    assert "a/older.md" in search_paths(vault, index_dir, "琉璃光塔")


def test_index_lives_outside_the_vault_by_default(vault, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.delenv("VAULT_SEARCH_INDEX_DIR", raising=False)
    with Index.open(vault, create=True) as idx:
        idx.sync(embed=False)
        where = idx.config.index_dir
    assert where.parent == tmp_path / "data" / "vault-search"
    assert where.name.startswith("vault-") and (where / "index.db").exists()
    assert not any(p.name.endswith(".db") for p in vault.rglob("*"))


def test_wal_mode_and_schema_recorded(vault, index_dir):
    sync(vault, index_dir)
    with sqlite3.connect(index_dir / "index.db") as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        names = [r[0] for r in conn.execute("SELECT name FROM _migrations ORDER BY rowid")]
        assert names == ["m001_notes", "m002_chunks_fts", "m003_dictionary", "m004_embeddings", "m005_rerank_cache",
                         "m006_links_entry_times", "m007_names", "m008_latent"]
        meta = dict(conn.execute("SELECT key, value FROM meta"))
        assert meta["schema_version"] == "8" and meta["segmenter_version"] == Segmenter.version


def test_two_index_processes_at_once_serialise(vault, index_dir):
    import subprocess

    from conftest import CLI

    cmd = [str(CLI), "--vault", str(vault), "--index-dir", str(index_dir), "index", "--no-embed"]
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(3)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], outs
    added = sorted(int(out.split(": ")[1].split(" added")[0]) for out, _ in outs)
    assert added == [0, 0, 22]
    with sqlite3.connect(index_dir / "index.db") as conn:
        assert conn.execute("SELECT count(*) FROM notes").fetchone() == (22,)


def test_an_index_belongs_to_one_vault(vault, index_dir, tmp_path):
    from indexer.errors import VaultSearchError

    sync(vault, index_dir)
    other = tmp_path / "other"
    write(other / "x.md", "# X\nother vault\n")
    with pytest.raises(VaultSearchError, match="belongs to the vault"):
        Index.open(other, index_dir)
    with pytest.raises(VaultSearchError, match="belongs to the vault"):
        Index.open(other, index_dir, create=True)
    with Index.open(other, index_dir, rebuild=True) as idx:
        assert idx.sync(embed=False).added == 1


def test_interrupted_sync_keeps_the_vault_dictionary(tmp_path):
    v = tmp_path / "v"
    names = ["琉璃光塔", "青鸾计划", "白鹭洲行动"] + [f"星河{'一二三四五六七八九'[i % 9]}号{'甲乙丙丁'[i % 4]}" for i in range(400)]
    for i, name in enumerate(names):
        write(v / f"n{i:03d}.md", f"---\ntitle: {name}\n---\n关于{name}的记录，另见{names[(i + 1) % len(names)]}。\n")

    class Stop(Exception):
        pass

    def stop_in_second_pass(done, total):
        if done > total // 2 + 250:   # pass 2, after its first batch committed
            raise Stop()

    with Index.open(v, tmp_path / "i", create=True) as idx:
        with pytest.raises(Stop):
            idx.sync(progress=stop_in_second_pass, embed=False)
        idx.sync(embed=False)
        words = {w for (w,) in idx.conn.execute("SELECT word FROM dictionary")}
    with Index.open(v, tmp_path / "clean", create=True) as idx:
        idx.sync(embed=False)
        clean = {w for (w,) in idx.conn.execute("SELECT word FROM dictionary")}
        clean_tokens = idx.conn.execute("SELECT body FROM chunks_fts ORDER BY rowid").fetchall()
    assert words == clean and "琉璃光塔" in words
    with sqlite3.connect(tmp_path / "i" / "index.db") as conn:
        assert conn.execute("SELECT count(*) FROM dictionary WHERE settled = 0").fetchone() == (0,)
        assert sorted(conn.execute("SELECT body FROM chunks_fts").fetchall()) == sorted(clean_tokens)


def test_an_edit_segmented_with_part_of_the_dictionary_is_indexed_as_a_full_build_would(vault, index_dir, tmp_path):
    """A sync of a few notes loads only the dictionary parts they need
    (Segmenter.prepare); the rows it writes are those of a full build."""
    sync(vault, index_dir)
    note = vault / "Notes/数据库/数据库索引.md"
    note.write_text(note.read_text(encoding="utf-8") + "\n## 新的小节\n\n飞轮效应与卡片笔记法，数据库的覆盖索引。\n",
                    encoding="utf-8")
    write(vault / "Notes/飞轮效应.md", "# 飞轮效应\n\n卡片笔记法让飞轮转起来。\n")
    with Index.open(vault, index_dir) as idx:
        report = idx.sync(embed=False)
        assert (report.added, report.updated) == (1, 1) and not idx.writer.segmenter.jieba_loaded

    def rows(index):
        with sqlite3.connect(index / "index.db") as conn:
            return sorted(conn.execute("""SELECT n.path, f.title, f.aliases, f.tags, f.headings, f.body
                                          FROM chunks_fts f JOIN chunks c ON c.id = f.rowid
                                          JOIN notes n ON n.id = c.note_id"""))

    full = tmp_path / "full"
    sync(vault, full)
    assert rows(index_dir) == rows(full)


def test_a_note_caught_mid_save_is_read_again(vault, index_dir, monkeypatch):
    """An editor that truncates a file and then writes it leaves it empty for a
    moment; a sync that reads it then must not index the note as empty."""
    import builtins
    import io

    sync(vault, index_dir)
    note = write(vault / "Inbox" / "busy.md", "# Busy\nrevision 1 of the marmoset\n")
    caught = []

    def open_mid_save(path, mode="r", *args, **kwargs):
        if str(path).endswith("busy.md") and "b" in mode and not caught:
            caught.append(path)
            return io.BytesIO(b"")          # the moment between the truncation and the write
        return builtins.open(path, mode, *args, **kwargs)

    monkeypatch.setattr("indexer.sync.open", open_mid_save, raising=False)
    sync(vault, index_dir)
    assert [os.fspath(p) for p in caught] == [str(note)]
    assert search_paths(vault, index_dir, "marmoset") == ["Inbox/busy.md"]


def test_notes_emptied_since_the_scan_pause_a_sync_a_bounded_number_of_times(vault, index_dir, monkeypatch):
    """Each empty read of a note the scan saw holding text waits a moment and
    reads it again, but a sync waits so at most MID_SAVE_MAX_PAUSES times:
    thousands of notes emptied since the scan must not stall it."""
    import builtins
    import io

    from indexer import sync as sync_module

    sync(vault, index_dir)
    for i in range(sync_module.MID_SAVE_MAX_PAUSES + 10):
        write(vault / "Bulk" / f"note {i}.md", f"# Note {i}\nthe okapi, number {i}\n")
    pauses = []

    def always_empty(path, mode="r", *args, **kwargs):
        if "Bulk" in str(path) and "b" in mode:
            return io.BytesIO(b"")
        return builtins.open(path, mode, *args, **kwargs)

    monkeypatch.setattr("indexer.sync.open", always_empty, raising=False)
    monkeypatch.setattr(sync_module, "MID_SAVE_PAUSE_S", 0.0)
    real_sleep = sync_module.time.sleep
    monkeypatch.setattr(sync_module.time, "sleep",
                        lambda s: pauses.append(s) if s == 0.0 else real_sleep(s))
    sync(vault, index_dir)
    assert len(pauses) == sync_module.MID_SAVE_MAX_PAUSES
    assert search_paths(vault, index_dir, "okapi") == []   # indexed as they were read: empty
