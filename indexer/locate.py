"""Where a vault's index lives, and which vault a folder lies in: with ``os``
alone, so the thin client (``vault_search.fast``) finds a running server
without paying for pathlib, hashlib's OpenSSL or the settings reader.
``indexer.config`` builds on these; they are the one implementation.
"""

from __future__ import annotations

import os

CONFIG_FILE = ".vault-search.toml"
INDEX_DB = "index.db"   # indexer.store.DB_NAME (not imported: this module stays light)
CEILING_ENV = "VAULT_SEARCH_CEILING"   # folders the search for the vault never reaches

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


def walk_up(start: str) -> list[str]:
    """``start`` (resolved) and the folders above it, stopping below the home
    folder (a stray settings file or index in ``~`` must not make the whole
    home a vault) and at ``$VAULT_SEARCH_CEILING`` folders (``:``-separated,
    like git's GIT_CEILING_DIRECTORIES); ``start`` itself always counts."""
    ceilings = {os.path.realpath(os.path.expanduser(p)) for p in os.environ.get(CEILING_ENV, "").split(os.pathsep)
                if p}
    home = os.path.expanduser("~")
    if home != "~":
        ceilings.add(os.path.realpath(home))
    folders = [start]
    if start in ceilings:
        return folders
    folder = start
    while True:
        parent = os.path.dirname(folder)
        if parent == folder or parent in ceilings:
            break
        folders.append(parent)
        folder = parent
    return folders


def marks_a_vault(folder: str) -> bool:
    """``folder`` has ``.obsidian/``, a settings file or an index in the default place."""
    return (os.path.isdir(os.path.join(folder, ".obsidian")) or os.path.isfile(os.path.join(folder, CONFIG_FILE))
            or os.path.isfile(os.path.join(default_index_dir(folder), INDEX_DB)))


def nearest_vault(start: str) -> str:
    """The nearest folder at or above ``start`` (resolved) that marks a vault,
    else ``start`` itself."""
    return next((folder for folder in walk_up(start) if marks_a_vault(folder)), start)


def settings_stamp(vault: str) -> list[int] | None:
    """What identifies the vault's settings file as it is now (None: there is
    none): a server records it when it reads the file, and the thin client
    answers through the server only while it is unchanged."""
    try:
        st = os.stat(os.path.join(vault, CONFIG_FILE))
    except OSError:
        return None
    return [st.st_mtime_ns, st.st_size, st.st_ino, st.st_ctime_ns]
