"""Bad input never stops indexing: each file gets a clear warning, the rest
of the vault is indexed and searchable."""

import os

import pytest
from conftest import HOSTILE_QUERIES, write

from vault_search import Index


@pytest.fixture
def messy(tmp_path):
    v = tmp_path / "messy"
    write(v / "good.md", "# Good\nthe healthy note mentions pelican\n")
    write(v / "bad-yaml.md", "---\ntags: [unclosed\n: nope\n---\n# Bad YAML\nbody still says heron\n")
    write(v / "latin1.md", b"# Latin-1\ncaf\xe9 and flamingo\n")
    write(v / "gbk.md", "# 旧编码\n这篇笔记用国标码保存，提到鸬鹚。\n".encode("gbk"))
    write(v / "image.md", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)) * 4)
    write(v / "empty.md", "")
    write(v / "blank.md", "\n   \n\t\n")
    write(v / "🦜 鹦鹉笔记.md", "# 鹦鹉\n会说话的鹦鹉 parrot\n")
    write(v / "中文目录/子目录/笔记.md", "# 笔记\n中文路径里的翠鸟 kingfisher\n")
    write(v / "README.md", "# Upper\nupper case readme albatross\n")
    write(v / "readme.md", "# Lower\nlower case readme albatross\n")
    os.symlink(v / "中文目录", v / "中文目录" / "子目录" / "loop")
    return v


def index(vault, index_dir, progress=None):
    with Index.open(vault, index_dir, create=True) as idx:
        return idx.sync(progress=progress, embed=False)


def top(vault, index_dir, query, **kw):
    with Index.open(vault, index_dir) as idx:
        return [r.path for r in idx.search(query, **kw).results]


def test_messy_vault_indexes_everything_it_can_with_one_warning_each(messy, tmp_path, ledger):
    report = index(messy, tmp_path / "i")
    warned = {}
    for path, message in report.warnings:
        warned.setdefault(path, []).append(message)
    assert "malformed YAML frontmatter" in warned["bad-yaml.md"][0]
    assert "invalid UTF-8" in warned["latin1.md"][0]
    assert "GB18030" in warned["gbk.md"][0]
    assert "binary file" in warned["image.md"][0]
    assert "already visited" in warned["中文目录/子目录/loop"][0]
    assert set(warned) == {"bad-yaml.md", "latin1.md", "gbk.md", "image.md", "中文目录/子目录/loop"}
    assert report.skipped == 1  # the binary one

    i = tmp_path / "i"
    assert top(messy, i, "pelican") == ["good.md"]
    assert top(messy, i, "heron") == ["bad-yaml.md"]
    assert top(messy, i, "flamingo") == ["latin1.md"]
    assert top(messy, i, "鸬鹚") == ["gbk.md"]
    assert top(messy, i, "鹦鹉") == ["🦜 鹦鹉笔记.md"]
    assert top(messy, i, "翠鸟") == ["中文目录/子目录/笔记.md"]
    assert sorted(top(messy, i, "albatross")) == ["README.md", "readme.md"]
    assert top(messy, i, "upper albatross")[0] == "README.md"

    with Index.open(messy, i) as idx:
        status = idx.status()
        assert status.notes == 10 and status.skipped_files == 1 and status.empty_notes == 2
        assert idx.get("readme.md").text.startswith("# Lower")
        assert idx.get("README.md").text.startswith("# Upper")
    # Nothing changed: the binary file is not re-read or re-reported.
    again = index(messy, i)
    assert again.warnings == [("中文目录/子目录/loop", again.warnings[0][1])] and again.skipped == 1
    ledger.record('hostile input', 'malformed YAML, invalid UTF-8, GBK, binary .md, empty files, symlink loop, emoji and look-alike names',
                  'everything readable indexed; one warning per bad file')


