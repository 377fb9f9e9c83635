"""One segmenter for documents and queries alike.

Han text goes through jieba in search mode (each word plus the dictionary
words inside it, so both 数据库 and 数据库索引 find a note about 数据库索引);
other text becomes lower-cased words, with compound identifiers kept whole
beside their parts (``node.js`` → ``node.js node js``, ``getUserName`` →
``getusername get user name``). The output is space-joined for FTS5, whose
``unicode61`` tokenizer is told that the connector characters are part of
tokens, so it splits on our spaces and nowhere else.

jieba's dictionary (about 0.6 s to load from its own cache, 0.3 s from
ours) is loaded only when a text actually contains Han characters, and a sync
of a few notes loads only the parts of it their characters need
(``Segmenter.prepare``, about 0.04 s for a long note).
"""

from __future__ import annotations

import logging
import math
import os
import pickle
import re
import tempfile
import threading
import unicodedata
from pathlib import Path
from typing import Any, Iterable

# Bump when the tokens produced for the same text change: the index records
# it and re-segments every note when it differs.
SEGMENTER_VERSION = "1"
# Characters that join the parts of one compound token. FTS5's unicode61
# would split on them, so the FTS table declares them as token characters.
CONNECTORS = ".-+#@/:_"
MAX_TOKEN_CHARS = 64   # longer runs are hashes, base64 or URLs: keep only their parts
# Whole names from the vault's titles, aliases and tags are added to jieba's
# dictionary when they are this long (in Han characters); longer titles are
# sentences, not names.
USER_WORD_MIN, USER_WORD_MAX = 2, 10
JIEBA_HMM = False  # measured on cmrc2018 / xquad-zh: docs/ranking-log.md, 2026-11-30

HAN_CLASS = r"\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0002ffff"
HAN_RUN_RE = re.compile(f"[{HAN_CLASS}]+")
HAN_ONLY_RE = re.compile(f"^[{HAN_CLASS}]+$")
HAS_HAN_RE = re.compile(f"[{HAN_CLASS}]")
HAN_RUN_CHAR_RE = re.compile(f"[{HAN_CLASS}]")
# Segmenter.prepare takes the short way for texts with at most this many
# distinct Han characters (a few notes; a whole vault loads everything).
PREPARE_MAX_CHARS = 2500
PREPARE_MAX_TEXT = 200_000   # ... and at most this much text (each run is looked up in it)
_CONN = re.escape(CONNECTORS.replace("_", ""))
WORD_RE = re.compile(rf"[^\W_]+(?:[{_CONN}_]+[^\W_]+)*[+#]*")
PART_RE = re.compile(r"[^\W_]+")
CAMEL_RE = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+|[^\W\d_]+")

log = logging.getLogger(__name__)


def has_han(text: str) -> bool:
    return HAS_HAN_RE.search(text) is not None


def normalize(text: str) -> str:
    """NFKC folds full-width letters and digits (ＡＢＣ１２３) to ASCII."""
    return unicodedata.normalize("NFKC", text.replace("\x00", " "))


def latin_tokens(text: str) -> list[str]:
    out: list[str] = []
    for word in WORD_RE.findall(text):
        if word.isascii() and word.isalnum() and (word.islower() or word.isupper() or word.isdigit()):
            # Most words: one ASCII part, no inner capitals: the word alone
            # (what the general case below gives them, a third faster).
            if len(word) <= MAX_TOKEN_CHARS:
                out.append(word.lower())
            continue
        lower = word.lower()
        parts = PART_RE.findall(word)
        if len(parts) > 1 or (len(parts) == 1 and lower != parts[0].lower()):
            if len(lower) <= MAX_TOKEN_CHARS:
                out.append(lower)
            for part in parts:
                out.extend(_camel_parts(part))
        else:
            out.extend(_camel_parts(word))
    return out


def _camel_parts(word: str) -> list[str]:
    lower = word.lower()
    pieces = CAMEL_RE.findall(word) if not word.islower() and not word.isupper() else [word]
    out = [lower] if len(lower) <= MAX_TOKEN_CHARS else []
    if len(pieces) > 1:
        out.extend(p.lower() for p in pieces if len(p) <= MAX_TOKEN_CHARS)
    return out


