"""Terminal hyperlinks (OSC 8): a path printed on a terminal that opens the note.

``ESC ] 8 ; ; URI ESC \\`` TEXT ``ESC ] 8 ; ; ESC \\``, as iTerm2, VTE (GNOME
Terminal, Tilix), kitty, WezTerm, foot, Konsole, Windows Terminal and
Alacritty show it (a terminal that does not know it shows TEXT alone). Only
where colours are on: click strips colour codes from a pipe but not these,
so a caller decides, never click.

The URI holds bytes 32-126 only (the spec's rule): the path is
percent-encoded, so an ESC, BEL or newline in a file name is ``%1B``,
``%07``, ``%0A`` inside the link and cannot end it early; the text is the
``printable`` path the caller already escaped.
"""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import quote

if TYPE_CHECKING:
    from indexer.config import VaultConfig

_OSC8 = "\x1b]8;;"
_ST = "\x1b\\"


def hyperlink(text: str, uri: str | None) -> str:
    """``text`` as a link to ``uri`` (as it is without a URI, or with one a
    link cannot carry)."""
    if not uri or not all(" " <= c <= "~" for c in uri):
        return text
    return f"{_OSC8}{uri}{_ST}{text}{_OSC8}{_ST}"


@cache
def _host() -> str:
    # The spec asks for the host in a file URI, so that a terminal can tell a
    # file of this machine from one of a machine it reached over ssh (VTE and
    # kitty open the first and refuse or ask about the second).
    return quote(socket.gethostname(), safe="")


def file_uri(path: Path) -> str:
    """``file://HOST/absolute/path``, each byte of the file name that is not
    unreserved percent-encoded (the name's own bytes, as the OS has them)."""
    if sys.platform == "win32":   # file:///C:/...: Windows Terminal's form
        return path.absolute().as_uri()
    return f"file://{_host()}{quote(os.fsencode(path.absolute()), safe='/')}"


def link_target(config: VaultConfig, path: str) -> str | None:
    """What the vault-relative ``path`` links to on a terminal, as the vault's
    ``hyperlinks`` setting says: the file, the note in Obsidian, or nothing."""
    if config.hyperlinks == "obsidian":
        from .search.rows import obsidian_uri

        return obsidian_uri(config.vault_name, path)
    if config.hyperlinks == "file":
        return file_uri(config.vault / path)
    return None


Linker = Callable[[str, str | None], str | None]


def linker(configs: dict[str | None, VaultConfig]) -> Linker:
    """(path, vault name) -> its link: ``configs`` maps each vault's name, and
    None for the vault a result that names none comes from."""
    def link(path: str, vault: str | None) -> str | None:
        config = configs.get(vault)
        return link_target(config, path) if config is not None else None
    return link
