"""A hostile tester's third round, each through the face where it was seen:
the installed `vault-search` on a temp vault (and its HTTP server where a
500 came back). Frontmatter numbers no float can hold, a note over
max_file_mb read with `get`, a query log grown past any sensible size or
damaged, an edit that sets the mtime back, settings no number can hold, and
a `bench` file nested past Python's stack."""

from __future__ import annotations

import json
import os
import sqlite3
import stat
from http.client import HTTPConnection

from conftest import start_server, write

HUGE = "1" + "0" * 400          # an integer YAML reads and no float can hold


def http(port: int, path: str, body: dict | None = None):
    """GET ``path``, or POST ``body`` as JSON (a request no other site's page can send: it is logged)."""
    conn = HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        conn.request("GET" if body is None else "POST", path, body=None if body is None else json.dumps(body),
                     headers={"Host": f"127.0.0.1:{port}", "Content-Type": "application/json"})
        r = conn.getresponse()
        return r.status, json.loads(r.read() or b"null")
    finally:
        conn.close()


def one_line_error(r) -> str:
    lines = [line for line in r.err.splitlines() if line.strip()]
    assert r.code != 0 and "Traceback" not in r.err and len(lines) >= 1, r
    errors = [line for line in lines if line.startswith(("error:", "Error:"))]
    assert len(errors) == 1, r
    return errors[0]


# -- 7. --boost on a value no float can hold -----------------------------------------

def test_boost_counts_a_number_no_float_can_hold_as_missing(vault, index_dir, cli, ledger):
    for name, value in (("big", HUGE), ("negative", "-" + HUGE), ("nan-text", '"nan"'), ("inf", ".inf"),
                        ("inf-text", '"-1e999"'), ("fine", "0.9")):
        write(vault / f"Inbox/quokka-{name}.md", f"---\nimportance: {value}\n---\n# Quokka {name}\nthe quokka smiles\n")
    write(vault / ".vault-search.toml", 'boost = "importance"\n')
    assert cli("index", "--no-embed").code == 0
    for args in ((), ("--boost", "importance")):
        r = cli("search", "quokka", "--json", "--explain", "--no-server", *args)
        assert r.code == 0 and "Traceback" not in r.err, r
        data = r.json()
        ranks = {row["path"]: row for row in data["explain"]["ranks"]}
        for name in ("big", "negative", "nan-text", "inf", "inf-text"):
            row = ranks[f"Inbox/quokka-{name}.md"]
            assert row["boost_factor"] == 0.75 and row.get("boost_value") is None, (name, row)
        assert ranks["Inbox/quokka-fine.md"]["boost_value"] == 0.9
        assert any("not a number, counted as 0.5: Inbox/quokka-big.md" in w for w in data["warnings"]), data
        assert data["results"][0]["path"] == "Inbox/quokka-fine.md"
    proc, info = start_server(vault, index_dir, "--no-watch")
    try:
        status, data = http(info["port"], "/search?query=quokka&boost=importance")
        assert status == 200 and len(data["results"]) == 6, data
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    ledger.record("hostile input", "`--boost` on frontmatter numbers no float holds (400 digits, its negative, "
                  "nan and inf as text and YAML)", "counted as missing (x0.75) with the not-a-number warning; "
                  "CLI and HTTP answer", tries=5)


# -- 8a. get of a note over max_file_mb ----------------------------------------------

