"""The code's shape, kept: one room per stage (see DESIGN "Layout"). No
function over 60 lines and no class over 250 in `vault_search/` and
`indexer/` (subpackages included); a search option is spelled in at most
three files of the two packages; no import cycle."""

from __future__ import annotations

import ast
import re
from collections import deque
from pathlib import Path

from conftest import REPO

from vault_search.options import SearchOptions

PACKAGES = ("vault_search", "indexer")
MAX_CLASS_LINES = 250
MAX_FUNCTION_LINES = 60
MAX_FILES_PER_OPTION = 3


def sources() -> dict[Path, str]:
    """Every module of the two packages, subpackages included."""
    return {path: path.read_text(encoding="utf-8")
            for package in PACKAGES for path in sorted((REPO / package).rglob("*.py"))}


def test_no_class_or_function_is_too_long():
    too_long = []
    for path, text in sources().items():
        for node in ast.walk(ast.parse(text)):
            limit = (MAX_CLASS_LINES if isinstance(node, ast.ClassDef) else
                     MAX_FUNCTION_LINES if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) else None)
            if limit and node.end_lineno - node.lineno + 1 > limit:
                too_long.append(f"{path.relative_to(REPO).as_posix()}:{node.lineno} {node.name} "
                                f"({node.end_lineno - node.lineno + 1} lines, limit {limit})")
    assert not too_long, too_long


def option_spellings(name: str) -> re.Pattern:
    """A file spells an option as its flag (``--exclude-stale``) or, for a
    compound name, as its snake_case name (``exclude_stale``). A one-word
    name (``path``, ``mode``, ``limit``) is an everyday word in any file, so
    for it only the flag counts."""
    flag = rf"(?<![\w-]){re.escape('--' + name.replace('_', '-'))}(?![\w-])"
    return re.compile(rf"{flag}|(?<!\w){re.escape(name)}(?!\w)" if "_" in name else flag)


def test_option_spellings_are_what_the_rule_counts():
    assert option_spellings("exclude_stale").search('flags = ["--exclude-stale"]')
    assert option_spellings("exclude_stale").search("if options.exclude_stale:")
    assert not option_spellings("min_score").search("hybrid_min_score = 0.15")
    assert option_spellings("tag").search("@click.option('--tag', multiple=True)")
    assert not option_spellings("tag").search("'--tags'") and not option_spellings("tag").search("tag = row[0]")


def test_each_search_option_is_spelled_in_at_most_three_files():
    texts = sources()
    spread = {}
    for name in SearchOptions.param_names():   # the options every face takes
        spelled = option_spellings(name)
        files = [p.relative_to(REPO).as_posix() for p, t in texts.items() if spelled.search(t)]
        if len(files) > MAX_FILES_PER_OPTION:
            spread[name] = files
    assert not spread, spread


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: Path, text: str, modules: set[str]) -> dict[str, int]:
    """The package modules that ``path`` imports, anywhere in it (at the top,
    in functions, under TYPE_CHECKING), each with the line of its first
    import: ``import a.b`` names a.b, ``from a import b`` names a.b when that
    is a module, else a; relative imports are resolved against the module's
    package."""
    name = module_name(path)
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found: dict[str, int] = {}

    def add(target: str, line: int) -> None:
        while target and target not in modules:   # a name inside a module: the module
            target = target.rpartition(".")[0]
        if target and target != name:
            found.setdefault(target, line)

    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(alias.name, node.lineno)
        elif isinstance(node, ast.ImportFrom):
            base = ".".join(package[:len(package) - node.level + 1] + ([node.module] if node.module else [])) \
                if node.level else node.module
            for alias in node.names:
                add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base, node.lineno)
    return found


def import_graph() -> dict[str, dict[str, int]]:
    texts = sources()
    modules = {module_name(p) for p in texts}
    return {module_name(p): imported_modules(p, t, modules) for p, t in texts.items()}


def cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """One shortest cycle through each group of modules that import each
    other (a strongly connected component), as its path a -> b -> a."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[set[str]] = []

    def visit(node: str) -> None:   # Tarjan; the graph is a few dozen modules deep at most
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in graph[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = {stack.pop()}
            while node not in group:
                group.add(stack.pop())
            if len(group) > 1:
                groups.append(group)

    for node in sorted(graph):
        if node not in index:
            visit(node)
    found = []
    for group in groups:
        start = min(group)
        came_from = {start: None}
        queue = deque([start])
        while queue:
            node = queue.popleft()
            if start in graph[node]:   # back at the start: the shortest way round
                path = [node]
                while came_from[path[-1]] is not None:
                    path.append(came_from[path[-1]])
                found.append(path[::-1] + [start])
                break
            for nxt in sorted(graph[node]):
                if nxt in group and nxt not in came_from:
                    came_from[nxt] = node
                    queue.append(nxt)
    return sorted(found)


def test_the_cycle_finder_finds_cycles_and_reports_them_as_paths():
    graph = {"a": {"b": 1}, "b": {"c": 1}, "c": {"a": 1, "d": 1}, "d": {}, "e": {"f": 1}, "f": {"e": 1}}
    assert cycles(graph) == [["a", "b", "c", "a"], ["e", "f", "e"]]
    assert cycles({"a": {"b": 1}, "b": {}}) == []


def test_imports_are_read_anywhere_in_a_module_and_resolved():
    modules = {"pkg", "pkg.a", "pkg.b", "pkg.sub", "pkg.sub.c", "other"}
    text = ("from . import a\nfrom .b import thing\nimport other\n"
            "def f():\n    from .sub.c import g\n    from pkg.sub import c\n    import os\n")
    assert imported_modules(REPO / "pkg" / "x.py", text, modules) == {"pkg.a": 1, "pkg.b": 2, "other": 3,
                                                                     "pkg.sub.c": 5}
    assert imported_modules(REPO / "pkg" / "sub" / "__init__.py", "from . import c\nfrom .. import a\n",
                            modules) == {"pkg.sub.c": 1, "pkg.a": 2}


def test_no_import_cycle():
    graph = import_graph()
    assert len(graph) > 40 and sum(len(imports) for imports in graph.values()) > 100   # the packages were read
    found = cycles(graph)
    where = {" -> ".join(c): [f"{a} -> {b} (line {graph[a][b]})" for a, b in zip(c, c[1:])] for c in found}
    assert not found, where
