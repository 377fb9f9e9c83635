"""Issue 37 items 10 and 11: the query's operators ("a phrase", -word,
path:, tag:) and a word no chunk holds searched as the indexed word it
begins or nearly is, through each face where they were seen (CLI, the fast
path and HTTP, which is the page's face, MCP), and `get` with a near-miss name."""

from __future__ import annotations

import asyncio
import json
import subprocess

import pytest
from conftest import CLI, HOSTILE_QUERIES, http_search, start_server, write_notes

from indexer.embed import HashEmbedder
from indexer.segment import Segmenter
from vault_search import Index
from vault_search.spelling import edit_distances
from vault_search.syntax import parse_query

NOTES = {
    "Recurring.md": "# Recurring tasks\n\nWhat happens when a recurring task is done: the next one is made.\n",
    "Done.md": "# Done\n\nWhat happens when you tick a task: it is marked done.\n",
    "Reversed.md": "# Reversed\n\nWhen it rains, nothing happens to the garden.\n",
    "Work/Reports/Build.md": "---\ntags: [proj]\n---\n# Build\n\nWhat happens when the build breaks.\n",
    "Work/Other.md": "---\ntags: [proj/alpha]\n---\n# Other\n\nWhat happens when the lights go out.\n",
    "Grouping.md": "# Grouping\n\nCustom grouping of query results by a function.\n",
    "Scripts.md": "# Scripts\n\nA script that sorts the rows.\n",
    "Urgent.md": "# Urgent\n\nUrgent tasks come first in the list.\n",
    "Sorting.md": "# Sorting\n\nSorting by due date, then by priority.\n",
    "Dependencies.md": "# Dependencies\n\nTask dependencies block a task until another is done.\n",
}
PHRASE_QUERY = '"happens when" -recurring'
PHRASE_ANSWER = {"Done.md", "Work/Reports/Build.md", "Work/Other.md"}
CORRECTED = {"grou": "group", "scrip": "script", "urgen": "urgent", "sortng": "sorting",
             "dependecies": "dependencies"}
FOUND_BY = {"grou": "Grouping.md", "scrip": "Scripts.md", "urgen": "Urgent.md", "sortng": "Sorting.md",
            "dependecies": "Dependencies.md"}


def syntax(query: str):
    segmenter = Segmenter()
    return parse_query(query, lambda text: bool(segmenter.segment(text)))


def test_operators_start_a_word_and_the_rest_is_text():
    parsed = syntax('"happens when" -recurring path:"Work/Reports" tag:#proj due')
    assert (parsed.text, parsed.phrases, parsed.excluded, parsed.paths, parsed.tags) == (
        "happens when due", ("happens when",), ("recurring",), ("Work/Reports",), ("proj",))
    assert syntax('-"a phrase" b').excluded == ("a phrase",)
    for text in ["e-mail", "a-b", "-5 degrees", "--x", "-", '""', '"', '"unclosed phrase', "tag:", "tag:#", "path:",
                 'path:"', 'tag:"x', "-+", "C++", "AND", "*", "x:y", "title:x", "-x", "a  b\tc"]:
        parsed = syntax(text)
        assert not parsed and parsed.text == text, text


@pytest.mark.parametrize("query", HOSTILE_QUERIES)
def test_hostile_queries_stay_text(query):
    assert not syntax(query) and syntax(query).text == query


def test_edit_distance_counts_a_transposition_as_one():
    assert edit_distances("sortng", "sorting")[-1] == 1
    assert edit_distances("dependecies", "dependencies")[-1] == 1
    assert edit_distances("ab", "ba")[-1] == 1
    assert min(edit_distances("sort", "sortng")) == 0


@pytest.fixture(scope="module")
def hashed(tmp_path_factory):
    root = tmp_path_factory.mktemp("syntax")
    idx = Index.open(write_notes(root / "vault", NOTES), root / "index", create=True, embedder=HashEmbedder(64))
    idx.sync(embed=True)
    yield idx
    idx.close()


@pytest.mark.parametrize("mode", ["fts", "vector", "hybrid"])
def test_phrase_and_exclusion_hold_in_every_mode(hashed, mode):
    found = {r.path for r in hashed.search(PHRASE_QUERY, mode=mode, min_score=0).results}
    assert found == PHRASE_ANSWER
    # Vector neighbours need not hold "happens"; no result holds "what happens".
    found = {r.path for r in hashed.search('happens -"what happens"', mode=mode, min_score=0).results}
    assert "Reversed.md" in found and not found & {"Recurring.md", *PHRASE_ANSWER}


