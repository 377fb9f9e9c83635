"""Stage 3: the lists that vote, each a ranking of notes by its best chunk.

- ``fts``         BM25 over FTS5 (keyword.py): every mode but vector;
- ``translated``  hybrid: the query's translation (``QueryPlan.translation``);
- ``vector``      the chunks nearest the query's embedding (vector.py), steered
                  by the translation when there is one; every mode but fts;
- ``latent``      hybrid, a translated question over a model with latent terms;
- ``title``       hybrid: the notes the others found whose name looks like the query.

``retriever_lists`` runs the lists of the plan's mode, in that order (the
fusion's order: on a tie the first list's chunk represents the note).
"""

from __future__ import annotations

import sqlite3
import sys
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from indexer.segment import WORD_RE, has_han
from indexer.store import name_key

from ..filters import SearchFilters, filter_warnings
from ..hits import ChunkHit
from ..keyword import CHUNKS_PER_RESULT, MIN_CHUNK_DEPTH, keyword_notes
from ..query import MAX_QUERY_CHARS, FtsQuery

if TYPE_CHECKING:
    from ..reader import Reader
    from .plan import QueryPlan

# A note whose name shares this share of its character n-grams with the query
# (Dice) is listed by the title list.
TITLE_SIMILARITY = 0.5
# A longer query is a sentence, not a (misremembered) name: no title list.
MAX_NAME_WORDS = 8
# Names of at most this many characters have their n-grams remembered
# (``Reader.name_grams``); a query or a longer name is not.
NAME_GRAMS_CHARS = 100


@dataclass
class Found:
    """Stage 3's answer: each list that voted, and what went wrong on the way."""
    lists: dict[str, list[ChunkHit]]
    warnings: list[str] = field(default_factory=list)


def retriever_lists(reader: Reader, plan: QueryPlan) -> Found:
    """Stage 3: each list the plan's mode runs (see the module), and warnings."""
    found = Found({}, filter_warnings(reader.conn, plan.filters))
    lists, mode = found.lists, plan.mode
    if mode in ("fts", "hybrid"):
        lists["fts"] = keyword_list(reader, plan, plan.fq)
    if plan.translation is not None and mode in ("fts", "hybrid"):
        lists["translated"] = keyword_list(reader, plan, plan.translation.query)
    allowed = allowed_chunks(reader, plan.filters) if mode in ("vector", "hybrid") and plan.fq.terms else None
    if mode in ("vector", "hybrid") and plan.fq.terms:
        lists["vector"] = vector_list(reader, plan, allowed, found.warnings)
    if mode == "hybrid" and plan.translation is not None and (hits := latent_list(reader, plan, allowed,
                                                                                  found.warnings)):
        lists["latent"] = hits
    if mode == "hybrid" and (titles := title_list(reader, plan, lists)):
        lists["title"] = titles
    if plan.embedded < plan.chunks and mode == "hybrid":
        found.lists = completed_vector_list(reader, lists)
    if (warning := coverage_warning(plan)) is not None:
        found.warnings.append(warning)
    return found


def coverage_warning(plan: QueryPlan) -> str | None:
    """What a search says while chunks wait for a vector: nothing when it
    asked for keywords only (``--mode fts``); while an embedding pass runs,
    how far it is (the count `status` tells); else how to embed the rest."""
    if plan.embedded >= plan.chunks or plan.options.mode == "fts":
        return None
    if plan.embedding_now:
        uses = "results use those" if plan.mode != "fts" else "keyword results until the first are published"
        return f"being embedded now: {plan.embedded} of {plan.chunks} chunks so far; {uses}"
    return (f"{plan.chunks - plan.embedded} of {plan.chunks} chunks still wait for a vector: vector search sees "
            "the others only (`vault-search index`, or a running `serve`, embeds them)")


def chunk_depth(notes: int) -> int:
    """Chunks a list reads to find its ``notes`` best notes."""
    return max(MIN_CHUNK_DEPTH, notes * CHUNKS_PER_RESULT)