def test_get_of_a_note_over_max_file_mb_says_where_it_is_cut(vault, cli, ledger):
    lines = [f"line {i} pangolin " + "é" * 40 for i in range(1, 40_001)]   # ~3.6 MB
    write(vault / "Inbox/export.md", "\n".join(lines) + "\n")
    write(vault / ".vault-search.toml", "max_file_mb = 1\n")
    r = cli("get", "Inbox/export.md", "--json")
    assert r.code == 0, r
    data = r.json()
    assert data["truncated"] is True and data["total_lines"] == 40_000 and data["start_line"] == 1
    last = data["end_line"]
    assert 1000 < last < 40_000 and len(data["text"].encode()) <= 1024 * 1024
    assert data["text"].split("\n") == lines[:last]                   # whole lines, none cut in half
    assert data["warnings"] == [f"cut at line {last} of 40000: Inbox/export.md is over the 1 MB that one get "
                                f"returns (max_file_mb in .vault-search.toml); read on from line {last + 1}"]
    plain = cli("get", "Inbox/export.md")   # the text form says so on stderr, the text stays clean on stdout
    assert plain.code == 0 and plain.err.strip() == f"warning: {data['warnings'][0]}"
    assert plain.out.split("\n")[:last] == lines[:last]
    on = cli("get", f"Inbox/export.md:{last + 1}", "--json").json()   # reading on, as the warning says
    assert on["start_line"] == last + 1 and on["text"].split("\n")[0] == lines[last]
    tail = cli("get", "Inbox/export.md:39999-40005", "--json").json()
    assert (tail["start_line"], tail["end_line"], tail["truncated"], tail["warnings"]) == (39999, 40000, False, [])
    assert tail["text"] == "\n".join(lines[-2:])
    past = cli("get", "Inbox/export.md:40001")
    assert "has 40000 lines; line 40001 is past the end" in one_line_error(past)
    small = cli("get", "Home.md", "--json").json()
    assert small["truncated"] is False and small["warnings"] == []
    # multi-get, of a note indexed before max_file_mb came down, lists it as cut
    (vault / ".vault-search.toml").unlink()
    assert cli("index", "--no-embed").code == 0
    write(vault / ".vault-search.toml", "max_file_mb = 1\n")
    many = cli("multi-get", "Inbox/export.md", "--json", "--max-bytes", "10000000").json()
    assert [c["path"] for c in many["cut"]] == ["Inbox/export.md"] and "cut at line" in many["cut"][0]["reason"]
    ledger.record("resources", "`get` of a note over max_file_mb (3.6 MB, limit 1 MB)",
                  "whole lines up to the limit, `truncated` with a warning naming where to read on; "
                  "true total_lines; later ranges readable")


# -- 8b. the query log's size --------------------------------------------------------

def test_the_query_log_keeps_a_bounded_number_of_hits_per_search(vault, index_dir, cli, ledger):
    from vault_search import querylog

    for i in range(querylog.LOGGED_HITS + 30):
        write(vault / f"Inbox/axolotl {i:03}.md", f"# Axolotl {i}\nthe axolotl number {i}\n")
    write(vault / ".vault-search.toml", "log_queries = true\n")
    assert cli("index", "--no-embed").code == 0
    r = cli("search", "axolotl", "-n", "1000", "--json", "--no-server")
    assert r.code == 0 and len(r.json()["results"]) == querylog.LOGGED_HITS + 30
    with sqlite3.connect(index_dir / "queries.db") as conn:
        assert conn.execute("SELECT count(*) FROM hits").fetchone() == (querylog.LOGGED_HITS,)
        assert conn.execute("SELECT results FROM searches").fetchone() == (querylog.LOGGED_HITS + 30,)
    ledger.record("resources", "query log with `limit=1000` searches",
                  f"at most {querylog.LOGGED_HITS} hits kept a search, the log capped by bytes too")


def test_the_query_log_stays_under_its_byte_cap(tmp_path, monkeypatch):
    from vault_search import querylog
    from vault_search.results import Scores, SearchResponse, SearchResult

    monkeypatch.setattr(querylog, "MAX_LOG_BYTES", 512 * 1024)
    long_path = "deep/" * 50 + "note.md"
    hits = [SearchResult(f"{long_path}{i}", "t", "", 1, 1, "", 1.0, Scores(), [], False, "", relevance=0.5)
            for i in range(1000)]
    for i in range(1000):
        querylog.record(tmp_path, SearchResponse(query=f"{i} " + "q" * 1000, mode="fts", took_ms=1.0, results=hits))
    size = sum(p.stat().st_size for p in tmp_path.glob("queries.db*"))
    # The cap, and one search's worth over it (~30 KB here: a 1000-character query, 50 hits of
    # 257-character paths, each in its table and in the index on paths), and the WAL's pages.
    assert size < 512 * 1024 + 4 * 40_000, size
    entries = querylog.read(tmp_path, True, limit=10_000).entries
    assert entries[0].query.startswith("999 ") and len(entries) < 1000


# -- 8c. a damaged query log ---------------------------------------------------------

