"""The README says what the code does: its endpoint table, MCP tool list and
option lists are checked against the server, the MCP tools and the CLI, so
they cannot drift apart again (as sqlite-utils' tests/test_docs.py does)."""

from __future__ import annotations

import asyncio
import re

import click
import pytest
from conftest import REPO

from vault_search.cli import main
from vault_search.mcp_server import build_server
from vault_search.server import ENDPOINTS

README = (REPO / "README.md").read_text(encoding="utf-8")


def section(title: str) -> str:
    """The README text from the heading that starts with ``title`` to the next heading of its level or above."""
    match = re.search(rf"^(#+) {re.escape(title)}.*$", README, re.M)
    assert match, title
    level = len(match.group(1))
    rest = README[match.end():]
    end = re.search(rf"^#{{1,{level}}} ", rest, re.M)
    return rest[:end.start()] if end else rest


def long_options(command: str) -> set[str]:
    cmd = main.commands[command]
    return {opt for p in cmd.params if isinstance(p, click.Option) for opt in p.opts if opt.startswith("--")} - {
        "--help"}


def documented_options(text: str) -> set[str]:
    """Options named at the start of a table row or bullet (``| `--x` |``, ``- `--x`:``)."""
    found = set()
    for line in text.replace("\\|", "/").splitlines():
        head = re.match(r"^\s*(?:\|\s*|- )(`[^|]*?)(?:\||:|\(|$)", line)
        if head:
            found |= options_in(head.group(1))
    return found


def options_in(text: str) -> set[str]:
    """``--long`` options inside the backticked spans of ``text``."""
    return {opt for span in re.findall(r"`([^`]*)`", text) for opt in re.findall(r"(?<![\w-])(--[a-z0-9][a-z0-9-]*)", span)}


@pytest.mark.parametrize("command,title", [
    ("search", "`vault-search search QUERY`"),
    ("index", "`vault-search index`"),
    ("serve", "`vault-search serve`"),
    ("watch", "`vault-search watch`"),
])
def test_every_option_is_documented_and_every_documented_option_exists(command, title):
    text = section(title)
    documented = documented_options(text) if command != "watch" else options_in(text.split("\n\n")[2])
    assert documented == long_options(command), (sorted(documented - long_options(command)),
                                                 sorted(long_options(command) - documented))


def test_endpoint_table_matches_the_server():
    rows = re.findall(r"^\| `GET (/[\w-]+)` \|([^|]*)\|", README, re.M)
    assert {endpoint for endpoint, _ in rows} == set(ENDPOINTS)
    for endpoint, params in rows:
        assert set(re.findall(r"`(\w+)`", params)) == set(ENDPOINTS[endpoint]), endpoint


def test_mcp_tool_list_matches_the_tools():
    tools = {t.name: t for t in asyncio.run(build_server(lambda: None).list_tools())}
    listed = dict(re.findall(r"^- `(\w+)\(([^)]*)\)`", section("`vault-search mcp`"), re.M))
    assert set(listed) == set(tools)
    for name, signature in listed.items():
        params = [p.strip() for p in signature.split(",") if p.strip()]
        schema = tools[name].input_schema
        assert [p.rstrip("?") for p in params] == list(schema.get("properties", {})), name
        optional = {p.rstrip("?") for p in params if p.endswith("?")}
        assert optional == set(schema["properties"]) - set(schema.get("required", [])), name


def test_every_command_has_help_and_a_readme_mention():
    for name, cmd in main.commands.items():
        assert (cmd.help or "").strip(), name
        assert f"vault-search {name}" in README or f"`{name}`" in README, name
