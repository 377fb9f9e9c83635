"""No note, however hostile its Markdown, holds the writer for long.

The parser (indexer/parse.py) and the reading-view text (indexer/plain.py)
are fuzzed with hypothesis on adversarial Markdown, each input under a time
bound; a budget turns a note whose markup takes too long into plain text.
"""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from indexer.chunk import chunk_note
from indexer.parse import MAX_MARKUP_LINE, parse_budget, parse_note
from indexer.plain import reading_text

# Pieces that open or close Markdown constructs, and the fillers between them.
PIECES = ["[", "]", "(", ")", "![", "](", "[[", "]]", "![](", "[x](", "<", ">", "<a ", "</", "<!--", "-->", "%%",
          "*", "**", "_", "__", "~~", "==", "`", "```", "~~~", "\\", "#", "# ", "|", "|-|", "> ", ">[!", "- ",
          "1. ", "    ", "\t", " ", "\n", "\n\n", "a", "b1", "中文", "http://", "data:", "base64,", "\"", "'",
          "^", "[^", "]:", "&", "&#", ";", ":", "=", "-", "---\n", "%"]

piece = st.sampled_from(PIECES)
# A run of one piece repeated (the shape of every quadratic-regex input), or a mix.
run = st.tuples(st.lists(piece, min_size=1, max_size=3), st.integers(1, 3000)).map(lambda t: "".join(t[0]) * t[1])
markdown = st.lists(st.one_of(run, piece), min_size=1, max_size=12).map("".join)

# Per input: a few thousand characters of anything must read in well under a
# second even on a loaded 2-core CI machine (honest notes go at 5-11 MB/s).
BOUND = timedelta(seconds=1.5)


