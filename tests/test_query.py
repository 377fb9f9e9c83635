import sqlite3

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from indexer.segment import Segmenter
from indexer.store import FTS_TOKENIZER
from vault_search.query import MAX_QUERY_TERMS, PROXIMITY_WINDOW, fts_query, near_window, proximity_query

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


@pytest.mark.parametrize("text,pairs", [
    ("数据库索引怎么建", [("数据库", "索引"), ("索引", "建")]),   # 怎么 is a function word: skipped
    ("数据库 索引", [("数据库", "索引")]),                      # keywords typed apart are one phrase ...
    ("数据库，索引", []),                                      # ... punctuation ends it ...
    ("数据库 SQLite 索引", []),                                # ... and so do another script's words
    ("how do I build a database index", []),                  # no Chinese: no pairs
    ("索引 索引", []),                                          # a word next to itself is no phrase
    ("数据库\n索引", []),                                       # a line end ends a phrase
    ("索引数据库 数据库索引", [("索引", "数据库")]),              # NEAR has no order: one pair
])
def test_proximity_pairs_neighbouring_chinese_words_of_one_phrase(fts, text, pairs):
    _, seg = fts
    near = proximity_query(text, seg)
    if not pairs:
        assert near is None
        return
    assert near.match == " OR ".join(f'NEAR("{a}" "{b}", {near_window(a, b, seg)})' for a, b in pairs)
    assert near.terms == list(dict.fromkeys(w for pair in pairs for w in pair))
    # the window spans the sub-words the index writes beside each word: 数据库 brings 数据 and 据库
    assert near_window("数据库", "索引", seg) == PROXIMITY_WINDOW + 2 and near_window("索引", "建", seg) == PROXIMITY_WINDOW


@pytest.mark.parametrize("text", HOSTILE + ["数据\"库\" NEAR(索引", "数据库" * 3000,
                                            "数据库索引查询" + "\x00" + "全文检索", "ＮＥＡＲ（数据库　索引）"])
def test_proximity_queries_of_hostile_text_never_raise_in_fts5(fts, text):
    conn, seg = fts
    near = proximity_query(text, seg)
    if near is not None:
        conn.execute("SELECT rowid FROM t WHERE t MATCH ?", (near.match,)).fetchall()


def test_proximity_pairs_are_capped_like_query_words(fts):
    _, seg = fts
    text = "".join(f"{a}{b}" for a in "东南西北中" for b in "春夏秋冬山水花鸟虫鱼天地") * 3
    near = proximity_query(text, seg)
    assert near.match.count("NEAR(") == MAX_QUERY_TERMS


@pytest.mark.parametrize("name", ["中华人民共和国刑法学", "数据库索引优化"])
def test_a_phrase_kept_together_matches_and_one_pulled_apart_does_not(tmp_path, name):
    # a vault name of up to ten characters: its parts sit between it and its neighbour in the index
    seg = Segmenter({name: None})
    conn = sqlite3.connect(":memory:")
    conn.execute(f"CREATE VIRTUAL TABLE t USING fts5(title, body, tokenize=\"{FTS_TOKENIZER}\")")
    far = "，".join(["今天天气很好出去散步"] * 3)
    for title, body in [("near", f"学习{name}"), ("far", f"学习，{far}，{name}")]:
        conn.execute("INSERT INTO t VALUES (?, ?)", (title, seg.segment_text(body)))
    near = proximity_query(f"学习{name}", seg)
    assert near is not None and f'"{name}"' in near.match
    titles = [t for (t,) in conn.execute("SELECT title FROM t WHERE t MATCH ?", (near.match,))]
    assert titles == ["near"]


def test_proximity_pairs_after_prepare_are_those_of_the_whole_dictionary():
    text = "怎么用dataviewjs算出整个库一共有多少文件、标签和文件夹"
    prepared = Segmenter({"文件夹": None})
    assert prepared.prepare([text])                   # the short way: only the parts the text needs
    assert proximity_query(text, prepared).match == proximity_query(text, Segmenter({"文件夹": None})).match
