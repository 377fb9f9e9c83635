"""Resource limits, corruption, old schemas, disagreeing vectors, fuzzed input
and secrets: each fault gives a clear one-line message or succeeds, and
nothing committed is lost."""

from __future__ import annotations

import json
import os
import resource
import shutil
import signal
import sqlite3
import subprocess
from http.client import HTTPConnection
from pathlib import Path

import numpy as np
import pytest
from conftest import CLI, SAMPLE_VAULT, copy_tree, start_server, write
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from indexer.chunk import Chunk, chunk_note
from indexer.parse import parse_note
from reliability.test_crash import snapshot
from vault_search import Index

FIXTURES = Path(__file__).parent / "fixtures"
ADDED_SINCE_SCHEMA_5 = ("memory/trading-rules.md", "memory/deploy-checklist.md")


def vs(vault, index, *args, preexec=None, env=None):
    return subprocess.run([str(CLI), "--vault", str(vault), "--index-dir", str(index), *args],
                          capture_output=True, text=True, timeout=300, preexec_fn=preexec,
                          env={**os.environ, **(env or {})})


def one_line_error(r) -> str:
    lines = [line for line in r.stderr.splitlines() if line.startswith("error:")]
    assert r.returncode == 1 and len(lines) == 1, (r.returncode, r.stderr[-800:])
    assert "Traceback" not in r.stderr
    return lines[0]


def file_size_limit(limit: int):
    def apply():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)   # so writes fail with EFBIG instead of killing
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return apply


def add_notes(vault: Path, n: int, tag: str = "bulk") -> None:
    for i in range(n):
        write(vault / "bulk" / f"{tag}-{i}.md", f"# {tag} {i}\n\n" + f"词语 word{i} 数据库 索引 {tag} " * 200 + "\n")


# -- resources ------------------------------------------------------------------

def test_disk_full_is_a_clear_error_and_loses_nothing(vault, tmp_path, ledger):
    index = tmp_path / "index"
    assert vs(vault, index, "index", "--no-embed").returncode == 0
    before = vs(vault, index, "search", "数据库", "--json", "--no-server").stdout
    add_notes(vault, 300)
    db = index / "index.db"
    r = vs(vault, index, "index", "--no-embed", preexec=file_size_limit(db.stat().st_size + 64 * 1024))
    err = one_line_error(r)
    assert "could not write the index" in err and "free space" in err
    conn = sqlite3.connect(db)
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    conn.close()
    # what was committed before is all there, and searchable
    after = vs(vault, index, "search", "数据库", "--json", "--no-server")
    assert after.returncode == 0
    assert {r["path"] for r in json.loads(before)["results"]} <= {r["path"] for r in json.loads(after.stdout)["results"]} | {
        p for p in []}
    # with room again, the next run completes
    assert vs(vault, index, "index", "--no-embed").returncode == 0
    assert json.loads(vs(vault, index, "status", "--json").stdout)["notes"] == 22 + 300
    ledger.record("resources", "file-size limit (disk full) during `index`",
                  "one-line error, db intact, committed notes searchable, next run completes")


def _read_only(path: Path) -> callable:
    """Make a folder and its files unwritable, even for root; returns the undo."""
    files = [path, *path.iterdir()]
    if os.geteuid() != 0:
        for p in files:
            p.chmod(0o555 if p.is_dir() else 0o444)
        return lambda: [p.chmod(0o755 if p.is_dir() else 0o644) for p in files]
    if shutil.which("chattr") is None or subprocess.run(["chattr", "+i", *map(str, files)],
                                                        capture_output=True).returncode != 0:
        pytest.skip("running as root without chattr: cannot make a folder read-only")
    return lambda: subprocess.run(["chattr", "-i", *map(str, files)], check=True)


def test_read_only_index_folder(vault, tmp_path, ledger):
    index = tmp_path / "index"
    assert vs(vault, index, "index", "--no-embed").returncode == 0
    write(vault / "Inbox" / "new.md", "# New\n\nzanzibar\n")
    undo = _read_only(index)
    try:
        err = one_line_error(vs(vault, index, "index", "--no-embed"))
        assert "read-only" in err or "permission" in err.lower() or "could not write" in err
        r = vs(vault, index, "search", "数据库", "--json", "--no-server")
        if r.returncode == 0:
            assert json.loads(r.stdout)["results"]
            outcome = "index: one-line error; search still answers"
        else:
            one_line_error(r)
            outcome = "index and search: one-line error"
    finally:
        undo()
    assert vs(vault, index, "index", "--no-embed").returncode == 0
    assert "Inbox/new.md" in vs(vault, index, "search", "zanzibar", "--format", "paths", "--no-server").stdout
    ledger.record("resources", "read-only index folder", outcome + "; works again once writable")


