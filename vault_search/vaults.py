"""Several vaults behind one resident process (``serve --vault A --vault B``).

Each vault keeps its own ``SearchService`` (index, watcher, reader); this set
routes a request to the vault it names (by name or path) and, for a search
that names none, asks every vault and merges the lists by ``relevance`` (the
one score that means the same across queries and indexes; docs/ranking.md,
"Relevance"), keeping each vault's own order among equals. With more than one
vault every result names its vault (``vault``), and so does every status
(``vault_name``: the short name a request names a vault by; the search page
puts it in its address). A merged search asked to explain itself explains
each result by its own vault's trace (``VaultsExplain``). A single vault is a
set of one: the answers are exactly those of its service. The whole notes a
resident face's answer carries (``full``) stop at MAX_FULL_TEXT_BYTES
(``cap_full_texts``).
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Sequence
from dataclasses import MISSING, Field, dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any

from indexer.errors import UsageValueError

from .hyperlinks import Linker, linker
from .options import SearchOptions
from .results import (
    Explain,
    ExplainRank,
    FolderListing,
    IndexStatus,
    NoteLinks,
    NoteText,
    NoteTexts,
    SearchResponse,
    SearchResult,
    TagCounts,
    Timeline,
)
from .service import SearchService

if TYPE_CHECKING:
    from indexer.config import VaultConfig

    from .querylog import QueryLog
    from .rerank import RerankSettings
    from .similar import SimilarResponse


# full=1's whole notes, all results together: far more than any agent's
# context holds, yet one request asking for 1000 large notes built and sent a
# 95 MB answer (seconds of the server's time, and the client's memory).
MAX_FULL_TEXT_BYTES = 4 << 20


class WrongVaultError(UsageValueError):
    """A request named a vault this server does not serve (HTTP 409)."""


@dataclass
class VaultStatus(IndexStatus):
    """A served vault's status with the name requests know it by (``vault``
    is its folder)."""
    vault_name: str = ""


@dataclass
class VaultRank(ExplainRank):
    """An explained result of a merged search, with the vault whose trace it is."""
    vault: str = ""


@dataclass
class VaultsExplain(Explain):
    """``explain`` of a search over several vaults. Each vault ran its own
    search (its own words, lists and weights), so ``vaults`` holds each one's
    explain whole, and ``ranks`` each merged result's own row, in the merged
    order, naming its vault. The fields above them hold what the vaults agree
    on, or the union of what they searched for: ``terms``, and ``fts_match``
    and ``translated_match`` as one OR of the vaults' own; a setting on which
    they differ (weights, k, coverage) is left empty there, and so are the
    name matches (paths of different vaults): read them per vault."""
    vaults: dict[str, Explain] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {**super().to_dict(), "vaults": {name: e.to_dict() for name, e in self.vaults.items()}}


class VaultSet:
    def __init__(self, services: Sequence[SearchService]):
        if not services:
            raise ValueError("a VaultSet needs at least one vault")
        self.services = list(services)
        check_names([s.config.vault_name for s in self.services])

    @property
    def several(self) -> bool:
        return len(self.services) > 1

    @property
    def names(self) -> list[str]:
        return [s.config.vault_name for s in self.services]

    def pick(self, vault: str | None) -> SearchService:
        """The vault a request names (its name or its folder), or the only one."""
        if vault is None:
            if self.several:
                raise UsageValueError(f"this server serves {len(self.services)} vaults; name one with vault "
                                      f"({', '.join(self.names)})")
            return self.services[0]
        for service in self.services:
            if vault in (service.config.vault_name, str(service.config.vault)):
                return service
        raise WrongVaultError(f"no vault named '{vault}' here; this server serves {', '.join(self.names)}")

    def without_paths(self, message: str) -> str:
        """``message`` (an error for a client over the network) with each
        vault's folder written as its name, each index folder as ``<index
        of NAME>`` and the home folder as ``~``: a caller learns which vault,
        never where it lies on the machine."""
        named = [(os.path.expanduser("~"), "~")]
        for service in self.services:
            config, name = service.config, service.config.vault_name
            for folder, shown in ((config.index_dir, f"<index of {name}>"), (config.vault, name)):
                named += [(str(folder), shown), (os.path.realpath(folder), shown)]
        for text, shown in sorted(set(named), key=lambda pair: -len(pair[0])):
            if len(text) > 1:   # a whole folder: ~/notes is not the start of ~/notes-old
                message = re.sub(re.escape(text) + r"(?![\w.\-])", shown.replace("\\", r"\\"), message)
        return message

    def search(self, query: str, options: SearchOptions, vault: str | None = None, *,
               rerank_settings: RerankSettings | None = None, log: bool = True) -> SearchResponse:
        """One vault's search (exactly its service's answer), or, with several
        vaults and none named, every vault's, merged, each result naming its vault."""
        if vault is not None or not self.several:
            return self.pick(vault).search(query, options, rerank_settings=rerank_settings, log=log)
        t0 = time.perf_counter()
        answers = []
        for service in self.services:
            response = service.search(query, options, rerank_settings=rerank_settings, log=log)
            for r in response.results:
                r.vault = service.config.vault_name
            answers.append((service.config.vault_name, response))
        merged = merge(answers, options.limit, (time.perf_counter() - t0) * 1000)
        if merged.token_budget:   # a context pack: each vault packed its own to the whole budget
            within_budget(merged, self.services[0], merged.token_budget)
        return merged

    def linker(self, vault: str | None = None) -> Linker:
        """What each result's path links to on a terminal (hyperlinks.py), by
        its own vault's settings; a result naming no vault is ``vault``'s."""
        configs: dict[str | None, VaultConfig] = {s.config.vault_name: s.config for s in self.services}
        if vault is not None or not self.several:
            configs[None] = self.pick(vault).config
        return linker(configs)

    def get(self, path: str, start: int | None = None, end: int | None = None, vault: str | None = None,
            follow: bool = True) -> NoteText:
        return self.pick(vault).get(path, start, end, follow)

    def multi_get(self, patterns: list[str], max_bytes: int | None = None, max_lines: int | None = None,
                  vault: str | None = None, follow: bool = True) -> NoteTexts:
        return self.pick(vault).multi_get(patterns, max_bytes, max_lines, follow)

    def ls(self, folder: str | None = None, vault: str | None = None) -> FolderListing:
        return self.pick(vault).ls(folder)

    def similar(self, note: str | None = None, text: str | None = None, limit: int = 10,
                vault: str | None = None) -> SimilarResponse:
        return self.pick(vault).similar(note, text, limit)

    def query_log(self, limit: int = 20, misses: bool = False, vault: str | None = None) -> QueryLog:
        return self.pick(vault).query_log(limit, misses)

    def timeline(self, folder: str | None = None, after: str | None = None, before: str | None = None,
                 vault: str | None = None) -> Timeline:
        return self.pick(vault).timeline(folder, after, before)

    def links(self, path: str, vault: str | None = None) -> NoteLinks:
        return self.pick(vault).links(path)

    def tags(self, limit: int | None = None, vault: str | None = None) -> TagCounts:
        return self.pick(vault).tags(limit)

    def status(self, vault: str | None = None) -> VaultStatus | list[VaultStatus]:
        """One vault's status, or (several served, none named) each vault's."""
        if vault is None and self.several:
            return [named_status(s) for s in self.services]
        return named_status(self.pick(vault))

    def close(self) -> None:
        for service in self.services:
            service.close()


