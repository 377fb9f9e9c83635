"""vault-search: hybrid search over a Markdown (Obsidian) vault.

The Python API is ``Index``; results are the dataclasses in ``results``.
"""

from indexer import __version__
from indexer.errors import VaultSearchError

from .index import Index
from .results import IndexStatus, NoteText, Scores, SearchResponse, SearchResult

__all__ = ["Index", "SearchResponse", "SearchResult", "Scores", "NoteText", "IndexStatus",
           "VaultSearchError", "__version__"]