def test_a_damaged_query_log_is_set_aside_once_and_a_new_one_started(vault, index_dir, cli, ledger):
    write(vault / ".vault-search.toml", "log_queries = true\n")
    assert cli("index", "--no-embed").code == 0
    assert cli("search", "tea ceremony", "--no-server").code == 0
    log_db = index_dir / "queries.db"
    assert stat.S_IMODE(log_db.stat().st_mode) == 0o600                # a new log: its owner's only
    for extra in ("-wal", "-shm"):
        (index_dir / f"queries.db{extra}").unlink(missing_ok=True)
    log_db.write_bytes(b"SQLite format 3\x00" + b"\xff" * 8000)       # damaged in place
    os.chmod(log_db, 0o644)
    r = cli("search", "tea ceremony", "--no-server", "--format", "paths")
    assert r.code == 0 and r.out.startswith("Notes/Travel/Kyoto trip.md") and "Traceback" not in r.err, r
    assert r.err.count("set aside as queries.db.corrupt-") == 1, r.err
    aside = list(index_dir.glob("queries.db.corrupt-*"))
    assert len(aside) == 1 and stat.S_IMODE(aside[0].stat().st_mode) == 0o600
    assert stat.S_IMODE(log_db.stat().st_mode) == 0o600
    again = cli("search", "deep work", "--no-server", "--format", "paths")
    assert again.code == 0 and again.err == "", again                  # one warning, not one a search
    logged = cli("log", "--json")
    assert logged.code == 0 and [e["query"] for e in logged.json()["entries"]] == ["deep work", "tea ceremony"]
    # Damaged between searches, found by `log` and by the server: no traceback, no 500.
    log_db.write_bytes(b"not a database at all" * 100)
    for extra in ("-wal", "-shm"):
        (index_dir / f"queries.db{extra}").unlink(missing_ok=True)
    r = cli("log", "--json")
    assert r.code == 0 and r.json()["entries"] == [] and "set aside" in r.json()["warnings"][0], r
    log_db.write_bytes(b"not a database at all" * 100)
    proc, info = start_server(vault, index_dir, "--no-watch")
    try:
        status, data = http(info["port"], "/search", {"query": "tea"})
        assert status == 200 and data["results"], data
        status, data = http(info["port"], "/log")
        assert status == 200 and [e["query"] for e in data["entries"]] == ["tea"], data
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert len(list(index_dir.glob("queries.db.corrupt-*"))) == 3
    ledger.record("corruption", "queries.db damaged (garbage pages, not a database) under search, `log`, HTTP",
                  "set aside as queries.db.corrupt-TIME with one warning, a new log started; the search answers",
                  tries=3)
    ledger.record("security", "query log file mode", "created 0600; an older 0644 one made 0600")


# -- 8d. an edit that sets the mtime back --------------------------------------------

def test_an_edit_that_keeps_the_size_and_sets_the_mtime_back_is_indexed(vault, cli, ledger):
    note = vault / "Notes/Reading/Deep Work.md"
    assert cli("index", "--no-embed").code == 0
    before = note.stat()
    text = note.read_text(encoding="utf-8")
    assert "productivity" in text
    note.write_text(text.replace("productivity", "egretegretxx", 1), encoding="utf-8")   # same length
    os.utime(note, ns=(before.st_atime_ns, before.st_mtime_ns))                      # touch -r, cp -p, rsync -t
    assert note.stat().st_size == before.st_size and note.stat().st_mtime_ns == before.st_mtime_ns
    report = cli("index", "--no-embed", "--json").json()
    assert (report["updated"], report["touched"]) == (1, 0), report
    found = cli("search", "egretegretxx", "--format", "paths", "--no-server")
    assert found.out.split("\n")[0] == "Notes/Reading/Deep Work.md", found
    # A change of the inode alone (chmod, a hard link) is only hashed again, never re-parsed.
    os.chmod(vault / "Home.md", 0o600)
    report = cli("index", "--no-embed", "--json").json()
    assert (report["updated"], report["touched"], report["chunks_written"]) == (0, 1, 0), report
    report = cli("index", "--no-embed", "--json").json()
    assert (report["updated"], report["touched"]) == (0, 0), report
    ledger.record("hostile input", "an edit keeping the size with the mtime set back (`touch -r`, `cp -p`)",
                  "found by its ctime and indexed; a chmod alone only hashes the file again")