def named_status(service: SearchService) -> VaultStatus:
    status = service.status()
    return VaultStatus(**{f.name: getattr(status, f.name) for f in fields(status)},
                       vault_name=service.config.vault_name)


def within_budget(response: SearchResponse, service: SearchService, budget: int) -> None:
    """Each vault packed its own passages to the whole budget: keep the merged
    list's passages, in order, while they fit it together (counted again)."""
    from .pack import counter

    name, count = counter(service.reader)
    kept, used = [], 0
    for r in response.results:
        tokens = count(r.text or "")
        if used + tokens <= budget:
            kept.append(r)
            used += tokens
    left = len(response.results) - len(kept)
    # a vault's "trimmed to fit" names its trimmed passage: gone with it when it is not kept
    shown = [f"{r.vault}: trimmed to fit {budget} tokens: {r.path}:" for r in kept if r.trimmed]
    response.warnings = [w for w in response.warnings
                         if ": trimmed to fit " not in w or any(w.startswith(t) for t in shown)]
    if left:
        response.warnings.append(f"{left} more passages did not fit in {budget} tokens")
    response.results, response.tokens, response.token_budget, response.token_counter = kept, used, budget, name


def check_names(names: list[str]) -> None:
    """Refuse two vaults of one name (a result could not say which it came from)."""
    doubles = sorted({n for n in names if names.count(n) > 1})
    if doubles:
        raise UsageValueError(f"two vaults are named {doubles[0]!r}; give one another name "
                              "(vault_name in its .vault-search.toml)")


