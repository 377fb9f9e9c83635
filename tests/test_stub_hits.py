"""A hit points at content (issue 37, item 2): a note's opening stub (its
``# Title`` and a tag line, nothing else) is shown stretched to the first
chunk after it with words, in results, ``--related`` and context packs, and
its snippet is that chunk's text, not the tag line printed twice. Real files,
a real keyword index, the CLI in-process through click's runner; the Tasks
docs (a copy of the shared vault) where the stubs were seen."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from tests.conftest import copy_tree, eval_path, write
from vault_search import Index
from vault_search.cli import main
from vault_search.options import SearchOptions
from vault_search.snippet import has_words

POSTPONING = """---
publish: true
---

# Postponing

<span class="related-pages">#feature/dates</span>

## Introduction

The postpone button moves a task's date to tomorrow, or later.

## Current Limitations

Currently, no.
"""


@pytest.fixture(scope="module")
def stubs(tmp_path_factory):
    """(vault, index folder): a note opening with a stub, a note that links
    to it, a note that is nothing but a stub, and a daily log."""
    root = tmp_path_factory.mktemp("stubs")
    vault = root / "vault"
    write(vault / "Editing/Postponing.md", POSTPONING)
    write(vault / "Hub.md", "# Hub\n\nThe walrus hub of buttons. See [[Postponing]].\n")
    write(vault / "Tagged.md", "# Tagged\n\n#feature/dates\n")
    write(vault / "memory/2026-01-05.md", "# 2026-01-05\n\n#log\n\n### 09:00 - Alpha\nthe first entry\n")
    write(vault / "Twins.md", "# Twins\n\nintro text\n\n## Part\n#tagonly\n\n## Part\nSecond part of the same name.\n")
    args = ["--vault", str(vault), "--index-dir", str(root / "index")]
    assert CliRunner().invoke(main, [*args, "index", "--no-embed"]).exit_code == 0
    return vault, args


def cli(args: list[str], *more: str) -> str:
    result = CliRunner().invoke(main, [*args, *more])
    assert result.exit_code == 0, result.output
    return result.output


def test_a_stub_is_a_chunk_with_no_word_past_its_heading_and_tags():
    assert not has_words('# Postponing\n\n<span class="related-pages">#feature/dates</span>')
    assert not has_words("## Setup\n\n![[diagram.png]]\n#a #b/c")
    assert not has_words("")
    assert has_words("## Limits\n\nCurrently, no.")      # two words answer a question: not a stub
    assert has_words("## 限制\n\n不能。") and has_words("# Title\n\n42")
    assert not has_words("## A heading alone")


def test_a_note_named_shows_the_content_after_its_stub_with_lines_from_the_title(stubs):
    _, args = stubs
    hit = json.loads(cli(args, "search", "Postponing", "--json"))["results"][0]
    # The stub is lines 5-7; the section after it ends at line 11. The range
    # starts at the title (what matched) and ends where the content does.
    assert hit["match"] == "name"
    assert (hit["path"], hit["start_line"], hit["end_line"]) == ("Editing/Postponing.md", 5, 11)
    assert hit["heading"] == "Postponing > Introduction"
    assert hit["snippet"].startswith("The postpone button moves") and "#feature" not in hit["snippet"]
    text = cli(args, "search", "Postponing", "-n", "1")
    assert text.count("#feature/dates") == 1          # the note's tags, once; no longer the snippet too
    assert "Editing/Postponing.md:5-11" in text
    # A short chunk with words is a hit of its own, never stretched.
    short = json.loads(cli(args, "search", "currently", "--json"))["results"][0]
    assert (short["start_line"], short["end_line"], short["snippet"]) == (13, 15, "Currently, no.")


def test_related_and_packs_get_the_content_too(stubs):
    vault, args = stubs
    related = json.loads(cli(args, "search", "walrus hub", "--related", "--json"))["results"]
    linked = next(r for r in related if r["related"])
    assert (linked["path"], linked["start_line"], linked["end_line"]) == ("Editing/Postponing.md", 5, 11)
    assert linked["snippet"].startswith("The postpone button")
    packed = json.loads(cli(args, "search", "Postponing", "--budget-tokens", "300", "--json"))
    first = packed["results"][0]
    lines = (vault / "Editing/Postponing.md").read_text().split("\n")
    assert (first["start_line"], first["end_line"]) == (5, 11) and first["trimmed"] is False
    assert first["text"] == "\n".join(lines[4:11]) and "moves a task's date" in first["text"]


def test_a_stub_with_nothing_after_it_keeps_its_lines_and_an_empty_snippet(stubs):
    _, args = stubs
    hit = json.loads(cli(args, "search", "Tagged", "--json"))["results"][0]
    assert (hit["path"], hit["start_line"], hit["end_line"], hit["snippet"]) == ("Tagged.md", 1, 3, "")
    assert hit["tags"] == ["feature/dates"]
    assert cli(args, "search", "Tagged", "-n", "1").count("#feature/dates") == 1
    # A daily log's title stub is not stretched into an entry: each entry has its own date.
    day = json.loads(cli(args, "search", "2026-01-05", "--json"))["results"][0]
    assert (day["path"], day["start_line"], day["end_line"], day["snippet"]) == ("memory/2026-01-05.md", 1, 3, "")


def test_a_stub_is_not_stretched_into_a_sibling_section_of_the_same_name(stubs):
    _, args = stubs
    hit = json.loads(cli(args, "search", "tagonly", "--mode", "fts", "--json"))["results"][0]
    # "## Part" (lines 5-6) holds only a tag; the next "## Part" is another section, not its continuation
    assert (hit["path"], hit["start_line"], hit["end_line"], hit["snippet"]) == ("Twins.md", 5, 6, "")


@pytest.fixture(scope="module")
def tasks(tmp_path_factory):
    root = tmp_path_factory.mktemp("tasks")
    vault = copy_tree(eval_path("vaults", "obsidian-tasks-docs-en"), root / "vault")
    args = ["--vault", str(vault), "--index-dir", str(root / "index")]
    assert CliRunner().invoke(main, [*args, "index", "--no-embed"]).exit_code == 0
    return vault, root / "index", args


def test_the_tasks_docs_postponing_question_gets_the_introduction(tasks):
    vault, _, args = tasks
    hit = json.loads(cli(args, "search", "how do I postpone a task", "--json"))["results"][0]
    # Was Editing/Postponing.md:5-7, "# Postponing" and its tag line, snippet "#feature/dates".
    assert (hit["path"], hit["start_line"], hit["end_line"]) == ("Editing/Postponing.md", 5, 24)
    assert hit["heading"] == "Postponing > Introduction" and "postpone many of them" in hit["snippet"]
    packed = json.loads(cli(args, "search", "how do I postpone a task", "--budget-tokens", "300", "--json"))
    passage = next(r for r in packed["results"] if r["path"] == "Editing/Postponing.md")
    assert passage["text"].startswith("# Postponing") and "## Introduction" in passage["text"]
    assert "snooze" in passage["text"]


def test_every_tasks_docs_note_named_shows_words(tasks):
    """Each note of the Tasks docs that opens with a stub, searched by its
    title: from its title line to its first lines with words, never the tag
    line as the snippet (a template that is all frontmatter: no snippet)."""
    vault, index_dir, _ = tasks
    with Index.open(vault, index_dir) as idx:
        openings = idx.conn.execute(
            "SELECT n.path, n.title, c.start_line, c.end_line, c.text FROM chunks c JOIN notes n ON n.id = c.note_id "
            "WHERE c.seq = (SELECT min(seq) FROM chunks WHERE note_id = n.id)").fetchall()
        stubbed = [(path, title, start) for path, title, start, _, text in openings if not has_words(text)]
        ends = {path: end for path, _, _, end, _ in openings}
        assert len(openings) == 118 and len(stubbed) == 38
        kept = []
        for path, title, start in stubbed:
            hit = next(r for r in idx.search(title, SearchOptions(mode="fts"), log=False).results if r.path == path)
            assert hit.start_line == start and hit.match == "name", path
            assert not hit.snippet.startswith("#"), (path, hit.snippet)
            if hit.end_line == ends[path]:   # kept: nothing with words comes after it
                kept.append(path)
    assert sorted(kept) == ["_meta/templates/standard frontmatter.md", "_meta/templates/tags for related pages.md"]
