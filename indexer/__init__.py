"""Writes the vault-search index: scan, parse, chunk, segment, store, sync.

This package never imports ``vault_search``; the reader side imports the
shared pieces (segmenter, store, errors) from here.
"""

__version__ = "0.1.0"
