import pytest

from indexer.parse import BinaryNoteError, decode_note, normalize_date, parse_note


def test_title_from_frontmatter_then_h1_then_file_name():
    assert parse_note("a/x.md", "---\ntitle: Given\n---\n# Heading\n").title == "Given"
    assert parse_note("a/x.md", "intro\n\n# First H1\n## Sub\n# Second\n").title == "First H1"
    assert parse_note("a/数据库索引.md", "## only h2\ntext\n").title == "数据库索引"


def test_aliases_and_tags_in_every_form():
    note = parse_note("n.md", "---\naliases: 别名一, Alias Two\ntags: \"alpha, #beta gamma/delta\"\n---\n"
                              "Body with #inline-tag, #项目/中文 and not#this nor #123 nor `#code`.\n"
                              "http://example.com/#anchor\n```\n#fenced\n```\n")
    assert note.aliases == ["别名一", "Alias Two"]
    assert note.tags == ["alpha", "beta", "gamma/delta", "inline-tag", "项目/中文"]
    listed = parse_note("n.md", "---\naliases: [A, B]\ntags:\n  - x\n  - y/z\n---\nbody\n")
    assert listed.aliases == ["A", "B"] and listed.tags == ["x", "y/z"]


def test_wikilinks_in_all_forms_and_not_in_code():
    note = parse_note("n.md", "See [[Note A]], [[Note B|shown]], [[Note C#Heading]], [[Note D#^block]],\n"
                              "![[Embedded.png]] and `[[not a link]]`.\n")
    assert note.links == ["Note A", "Note B", "Note C", "Note D", "Embedded.png"]


def test_headings_carry_file_line_numbers_and_skip_code_blocks():
    text = "---\ntitle: T\n---\n# One\ntext\n```python\n# comment, not a heading\n```\n## Two ##\n#nospace\n"
    note = parse_note("n.md", text)
    assert [(h.level, h.text, h.line) for h in note.headings] == [(1, "One", 4), (2, "Two", 9)]
    assert note.body_start == 4


def test_malformed_yaml_keeps_the_body_and_warns():
    note = parse_note("n.md", "---\ntags: [unclosed\ntitle: x: y\n---\n# Body title\nbody text\n")
    assert note.metadata == {}
    assert note.title == "Body title"
    assert len(note.warnings) == 1 and "malformed YAML frontmatter" in note.warnings[0]
    assert note.body_start == 5


def test_frontmatter_that_is_not_a_mapping():
    note = parse_note("n.md", "---\n- just\n- a list\n---\nbody\n")
    assert note.metadata == {} and "not a key: value mapping" in note.warnings[0]


def test_unclosed_frontmatter_is_body():
    note = parse_note("n.md", "---\nnot closed\n")
    assert note.body_start == 1 and not note.warnings


def test_dates_from_frontmatter_keys_and_daily_file_names():
    assert parse_note("n.md", "---\ndate: 2026-11-01\n---\nx").date == "2026-11-01"
    assert parse_note("n.md", "---\ndate created: 2022-06-19 10:05\n---\nx").date == "2022-06-19T10:05"
    assert parse_note("memory/2026-11-02.md", "x").date == "2026-11-02"
    assert parse_note("n.md", "---\ndate: someday\n---\nx").date is None
    assert normalize_date("2026-2-30") is None
    assert normalize_date("2026-11-1 9:30") == "2026-11-01T09:30"


def test_decode_utf8_bom_gbk_invalid_and_binary():
    assert decode_note("\ufeff中文".encode("utf-8")) == ("中文", None)
    text, warning = decode_note("数据库索引是一种数据结构".encode("gbk"))
    assert text == "数据库索引是一种数据结构" and "GB18030" in warning
    text, warning = decode_note(b"caf\xe9 ok \xff")
    assert "ok" in text and "invalid UTF-8 at byte 3" in warning
    with pytest.raises(BinaryNoteError):
        decode_note(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