def test_huge_note_is_skipped_with_a_hint_and_indexed_when_allowed(tmp_path, ledger):
    v = tmp_path / "v"
    write(v / "small.md", "# Small\nordinary note about otters\n")
    line = "A very long export line about walruses and other large marine mammals. " * 10 + "\n"
    write(v / "huge.md", "# Huge\n" + line * (20 * 1024 * 1024 // len(line)))
    assert (v / "huge.md").stat().st_size >= 20_000_000
    report = index(v, tmp_path / "i")
    assert report.warnings[0][0] == "huge.md" and "max_file_mb" in report.warnings[0][1]
    assert top(v, tmp_path / "i", "otters") == ["small.md"]
    assert top(v, tmp_path / "i", "walruses") == []

    write(v / ".vault-search.toml", "max_file_mb = 25\n")
    report = index(v, tmp_path / "i")
    assert report.added == 1 and not report.warnings
    assert top(v, tmp_path / "i", "walruses") == ["huge.md"]
    ledger.record('hostile input', 'a 20 MB note',
                  'skipped with a hint; indexed when max_file_mb allows')


def test_file_deleted_between_scan_and_read(tmp_path, ledger):
    v = tmp_path / "v"
    for i in range(5):
        write(v / f"n{i}.md", f"# N{i}\nnote number {i} about lemurs\n")

    def vanish(done, total):
        if done == 1:
            os.remove(v / "n3.md")  # listed by the scan, gone before it is read

    report = index(v, tmp_path / "i", progress=vanish)
    assert report.added == 4
    assert ("n3.md", "vanished while indexing; will be picked up if it comes back") in report.warnings
    assert sorted(top(v, tmp_path / "i", "lemurs")) == ["n0.md", "n1.md", "n2.md", "n4.md"]
    # A file that vanishes after it was indexed disappears from the index.
    write(v / "n3.md", "# N3\nback again with lemurs\n")
    assert index(v, tmp_path / "i").added == 1

    def vanish_indexed(done, total):
        if done == 1:
            os.remove(v / "n3.md")

    (v / "n3.md").write_text("# N3\nchanged\n", encoding="utf-8")
    report = index(v, tmp_path / "i", progress=vanish_indexed)
    assert report.deleted == 1 and "n3.md" not in top(v, tmp_path / "i", "lemurs")
    ledger.record('hostile input', 'a file vanishing mid-scan',
                  'skipped quietly; the index stays consistent')


# Each hostile query's words written into one note, which it must find first.
HOSTILE_NOTES = {
    "Code/Pointers.md": "# Pointers\n\nSmart pointers in C++ own their memory.\n",
    "Widgets.md": "# Widgets\n\nThe foo-bar widget ships next week.\n",
    "Ratios.md": "# Ratios\n\nKeep the x:y ratio; -x flips it, +y grows it.\n",
    "Fields.md": "# Fields\n\nThe filters title:x, title:secret look like syntax.\n",
    "Logic.md": "# Logic\n\nAND, OR and NOT join words.\n",
    "Near.md": "# Near\n\nNEAR(a b) is proximity syntax; NEAR( opens it, {a b} is a set, a* is a glob.\n",
    "SQL.md": "# SQL\n\nNever run '; DROP TABLE notes; -- against live databases.\n",
    "数据库.md": "# 数据库\n\n数据库索引的原理。\n",
}
NO_WORDS = ["query has no searchable words"]
# What each query answers: the note it finds first (with no warning), or no
# results and the warnings that say why.
HOSTILE_ANSWERS = {
    "C++": "Code/Pointers.md", "foo-bar": "Widgets.md",
    "x:y": "Ratios.md", "-x": "Ratios.md", "+y": "Ratios.md", "title:x": "Fields.md", "title:secret": "Fields.md",
    "AND": "Logic.md", "OR": "Logic.md", "NOT": "Logic.md",
    "NEAR": "Near.md", "NEAR(": "Near.md", "NEAR(a b)": "Near.md", "{a b}": "Near.md", "a*": "Near.md",
    "a\x00b": "Near.md",
    "'; DROP TABLE notes; --": "SQL.md",
    "数据库\x00索引": "数据库.md", '数据库" OR "1': "数据库.md",
    '"': NO_WORDS, '""': NO_WORDS, "*": NO_WORDS, "\x00": NO_WORDS, "(": NO_WORDS, ")": NO_WORDS, "^": NO_WORDS,
    "\\": NO_WORDS, "%": NO_WORDS, "_": NO_WORDS,
    "": ["empty query"], "   ": ["empty query"],
    "a" * 10_240: ["query longer than 4000 characters; the rest was ignored", *NO_WORDS],
}


def test_every_hostile_query_has_its_answer():
    assert sorted(HOSTILE_ANSWERS) == sorted(HOSTILE_QUERIES)


@pytest.mark.parametrize("query", HOSTILE_QUERIES)
def test_hostile_queries_through_the_index(indexed, query, ledger):
    response = indexed(HOSTILE_NOTES).search(query)
    expected = HOSTILE_ANSWERS[query]
    if isinstance(expected, str):
        assert ([r.path for r in response.results][:1], response.warnings) == ([expected], [])
    else:
        assert (response.results, response.warnings) == ([], expected)
    ledger.record('hostile input', 'hostile query strings (C++, quotes, AND/OR/NOT, *, NUL, 10 KB)',
                  'answered as words, exit 0')


def test_file_name_that_is_not_utf8_is_skipped_with_a_warning(tmp_path):
    v = tmp_path / "v"
    write(v / "good.md", "# Good\npelican\n")
    with open(os.path.join(os.fsencode(v), b"caf\xe9.md"), "wb") as fh:
        fh.write(b"# x\nheron\n")
    report = index(v, tmp_path / "i")
    assert report.added == 1
    assert ("caf\ufffd.md", "file name is not valid UTF-8; skipped (rename it to index it)") in report.warnings
    assert top(v, tmp_path / "i", "pelican") == ["good.md"]


def test_hostile_frontmatter_is_ignored_not_fatal(tmp_path, ledger):
    v = tmp_path / "v"
    write(v / "recursive.md", "---\na: &a [*a]\n---\n# R\nrecursive anchors and ibis\n")
    levels = ["a: &a [x, x, x, x, x, x, x, x, x, x]"] + [
        f"{chr(98 + i)}: &{chr(98 + i)} [" + ", ".join([f"*{chr(97 + i)}"] * 10) + "]" for i in range(7)]
    write(v / "bomb.md", "---\n" + "\n".join(levels) + "\n---\n# B\nan alias bomb about storks\n")
    report = index(v, tmp_path / "i")
    assert report.added == 2
    assert all("ignored" in m for _, m in report.warnings) and len(report.warnings) == 2
    assert top(v, tmp_path / "i", "ibis") == ["recursive.md"]
    assert top(v, tmp_path / "i", "storks") == ["bomb.md"]
    assert (tmp_path / "i" / "index.db").stat().st_size < 2_000_000
    ledger.record('hostile input', 'recursive and alias-bomb YAML frontmatter',
                  'ignored with a warning; the body is indexed')


def test_line_numbers_count_only_real_line_breaks(tmp_path):
    v = tmp_path / "v"
    text = "# T\nfirst\u2028still the first line\x0cand\x1cthis\r\nsecond\rthird\n\n## H\nthe target line\n"
    write(v / "n.md", text)
    index(v, tmp_path / "i")
    with Index.open(v, tmp_path / "i") as idx:
        r = idx.search("target", mode="fts").results[0]
        assert (r.start_line, r.end_line) == (6, 7)
        assert idx.get("n.md", 7, 7).text == "the target line"
        assert idx.get("n.md").total_lines == 7


def test_pasted_base64_image_is_elided_and_fast(tmp_path):
    import base64
    import time

    v = tmp_path / "v"
    blob = base64.b64encode(os.urandom(1_500_000)).decode()
    write(v / "img.md", f"# Screenshot\n\nbefore the image, cormorant\n\n![](data:image/png;base64,{blob})\n\nafter\n")
    t0 = time.perf_counter()
    index(v, tmp_path / "i")
    assert time.perf_counter() - t0 < 20
    with Index.open(v, tmp_path / "i") as idx:
        assert idx.status().chunks == 1
        r = idx.search("cormorant").results[0]
        assert r.end_line == 7 and len(r.snippet) < 400
        assert idx.conn.execute("SELECT length(text) FROM chunks").fetchone()[0] < 200


def test_undecodable_filter_arguments_are_handled(cli):
    cli("index", "--no-embed")
    for args in (["--path", "\udcff"], ["--tag", "caf\udce9"]):
        r = cli("search", "数据库", "--json", *args)
        assert r.code == 0, r
        assert r.json()["results"] == []
    r = cli("search", "--json", "bad\udcffquery")
    assert r.code == 0 and r.json()["query"] == "bad\ufffdquery"
