"""vault-search: hybrid search over a Markdown (Obsidian) vault.

The Python API is ``Index``; results are the dataclasses in ``results``.
Attributes load lazily, so ``vault_search.cli`` starts fast (the thin client
that asks a running server never imports the index machinery).
"""

from indexer import __version__
from indexer.errors import VaultSearchError

__all__ = ["Index", "SearchResponse", "SearchResult", "Scores", "NoteText", "IndexStatus",
           "VaultSearchError", "__version__"]


def __getattr__(name: str):
    if name == "Index":
        from .index import Index

        return Index
    if name in ("SearchResponse", "SearchResult", "Scores", "NoteText", "IndexStatus"):
        from . import results

        return getattr(results, name)
    raise AttributeError(f"module 'vault_search' has no attribute {name!r}")
