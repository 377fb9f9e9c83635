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


def foreign_owner(path: str, trusted: set[str]) -> int | None:
    """The uid of ``path``'s owner when that is another user, else None
    (``trusted`` holds ``*``: nobody is another). A path whose owner cannot
    be told counts as another user's (uid -1): nothing vouches for it."""
    if not hasattr(os, "getuid") or "*" in trusted:
        return None   # Windows has no uids to compare
    try:
        uid = os.lstat(path).st_uid
    except OSError:
        return -1
    return None if uid == os.getuid() else uid


def walk_up(start: str) -> list[str]:
    """``start`` (resolved) and the folders above it, stopping below the home
    folder (a stray settings file or index in ``~`` must not make the whole
    home a vault) and at ``$VAULT_SEARCH_CEILING`` folders (``:``-separated,
    like git's GIT_CEILING_DIRECTORIES); ``start`` itself always counts."""
    ceilings = _ceilings()
    folders = [start]
    if start in ceilings:
        return folders
    folder = start
    while True:
        parent = os.path.dirname(folder)
        if parent == folder or parent in ceilings:
            return folders
        folders.append(parent)
        folder = parent


def marks_a_vault(folder: str) -> bool:
    """``folder`` has ``.obsidian/``, a settings file or an index in the default place."""
    return bool(_markers(folder)) or os.path.isfile(os.path.join(default_index_dir(folder), INDEX_DB))


def _markers(folder: str) -> list[str]:
    return [path for path in (os.path.join(folder, ".obsidian"), os.path.join(folder, CONFIG_FILE))
            if os.path.lexists(path)]


def _foreign_mark(folder: str, trusted: set[str]) -> tuple[str, int] | None:
    """What makes ``folder``, above where the user stands, a vault that is not
    the user's to adopt: the folder or its ``.obsidian/`` or settings file
    owned by another user (git's CVE-2022-24765: a ``.obsidian/`` and a
    ``log_queries`` settings file planted in ``/tmp``, or by another user in
    a folder anyone may write), unless ``$VAULT_SEARCH_TRUSTED`` names the
    folder. An index of it in the user's own data folder is the user's own
    choice. Returns (the foreign path, its owner's uid), else None."""
    if folder in trusted or os.path.isfile(os.path.join(default_index_dir(folder), INDEX_DB)):
        return None
    for path in (folder, *_markers(folder)):
        uid = foreign_owner(path, trusted)
        if uid is not None:
            return path, uid
    return None


_said: set[str] = set()   # the notes nearest_vault has written in this process


def nearest_vault(start: str) -> str:
    """The nearest folder at or above ``start`` (resolved) that marks a vault,
    else ``start`` itself. A folder above ``start`` counts only when it and
    its marks are the user's own (``_foreign_mark``): one that is not is
    passed over, and when no vault is found at all, one line on stderr says
    which was passed over and how to trust it (once a process: the thin
    client and the full CLI both ask)."""
    trusted = _trusted()
    passed: tuple[str, str, int] | None = None   # (folder, the foreign path, its uid)
    for i, folder in enumerate(walk_up(start)):
        if not marks_a_vault(folder):
            continue
        foreign = _foreign_mark(folder, trusted) if i else None   # where one stands always counts
        if foreign is None:
            return folder
        passed = passed or (folder, *foreign)
    if passed is not None:
        note = untrusted_vault_note(*passed)
        if note not in _said:
            _said.add(note)
            sys.stderr.write(f"vault-search: {note}\n")
    return start


def untrusted_vault_note(folder: str, foreign: str, uid: int) -> str:
    """Why ``folder`` is not used as the vault, and how to trust it."""
    who = "it" if foreign == folder else foreign
    whose = f"uid {uid}" if uid >= 0 else "uid unknown"
    return (f"not using {folder} as the vault: {who} belongs to another user ({whose}); "
            f"set {TRUSTED_ENV}={folder} to trust it")


def settings_stamp(vault: str) -> list[int] | None:
    """What identifies the vault's settings file as it is now (None: there is
    none): a server records it when it reads the file, and the thin client
    answers through the server only while it is unchanged."""
    try:
        st = os.stat(os.path.join(vault, CONFIG_FILE))
    except OSError:
        return None
    return [st.st_mtime_ns, st.st_size, st.st_ino, st.st_ctime_ns]