def keyword_list(reader: Reader, plan: QueryPlan, fq: FtsQuery) -> list[ChunkHit]:
    """The plan's ``depth`` best notes by BM25 for ``fq`` (the query, its
    phrases or its translation), each by its best chunk; each chunk's note
    from the arrays the vector list needs too (``Reader.chunk_notes``) when
    the mode searches vectors or they are at hand, else by a join."""
    chunk_notes = None
    if fq.match and not plan.filters:
        chunk_notes = reader.current_chunk_notes() if plan.mode == "fts" else reader.chunk_notes()
    return keyword_notes(reader.conn, fq.match, plan.filters, chunk_depth(plan.depth), plan.depth, chunk_notes)


def allowed_chunks(reader: Reader, filters: SearchFilters) -> Any:
    """The ids of the chunks ``filters`` let through, for the lists that rank
    every chunk (vector, latent); None without filters."""
    if not filters:
        return None
    from ..vector import allowed_chunk_ids

    where, params = filters.sql()
    return allowed_chunk_ids(reader.conn, where, params)


def vector_list(reader: Reader, plan: QueryPlan, allowed: Any, warnings: list[str]) -> list[ChunkHit]:
    """The plan's ``depth`` notes nearest the query's embedding, each by its
    best chunk (a warning goes to ``warnings`` when the matrix file could not
    be used). With a translation, nearest the mean of the query's embedding
    and its word by word translation's (``Translation.text``):
    multilingual-e5-small finds the right note first for 1 in 4 questions
    asked in the notes' other language, and the translation, however rough,
    is in the notes' language. ``allowed``: the chunk ids the filters let
    through (``allowed_chunks``)."""
    from ..vector import nearest_notes

    vectors = reader.vectors()
    if vectors.problem and not plan.embedding_now:   # (while a pass publishes, a file newer than the snapshot)
        warnings.append(f"{vectors.problem}; searched the database copy (run `vault-search index` to repair)")
    qvec = reader.query_vector(plan.text[:MAX_QUERY_CHARS])
    translation = plan.translation
    if translation is not None and translation.text and translation.blend > 0:
        qvec = mean_direction(qvec, reader.query_vector(translation.text[:MAX_QUERY_CHARS]), translation.blend)
    return nearest_notes(vectors, reader.chunk_notes(), qvec, chunk_depth(plan.depth), plan.depth, allowed)


def latent_list(reader: Reader, plan: QueryPlan, allowed: Any, warnings: list[str]) -> list[ChunkHit]:
    """For a translated question when the model gives latent terms: the
    plan's ``depth`` notes whose chunks share the most latent weight with the
    question and its word by word translation, read as one text. The sparse
    head's features are more alike across languages than words are, and the
    translation adds the notes' own words: on XQuAD across languages this list
    lifts hybrid nDCG@10 by 0.016-0.021 (docs/ranking-log.md, "Fifth stop").
    A note it alone finds carries no evidence of its own (relevance.evidence):
    its relevance is what its words and vectors show. When the query's latent
    terms cannot be had, the search goes on without the list, and says so."""
    from indexer.embed import EmbedderError

    latent = reader.latent()
    if latent is None or not len(latent) or plan.translation is None:
        return []
    from ..vector import latent_notes

    text = "\n".join(part[:MAX_QUERY_CHARS] for part in (plan.text, plan.translation.text) if part)
    try:
        features, weights = reader.query_latent(text)
    except EmbedderError as exc:
        warnings.append(f"no latent-terms list: {exc}")
        return []
    return latent_notes(latent, reader.chunk_notes(), features, weights, chunk_depth(plan.depth), plan.depth,
                        allowed)


def mean_direction(a: Any, b: Any, weight: float = 1.0) -> Any:
    """The unit vector along ``a`` + ``weight`` x ``b``, two unit vectors as
    ``Embedder.embed_query`` gives them: halfway between them at weight 1."""
    from indexer.embed import normalise

    return normalise(a + weight * b)


