import pytest

from indexer.chunk import CHUNK_MAX_TOKENS, chunk_note, estimate_tokens
from indexer.parse import parse_note


def test_sections_become_chunks_with_heading_paths_and_lines():
    text = ("---\ntitle: T\n---\n# Top\n\nintro line\n\n## Part A\na text\n\n### Deep\ndeep text\n"
            "## Part B\nb text\n")
    chunks = chunk_note(parse_note("n.md", text))
    assert [(c.heading, c.start_line, c.end_line) for c in chunks] == [
        ("Top", 4, 6), ("Top > Part A", 8, 9), ("Top > Part A > Deep", 11, 12), ("Top > Part B", 13, 14)]
    lines = text.splitlines()
    for c in chunks:
        assert c.text == "\n".join(lines[c.start_line - 1:c.end_line])


def test_heading_with_nothing_under_it_joins_the_next_section():
    chunks = chunk_note(parse_note("n.md", "# Title\n\n## Sub\nbody\n"))
    assert [(c.heading, c.start_line, c.end_line) for c in chunks] == [("Title > Sub", 1, 4)]


def test_daily_log_entries_are_separate_chunks():
    text = "# 2026-11-01\n\n### 09:30 — Stand-up\nnotes\n\n### 11:00 — 数据库迁移\n迁移\n"
    chunks = chunk_note(parse_note("memory/2026-11-01.md", text))
    assert [(c.heading, c.start_line, c.end_line) for c in chunks] == [
        ("2026-11-01 > 09:30 — Stand-up", 1, 4), ("2026-11-01 > 11:00 — 数据库迁移", 6, 7)]


def test_long_sections_are_split_to_fit_the_embedding_window():
    para = "数据库索引是一种帮助数据库高效获取数据的数据结构。" * 12
    text = "# Long\n\n" + "\n\n".join(f"{para} paragraph {i}" for i in range(10)) + "\n" + "word " * 3000 + "\n"
    chunks = chunk_note(parse_note("n.md", text))
    assert len(chunks) > 5
    assert all(estimate_tokens(c.text) <= CHUNK_MAX_TOKENS for c in chunks)
    assert all(c.heading == "Long" for c in chunks)
    # In order, never overlapping, and every non-blank line is in some chunk.
    assert all(a.end_line <= b.start_line for a, b in zip(chunks, chunks[1:]))
    covered = {ln for c in chunks for ln in range(c.start_line, c.end_line + 1)}
    lines = text.splitlines()
    assert all(i + 1 in covered for i, line in enumerate(lines) if line.strip())


def test_a_heading_that_does_not_fit_beside_its_text_is_no_chunk_of_its_own():
    # Each section's text fits the window, but not beside its heading line. A one-line
    # chunk of the heading would outrank the section on the heading's words (BM25
    # favours short chunks) and point a result at a line with nothing under it; every
    # chunk of the section carries the heading in its path, indexed and embedded.
    block = "word " * 199                     # 398 tokens: fits alone, not with a heading
    items = "\n".join(f"- video {i} " + "clip " * 45 for i in range(12))
    text = f"# Paper title\n\n{block}\n\n## Videos\n\n{items}\n\n#tag line\n\n{block}\n"
    chunks = chunk_note(parse_note("n.md", text))
    assert all(estimate_tokens(c.text) <= CHUNK_MAX_TOKENS for c in chunks)
    assert not [c.text for c in chunks if c.text.lstrip().startswith("# ") or c.text.startswith("## ")]
    assert [c.heading for c in chunks][:1] == ["Paper title"] and chunks[0].start_line == 3
    assert {c.heading for c in chunks} == {"Paper title", "Paper title > Videos"}
    # Every other line is still in a chunk: the list, and a tag line (not a heading).
    lines = text.splitlines()
    covered = {ln for c in chunks for ln in range(c.start_line, c.end_line + 1)}
    assert {i + 1 for i, line in enumerate(lines) if line.strip()} - covered == {1, 5}
    assert any(c.text.startswith("#tag line") for c in chunks)


