"""Terminal rendering of results (colours only reach a terminal: click
strips ANSI codes when output is piped).

Everything taken from a note (path, title, heading, snippet, tags, warning
text) goes through ``printable`` first: a file name with a newline would
split a ``--format paths`` record in two, and an ESC sequence in a title
could retitle, clear or spoof the user's terminal.
"""

from __future__ import annotations

import json
import re

import click

from .hyperlinks import Linker, hyperlink
from .results import Explain, FolderListing, IndexStatus, NoteLinks, NoteTexts, SearchResponse, TagCounts, Timeline
from .snippet import highlight_spans

# C0 controls, DEL and C1 controls (Unicode category Cc): all the characters a
# terminal acts on rather than shows.
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(m: re.Match) -> str:
    c = m.group()
    return _NAMED.get(c) or f"\\x{ord(c):02x}"


def printable(text: str, keep: str = "") -> str:
    """``text`` with every control character shown escaped (``\\n``,
    ``\\x1b``), except those in ``keep``."""
    if not keep:
        return _CONTROL_RE.sub(_escape, text)
    return _CONTROL_RE.sub(lambda m: m.group() if m.group() in keep else _escape(m), text)


def plural(n: int, word: str, many: str | None = None) -> str:
    """``1 note``, ``2 notes`` (``many``: the plural when it is not word + s)."""
    return f"{n} {word if n == 1 else many or word + 's'}"


def highlight(text: str, terms: list[str]) -> str:
    out, pos = [], 0
    for start, end in highlight_spans(text, terms):
        out.append(printable(text[pos:start]))
        out.append(click.style(printable(text[start:end]), fg="yellow", bold=True))
        pos = end
    out.append(printable(text[pos:]))
    return "".join(out)


def cli_output(response: SearchResponse, fmt: str, color: bool = True, link: Linker | None = None) -> str:
    """Exactly what `vault-search search --format FMT` prints ("text" or
    "json"), newline included; without ``color`` as click prints it to a
    pipe (ANSI codes stripped). With ``color`` and ``link``, each hit's path
    is a terminal hyperlink (hyperlinks.py) to what ``link`` says."""
    if fmt == "json":
        out = json.dumps(response.to_dict(), ensure_ascii=False, indent=2)
    else:
        out = render_search(response, link if color else None)
        out = out if color else click.unstyle(out)
    return out + "\n"


def render_search(response: SearchResponse, link: Linker | None = None) -> str:
    """The text a person reads; ``link``: (path, vault) -> what the hit's
    path links to (OSC 8), only for a terminal with colours on."""
    lines = []
    for warning in response.warnings:
        lines.append(click.style(f"warning: {printable(warning)}", fg="red"))
    if response.corrections:
        lines.append(click.style("searched " + ", ".join(f"{printable(word)} as {printable(to)}"
                                                         for word, to in response.corrections.items()), dim=True))
    if not response.results:
        lines.append(f"no results for {response.query!r} ({response.mode}, {response.took_ms:.0f} ms)")
    hits = [r for r in response.results if not r.related]
    for i, r in enumerate(response.results, 1):
        if r.related and (i == 1 or not response.results[i - 2].related):
            lines.append(click.style("related (one link away from the hits above):", bold=True))
        where = (f"{printable(r.vault)}: " if r.vault else "") + f"{printable(r.path)}:{r.start_line}-{r.end_line}"
        where = click.style(where, fg="cyan")
        if link is not None:
            where = hyperlink(where, link(r.path, r.vault))
        mark = (click.style(f"  ↔ {printable(r.related_to or '')}", fg="blue") if r.related
                else click.style(f"{r.score:.3f}", dim=True))
        when = (click.style(f"  {printable(r.date.replace('T', ' '))}", dim=True) if r.date and "T" in r.date
                else "")
        lines.append(f"{click.style(f'{i:>2}.', dim=True)} {click.style(printable(r.title), bold=True)}  "
                     f"{where}  {mark}{when}"
                     + (click.style("  [stale]", fg="red") if r.stale else ""))
        if r.context:
            lines.append(click.style(f"    context: {printable(r.context)}", dim=True))
        if r.heading:
            lines.append(f"    {click.style(printable(r.heading), fg='green')}")
        if r.snippet:
            lines.append(f"    {highlight(r.snippet, response.terms)}")
        if r.tags:
            lines.append("    " + click.style(printable(" ".join("#" + t for t in r.tags[:8])), fg="magenta"))
        if r.text is not None:
            label = f"lines {r.start_line}-{r.end_line}" if response.tokens is not None else "the whole note"
            label += ", trimmed to fit" if r.trimmed else ""
            lines.append(click.style(f"    ┌─ {label}", dim=True))
            lines.extend("    │ " + printable(line, keep="\t") for line in r.text.split("\n"))
            lines.append(click.style("    └─", dim=True))
    if response.results:
        extra = len(response.results) - len(hits)
        lines.append(click.style(plural(len(hits), "result")
                                 + (f" + {extra} related" if extra else "")
                                 + f" ({response.mode}, {response.took_ms:.0f} ms)"
                                 + (f"; {response.tokens} of {response.token_budget} tokens ({response.token_counter})"
                                    if response.tokens is not None else ""), dim=True))
    if response.explain:
        lines += render_explain(response.explain, response.mode)
    return "\n".join(lines)


