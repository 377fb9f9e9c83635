"""Build the FTS5 MATCH expression from user text.

User text never reaches MATCH as syntax: it is segmented with the same
segmenter as the documents, and every token becomes a double-quoted string
OR-ed with the others (OR, not AND: on natural-language questions most words
of the question are missing from the answer; BM25 still ranks notes that
contain more of the words first).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from indexer.segment import Segmenter

MAX_QUERY_CHARS = 4000   # a pasted page is not a query; the rest is ignored
MAX_QUERY_TERMS = 64     # FTS5 cost grows with OR terms; 64 covers any real question


@dataclass
class FtsQuery:
    match: str                  # "" when there is nothing to search for
    terms: list[str]
    warnings: list[str] = field(default_factory=list)


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
    return FtsQuery(" OR ".join(quote_term(t) for t in terms), terms, warnings)