@pytest.mark.parametrize("mode", ["fts", "vector", "hybrid"])
def test_a_phrase_no_note_holds_is_searched_as_its_words(hashed, mode):
    """A question quoting a title the notes never wrote is still answered (as
    a filter it answered nothing), and the answer says so."""
    response = hashed.search('which task is "done happens" here', mode=mode, min_score=0)
    assert response.results and any('no note holds the phrase "done happens"' in w for w in response.warnings)
    held = hashed.search('"happens when" task', mode=mode, min_score=0)
    assert {r.path for r in held.results} <= {"Recurring.md", *PHRASE_ANSWER} and not any(
        "no note holds" in w for w in held.warnings)


@pytest.mark.parametrize("mode", ["fts", "vector", "hybrid"])
def test_path_and_tag_in_the_query_are_the_filters(hashed, mode):
    both = hashed.search("happens path:Work tag:proj", mode=mode, min_score=0)
    assert {r.path for r in both.results} == {"Work/Reports/Build.md", "Work/Other.md"}
    assert [r.path for r in hashed.search("happens path:Work/Reports", mode=mode).results] == [
        "Work/Reports/Build.md"]
    # With --path: both hold.
    assert hashed.search("happens path:Work/Reports", mode=mode, path="Work/Other.md").results == []
    assert {r.path for r in hashed.search("happens tag:#proj/alpha", mode=mode).results} == {"Work/Other.md"}


def test_filters_alone_say_what_to_add(hashed):
    response = hashed.search("tag:proj -recurring")
    assert response.results == [] and response.warnings == [
        "the query has only filters (path:, tag:) and exclusions: add a word to search for"]


def test_a_word_the_index_knows_is_never_rewritten(hashed):
    response = hashed.search("sorts", mode="fts")
    assert response.corrections == {} and response.terms == ["sorts"]
    # Too short for a typo, no word begins with it: nothing is guessed.
    assert hashed.search("qzx", mode="fts").corrections == {}


@pytest.mark.parametrize("mode", ["fts", "hybrid"])
def test_prefix_and_typo_find_the_word_in_each_keyword_mode(hashed, mode):
    for word, to in CORRECTED.items():
        response = hashed.search(word, mode=mode, explain=True)
        assert response.corrections == {word: to}
        assert response.results[0].path == FOUND_BY[word]
        assert response.explain.corrections == {word: ("prefix: " if word in ("grou", "scrip", "urgen")
                                                        else "typo: ") + to}


def test_the_hybrid_corrects_only_a_query_none_of_whose_words_is_there(hashed):
    """Where some words are there, the vector list reads the rest: the hybrid
    corrects nothing (the pool lost by it); keyword search still does."""
    assert hashed.search("custom sortng", mode="hybrid").corrections == {}
    assert hashed.search("custom sortng", mode="fts").corrections == {"sortng": "sorting"}
    assert hashed.search("sortng", mode="hybrid").corrections == {"sortng": "sorting"}


def test_vector_mode_corrects_nothing(hashed):
    assert hashed.search("sortng", mode="vector").corrections == {}


# -- the faces ------------------------------------------------------------------

@pytest.fixture(scope="module")
def keyword_vault(tmp_path_factory):
    root = tmp_path_factory.mktemp("syntax-cli")
    vault, index = write_notes(root / "vault", NOTES), root / "index"
    proc = cli_run(vault, index, "index", "--no-embed")
    assert proc.returncode == 0, proc.stderr
    return vault, index


def cli_run(vault, index, *args):
    return subprocess.run([str(CLI), "--vault", str(vault), "--index-dir", str(index), *args],
                          capture_output=True, text=True, timeout=300)


def test_cli_search_with_operators_and_typos(keyword_vault):
    vault, index = keyword_vault
    proc = cli_run(vault, index, "search", PHRASE_QUERY, "--json")
    assert proc.returncode == 0, proc.stderr
    assert {r["path"] for r in json.loads(proc.stdout)["results"]} == PHRASE_ANSWER
    proc = cli_run(vault, index, "search", "sortng")
    assert proc.returncode == 0 and "searched sortng as sorting" in proc.stdout
    assert "Sorting.md" in proc.stdout.splitlines()[1]
    explained = cli_run(vault, index, "search", "dependecies -blocked path:Dependencies.md", "--explain")
    assert "not in the index: dependecies -> typo: dependencies" in explained.stdout
    assert "operators: excluded ['blocked'], paths ['Dependencies.md']; ranked by 'dependecies'" in explained.stdout


def test_cli_get_with_a_near_miss_name_says_did_you_mean(keyword_vault):
    vault, index = keyword_vault
    proc = cli_run(vault, index, "get", "Groupng")
    assert proc.returncode == 1
    assert proc.stderr.strip().endswith("Groupng: no note has this path, name or alias; did you mean: Grouping.md")
    far = cli_run(vault, index, "get", "zebra crossing")
    assert far.returncode == 1 and "did you mean" not in far.stderr