def merge(answers: list[tuple[str, SearchResponse]], limit: int, took_ms: float) -> SearchResponse:
    """Every vault's hits in one list: by relevance, then by the place each
    had in its own vault's list; related notes after the hits; each vault's
    warnings prefixed with its name."""
    hits: list[tuple[int, SearchResult]] = []
    related: list[tuple[int, SearchResult]] = []
    for _, answer in answers:
        for rank, r in enumerate(answer.results):
            (related if r.related else hits).append((rank, r))
    hits.sort(key=lambda pair: (-(pair[1].relevance or 0.0), pair[0]))
    kept = [r for _, r in hits[:limit]]
    paths = {(r.vault, r.path) for r in kept}
    kept += [r for _, r in related if (r.vault, r.related_to) in paths]
    warnings = [f"{name}: {w}" for name, a in answers for w in a.warnings]
    modes = [a.mode for _, a in answers]
    mode = max(set(modes), key=modes.count)
    warnings += [f"{name}: searched in {a.mode} mode (not {mode})" for name, a in answers if a.mode != mode]
    first = answers[0][1]
    guessed = [a.guesses for _, a in answers if a.results]
    return replace(first, mode=mode, took_ms=round(took_ms, 2), warnings=warnings, results=kept,
                   guesses=bool(kept) and bool(guessed) and all(guessed),
                   explain=merged_explain(answers, kept),
                   terms=list(dict.fromkeys(t for _, a in answers for t in a.terms)),
                   # A word each vault knew differently: the first vault's guess (each explain has its own).
                   corrections={w: to for _, a in reversed(answers) for w, to in a.corrections.items()})


def merged_explain(answers: list[tuple[str, SearchResponse]], kept: list[SearchResult]) -> VaultsExplain | None:
    """The vaults' explains as one (``VaultsExplain``); None when none was asked for."""
    explains = {name: a.explain for name, a in answers if a.explain is not None}
    if not explains:
        return None
    every = list(explains.values())

    def agreed(name: str, empty):
        values = [getattr(e, name) for e in every]
        return values[0] if all(v == values[0] for v in values) else empty

    def either(name: str) -> str | None:
        """The vaults' MATCH expressions as one OR (each in parentheses: it may hold more than ORs)."""
        matches = list(dict.fromkeys(m for e in every if (m := getattr(e, name))))
        return matches[0] if len(matches) == 1 else " OR ".join(f"({m})" for m in matches) or None

    rows = {(name, r.path): r for name, e in explains.items() for r in e.ranks}
    ranks: list[ExplainRank] = [VaultRank(**{f.name: getattr(row, f.name) for f in fields(row)}, vault=r.vault or "")
                                for r in kept if (row := rows.get((r.vault or "", r.path))) is not None]
    # Every field of Explain, so a field added there is merged here: a MATCH
    # as one OR, the rest where the vaults agree (else the field's empty value).
    own = {"ranks": ranks, "terms": list(dict.fromkeys(t for e in every for t in e.terms)),
           "name_matches": {}, "weights": agreed("weights", {}), "fts_match": either("fts_match") or ""}
    merged: dict[str, Any] = {f.name: own[f.name] if f.name in own
              else either(f.name) if f.name.endswith("_match")
              else agreed(f.name, empty_value(f)) for f in fields(Explain)}
    return VaultsExplain(**merged, vaults=explains)


def empty_value(f: Field):
    """What an ``Explain`` field holds when the vaults disagree on it."""
    if f.default_factory is not MISSING:
        return f.default_factory()
    return None if f.default is MISSING else f.default


def cap_full_texts(response: SearchResponse, limit: int = MAX_FULL_TEXT_BYTES) -> None:
    """full=1: the results' whole notes, in rank order, until ``limit`` bytes
    (UTF-8) in all; the note that crosses it is cut after its last whole line
    that fits, the later ones carry no text, and a warning says which."""
    used, cut, dropped = 0, None, []
    for r in response.results:
        if r.text is None:
            continue
        if cut is not None or used >= limit:
            r.text = None
            dropped.append(r.path)
            continue
        size = len(r.text.encode("utf-8", "surrogatepass"))
        if used + size <= limit:
            used += size
            continue
        room, kept = limit - used, []
        for line in r.text.split("\n"):
            room -= len(line.encode("utf-8", "surrogatepass")) + 1
            if room < 0:
                break
            kept.append(line)
        r.text = "\n".join(kept)
        cut = (r.path, len(kept))
        used = limit
    if cut is None and not dropped:
        return
    said = f"{cut[0]} is cut after line {cut[1]}" if cut else ""
    if dropped:
        named = ", ".join(dropped[:3]) + (f" and {len(dropped) - 3} more" if len(dropped) > 3 else "")
        said += ("; " if said else "") + f"no text for {named}"
    response.warnings.append(f"full: whole texts stop at {limit / (1 << 20):g} MB per answer: {said} "
                             "(read them with get)")
