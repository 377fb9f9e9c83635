"""The code's shape, kept: one room per stage (see README "How it works").
No class over 300 lines and no function over 90 lines in `vault_search/` and
`indexer/`; `Index` is a facade; a search option is spelled in at most three
files of the two packages."""

from __future__ import annotations

import ast

from conftest import REPO

from vault_search.options import SearchOptions

PACKAGES = ("vault_search", "indexer")
MAX_CLASS_LINES = 300
MAX_FUNCTION_LINES = 90
MAX_FILES_PER_OPTION = 3


def sources():
    for package in PACKAGES:
        for path in sorted((REPO / package).glob("*.py")):
            yield path, path.read_text(encoding="utf-8")


def test_no_class_or_function_is_too_long():
    too_long = []
    for path, text in sources():
        for node in ast.walk(ast.parse(text)):
            limit = (MAX_CLASS_LINES if isinstance(node, ast.ClassDef) else
                     MAX_FUNCTION_LINES if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) else None)
            if limit and node.end_lineno - node.lineno + 1 > limit:
                too_long.append(f"{path.relative_to(REPO)}:{node.lineno} {node.name} "
                                f"({node.end_lineno - node.lineno + 1} lines)")
    assert not too_long, too_long


def test_each_search_option_is_spelled_in_at_most_three_files():
    texts = {path: text for path, text in sources()}
    spread = {}
    for name in SearchOptions.param_names():   # the options every face takes
        if "_" not in name:
            continue   # "path", "mode", "limit" are everyday words in any file; the compound names are not
        files = [p.relative_to(REPO).as_posix() for p, t in texts.items() if name in t]
        if len(files) > MAX_FILES_PER_OPTION:
            spread[name] = files
    assert not spread, spread