@settings(max_examples=150, deadline=BOUND, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(markdown)
def test_parse_and_chunk_stay_fast_on_adversarial_markdown(text):
    note = parse_note("fuzz.md", text)
    assert len(note.lines) <= text.count("\n") + text.count("\r") + 1
    for chunk in chunk_note(note):
        assert 1 <= chunk.start_line <= chunk.end_line <= max(len(note.lines), 1)


@settings(max_examples=150, deadline=BOUND, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(markdown)
def test_reading_text_stays_fast_and_keeps_lines_on_adversarial_markdown(text):
    out = reading_text(text)
    assert out.count("\n") == text.count("\n")


@pytest.mark.parametrize("opener,fill,closer", [
    ("[x](", " ", ""), ("![](", " ", ""), ("[x](<", " ", ""), ("[[", " ", ""), ("[x][", " ", ""), ("<a ", " ", ""),
    ("**", " ", ""), ("`", " ", ""),
    ("# a", " ", "b"),          # a heading with a long run of blanks inside (HEADING_RE, the closing hashes)
    ("", "[\\", "](x"),         # escaped brackets, each once a new start for the link regex
    ("[d]: e\n", "[\\", "][d]"),  # the same for reference links, with a definition in the note
    ("", "[^", ""),               # footnote references, never closed (reading_text)
])
def test_a_long_run_after_an_opener_reads_in_linear_time(opener, fill, closer, ledger):
    """The line that hung `serve`: ``[x](`` and 16,000 spaces took 2.8-6.8 s in the
    Markdown-link regex, and doubling the line quadrupled it. Timed against a
    line a quarter as long in the same run: linear means about 4x, quadratic 16x."""
    def cost(n: int) -> float:
        text = opener + fill * (n // len(fill)) + closer + "\n"
        best = float("inf")
        for _ in range(3):
            t0 = time.perf_counter()
            parse_note("a.md", text)
            reading_text(text)
            best = min(best, time.perf_counter() - t0)
        return best

    small, big = cost(4_000), cost(16_000)
    assert big < max(8 * small, 0.05), (opener, small, big)
    ledger.record("hostile input", "a Markdown opener followed by a long run of spaces (quadratic regex)",
                  "read in linear time, no hang")


def test_a_note_past_its_budget_is_indexed_as_plain_text(ledger):
    text = "---\ntitle: Kept\ntags: [meta]\n---\n# Heading\n\nSee [[Other]] and [x](Note.md) #inline\n"
    full = parse_note("n.md", text)
    assert full.links == ["Other", "Note.md"] and "inline" in full.tags and full.headings
    plain = parse_note("n.md", text, budget_s=0)
    assert plain.title == "Kept" and plain.tags == ["meta"]          # the frontmatter is still read
    assert plain.links == [] and plain.link_records == [] and plain.headings == []
    assert plain.lines == full.lines and plain.body_start == full.body_start
    assert any("indexed as plain text" in w for w in plain.warnings)
    assert chunk_note(plain)   # its text is still chunked and searchable
    ledger.record("hostile input", "a note whose Markdown takes longer than its parse budget",
                  "indexed as plain text with a warning")


def test_the_budget_grows_with_the_note():
    assert parse_budget("x") < parse_budget("x" * 5_000_000) < 10


def test_a_pasted_data_uri_costs_little_memory():
    """A 9 MB ``data:`` URI took 1.9 GB (the link regex kept a mark per
    character); a line past MAX_MARKUP_LINE is not read for markup at all."""
    import tracemalloc

    uri = "A" * 3_000_000
    text = f"# Pic\n\n![](data:image/png;base64,{uri})\n\nSee [[Other]].\n"
    tracemalloc.start()
    try:
        note = parse_note("pic.md", text)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 * len(text), peak
    assert note.links == ["Other"] and note.title == "Pic"
    assert len(text.split("\n")[2]) > MAX_MARKUP_LINE


def test_a_note_past_its_budget_is_searchable_and_status_says_why(vault, index_dir, monkeypatch):
    """Through the real sync: the note's text is indexed, its warning is in `status`."""
    from conftest import write

    import indexer.parse
    from vault_search import Index

    write(vault / "Slow.md", "# Slow heading\n\nzanzibarword and [[Other]] #slowtag\n")
    monkeypatch.setattr(indexer.parse, "PARSE_SECONDS", -1.0)   # every note is over budget
    with Index.open(vault, index_dir, create=True) as idx:
        report = idx.sync(embed=False)
        assert any(p == "Slow.md" and "indexed as plain text" in m for p, m in report.warnings)
        assert [r.path for r in idx.search("zanzibarword", mode="fts").results] == ["Slow.md"]
        status = idx.status()
    assert any(w["path"] == "Slow.md" and "indexed as plain text" in w["message"] for w in status.warnings)


def test_a_line_too_long_to_read_still_counts_as_text_for_the_blocks_around_it():
    """An indented line right after a paragraph continues it; after a line past
    MAX_MARKUP_LINE too (it was taken for indented code, losing its links)."""
    text = "Intro\n\n" + "word " * 5000 + "see [[Long Link]] #longtag\n    continued with [[Next Note]] and #nexttag\n"
    note = parse_note("n.md", text)
    assert note.links == ["Next Note"] and note.tags == ["nexttag"]
    assert note.warnings == [f"line 3 longer than {MAX_MARKUP_LINE:,} characters: indexed as text, its links, "
                             "tags and headings not read"]
    pasted = parse_note("p.md", "![](data:image/png;base64," + "A" * 30_000 + ")\n")
    assert pasted.warnings == []   # a pasted image is no loss worth a warning


def test_a_note_that_fell_back_to_plain_text_is_parsed_again_once(vault, index_dir, monkeypatch, ledger):
    """A budget is wall-clock time: a note caught by a stalled or overloaded
    machine must not stay plain text for good. The next sync parses it again;
    one that falls back twice on the same content is left until it changes."""
    from conftest import write

    import indexer.parse
    import indexer.sync
    from vault_search import Index

    write(vault / "Linked.md", "# Linked\n\nsee [[Home]] #linkedtag\n")

    def outlinks(idx) -> list[str]:
        return [row[0] for row in idx.writer.conn.execute(
            "SELECT target FROM links JOIN notes ON notes.id = links.source_id WHERE notes.path = 'Linked.md'")]

    with Index.open(vault, index_dir, create=True) as idx:
        monkeypatch.setattr(indexer.parse, "PARSE_SECONDS", -1.0)    # a stalled machine: every note over budget
        idx.sync(embed=False)
        assert outlinks(idx) == []
        monkeypatch.setattr(indexer.parse, "PARSE_SECONDS", 1.0)     # the machine is back
        assert idx.sync(embed=False).updated == 0    # but the retry waits a while: the same busy minute is no test
        monkeypatch.setattr(indexer.sync, "PLAIN_RETRY_AFTER_S", 0)  # ... and the while is over
        again = idx.sync(embed=False)
        assert again.updated >= 1 and outlinks(idx) == ["Home"]
        assert idx.sync(embed=False).updated == 0                    # and it settles
        monkeypatch.setattr(indexer.parse, "PARSE_SECONDS", -1.0)    # a note that is hostile for real
        write(vault / "Linked.md", "# Linked\n\nsee [[Home]] again\n")
        idx.sync(embed=False)
        assert idx.sync(embed=False).updated == 1                    # tried once more
        assert idx.sync(embed=False).updated == 0                    # then left until it changes
    ledger.record("hostile input", "a note over its parse budget because the machine stalled (SIGSTOP, load)",
                  "parsed again by a sync at least a minute later (not a rebuild's own catch-up); a note over budget "
                  "twice on the same content is left as plain text")


def test_a_note_indexed_as_plain_text_goes_into_a_context_pack(vault, index_dir, monkeypatch):
    """Its stored hash carries the plain-text mark; the pack still knows the
    file is what the index read (it was left out as 'edited')."""
    from conftest import write

    import indexer.parse
    from vault_search import Index
    from vault_search.pack import indexed_lines, pack

    write(vault / "Slow.md", "# Slow heading\n\nzanzibarword and [[Other]] #slowtag\n")
    monkeypatch.setattr(indexer.parse, "PARSE_SECONDS", -1.0)
    with Index.open(vault, index_dir, create=True) as idx:
        idx.sync(embed=False)
        idx.sync(embed=False)   # over budget twice: left as plain text for good
        found = idx.search("zanzibarword", mode="fts").results
        assert [r.path for r in found] == ["Slow.md"]
        assert indexed_lines(idx, "Slow.md") == ["# Slow heading", "", "zanzibarword and [[Other]] #slowtag"]
        packed = pack(idx, found, 500)
        assert packed.changed == [] and [p.path for p in packed.results] == ["Slow.md"]
        write(vault / "Slow.md", "# Slow heading\n\nzanzibarword, edited\n")
        assert indexed_lines(idx, "Slow.md") is None   # an edit since still counts as one


def test_a_rebuilds_catch_up_sync_does_not_spend_the_plain_text_retry(vault, index_dir, monkeypatch):
    """The rebuild parses every note, then syncs once more after the swap:
    that second look comes seconds after the first, on the same busy machine,
    and must leave the retry for a later sync."""
    from conftest import write

    import indexer.parse
    import indexer.sync
    from vault_search import Index

    write(vault / "Linked.md", "# Linked\n\nsee [[Home]] #linkedtag\n")

    def stored(idx) -> str:
        return idx.writer.conn.execute("SELECT hash FROM notes WHERE path = 'Linked.md'").fetchone()[0]

    with Index.open(vault, index_dir, create=True) as idx:
        idx.sync(embed=False)
    monkeypatch.setattr(indexer.parse, "PARSE_SECONDS", -1.0)
    with Index.open(vault, index_dir, rebuild=True) as idx:
        idx.sync(embed=False)
    with Index.open(vault, index_dir) as idx:
        assert indexer.sync.PLAIN_MARK + "@" in stored(idx)   # still waiting for its retry
        monkeypatch.setattr(indexer.parse, "PARSE_SECONDS", 1.0)
        monkeypatch.setattr(indexer.sync, "PLAIN_RETRY_AFTER_S", 0)
        retried = idx.sync(embed=False)
        assert retried.updated == retried.scanned   # every note had fallen back: each is parsed again
        assert indexer.sync.PLAIN_MARK not in stored(idx)
        assert [row[0] for row in idx.writer.conn.execute(
            "SELECT target FROM links JOIN notes ON notes.id = links.source_id WHERE notes.path = 'Linked.md'")] \
            == ["Home"]