def dag_cut(freq: dict, log_total: float, run: str) -> list[str]:
    """jieba's cut of a run of Han characters without HMM, word for word:
    the most probable path through the dictionary words the run contains
    (jieba's ``get_DAG`` and ``calc``, then its route, for a run with no Latin
    letters or digits). One backward pass with no DAG or route dict, a third
    faster; the sums are the same, in the same order, and a tie goes to the
    longer word as in jieba's ``max`` over (score, end)."""
    n = len(run)
    log = math.log
    score = [0.0] * (n + 1)
    end = [0] * n
    get = freq.get
    for k in range(n - 1, -1, -1):
        best, best_end = -math.inf, k
        i, f = k, get(run[k])
        found = False
        while f is not None:
            if f:
                found = True
                s = log(f) - log_total + score[i + 1]
                if s >= best:
                    best, best_end = s, i
            i += 1
            if i >= n:
                break
            f = get(run[k:i + 1])
        if not found:   # no word starts here: the character alone
            best, best_end = log(get(run[k]) or 1) - log_total + score[k + 1], k
        score[k], end[k] = best, best_end
    out, x = [], 0
    while x < n:
        y = end[x] + 1
        out.append(run[x:y])
        x = y
    return out


def user_word_candidates(texts: Iterable[str]) -> set[str]:
    """Titles, aliases and tags that are short all-Han names."""
    out = set()
    for text in texts:
        word = re.sub(r"^[\W_]+|[\W_]+$", "", normalize(text or ""))
        if USER_WORD_MIN <= len(word) <= USER_WORD_MAX and HAN_ONLY_RE.match(word):
            out.add(word)
    return out


class _BaseDictionary:
    """jieba's default dictionary, loaded once per process, from a pickle.

    jieba's own marshal cache takes ~0.6 s to load; the same dict pickled with
    protocol 5 loads in ~0.2 s, which matters for a CLI query in Chinese.
    """

    _lock = threading.Lock()
    _loaded: tuple[dict, int] | None = None

    @classmethod
    def get(cls) -> tuple[dict, int]:
        with cls._lock:
            if cls._loaded is None:
                cls._loaded = cls._load()
            return cls._loaded

    @classmethod
    def _load(cls) -> tuple[dict, int]:
        import jieba

        jieba.setLogLevel(logging.WARNING)
        cache_dir = user_cache_dir()
        dict_path = jieba.get_dict_file().name if hasattr(jieba, "get_dict_file") else ""
        stamp = f"{jieba.__version__}-{_file_stamp(jieba.DEFAULT_DICT or dict_path)}"
        pickled = cache_dir / f"jieba-{stamp}.pickle" if cache_dir else None
        if pickled is not None and pickled.exists():
            try:
                with open(pickled, "rb") as fh:
                    freq, total = pickle.load(fh)
                return freq, total
            except Exception as exc:  # a torn or foreign cache: rebuild it
                log.debug("jieba cache %s unreadable (%s); rebuilding", pickled, exc)
        tk = jieba.Tokenizer()
        if cache_dir:
            tk.tmp_dir = str(cache_dir)
        tk.initialize()
        if pickled is not None:
            _write_pickle(pickled, (tk.FREQ, tk.total))
        return tk.FREQ, tk.total

    @classmethod
    def parts(cls) -> Path | None:
        """The same dictionary in a SQLite file, split by the first two
        characters of each entry (the character itself for one-character
        words), each part pickled on its own: a sync of a few notes reads only
        the parts their characters and character pairs begin
        (``Segmenter.prepare``). None when it cannot be cached."""
        with cls._lock:
            if cls._parts is None:
                cls._parts = cls._build_parts() or ""
            return Path(cls._parts) if cls._parts else None

    _parts: Path | str | None = None   # "": cannot be cached

    @classmethod
    def _build_parts(cls) -> Path | None:
        import sqlite3

        import jieba

        cache_dir = user_cache_dir()
        if cache_dir is None:
            return None
        stamp = f"{jieba.__version__}-{_file_stamp(jieba.DEFAULT_DICT or '')}"
        path = cache_dir / f"jieba-{stamp}.parts.db"
        if path.exists():
            return path
        freq, total = cls._loaded if cls._loaded is not None else cls._load()
        grouped: dict[str, dict[str, int]] = {}
        for word, n in freq.items():
            grouped.setdefault(word[:2], {})[word] = n
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        try:
            conn = sqlite3.connect(tmp)
            try:
                conn.execute("CREATE TABLE parts (key TEXT PRIMARY KEY, words BLOB NOT NULL) WITHOUT ROWID")
                conn.execute("CREATE TABLE meta (total INTEGER NOT NULL)")
                conn.execute("INSERT INTO meta VALUES (?)", (total,))
                conn.executemany("INSERT INTO parts VALUES (?, ?)",
                                 ((key, pickle.dumps(words, protocol=5)) for key, words in grouped.items()))
                conn.commit()
            finally:
                conn.close()
            os.replace(tmp, path)
        except (OSError, sqlite3.Error) as exc:
            log.debug("cannot write jieba parts %s: %s", path, exc)
            try:
                os.unlink(tmp)
            except OSError:
                pass
            return None
        return path