def test_vault_and_index_paths_with_spaces_and_non_ascii(tmp_path, ledger):
    vault = copy_tree(SAMPLE_VAULT, tmp_path / "My Vault 笔记 ü")
    index = tmp_path / "索引 folder é"
    assert vs(vault, index, "index", "--model", "hash:32").returncode == 0
    hit = json.loads(vs(vault, index, "search", "数据库索引", "--json", "--no-server").stdout)["results"][0]
    assert hit["path"] == "Notes/数据库/数据库索引.md" and "vault=My%20Vault%20%E7%AC%94" in hit["uri"]
    assert vs(vault, index, "get", hit["path"] + ":1-3").returncode == 0
    assert vs(vault, index, "links", hit["path"]).returncode == 0
    assert json.loads(vs(vault, index, "status", "--json").stdout)["vectors"].startswith("ok")
    ledger.record("resources", "vault and index on paths with spaces and non-ASCII", "index, search, get, links work")


# -- corruption and versions ----------------------------------------------------------

CORRUPTIONS = {
    "garbage header": lambda data: b"\x00garbage" * 16 + data[128:],
    "truncated to a third": lambda data: data[:len(data) // 3],
    "pages overwritten": lambda data: data[:4096] + bytes((i * 7) % 251 for i in range(len(data) - 4096)),
}


@pytest.mark.parametrize("kind", list(CORRUPTIONS))
def test_corrupted_db_is_a_one_line_error_and_rebuild_recovers(vault, tmp_path, kind, ledger):
    index = tmp_path / "index"
    assert vs(vault, index, "index", "--no-embed").returncode == 0
    db = index / "index.db"
    db.write_bytes(CORRUPTIONS[kind](db.read_bytes()))
    for extra in ("-wal", "-shm"):
        Path(str(db) + extra).unlink(missing_ok=True)
    for args in (("search", "数据库", "--no-server"), ("status",), ("index", "--no-embed")):
        err = one_line_error(vs(vault, index, *args))
        assert "--rebuild" in err, (args, err)
    assert vs(vault, index, "index", "--rebuild", "--no-embed").returncode == 0
    assert "Notes/数据库/数据库索引.md" in vs(vault, index, "search", "数据库索引", "--format", "paths",
                                               "--no-server").stdout
    ledger.record("corruption", f"index.db {kind}", "one-line error naming `index --rebuild`; rebuild recovers")


@pytest.mark.parametrize("schema", ["schema-5", "schema-7", "schema-8"])
def test_an_index_written_by_an_older_version_is_migrated(tmp_path, schema, ledger):
    """schema-5 was written by the release before links and names (git
    590d837), schema-7 by the release before latent terms (852c63c); schema-8
    by today's code, kept for tomorrow's migrations."""
    vault = copy_tree(SAMPLE_VAULT, tmp_path / "vault")
    for rel in ADDED_SINCE_SCHEMA_5:
        (vault / rel).unlink()
    index = tmp_path / "index"
    shutil.copytree(FIXTURES / schema, index)
    conn = sqlite3.connect(index / "index.db")
    conn.execute("UPDATE meta SET value = ? WHERE key = 'vault'", (str(vault.resolve()),))
    conn.commit()
    conn.close()
    # a reader never writes: an older index asks for `index` in one line; today's just answers
    r = vs(vault, index, "search", "数据库索引", "--json", "--no-server")
    if schema == "schema-8":
        assert r.returncode == 0 and json.loads(r.stdout)["results"][0]["path"] == "Notes/数据库/数据库索引.md"
    else:
        assert "run `vault-search index` to migrate" in one_line_error(r)
    # the next `index` migrates it to exactly what a clean build gives
    assert vs(vault, index, "index").returncode == 0
    clean = tmp_path / "clean"
    assert vs(vault, clean, "index", "--model", "hash:16").returncode == 0
    assert snapshot(index) == snapshot(clean)
    status = json.loads(vs(vault, index, "status", "--json").stdout)
    assert status["schema_version"] == 8 and status["links"] > 0 and status["vectors"].startswith("ok")
    ledger.record("versions", f"index written by {schema.replace('-', ' ')}"
                  + (" (an earlier release)" if schema != "schema-8" else " (today's code, for tomorrow)"),
                  ("search asks for `index` in one line" if schema != "schema-8" else "search answers as is")
                  + "; `index` leaves a clean build's state")


# -- index and vectors disagree ---------------------------------------------------

def _hash_index(vault, index, model="hash:32"):
    assert vs(vault, index, "index", "--model", model).returncode == 0


def test_vectors_from_another_model_are_detected_and_repaired(vault, tmp_path, ledger):
    index, other = tmp_path / "index", tmp_path / "other"
    _hash_index(vault, index)
    _hash_index(vault, other, "hash:48")
    for name in ("vectors.npy", "vectors.ids.npy"):
        shutil.copy(other / name, index / name)
    status = json.loads(vs(vault, index, "status", "--json").stdout)
    assert not status["vectors"].startswith("ok")
    response = json.loads(vs(vault, index, "search", "数据库", "--mode", "vector", "--json", "--no-server").stdout)
    assert response["warnings"] and "database copy" in response["warnings"][0]
    assert response["results"][0]["path"].startswith("Notes/数据库/")
    assert vs(vault, index, "index").returncode == 0
    assert json.loads(vs(vault, index, "status", "--json").stdout)["vectors"].startswith("ok")
    ledger.record("vectors", "vectors file from another model", "detected, reported in status, db copy served "
                  "with a warning, repaired by `index`")


def test_vectors_file_with_rows_of_deleted_chunks(vault, tmp_path, ledger):
    index = tmp_path / "index"
    _hash_index(vault, index)
    saved = {name: (index / name).read_bytes() for name in ("vectors.npy", "vectors.ids.npy")}
    (vault / "Notes" / "数据库" / "数据库索引.md").unlink()
    _hash_index(vault, index)
    for name, data in saved.items():   # an old matrix comes back (a backup restore, a sync tool)
        (index / name).write_bytes(data)
    assert "belongs to other chunks" in json.loads(vs(vault, index, "status", "--json").stdout)["vectors"] or \
        "rows" in json.loads(vs(vault, index, "status", "--json").stdout)["vectors"]
    response = json.loads(vs(vault, index, "search", "数据库索引", "--mode", "vector", "--json",
                             "--no-server").stdout)
    assert response["warnings"]
    assert "Notes/数据库/数据库索引.md" not in {r["path"] for r in response["results"]}   # never a deleted note
    assert vs(vault, index, "index").returncode == 0
    assert json.loads(vs(vault, index, "status", "--json").stdout)["vectors"].startswith("ok")
    ids = np.load(index / "vectors.ids.npy")
    conn = sqlite3.connect(index / "index.db")
    assert set(ids.tolist()) == {r[0] for r in conn.execute("SELECT id FROM chunks")}
    ledger.record("vectors", "stale vectors file with rows of deleted chunks",
                  "detected; deleted notes never served; repaired by `index`")


# -- fuzzing ------------------------------------------------------------------

MARKDOWNISH = st.lists(st.sampled_from(list("ab 数据#-*[]|^`~:>\n\r\t!") + ["---\n", "```\n", "[[x]]", "[[y#h|z]]",
                                                                       "\n### 09:30 — ", "\u2028", "tags: [a]\n"]),
                       max_size=120).map("".join)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=MARKDOWNISH, daily=st.booleans())