# -- 8e. settings no number can hold -------------------------------------------------

def test_settings_past_any_sensible_number_are_used_at_their_bound_or_refused(vault, cli, ledger):
    assert cli("index", "--no-embed").code == 0
    for setting, warned in (("max_file_mb = 1e308", "max_file_mb = 1e+308 is past the most it may be; 1024 used"),
                            ("max_file_mb = inf", "max_file_mb = inf is past the most it may be; 1024 used"),
                            ("stale_days = 1e12", "stale_days = 1e+12 is past 36500 (a hundred years); 36500 used"),
                            ("stale_days = inf", "stale_days = inf is past 36500"),
                            ("max_file_mb = 1" + "0" * 400, "max_file_mb = 10000000000000000000... (401 digits) is past"),
                            ("stale_days = 1" + "0" * 400, "stale_days = 10000000000000000000... (401 digits) is past")):
        write(vault / ".vault-search.toml", setting + "\n")
        r = cli("search", "tea ceremony", "--exclude-stale", "--format", "paths", "--no-server")
        assert r.code == 0 and r.out.startswith("Notes/Travel/Kyoto trip.md") and "Traceback" not in r.err, r
        status = cli("status")
        assert status.code == 0 and warned in status.err, (setting, status)
        assert cli("get", "Home.md").code == 0
    for setting, message in (("max_file_mb = nan", "max_file_mb must be a positive number"),
                             ("max_file_mb = -inf", "max_file_mb must be a positive number"),
                             ("stale_days = nan", "stale_days must be a number of days (0 or more)")):
        write(vault / ".vault-search.toml", setting + "\n")
        for args in (("search", "tea", "--no-server"), ("index", "--no-embed")):
            assert message in one_line_error(cli(*args)), (setting, args)
    ledger.record("hostile input", "max_file_mb and stale_days of 1e308, inf, nan, 1e12, a 401-digit integer in "
                  ".vault-search.toml", "past the bound: used at it with a warning; nan: a one-line settings error",
                  tries=9)


# -- 8f. bench on a line nested past the stack ---------------------------------------

def test_bench_names_a_line_nested_past_pythons_stack(vault, tmp_path, cli, ledger):
    assert cli("index", "--no-embed").code == 0
    items = tmp_path / "items.jsonl"
    items.write_text('{"query": "tea ceremony", "targets": ["Notes/Travel/Kyoto trip.md"]}\n'
                     + "[" * 100_000 + "]" * 100_000 + "\n", encoding="utf-8")
    r = cli("bench", str(items))
    assert r.code == 2 and f"{items}:2: not JSON (nested too deeply)" in one_line_error(r), r
    ledger.record("hostile input", "`bench` file with a line nested 100,000 deep",
                  "a one-line error naming the line (exit 2)")


def test_a_watchers_sync_of_one_path_sees_the_edit_too(vault, index_dir):
    from vault_search import Index

    note = vault / "Notes/Reading/Deep Work.md"
    with Index.open(vault, index_dir, create=True) as idx:
        idx.sync(embed=False)
        before = note.stat()
        text = note.read_text(encoding="utf-8")
        note.write_text(text.replace("productivity", "egretegretxx", 1), encoding="utf-8")
        os.utime(note, ns=(before.st_atime_ns, before.st_mtime_ns))
        assert idx.sync(embed=False, paths=["Notes/Reading/Deep Work.md"]).updated == 1
        assert [r.path for r in idx.search("egretegretxx", mode="fts").results] == ["Notes/Reading/Deep Work.md"]


def test_a_ctime_to_the_whole_second_is_compared_at_that_precision():
    from indexer.sync import _changed_since

    scan_began = 10_500_000_000                          # 10.5 s
    assert _changed_since(10_000_000_001 + 500_000_000, scan_began)
    assert not _changed_since(10_400_000_000, scan_began)  # nanosecond dates: exact
    assert _changed_since(10_000_000_000, scan_began)      # dated to the second: maybe after 10.5 s
    assert not _changed_since(8_000_000_000, scan_began)