def _read_parts(path: Path, keys: set[str]) -> tuple[dict[str, int], int] | None:
    """The dictionary entries under ``keys``, and jieba's total, or None."""
    import sqlite3

    try:
        conn = sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True)
        try:
            total = conn.execute("SELECT total FROM meta").fetchone()[0]
            freq: dict[str, int] = {}
            ordered = sorted(keys)
            for start in range(0, len(ordered), 900):
                part = ordered[start:start + 900]
                for (blob,) in conn.execute(f"SELECT words FROM parts WHERE key IN ({','.join('?' * len(part))})",
                                            part):
                    freq.update(pickle.loads(blob))
        finally:
            conn.close()
    except Exception as exc:  # a damaged or foreign file: the whole dictionary answers
        log.debug("jieba parts %s unreadable (%s)", path, exc)
        return None
    return freq, total


def _write_pickle(path: Path, value: Any) -> None:
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        with os.fdopen(fd, "wb") as fh:
            pickle.dump(value, fh, protocol=5)
        os.replace(tmp, path)
    except OSError as exc:
        log.debug("cannot write jieba cache %s: %s", path, exc)


def default_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/vault-search``: jieba's, the dictionary's and the embedding caches."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(Path.home(), ".cache")
    return Path(base) / "vault-search"


def user_cache_dir(path: Path | None = None) -> Path | None:
    """``path`` or ``default_cache_dir()``, created; None when it cannot be."""
    if path is None:
        path = default_cache_dir()
    try:
        path.mkdir(parents=True, exist_ok=True, mode=0o700)
        return path
    except OSError:
        return None


def _file_stamp(path: str) -> str:
    try:
        st = os.stat(path)
        return f"{st.st_size}-{int(st.st_mtime)}"
    except (OSError, TypeError):
        return "default"