def test_http_and_the_fast_path_through_a_running_server(keyword_vault):
    vault, index = keyword_vault
    server, info = start_server(vault, index, "--no-watch")
    try:
        status, data = http_search(info["port"], PHRASE_QUERY)
        assert status == 200 and {r["path"] for r in data["results"]} == PHRASE_ANSWER
        assert data["query"] == PHRASE_QUERY
        for word, to in CORRECTED.items():   # the page sends each keystroke's text as it is
            status, data = http_search(info["port"], word)
            assert (status, data["corrections"], data["results"][0]["path"]) == (200, {word: to}, FOUND_BY[word])
        fast = cli_run(vault, index, "search", '"happens when" path:Work -lights', "--json")
        assert fast.returncode == 0, fast.stderr
        assert [r["path"] for r in json.loads(fast.stdout)["results"]] == ["Work/Reports/Build.md"]
        typo = cli_run(vault, index, "search", "urgen")
        assert "searched urgen as urgent" in typo.stdout
    finally:
        server.terminate()
        server.communicate(timeout=30)


def test_mcp_search_and_get(keyword_vault):
    from mcp import Client

    from vault_search.mcp_server import build_server
    from vault_search.service import SearchService

    vault, index = keyword_vault

    async def session():
        server = build_server(lambda: SearchService(vault, index, watch=False, warm=False))
        async with Client(server) as client:
            found = await client.call_tool("search", {"query": PHRASE_QUERY})
            assert {r["path"] for r in found.structured_content["results"]} == PHRASE_ANSWER
            typo = await client.call_tool("search", {"query": "scrip"})
            assert typo.structured_content["corrections"] == {"scrip": "script"}
            missing = await client.call_tool("get", {"path": "Sortng"})
            assert missing.is_error and "did you mean: Sorting.md" in missing.content[0].text

    asyncio.run(session())


def test_a_corrected_word_weighs_as_the_word_searched(hashed):
    typed = hashed.search("sortng", mode="hybrid", explain=True).explain
    right = hashed.search("sorting", mode="hybrid", explain=True).explain
    assert (typed.term_coverage, typed.weights, typed.fts_match) == (right.term_coverage, right.weights,
                                                                     right.fts_match)
    assert typed.term_coverage > 0


def test_a_chinese_phrase_is_cut_as_the_notes_are(indexed):
    idx = indexed({"a.md": "# 甲\n数据库索引的原理很重要。\n", "b.md": "# 乙\n索引和数据库是两回事。\n",
                   "c.md": "# 丙\n我们讨论数据库的索引。\n"})
    assert [r.path for r in idx.search('"数据库索引"').results] == ["a.md"]
    apart = idx.search('"索引 数据库"')    # no note holds the words in this order: searched as words
    assert apart.results and any('no note holds the phrase "索引 数据库"' in w for w in apart.warnings)
    assert sorted(r.path for r in idx.search('数据库 -"数据库索引"').results) == ["b.md", "c.md"]


# -- review mends ---------------------------------------------------------------

def test_operators_meet_date_filters_sections_and_their_own_number(tmp_path):
    """A phrase with a date filter searched (it raised "no such column"); two
    phrases in two sections of one note find it; `path:` warns of a missing
    folder as --path does; a thousand operators are capped, not an error."""
    notes = {"2026-01-05.md": "# Log\n\nThe heart rate was high.\n",
             "Areas/Two.md": "# Two\n\n## First\n\nthe quick brown fox\n\n## Second\n\na purple elephant\n",
             "Plain.md": "# Plain\n\nheart rate without a date\n"}
    with Index.open(write_notes(tmp_path / "v", notes), tmp_path / "i", create=True,
                    embedder=HashEmbedder(64)) as idx:
        idx.sync(embed=True)
        for mode in ("fts", "hybrid"):
            dated = idx.search('"heart rate"', mode=mode, after="2026-01-01", min_score=0)
            assert [r.path for r in dated.results] == ["2026-01-05.md"]
            assert any("left out 1 note without a date" in w for w in dated.warnings)
            both = idx.search('"quick brown" "purple elephant"', mode=mode, min_score=0)
            assert [r.path for r in both.results] == ["Areas/Two.md"] and not both.warnings
            assert idx.search('"quick brown" "heart rate"', mode=mode, min_score=0).results == []
        folder = idx.search("path:areas fox", mode="fts")
        assert any("did you mean 'Areas'" in w for w in folder.warnings)
        many = idx.search("fox " + " ".join(f"path:A{i}" for i in range(1100)), mode="fts")
        assert any("only the first 16 path: filters" in w for w in many.warnings) and many.results == []
        many = idx.search("fox " + " ".join(f'"fox {i}"' for i in range(400)), mode="fts")
        assert any("only the first 16 phrases" in w for w in many.warnings)
