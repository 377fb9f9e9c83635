"""Reference keyword retrievers, run beside ours on the same documents.

- ``unicode61``: SQLite FTS5 with its stock tokenizer over the raw text, the
  way QMD indexes notes. unicode61 splits on spaces and punctuation only, so
  a run of Chinese characters (a whole clause) is one token, and a query
  word finds it only if the clause is exactly that word.
- ``trigram``: FTS5's ``trigram`` tokenizer: every three-character window
  is a token, queried as the OR of the query's trigrams (words shorter than
  three characters cannot be searched at all).
- ``bm25s``: the `bm25s` library (Lucene BM25, k1 1.2, b 0.75, the values
  FTS5's ``bm25()`` uses) over the very tokens our jieba segmenter gives the
  FTS table: a reference for our scores and speed.

Each indexes one row per document (title and text; the title weighted 4 as in
our index) and returns ``[(doc_id, score)]``, best first.
"""

from __future__ import annotations

import re
import sqlite3
import time

from indexer.segment import Segmenter

BASELINES = ("unicode61", "trigram", "bm25s")
TITLE_WEIGHT = 4.0
WORD_RE = re.compile(r"[^\W_]+")  # what unicode61 keeps as token characters by default


def _quote(token: str) -> str:
    return '"' + token.replace('"', '""') + '"'


class FtsBaseline:
    def __init__(self, name: str, docs: dict[str, dict]):
        if name not in ("unicode61", "trigram"):
            raise ValueError(f"unknown FTS baseline {name!r}")
        self.name = name
        t0 = time.perf_counter()
        self.conn = sqlite3.connect(":memory:")
        self.conn.execute(f"CREATE VIRTUAL TABLE docs USING fts5(doc_id UNINDEXED, title, body, tokenize='{name}')")
        self.conn.executemany("INSERT INTO docs (doc_id, title, body) VALUES (?, ?, ?)",
                              [(d, doc.get("title") or "", doc.get("text") or "") for d, doc in docs.items()])
        self.index_seconds = time.perf_counter() - t0

    def match(self, query: str) -> str:
        words = WORD_RE.findall(query.lower())
        if self.name == "unicode61":
            terms = words
        else:
            terms = [w[i:i + 3] for w in words for i in range(len(w) - 2)]
        return " OR ".join(_quote(t) for t in dict.fromkeys(terms))

    def search(self, query: str, k: int) -> list[tuple[str, float]]:
        match = self.match(query)
        if not match:
            return []
        rows = self.conn.execute(
            f"SELECT doc_id, bm25(docs, 0, {TITLE_WEIGHT}, 1.0) AS s FROM docs WHERE docs MATCH ? ORDER BY s LIMIT ?",
            (match, k)).fetchall()
        return [(d, -s) for d, s in rows]

    def close(self) -> None:
        self.conn.close()


class Bm25sBaseline:
    name = "bm25s"

    def __init__(self, docs: dict[str, dict], segmenter: Segmenter | None = None):
        import bm25s  # optional: the `bench` extra

        self.segmenter = segmenter or Segmenter()
        t0 = time.perf_counter()
        self.ids = list(docs)
        corpus = []
        for d in self.ids:
            title = self.segmenter.segment(docs[d].get("title") or "")
            # The title counts TITLE_WEIGHT times, as the FTS column weight does.
            corpus.append(title * int(TITLE_WEIGHT) + self.segmenter.segment(docs[d].get("text") or ""))
        self.model = bm25s.BM25(k1=1.2, b=0.75)
        self.model.index(corpus, show_progress=False)
        self.index_seconds = time.perf_counter() - t0

    def search(self, query: str, k: int) -> list[tuple[str, float]]:
        tokens = list(dict.fromkeys(self.segmenter.segment(query)))
        if not tokens:
            return []
        docs, scores = self.model.retrieve([tokens], k=min(k, len(self.ids)), show_progress=False)
        return [(self.ids[i], float(s)) for i, s in zip(docs[0], scores[0]) if s > 0]

    def close(self) -> None:
        pass


def make_baseline(name: str, docs: dict[str, dict], segmenter: Segmenter | None = None):
    if name == "bm25s":
        return Bm25sBaseline(docs, segmenter)
    return FtsBaseline(name, docs)