class Segmenter:
    """Segments text into index tokens; holds one vault's user dictionary.

    Each vault's names go into its own jieba tokenizer, so two indexes open in
    one process (a server, the tests) never segment with each other's words.
    """

    version = f"{SEGMENTER_VERSION}/jieba-search/hmm{int(JIEBA_HMM)}"

    def __init__(self, user_words: dict[str, int] | None = None):
        self._pending: dict[str, int | None] = dict(user_words or {})
        self._user_parts: dict[str, list[str]] = {}
        self._tk: Any = None   # jieba.Tokenizer, loaded on first use
        self._lock = threading.Lock()
        # Segmenter.prepare: (a tokenizer with only the dictionary parts some
        # texts need, its names' parts, the texts).
        self._small: tuple[Any, dict[str, list[str]], str] | None = None

    def prepare(self, texts: Iterable[str]) -> bool:
        """Before segmenting only ``texts`` (and runs of Han text that occur
        in them): load just the parts of jieba's dictionary that their Han
        characters and pairs of neighbouring characters begin, and the vault's
        names that occur in them, instead of the whole dictionary (0.3 s).
        Segmenting is exactly the same: every entry jieba looks up while
        cutting a run begins with a character, or a pair of characters, of
        the run, and a name changes how a run is cut (or another name's
        parts) only where it occurs in it. Any other text, or a question this
        tokenizer cannot answer, loads the whole dictionary as before. True
        when it took the short way."""
        text = "\n".join(texts)
        if len(text) > PREPARE_MAX_TEXT:
            return False
        text = normalize(text)
        chars = frozenset(HAN_RUN_CHAR_RE.findall(text))
        with self._lock:
            if (self._tk is not None or self._small is not None or len(chars) > PREPARE_MAX_CHARS
                    or len(text) > PREPARE_MAX_TEXT):
                return False
            if not chars:
                return False
            path = _BaseDictionary.parts()
            if path is None:
                return False
            # Entries begin with a character (one-character words) or a pair
            # of neighbouring characters of a run.
            keys = set(chars)
            for run in HAN_RUN_RE.findall(text):
                keys.update(run[i:i + 2] for i in range(len(run) - 1))
            found = _read_parts(path, keys)
            if found is None:
                return False
            freq, total = found
            import jieba

            tk = jieba.Tokenizer()
            tk.FREQ, tk.total, tk.initialized = freq, total, True
            names = {w: f for w, f in self._pending.items() if w in text}
            self._small = (tk, self._apply(tk, names), text)
            return True


    @property
    def jieba_loaded(self) -> bool:
        return self._tk is not None

    def segment(self, text: str) -> list[str]:
        """Tokens of ``text`` in order (with sub-words), ready for FTS5."""
        text = normalize(text)
        if not has_han(text):
            return latin_tokens(text)
        out: list[str] = []
        pos = 0
        for m in HAN_RUN_RE.finditer(text):
            if m.start() > pos:
                out.extend(latin_tokens(text[pos:m.start()]))
            out.extend(self._han_tokens(m.group(0)))
            pos = m.end()
        if pos < len(text):
            out.extend(latin_tokens(text[pos:]))
        return out

    def segment_text(self, text: str) -> str:
        return " ".join(self.segment(text))

    def add_user_words(self, words: Iterable[str]) -> dict[str, int | None]:
        """Queue names for the dictionary; returns the new ones with their
        frequency once jieba is loaded (or None until then)."""
        new: dict[str, int | None] = {}
        with self._lock:
            for word in words:
                if word in self._pending or word in self._user_parts:
                    continue
                self._pending[word] = None
                new[word] = None
            if self._tk is not None and new:
                self._apply_pending()
                new = {w: self._tk.FREQ[w] for w in new}
            elif self._small is not None and new:
                tk, parts, text = self._small
                if all(w in text for w in new):   # names from the prepared notes themselves
                    parts.update(self._apply(tk, dict(new)))
                else:
                    self._small = None
        return new

    def frequencies(self, words: Iterable[str]) -> dict[str, int]:
        """The frequency each of ``words`` (names added before) has in the
        dictionary: from the prepared tokenizer when it has them, else from
        the whole one."""
        words = list(words)
        with self._lock:
            small = self._small
            if self._tk is None and small is not None and all(w in small[1] for w in words):
                return {w: small[0].FREQ[w] for w in words}
        self._tokenizer()
        with self._lock:
            return {w: self._tk.FREQ[w] for w in words}

    def known_words(self) -> set[str]:
        """Every user word given or added so far (without loading jieba)."""
        with self._lock:
            return set(self._pending) | set(self._user_parts)

    def learn(self, words: dict[str, int]) -> None:
        """Add words with the frequencies a writer gave them (for readers)."""
        with self._lock:
            for word, freq in words.items():
                if word not in self._pending and word not in self._user_parts:
                    self._pending[word] = freq
                    self._small = None   # a name the prepared tokenizer may lack
            if self._tk is not None and self._pending:
                self._apply_pending()

    def load(self) -> None:
        """Load the whole dictionary now (a resident process, before it says it is ready)."""
        self._tokenizer()

    def user_words(self) -> dict[str, int]:
        """Every user word with the frequency it was given (loads jieba)."""
        self._tokenizer()
        return {w: self._tk.FREQ[w] for w in self._user_parts}

    def _tokenizer(self):
        with self._lock:
            if self._tk is None:
                import jieba

                freq, total = _BaseDictionary.get()
                tk = jieba.Tokenizer()
                # Copy only when this vault adds words, so the shared base
                # dictionary is never changed.
                tk.FREQ, tk.total = (dict(freq) if self._pending else freq), total
                tk.initialized = True
                self._tk = tk
                self._apply_pending()
            return self._tk

    def _apply_pending(self) -> None:
        tk = self._tk
        if self._pending and tk.FREQ is _BaseDictionary.get()[0]:
            tk.FREQ = dict(tk.FREQ)
        self._user_parts.update(self._apply(tk, self._pending))
        self._pending.clear()
        self._small = None   # the whole dictionary answers from now on

    def _apply(self, tk, words: dict[str, int | None]) -> dict[str, list[str]]:
        """Add ``words`` (names, in order) to ``tk``'s dictionary; each name's parts."""
        parts = {}
        for word, freq in words.items():
            # Parts by the dictionary as it was before the name was added, so
            # a query for a part of the name still matches.
            parts[word] = [t for t in self._search_words(tk, word) if t != word]
            if freq is None:
                freq = tk.suggest_freq(word, tune=False)
            # Set the entry without touching tk.total, so text that does not
            # contain the word segments exactly as before.
            tk.FREQ[word] = max(int(freq), 1)
            for i in range(1, len(word)):
                tk.FREQ.setdefault(word[:i], 0)
        return parts

    def han_words(self, text: str) -> list[list[str]]:
        """The words of each run of Han characters in ``text``, as the cut
        that ``segment`` starts from gives them: without the sub-words it
        adds, so neighbours in a list are neighbours in the text."""
        return [list(self._cut(self._tokenizer_for(run)[0], run))
                for run in HAN_RUN_RE.findall(normalize(text))]

    def _tokenizer_for(self, run: str) -> tuple[Any, dict[str, list[str]]]:
        """The tokenizer that cuts ``run``, and its names' parts."""
        small = self._small
        # Only a run that occurs in the prepared text: every name inside it
        # occurs there too, so the prepared tokenizer has it.
        if small is not None and self._tk is None and run in small[2]:
            return small[0], small[1]
        return self._tokenizer(), self._user_parts

    def _han_tokens(self, run: str) -> list[str]:
        tk, user_parts = self._tokenizer_for(run)
        out: list[str] = []
        for word in self._cut(tk, run):
            parts = user_parts.get(word)
            if parts is not None:
                out.extend(parts)
                out.append(word)
            else:
                out.extend(self._grams(tk, word))
        return out

    @staticmethod
    def _grams(tk, word: str) -> list[str]:
        """jieba's search mode: dictionary 2- and 3-grams inside a word, then the word."""
        out: list[str] = []
        if len(word) > 2:
            out.extend(word[i:i + 2] for i in range(len(word) - 1) if tk.FREQ.get(word[i:i + 2]))
        if len(word) > 3:
            out.extend(word[i:i + 3] for i in range(len(word) - 2) if tk.FREQ.get(word[i:i + 3]))
        out.append(word)
        return out

    @staticmethod
    def _cut(tk, run: str):
        """jieba's cut of one run of Han characters.

        ``Tokenizer.cut`` re-splits its input with regexes on every call; our
        runs are already pure Han, so ``dag_cut`` does the dictionary cut it
        would reach, in one pass (about 10% of the indexing time on a
        3,000-note vault, and a third of the cut's own).
        """
        if not JIEBA_HMM:
            return dag_cut(tk.FREQ, math.log(tk.total), run)
        return tk.cut(run, HMM=JIEBA_HMM)

    def _search_words(self, tk, text: str) -> list[str]:
        out = []
        for word in self._cut(tk, text):
            out.extend(self._grams(tk, word))
        return out
