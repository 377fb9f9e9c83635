import sqlite3

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from indexer.segment import Segmenter
from indexer.store import FTS_TOKENIZER
from vault_search.query import MAX_QUERY_TERMS, fts_query

HOSTILE = ["C++", '"', '""', "AND", "OR", "NOT", "NEAR", "NEAR(a b)", "*", "a*", "foo-bar", "x:y",
           "title:secret", "\x00", "a\x00b", "", "   ", "(", ")", "^", "{a b}", "'; DROP TABLE notes; --",
           "数据库\" OR \"1", "-x", "+y", "\\", "%", "_"]


@pytest.fixture(scope="module")
def fts():
    conn = sqlite3.connect(":memory:")
    conn.execute(f"CREATE VIRTUAL TABLE t USING fts5(title, body, tokenize=\"{FTS_TOKENIZER}\")")
    seg = Segmenter()
    for title, body in [("C++ notes", "smart pointers in C++"), ("foo", "foo-bar baz"),
                        ("and or not", "AND OR NOT NEAR words"), ("数据库", "数据库索引")]:
        conn.execute("INSERT INTO t VALUES (?, ?)", (seg.segment_text(title), seg.segment_text(body)))
    return conn, seg


@pytest.mark.parametrize("text", HOSTILE + ["x" * 10_000, "数据库 " * 2000])
def test_hostile_queries_never_raise_in_fts5(fts, text):
    conn, seg = fts
    q = fts_query(text, seg)
    rows = conn.execute("SELECT rowid FROM t WHERE t MATCH ?", (q.match,)).fetchall() if q.match else []
    assert isinstance(rows, list)
    if not q.terms:
        assert q.warnings  # an empty or symbol-only query says why it found nothing


def test_operators_are_words_not_syntax(fts):
    conn, seg = fts
    q = fts_query("AND", seg)
    assert q.match == '"and"'
    rows = conn.execute("SELECT rowid FROM t WHERE t MATCH ?", (q.match,)).fetchall()
    assert rows == [(3,)]
    assert fts_query("title:secret", seg).match == '"title:secret" OR "title" OR "secret"'


def test_c_plus_plus_and_compounds_are_searchable(fts):
    conn, seg = fts
    assert conn.execute("SELECT rowid FROM t WHERE t MATCH ?", (fts_query("C++", seg).match,)).fetchall()[0] == (1,)
    assert (2,) in conn.execute("SELECT rowid FROM t WHERE t MATCH ?", (fts_query("foo-bar", seg).match,)).fetchall()


def test_long_queries_are_capped_with_a_warning(fts):
    _, seg = fts
    q = fts_query(" ".join(f"w{i}" for i in range(500)), seg)
    assert len(q.terms) == MAX_QUERY_TERMS and q.warnings


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=200))
def test_any_unicode_query_is_safe(fts, text):
    conn, seg = fts
    q = fts_query(text, seg)
    if q.match:
        conn.execute("SELECT rowid FROM t WHERE t MATCH ?", (q.match,)).fetchall()
        # Every term is a quoted string: nothing outside quotes but OR.
        assert all(part.startswith('"') and part.endswith('"') for part in q.match.split(" OR "))


@pytest.mark.parametrize("text,match,stop", [
    ("how do I set a due date", '"set" OR "due" OR "date"', ["how", "do", "i", "a"]),
    ("如何设置截止日期", '"设置" OR "截止" OR "日期"', ["如何"]),
    ("filter done tasks", '"filter" OR "done" OR "tasks"', []),   # "done" means something in Tasks
    ("not done", '"not" OR "done"', []),
])
def test_function_words_leave_the_or_query(text, match, stop):
    q = fts_query(text, Segmenter())
    assert q.match == match and q.stop_words == stop and not q.only_stop_words


def test_a_query_of_function_words_only_searches_them_all():
    q = fts_query("how to", Segmenter())
    assert q.match == '"how" OR "to"' and q.only_stop_words and q.stop_words == []


def test_coverage_weighs_words_by_idf_and_a_typo_as_a_word_one_chunk_has(fts):
    from vault_search.keyword import Frequencies, idf, term_weights

    freqs = Frequencies(chunks=100, df={"tasks": 60, "deadline": 2, "obsidain": 0})
    w = term_weights(freqs)
    assert w["deadline"] > w["tasks"] and w["obsidain"] == idf(1, 100) > w["deadline"]
    foreign = term_weights(Frequencies(chunks=100, df={"设置": 0, "日期": 0}))
    assert foreign == {"设置": 1.0, "日期": 1.0}