@pytest.mark.parametrize("text", [
    "# Title\n## Part\n\n" + "word " * 199 + "\n",                 # a heading merged into the next one
    "# Title\n\n## Part\n\n" + "word " * 199 + "\n",
    "## Part\n" + "word " * 600 + "\n",                               # one long line right under it
])
def test_headings_alone_are_never_a_chunk_however_the_section_is_cut(text):
    chunks = chunk_note(parse_note("n.md", text))
    assert chunks and all(not c.text.startswith("#") for c in chunks)
    assert all(estimate_tokens(c.text) <= CHUNK_MAX_TOKENS for c in chunks)
    assert sum(c.text.count("word") for c in chunks) == text.count("word")


@pytest.mark.parametrize(("path", "text", "kept"), [
    ("n.md", "## Alpha budget\n## Beta\n\n" + "word " * 198 + "\n", ["Alpha budget"]),        # a sibling
    ("n.md", "# T\n\n### Gamma ideas\n## Delta\n\n" + "word " * 198 + "\n", ["Gamma ideas"]),
    ("2024-05-01.md", "### 09:30 Stand-up\n### 10:00 Review\n\n" + "word " * 198 + "\n", ["09:30 Stand-up"]),
    ("n.md", "".join(f"## Section {i} about topic{i}\n" for i in range(120)) + "word " * 300 + "\n",
     [f"topic{i} " for i in range(120)]),                                                  # an outline
])
def test_a_heading_merged_into_a_section_it_is_not_the_path_of_stays_in_its_text(path, text, kept):
    # A heading with nothing under it joins the next section; when it is not on that
    # section's path (a sibling, an entry), its words are in no heading path, so its line
    # stays in a chunk, however the section is cut.
    chunks = chunk_note(parse_note(path, text))
    searchable = " ".join(f"{c.heading} {c.text}" for c in chunks).replace("\n", " ") + " "
    assert [k for k in kept if k not in searchable] == []
    assert all(estimate_tokens(c.text) <= CHUNK_MAX_TOKENS for c in chunks)


def test_a_comment_line_in_a_code_fence_is_no_heading_and_is_kept():
    # Cut inside the fence, "# install the thing" starts a piece that does not fit
    # beside the next line: it is code, not a heading, and stays searchable.
    text = "# H\n\n```bash\napt-get update\n\n# install the thing\n" + "word " * 395 + "\n```\n"
    chunks = chunk_note(parse_note("n.md", text))
    covered = {ln for c in chunks for ln in range(c.start_line, c.end_line + 1)}
    assert 6 in covered and any("# install the thing" in c.text for c in chunks)


def test_token_estimate_is_pessimistic_for_han_and_latin():
    assert estimate_tokens("数据库") == 3
    assert estimate_tokens("hello world") >= 2
    assert estimate_tokens("") == 0


def test_frontmatter_only_note_keeps_one_empty_chunk_and_empty_file_none():
    chunks = chunk_note(parse_note("n.md", "---\ntitle: Only metadata\naliases: [x]\n---\n"))
    assert [(c.start_line, c.end_line, c.text) for c in chunks] == [(1, 4, "")]
    assert chunk_note(parse_note("n.md", "")) == []
    assert chunk_note(parse_note("n.md", "\n\n  \n")) == []


def test_daily_log_entries_carry_their_date_and_time():
    text = ("# 2026-11-01\n\nbefore any entry\n\n### 09:30 — Stand-up\nnotes\n\n#### details\nmore\n\n"
            "### 11:00 数据库迁移\n迁移\n\n### 25:00 not a time\nx\n")
    chunks = chunk_note(parse_note("memory/2026-11-01.md", text))
    assert [(c.heading.split(" > ")[-1], c.at) for c in chunks] == [
        ("2026-11-01", None), ("09:30 — Stand-up", "2026-11-01T09:30"), ("details", "2026-11-01T09:30"),
        ("11:00 数据库迁移", "2026-11-01T11:00"), ("25:00 not a time", None)]
    # the same headings outside a daily note are just headings
    assert all(c.at is None for c in chunk_note(parse_note("notes/log.md", text)))