# What each list's score is, where it is not just a score.
SCORE_NAMES = {"fts": "bm25", "translated": "bm25", "vector": "cos", "title": "name alike"}


def render_explain(ex: Explain, mode: str) -> list[str]:
    """A search's ``Explain`` as dim lines: the query's settings, then each
    result with its rank and score in every list that voted for it."""
    lines = [click.style(f"FTS MATCH: {ex.fts_match}", dim=True)]
    if ex.syntax:
        parts = [f"{name} {ex.syntax[name]}" for name in ("phrases", "excluded", "paths", "tags") if ex.syntax[name]]
        lines.append(click.style(f"operators: {', '.join(parts)}; ranked by {ex.syntax['text']!r}", dim=True))
    for word, how in ex.corrections.items():
        lines.append(click.style(f"not in the index: {word} -> {how}", dim=True))
    if mode == "hybrid":
        lines.append(click.style(f"RRF k={ex.rrf_k}, weights {ex.weights} "
                                 f"(query words found in the index: {ex.term_coverage})", dim=True))
        if ex.translated_match:
            why = (f"a question in a script the notes mostly are not (Han share {ex.notes_han_share})"
                   if ex.foreign_query else "most of its words are not in the index")
            lines.append(click.style(f"translated ({why}): {ex.translated_match}", dim=True))
            if ex.untranslated_coverage is not None:
                lines.append(click.style(f"its words found in the index and left untranslated: "
                                         f"{ex.untranslated_coverage}", dim=True))
            if ex.translated_text:
                lines.append(click.style(f"embedded beside the query for the vector list: {ex.translated_text}",
                                         dim=True))
    for row in ex.ranks:
        parts = [f"{name} #{rank}" + (f" ({SCORE_NAMES.get(name, 'score')} {row.scores[name]})"
                                      if name in row.scores else "") for name, rank in row.ranks.items()]
        parts.append(f"fused {row.fused_score:.5f}")
        if row.rerank_score is not None:
            parts.append(f"judge {row.rerank_score:g}/10, blended {row.blended_score:.4f}")
        if row.name_match:
            parts.append(f"query is its {row.name_match}: ranked first")
        if row.recency_factor is not None:
            aged = f"dated {row.date}" if row.date else f"undated, modified {row.modified}"
            parts.append(f"{aged}, recency x{row.recency_factor:.3f}")
        if row.boost_factor is not None:
            shown = "missing" if row.boost_value is None else f"{row.boost_value:g}"
            parts.append(f"boost {shown} x{row.boost_factor:.3f}")
        lines.append(click.style(f"  {printable(row.path)}: " + ", ".join(parts), dim=True))
    return lines


CSV_COLUMNS = ("rank", "path", "start_line", "end_line", "title", "heading", "score", "relevance", "match", "date",
               "tags", "stale", "related_to", "snippet", "uri")


