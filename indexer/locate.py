"""Where a vault's index lives, and which vault a folder lies in: with ``os``
alone, so the thin client (``vault_search.fast``) finds a running server
without paying for pathlib, hashlib's OpenSSL or the settings reader.
``indexer.config`` builds on these; they are the one implementation.
"""

from __future__ import annotations

import os
import sys

CONFIG_FILE = ".vault-search.toml"
INDEX_DB = "index.db"   # indexer.store.DB_NAME (not imported: this module stays light)
CEILING_ENV = "VAULT_SEARCH_CEILING"   # folders the search for the vault never reaches
TRUSTED_ENV = "VAULT_SEARCH_TRUSTED"   # folders of other users the search for the vault may use ("*": all)

try:   # CPython's own SHA-1, without loading OpenSSL as hashlib does
    from _sha1 import sha1
except ImportError:   # pragma: no cover - a Python built without it
    from hashlib import sha1


def safe_name(name: str) -> str:
    """``name`` with each run of characters other than word characters, ``.``
    and ``-`` turned into one ``_`` (``re.sub(r"[^\\w.-]+", "_", name)``: a
    word character is what ``str.isalnum`` accepts, or ``_``), stripped of
    leading and trailing ``.`` and ``_``; "vault" when nothing is left."""
    out: list[str] = []
    for ch in name:
        if ch.isalnum() or ch in "_.-":
            out.append(ch)
        elif not out or out[-1] != "\0":
            out.append("\0")
    return "".join(out).replace("\0", "_").strip("._") or "vault"


def default_index_dir(vault: str) -> str:
    """``$XDG_DATA_HOME/vault-search/<vault-name>-<hash of its absolute path>``
    for the resolved vault path ``vault``."""
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    digest = sha1(vault.encode("utf-8", "surrogateescape")).hexdigest()[:10]
    return os.path.join(base, "vault-search", f"{safe_name(os.path.basename(vault))}-{digest}")


def _ceilings() -> set[str]:
    """Folders the walk up never reaches: ``$VAULT_SEARCH_CEILING``'s and the home folder."""
    ceilings = {os.path.realpath(os.path.expanduser(p)) for p in os.environ.get(CEILING_ENV, "").split(os.pathsep)
                if p}
    home = os.path.expanduser("~")
    if home != "~":
        ceilings.add(os.path.realpath(home))
    return ceilings


def _trusted() -> set[str]:
    """``$VAULT_SEARCH_TRUSTED``'s folders (``*``: every folder), resolved."""
    return {p if p == "*" else os.path.realpath(os.path.expanduser(p))
            for p in os.environ.get(TRUSTED_ENV, "").split(os.pathsep) if p}


def foreign_owner(folder: str, trusted: set[str]) -> int | None:
    """The uid of ``folder``'s owner when that is another user and the folder
    is not trusted, else None. A folder whose owner cannot be told counts as
    another user's (uid -1): nothing vouches for it."""
    if not hasattr(os, "getuid") or "*" in trusted or folder in trusted:
        return None   # Windows has no uids to compare
    try:
        uid = os.stat(folder).st_uid
    except OSError:
        return -1
    return None if uid == os.getuid() else uid


def _walk(start: str) -> tuple[list[str], str | None]:
    """``walk_up``'s folders, and the folder of another user it stopped
    below (None: it stopped at the top, the home folder or a ceiling)."""
    ceilings, trusted = _ceilings(), _trusted()
    folders = [start]
    if start in ceilings:
        return folders, None
    folder = start
    while True:
        parent = os.path.dirname(folder)
        if parent == folder or parent in ceilings:
            return folders, None
        if foreign_owner(parent, trusted) is not None:
            return folders, parent
        folders.append(parent)
        folder = parent


def walk_up(start: str) -> list[str]:
    """``start`` (resolved) and the folders above it, stopping below the home
    folder (a stray settings file or index in ``~`` must not make the whole
    home a vault), at ``$VAULT_SEARCH_CEILING`` folders (``:``-separated,
    like git's GIT_CEILING_DIRECTORIES) and below a folder another user owns
    (a ``.obsidian/`` or settings file planted in ``/tmp`` must not become
    the vault, nor its ``log_queries`` be obeyed: git's CVE-2022-24765)
    unless ``$VAULT_SEARCH_TRUSTED`` names it (like git's safe.directory);
    ``start`` itself always counts."""
    return _walk(start)[0]


def marks_a_vault(folder: str) -> bool:
    """``folder`` has ``.obsidian/``, a settings file or an index in the default place."""
    return (os.path.isdir(os.path.join(folder, ".obsidian")) or os.path.isfile(os.path.join(folder, CONFIG_FILE))
            or os.path.isfile(os.path.join(default_index_dir(folder), INDEX_DB)))


_said: set[str] = set()   # the notes nearest_vault has written in this process


def nearest_vault(start: str) -> str:
    """The nearest folder at or above ``start`` (resolved) that marks a vault,
    else ``start`` itself. When the walk stopped at another user's folder
    and that folder, or one above it, would have been the vault, says so
    on stderr (once a process: the thin client and the full CLI both ask)."""
    folders, stop = _walk(start)
    found = next((folder for folder in folders if marks_a_vault(folder)), None)
    if found is not None:
        return found
    if stop is not None:
        note = untrusted_vault_note(stop)
        if note is not None and note not in _said:
            _said.add(note)
            sys.stderr.write(f"vault-search: {note}\n")
    return start


def untrusted_vault_note(stop: str) -> str | None:
    """Why the vault at or above ``stop`` (a folder of another user the walk
    stopped at) is not used, and how to trust it; None when nothing from
    there up (below the home folder and the ceilings) marks a vault."""
    ceilings, trusted = _ceilings(), _trusted()
    blocked: list[tuple[str, int]] = []   # the untrusted folders of others on the way, with their owners
    folder = stop
    while True:
        uid = foreign_owner(folder, trusted)
        if uid is not None:
            blocked.append((folder, uid))
        if marks_a_vault(folder):
            break
        parent = os.path.dirname(folder)
        if parent == folder or parent in ceilings:
            return None
        folder = parent
    if not blocked:   # it changed owner since the walk
        return None
    owner, uid = blocked[-1] if blocked[-1][0] == folder else blocked[0]
    who = "it" if owner == folder else owner
    whose = f"uid {uid}" if uid >= 0 else "uid unknown"
    trust = os.pathsep.join(f for f, _ in blocked)
    return (f"not using {folder} as the vault: {who} belongs to another user ({whose}); "
            f"set {TRUSTED_ENV}={trust} to trust it")


def settings_stamp(vault: str) -> list[int] | None:
    """What identifies the vault's settings file as it is now (None: there is
    none): a server records it when it reads the file, and the thin client
    answers through the server only while it is unchanged."""
    try:
        st = os.stat(os.path.join(vault, CONFIG_FILE))
    except OSError:
        return None
    return [st.st_mtime_ns, st.st_size, st.st_ino, st.st_ctime_ns]