@example(text="\n### 09:30 — aaaa[[y#h|z]]aaaa\na[[y#h|z]][[y#h|z]]a a", daily=False)   # a heading with no room
def test_parser_and_chunker_never_fail_and_cover_the_note(text, daily):
    path = "log/2026-11-01.md" if daily else "notes/n.md"
    note = parse_note(path, text)
    assert 1 <= note.body_start <= len(note.lines) + 1
    assert all(note.body_start <= h.line <= len(note.lines) for h in note.headings)
    assert all(1 <= link.line <= len(note.lines) for link in note.link_records)
    chunks = chunk_note(note, max_tokens=40)
    if note.body_is_empty:   # frontmatter only: one empty chunk over it keeps the names and tags searchable
        assert chunks == ([Chunk(0, "", 1, max(note.body_start - 1, 1), "")] if note.metadata else [])
        return
    previous_end = note.body_start - 1
    for c in chunks:
        assert previous_end <= c.start_line <= c.end_line <= len(note.lines)   # in order, inside the note
        previous_end = c.end_line
        assert c.text.strip()
    covered = set()
    for c in chunks:
        covered.update(range(c.start_line, c.end_line + 1))
    body = [i for i in range(note.body_start, len(note.lines) + 1) if note.lines[i - 1].strip()]
    if note.metadata or not note.body_is_empty:
        # A heading line with no room beside its text is left out of the chunks on purpose: every
        # chunk under it carries it in its heading path (chunk._split_section).
        headings = {h.line: h.text for h in note.headings}
        for line in set(body) - covered:
            assert line in headings and any(headings[line] in c.heading for c in chunks), (text, chunks)