def render_csv(response: SearchResponse) -> str:
    """One row per result under a header (RFC 4180, CRLF line ends as the
    csv module writes them): tags joined by spaces, ``text`` last with whole notes."""
    import csv
    import io

    full = any(r.text is not None for r in response.results)
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(CSV_COLUMNS + (("text",) if full else ()))
    for i, r in enumerate(response.results, 1):
        row = [i, r.path, r.start_line, r.end_line, r.title, r.heading, r.score,
               "" if r.relevance is None else r.relevance, r.match or "", r.date or "", " ".join(r.tags),
               "true" if r.stale else "false", r.related_to or "", r.snippet, r.uri]
        writer.writerow(row + ([r.text or ""] if full else []))
    return out.getvalue()


def render_paths(response: SearchResponse) -> str:
    """One vault path per line (each note once), for pipes and xargs; a
    control character in a path is shown escaped, so a name never spans two
    lines (``render_paths0`` gives the exact names). Best guesses
    (``response.guesses``) are no hits: a pipe gets none of them."""
    if response.guesses:
        return ""
    # The backslash too, or a name holding a newline and one holding "\\n"
    # would print the same (Obsidian allows no backslash in a note's name).
    return "\n".join(printable(p.replace("\\", "\\\\")) for p in dict.fromkeys(r.path for r in response.results))


def render_paths0(response: SearchResponse) -> bytes:
    """Each note's exact path once, NUL-terminated (``find -print0`` style),
    for ``xargs -0``; none for best guesses, as ``render_paths``."""
    if response.guesses:
        return b""
    return b"".join(p.encode("utf-8", "surrogateescape") + b"\0"
                    for p in dict.fromkeys(r.path for r in response.results))


# What a snippet must not turn into in the note it is pasted into: a tag
# (#), a link or embed ([ ]), HTML (< >), an Obsidian comment (%%, which
# would hide the rest of the note), code, emphasis, highlight, strike-through,
# math, a block id (^) or, at its start, a list item. Marks that only pair
# up when doubled (~~ == %%) or at a word's edge (_) are escaped only there,
# so snake_case and a = b stay as they are.
_MARKDOWN_SPECIAL_RE = re.compile(r"[\\`*\[\]<>#$^]|(?<![^\W_])_|_(?![^\W_])|~(?=~)|(?<=~)~|=(?==)|(?<==)=|"
                                  r"%(?=%)|(?<=%)%|&(?=#?\w+;)|^[-+]")
_ORDERED_ITEM_RE = re.compile(r"^([0-9]{1,9})([.)])")   # "1. " would start a list


def markdown_text(text: str) -> str:
    """``text`` as Markdown that shows exactly it, and is no more than text."""
    return _ORDERED_ITEM_RE.sub(r"\1\\\2", _MARKDOWN_SPECIAL_RE.sub(lambda m: "\\" + m.group(), text))


def heading_anchor(heading: str | None, title: str | None) -> str:
    """The ``#Heading`` part of an Obsidian link to a hit's section: its own
    (innermost) heading, without the characters a link target cannot hold;
    "" for the note's top (no heading, or the heading is the title)."""
    inner = (heading or "").rsplit(" > ", 1)[-1]
    inner = " ".join(_LINK_UNSAFE_RE.sub(" ", inner).split())
    return f"#{inner}" if inner and inner != (title or "").strip() else ""


# What ends or splits an Obsidian link target: [[a#b|c]] and ^block ids.
_LINK_UNSAFE_RE = re.compile(r"[\[\]|#^]")


def render_markdown(response: SearchResponse) -> str:
    """A Markdown list: an Obsidian link to the hit's section, the lines, and
    the snippet, per result. The snippet is the reading view's text, escaped
    (``markdown_text``): a tag, link or HTML in it stays text in the note it
    is pasted into."""
    lines = []
    for r in response.results:
        path, title = printable(r.path), printable(r.title)
        target = (path[:-3] if path.endswith(".md") else path) + heading_anchor(printable(r.heading or ""), title)
        label = f"[[{target}|{title}]]" if title and title != target.rsplit("/", 1)[-1] else f"[[{target}]]"
        extra = " (related)" if r.related else ""
        extra += " (stale)" if r.stale else ""
        lines.append(f"- {label} — [{path}:{r.start_line}-{r.end_line}]({r.uri}){extra}")
        if r.snippet:
            lines.append(f"  > {printable(markdown_text(' '.join(r.snippet.split())))}")
    return "\n".join(lines)


