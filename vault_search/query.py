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

import re
from dataclasses import dataclass, field

from indexer.segment import HAN_CLASS, Segmenter, normalize

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


# Two neighbouring words of a query count as its phrase in a chunk that has at
# most this many other tokens between them. The index writes a word's
# sub-words (and a vault name's parts) just before it, so the second word's
# lie between the two ("自定 定义 自定义 过滤"; a ten-character name has up to
# nine, a jieba word up to seventeen) and each pair's window spans them too. On the dev set's Chinese
# vault, 5 and 8 ranked alike (hybrid hit@1 0.789), 3 lost a question (0.778)
# and 1 all of the list's gain (0.756).
PROXIMITY_WINDOW = 5
# Runs of Han text that only spaces part ("数据库 索引") are one phrase: people
# type Chinese keywords apart; punctuation, line ends and other scripts end a phrase.
_PHRASE_RE = re.compile(f"[{HAN_CLASS}](?:[{HAN_CLASS} \t]*[{HAN_CLASS}])?")


def proximity_query(text: str, segmenter: Segmenter) -> FtsQuery | None:
    """The query's neighbouring Chinese words as FTS5 NEAR pairs, OR-ed: the
    chunks that keep two of its words together, as the query wrote them.
    Segmenting splits a Chinese phrase into words that BM25 then counts one
    by one, anywhere in a chunk; a pair found close together is evidence of
    the phrase. Pairs are made inside a phrase of Han text (``_PHRASE_RE``)
    and skip function words. None without a pair."""
    pairs: list[tuple[str, str]] = []
    for phrase in _PHRASE_RE.findall(normalize(text[:MAX_QUERY_CHARS])):
        words = [w for run in segmenter.han_words(phrase) for w in run if w not in STOP_WORDS]
        pairs += [(a, b) for a, b in zip(words, words[1:]) if a != b]
    unique: dict[frozenset[str], tuple[str, str]] = {}
    for pair in pairs:
        unique.setdefault(frozenset(pair), pair)   # NEAR has no order: "a b" and "b a" are one pair
    pairs = list(unique.values())[:MAX_QUERY_TERMS]
    if not pairs:
        return None
    terms = list(dict.fromkeys(w for pair in pairs for w in pair))
    match = " OR ".join(f"NEAR({quote_term(a)} {quote_term(b)}, {near_window(a, b, segmenter)})" for a, b in pairs)
    return FtsQuery(match, terms)


def near_window(a: str, b: str, segmenter: Segmenter) -> int:
    """PROXIMITY_WINDOW plus the sub-words the index writes before ``a`` or
    ``b``, whichever has more (NEAR has no order: either may come second)."""
    return PROXIMITY_WINDOW + max(len(segmenter.segment(a)), len(segmenter.segment(b))) - 1


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