def test_random_http_requests_never_crash_the_server(vault, index_dir, ledger):
    assert vs(vault, index_dir, "index", "--no-embed").returncode == 0
    proc, info = start_server(vault, index_dir, "--no-watch")
    try:
        port = info["port"]
        statuses = {}

        @settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
        @given(method=st.sampled_from(["GET", "POST", "PUT", "DELETE", "HEAD"]),
               path=st.sampled_from(["/search", "/get", "/links", "/tags", "/status", "/health", "/x", "//"]),
               query=st.lists(st.tuples(st.sampled_from(["query", "q", "mode", "limit", "tag", "path", "after",
                                                         "before", "where", "related", "recency_half_life",
                                                         "start", "end", "explain", "vault", "zz"]),
                                        st.text(max_size=30)), max_size=5),
               body=st.one_of(st.none(), st.binary(max_size=200), st.text(max_size=200).map(str.encode)))
        def fire(method, path, query, body):
            from urllib.parse import urlencode
            url = path + ("?" + urlencode(query) if query else "")
            conn = HTTPConnection("127.0.0.1", port, timeout=30)
            try:
                conn.request(method, url, body=body, headers={"Host": f"127.0.0.1:{port}"})
                r = conn.getresponse()
                data = r.read()
                statuses[r.status] = statuses.get(r.status, 0) + 1
                assert r.status not in (500, 501), (method, url, body, data[:300])
                if method != "HEAD" and not r.getheader("Content-Type", "").startswith("text/html"):
                    json.loads(data)   # every answer is JSON, refusals included (the search page aside)
                elif method != "HEAD":   # "//" is "/" to http.server: the search page, and only for GET
                    assert (method, r.status, url.split("?")[0]) == ("GET", 200, "//"), (method, url)
            finally:
                conn.close()
        fire()
        conn = HTTPConnection("127.0.0.1", port, timeout=30)
        conn.request("GET", "/health", headers={"Host": f"127.0.0.1:{port}"})
        assert conn.getresponse().status == 200 and proc.poll() is None
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    ledger.record("hostile input", "random HTTP requests (methods, paths, parameters, bodies)",
                  f"no 500, no crash, every answer JSON; statuses {dict(sorted(statuses.items()))}",
                  tries=sum(statuses.values()))


def test_query_builder_fuzz_never_raises_nor_becomes_syntax(ledger):
    """Arbitrary Unicode through the FTS query builder into a real FTS5 table."""
    from indexer.segment import Segmenter
    from vault_search.query import fts_query

    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE VIRTUAL TABLE t USING fts5(body)")
    conn.execute("INSERT INTO t VALUES ('near and or not c++ 数据库')")
    segmenter = Segmenter()
    count = [0]

    @settings(max_examples=400, deadline=None)
    @given(st.text(max_size=120))
    def run(text):
        fq = fts_query(text, segmenter)
        if fq.match:
            conn.execute("SELECT count(*) FROM t WHERE t MATCH ?", (fq.match,)).fetchone()
            # every term is a quoted string: the query is words, never operators
            assert all(part.startswith('"') and part.endswith('"') for part in fq.match.split(" OR "))
        count[0] += 1
    run()
    ledger.record("hostile input", "arbitrary Unicode through the FTS query builder (hypothesis)",
                  "never raises; always quoted words, never FTS5 syntax", tries=count[0])


def test_readers_never_see_a_half_applied_batch(vault, tmp_path, ledger):
    """Every note is rewritten from version A to B by a running `index`; a
    reader polling meanwhile sees each note wholly A or wholly B."""
    index = tmp_path / "index"
    for i in range(400):
        write(vault / "bulk" / f"n{i}.md", f"# N{i}\n\nalpha{i} versiona\n\n## Two\n\nbeta{i} versiona\n")
    assert vs(vault, index, "index", "--no-embed").returncode == 0
    for i in range(400):
        write(vault / "bulk" / f"n{i}.md", f"# N{i}\n\nalpha{i} versionb\n\n## Two\n\nbeta{i} versionb\n")
    writer = subprocess.Popen([str(CLI), "--vault", str(vault), "--index-dir", str(index), "index", "--no-embed"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    polls = 0
    with Index.open(vault, index) as idx:
        while writer.poll() is None or polls < 5:
            idx.conn.execute("BEGIN")
            try:
                mixed = idx.conn.execute(
                    """SELECT n.path FROM chunks c JOIN notes n ON n.id = c.note_id WHERE n.path LIKE 'bulk/%'
                       GROUP BY n.id HAVING sum(c.text LIKE '%versiona%') > 0 AND sum(c.text LIKE '%versionb%') > 0
                    """).fetchall()
                counts = idx.conn.execute("SELECT count(*) FROM notes WHERE path LIKE 'bulk/%'").fetchone()[0]
            finally:
                idx.conn.execute("COMMIT")
            assert not mixed and counts == 400
            idx.search("versionb alpha7", mode="fts")
            polls += 1
    assert writer.wait() == 0, writer.stderr.read()
    ledger.record("concurrency", "a reader polling while `index` rewrites 400 notes",
                  "every note wholly old or wholly new; no 'database is locked'", tries=polls)