def render_status(s: IndexStatus) -> str:
    import datetime as dt

    last = "never"
    if s.last_sync:
        when = dt.datetime.fromtimestamp(s.last_sync["at"]).strftime("%Y-%m-%d %H:%M:%S")
        last = (f"{when} ({s.last_sync['seconds']} s: +{s.last_sync['added']} ~{s.last_sync['updated']} "
                f"-{s.last_sync['deleted']}, {s.last_sync['unchanged']} unchanged)")
    rows = [
        ("vault", printable(s.vault)), ("index", printable(s.index_dir)),
        ("settings", printable(s.settings_file or "none (.vault-search.toml at the vault root; see `config`)")),
        ("notes", f"{s.notes} ({s.empty_notes} empty, {s.notes_with_warnings} with warnings)"),
        ("chunks", str(s.chunks)), ("tags", str(s.tags)),
        ("links", f"{s.links} to notes, {s.unresolved_links} unresolved"),
        ("skipped files", str(s.skipped_files)), ("jieba words", f"{s.dictionary_words} from the vault"),
        ("model", s.model or "none (keyword only)"),
        ("embedded", f"{plural(s.embedded_chunks, 'chunk')}, {s.waiting_chunks} waiting"
                     f"{' (being embedded now)' if s.embedding_now else ''}" if s.model else "-"),
        ("vectors file", printable(s.vectors or "-")),
        ("size", f"{s.db_bytes / 1048576:.1f} MB"), ("last sync", last),
        ("versions", f"vault-search {s.tool_version}, schema {s.schema_version}, "
                     f"segmenter {s.segmenter_version}"),
    ]
    out = [f"{click.style(k + ':', bold=True):<24} {v}" for k, v in rows]
    if s.warnings:
        out.append(click.style("warnings:", bold=True))
        out += [f"  {printable(w['path'])}: {printable(w['message'])}" for w in s.warnings]
    return "\n".join(out)


def linked(text: str, path: str, link: Linker | None) -> str:
    """``text`` (a ``path`` shown) as a terminal hyperlink, where ``link`` is given (colours on)."""
    return text if link is None else hyperlink(text, link(path, None))


def render_links(links: NoteLinks, link_to: Linker | None = None) -> str:
    """A note's outlinks (and where each resolves), backlinks and unresolved
    links; with ``link_to`` each note's path is a terminal hyperlink."""
    def shown(link) -> str:
        text = link.target + link.subpath
        text = ("!" if link.embed else "") + f"[[{text}" + (f"|{link.alias}" if link.alias else "") + "]]"
        return printable(text)

    lines = [linked(click.style(printable(links.path), bold=True), links.path, link_to),
             click.style(f"outlinks ({len(links.outlinks)}):", bold=True)]
    for link in links.outlinks:
        where = (linked(printable(link.path), link.path, link_to) if link.path else
                 {"attachment": "(attachment)", "self": "(this note)"}.get(link.kind, click.style("unresolved",
                                                                                                  fg="red")))
        lines.append(f"  {link.line:>4}  {shown(link)} → {where}")
    lines.append(click.style(f"backlinks ({len(links.backlinks)}):", bold=True))
    lines += [f"  {linked(f'{printable(link.path)}:{link.line}', link.path, link_to)}  {shown(link)}"
              for link in links.backlinks]
    unresolved = links.unresolved
    lines.append(click.style(f"unresolved ({len(unresolved)}):", bold=True))
    lines += [f"  {link.line:>4}  {shown(link)}" for link in unresolved]
    return "\n".join(lines)


def render_tags(tags: TagCounts) -> str:
    """One tag a line, with its note count ("" when there are none)."""
    return "\n".join(f"{t.notes:>6}  #{printable(t.tag)}" for t in tags.tags)


def render_notes(texts: NoteTexts) -> str:
    """``multi-get``: each note under a ``==> path:start-end (of N lines) <==`` line, then what was cut."""
    out = []
    for note in texts.notes:
        out.append(f"==> {printable(note.path)}:{note.start_line}-{note.end_line} "
                   f"(of {note.total_lines} lines) <==")
        out.append(printable(note.text, keep="\n\t"))
        out.append("")
    if texts.cut:
        out.append("left out or cut short (--max-bytes, --max-lines):")
        out.extend(f"  {printable(c.path)}  {c.bytes} bytes, {c.reason}" for c in texts.cut)
    if texts.missing:
        out.append("not found (the notes above were read):")
        out.extend(f"  {printable(m.error)}" for m in texts.missing)
    return "\n".join(out).rstrip("\n")


