"""Build the FTS5 MATCH expression from user text.

User text never reaches MATCH as syntax: it is segmented with the same
segmenter as the documents, and every token becomes a double-quoted string
OR-ed with the others (OR, not AND: on natural-language questions most words
of the question are missing from the answer; BM25 still ranks notes that
contain more of the words first).

Function words ("how do I", "如何", "的") are left out of the OR query unless
the query has nothing else: OR-ed, each one matches most notes, and in a
heading column weighted x2 "How do I make the menu pop up less?" outranked
the note about due dates for "how do I set a due date". They also leave the
coverage that weighs the keyword list in the hybrid (keyword.term_coverage).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from indexer.segment import Segmenter

MAX_QUERY_CHARS = 4000   # a pasted page is not a query; the rest is ignored
MAX_QUERY_TERMS = 64     # FTS5 cost grows with OR terms; 64 covers any real question


# Words that say how a question is asked, not what it is about. Kept short on
# purpose: "not", "no", "all", "new" and "done" carry meaning in notes (Tasks'
# `not done`), and "us", "who", "may", "will" are also names (US, WHO, May,
# a will), so they stay searchable.
STOP_WORDS = frozenset("""
a an the and or but if then so as of to in on at by for with from into onto about over under up out off
is are was were be been being am do does did can could should would shall might must
have has had having i me my mine we our ours you your yours he him his she her it its they them their
this that these those there here what which whom whose when where why how whether
any some such than too very just also only own same other each both few more most
get got let lets want wants need needs way ways s t d ll m re ve
""".split()) | frozenset("""
的 了 是 在 我 你 他 她 它 我们 你们 他们 她们 这 那 这个 那个 这些 那些 这样 那样 和 与 及 或 或者 吗 呢 吧 啊 呀 么
什么 怎么 怎样 怎么样 如何 为什么 为何 哪 哪些 哪个 哪里 是否 能否 能不能 可不可以 可以 能 会 要 想 应该 需要
有 有没有 没有 把 被 让 给 对 从 向 到 就 都 也 还 又 很 一个 一些 一下 里 中 时 时候 得 地 着 过 之 其 个 该 请
""".split())


@dataclass
class FtsQuery:
    match: str                  # "" when there is nothing to search for
    terms: list[str]            # the words searched for (and highlighted)
    warnings: list[str] = field(default_factory=list)
    stop_words: list[str] = field(default_factory=list)   # left out of ``match``
    only_stop_words: bool = False   # every word was a function word, so all were searched


def quote_term(term: str) -> str:
    return '"' + term.replace('"', '""') + '"'


def fts_query(text: str, segmenter: Segmenter) -> FtsQuery:
    warnings = []
    if len(text) > MAX_QUERY_CHARS:
        warnings.append(f"query longer than {MAX_QUERY_CHARS} characters; the rest was ignored")
        text = text[:MAX_QUERY_CHARS]
    terms = list(dict.fromkeys(segmenter.segment(text)))
    if len(terms) > MAX_QUERY_TERMS:
        warnings.append(f"query has {len(terms)} distinct words; searched the first {MAX_QUERY_TERMS}")
        terms = terms[:MAX_QUERY_TERMS]
    if not terms:
        warnings.append("query has no searchable words" if text.strip() else "empty query")
        return FtsQuery("", [], warnings)
    content = [t for t in terms if t not in STOP_WORDS]
    stop = [t for t in terms if t in STOP_WORDS] if content else []
    terms = content or terms   # a query of function words only ("how to") searches them all
    return FtsQuery(" OR ".join(quote_term(t) for t in terms), terms, warnings, stop, not content)


def phrase_match(text: str, segmenter: Segmenter) -> str:
    """``text`` as one FTS5 phrase: its words in order, segmented as the notes were."""
    return quote_term(" ".join(segmenter.segment(text[:MAX_QUERY_CHARS])))


def with_words_replaced(fq: FtsQuery, replaced: dict[str, str]) -> FtsQuery:
    """``fq`` searching each word of ``replaced`` as the word it maps to."""
    terms = list(dict.fromkeys(replaced.get(t, t) for t in fq.terms))
    return FtsQuery(" OR ".join(quote_term(t) for t in terms), terms, fq.warnings, fq.stop_words, fq.only_stop_words)