def title_list(reader: Reader, plan: QueryPlan, lists: dict[str, list[ChunkHit]]) -> list[ChunkHit]:
    """The notes found by the other ``lists`` whose title, alias or file
    name looks like the query (Dice coefficient of character n-grams at least
    TITLE_SIMILARITY), most alike first, each by its opening chunk; none for a
    query of more than MAX_NAME_WORDS words. People misremember names: "Quick
    Refrence table" is the note "Quick Reference", "customised grouping with functions" is "Custom Grouping"."""
    wanted = grams(plan.text)
    notes = list(dict.fromkeys(h.note_id for hits in lists.values() for h in hits))
    if not wanted or not notes or len(WORD_RE.findall(plan.text)) > MAX_NAME_WORDS:
        return []
    marks = ",".join("?" * len(notes))
    best: dict[int, float] = {}
    for note_id, key in reader.conn.execute(f"SELECT note_id, key FROM names WHERE note_id IN ({marks})", notes):
        have = name_grams(reader, key)
        if have:
            similarity = 2 * len(wanted & have) / (len(wanted) + len(have))
            best[note_id] = max(best.get(note_id, 0.0), similarity)
    alike = sorted((n for n, sim in best.items() if sim >= TITLE_SIMILARITY), key=lambda n: -best[n])
    opening = first_chunks(reader.conn, alike, plan.filters)
    return [ChunkHit(opening[n], n, round(best[n], 4), rank) for rank, n in enumerate(alike, 1) if n in opening]


def grams(text: str) -> frozenset[str]:
    """Character trigrams of a name (bigrams of Han text, whose words are
    one or two characters), over its words with the spaces between them."""
    key = " ".join(WORD_RE.findall(name_key(text)))
    n = 2 if has_han(key) else 3
    padded = f" {key} "
    return frozenset(padded[i:i + n] for i in range(len(padded) - n + 1)) if key else frozenset()


def name_grams(reader: Reader, name: str) -> frozenset[str]:
    """``grams`` of a note's name, remembered by the reader for a name of up to
    NAME_GRAMS_CHARS characters; interned: the n-grams many names share are
    stored once (22 MB for 8,192 names of the 10k-note growth vault instead of 45)."""
    if len(name) > NAME_GRAMS_CHARS:
        return grams(name)
    return reader.name_grams.get(name, lambda: frozenset(map(sys.intern, grams(name))))


def first_chunks(conn: sqlite3.Connection, note_ids: list[int],
                 filters: SearchFilters | None = None) -> dict[int, int]:
    """note id -> its first chunk's id (the first that passes ``filters``: a
    daily log's entries are chunks with their own dates)."""
    if not note_ids:
        return {}
    marks = ",".join("?" * len(note_ids))
    where, params = filters.sql() if filters else ("1", [])
    return dict(conn.execute(
        f"SELECT c.note_id, min(c.id) FROM chunks c JOIN notes n ON n.id = c.note_id "
        f"WHERE c.note_id IN ({marks}) AND {where} GROUP BY c.note_id", [*note_ids, *params]))


def completed_vector_list(reader: Reader, lists: dict[str, list[ChunkHit]]) -> dict[str, list[ChunkHit]]:
    """While chunks still wait for a vector: the vector list with each
    keyword hit whose note has no vector yet put in at its keyword rank. The
    vector list cannot see such a note, so on its own it ranks every note that
    happens to have vectors above it; a note still waiting is assumed to stand
    where its keywords put it (no evidence either way), notes with vectors
    where their vectors put them. The stand-ins count in the fusion only
    (``ChunkHit.stand_in``): no result says it was found by its vector."""
    vector, keyword = lists.get("vector", []), lists.get("fts", [])
    if not vector or not keyword:
        return lists
    listed = {h.note_id for h in vector}
    candidates = [h.note_id for h in keyword if h.note_id not in listed]
    if not candidates:
        return lists
    import numpy as np

    marks = ",".join("?" * len(candidates))
    rows = reader.conn.execute(f"SELECT id, note_id FROM chunks WHERE note_id IN ({marks})", candidates).fetchall()
    ids = np.fromiter((cid for cid, _ in rows), dtype=np.int64, count=len(rows))
    seen = np.isin(ids, reader.vectors().ids)
    embedded = {note for (_, note), has in zip(rows, seen) if has}
    waiting = [(h.rank, 1, h) for h in keyword if h.note_id not in listed and h.note_id not in embedded]
    merged = sorted([(h.rank, 0, h) for h in vector] + waiting, key=lambda item: (item[0], item[1]))
    return {**lists, "vector": [replace(h, stand_in=True) if source else h for _, source, h in merged]}