def render_similar(response, link: Linker | None = None) -> str:
    """``similar``: one note a line (similarity, word overlap, its verdict), its
    closest lines and snippet; with ``link`` each path is a terminal hyperlink."""
    lines = []
    for w in response.warnings:
        lines.append(click.style(f"warning: {printable(w)}", fg="red"))
    for i, r in enumerate(response.results, 1):
        cos = "-" if r.similarity is None else f"{r.similarity:.3f}"
        mark = click.style("  near-duplicate: update it", fg="red", bold=True) if r.near_duplicate else \
            "  related: link it" if r.verdict == "related" else ""
        where = click.style(f"{printable(r.path)}:{r.start_line}-{r.end_line}", fg="cyan")
        lines.append(f"{i:>2}. {click.style(printable(r.title), bold=True)}  {linked(where, r.path, link)}  "
                     f"similarity {cos}, words {r.overlap:.2f}{mark}")
        if r.snippet:
            lines.append(f"    {printable(r.snippet)}")
    if response.verdict == "none":
        lines.append(f"nothing clearly like {printable(response.source)}")
    lines.append(click.style(f"like {printable(response.source)} ({response.mode}, key words: "
                             f"{printable(' '.join(response.terms[:8]))}; {response.took_ms:.0f} ms)", dim=True))
    return "\n".join(lines)


def render_log(logged, misses: bool) -> str:
    """``log``: one search a line, newest first: time, mode, results, best relevance, followed, query, top hit."""
    import datetime as dt

    lines = [] if logged.enabled else [click.style(
        "the query log is off: set log_queries = true in .vault-search.toml to keep one", fg="red")]
    for e in logged.entries:
        when = dt.datetime.fromtimestamp(e.at).strftime("%Y-%m-%d %H:%M")
        best = "-" if e.best_relevance is None else f"{e.best_relevance:.2f}"
        state = e.why_missed or ("followed" if e.followed else "")
        top = e.top[0]["path"] if e.top else "nothing"
        lines.append(f"{when}  {e.mode:<6} {e.results:>3} hits  best {best:<4}  {state:<12}  "
                     f"{printable(e.query)!r} -> {printable(top)}")
    if not logged.entries and logged.enabled:
        lines.append("no misses logged" if misses else "no searches logged yet")
    return "\n".join(lines)


def render_timeline(timeline: Timeline, after: str | None = None, before: str | None = None) -> str:
    """``ls --timeline``: one entry a line, oldest first; one line that says
    so when there is none (within ``after``/``before``, as the user gave them)."""
    if not timeline.entries:
        window = (f" from {after} to {before}" if after and before else f" from {after}" if after
                  else f" up to {before}" if before else "")
        return (f"no daily-log entries in {printable(timeline.folder)}{printable(window)} (an entry is a "
                "'### HH:MM - Title' heading in a note dated by its frontmatter or its YYYY-MM-DD file name)")
    return "\n".join(f"{e.at.replace('T', ' ')}  {printable(e.title)}  {printable(e.path)}:{e.start_line}-{e.end_line}"
                     for e in timeline.entries)


def render_listing(listing: FolderListing, link: Linker | None = None) -> str:
    """``ls``: sub-folders (notes under each, newest date), then notes (date,
    title); with ``link`` each note's name is a terminal hyperlink."""
    out = []
    for f in listing.folders:
        plural = "note" if f.notes == 1 else "notes"
        out.append(f"{printable(f.path)}  {f.notes} {plural}" + (f", newest {f.latest}" if f.latest else ""))
    for n in listing.notes:
        name = n.path.rsplit("/", 1)[-1]
        title = "" if n.title == name.rsplit(".", 1)[0] else f"  {printable(n.title)}"
        out.append(f"{linked(printable(name), n.path, link)}  {(n.date or n.modified)[:16]}{title}")
    return "\n".join(out)
