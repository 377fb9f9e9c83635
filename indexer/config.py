"""Where the vault and its index are, and what the scan includes.

Settings come from ``.vault-search.toml`` at the vault root (dot-prefixed, so
it is never indexed itself), plus whatever the caller adds for one run.
"""

from __future__ import annotations

import difflib
import os
import sqlite3
import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path

from . import locate
from .errors import ConfigError, VaultNotFoundError
from .locate import CONFIG_FILE, INDEX_DB

INDEX_DIR_ENV = "VAULT_SEARCH_INDEX_DIR"
# Large enough for the longest real notes we have seen (130 KB reading notes)
# a hundred times over; a bigger ".md" is almost always an export or a dump,
# and segmenting 20 MB of Han text would stall a sync for tens of seconds.
DEFAULT_MAX_FILE_MB = 10.0
# The most max_file_mb may say: a sync holds a note's text, lines and chunks
# at once, several times its size; past a gigabyte that is the machine's
# memory, not a limit. A larger value (``inf`` for "no limit") is taken as this.
MAX_FILE_MB_CEILING = 1024.0
# A note is stale when its ``stale_field`` date (when a person or agent last
# checked it) is older than ``stale_days``, or its ``expiry_field`` date has passed.
DEFAULT_STALE_FIELD = "last_verified"
DEFAULT_STALE_DAYS = 30
# A hundred years: every note checked in living memory is fresh. A larger
# value (``1e12``, ``inf`` for "never stale") is taken as this; a date
# billions of days back does not exist to compare with.
MAX_STALE_DAYS = 36_500
DEFAULT_EXPIRY_FIELD = "valid_until"
# The keys of .vault-search.toml that load_config reads, plus any that other
# modules read from ``VaultConfig.extra`` (none today): anything else is
# named in a warning, since a misspelt key (``ignor = [...]``) silently
# turns its setting off.
KNOWN_SETTINGS = ("ignore", "include_dot", "max_file_mb", "vault_name", "stale_field", "stale_days",
                  "expiry_field", "boost", "log_queries", "contexts", "hyperlinks")
# What a path printed on a terminal links to (OSC 8, where colours are on):
# the file itself (file://host/path, what every terminal that links opens),
# the note in Obsidian (obsidian://open?..., which a terminal hands to the
# app registered for the scheme), or nothing.
HYPERLINK_TARGETS = ("file", "obsidian", "none")
# Settings that look as if they belong here but live elsewhere.
MISPLACED_SETTINGS = {"rerank": "rerank settings live in $XDG_CONFIG_HOME/vault-search/config.toml, "
                                "never in the vault"}


@dataclass(frozen=True)
class VaultConfig:
    vault: Path
    index_dir: Path
    ignore: tuple[str, ...] = ()
    include_dot: tuple[str, ...] = ()
    max_file_bytes: int = int(DEFAULT_MAX_FILE_MB * 1024 * 1024)
    vault_name: str = ""
    stale_field: str = DEFAULT_STALE_FIELD
    stale_days: float = DEFAULT_STALE_DAYS
    expiry_field: str = DEFAULT_EXPIRY_FIELD
    boost: str | None = None          # a frontmatter field every search boosts by (search --boost)
    log_queries: bool = False         # keep a log of searches in the index folder (vault-search log)
    # A short description per folder ("" : the whole vault), returned with
    # every hit under it as ``context`` (the most specific folder's): what an
    # agent is reading. Folder -> description, without leading/trailing "/";
    # an empty description says "none here" under a described parent.
    contexts: tuple[tuple[str, str], ...] = ()
    hyperlinks: str = "file"          # what a path on a terminal links to (HYPERLINK_TARGETS)
    extra: dict = field(default_factory=dict, compare=False)
    # (file, message) pairs about the settings file, e.g. an unknown key;
    # the CLI prints them and `status` lists them.
    warnings: tuple[tuple[str, str], ...] = field(default=(), compare=False)
    # The settings file as it was read (locate.settings_stamp); None: there was none.
    settings_stamp: list[int] | None = field(default=None, compare=False)

    def context_of(self, path: str) -> str | None:
        """The description of the most specific folder ``path`` (vault-relative)
        lies in, else the vault's; None when neither has one."""
        if not self.contexts:
            return None
        described = dict(self.contexts)
        folder = path
        while folder:
            folder = folder.rpartition("/")[0]
            if folder in described:
                return described[folder] or None
        return None

    def with_overrides(self, ignore=(), include_dot=()) -> "VaultConfig":
        return replace(
            self,
            ignore=self.ignore + tuple(ignore),
            include_dot=self.include_dot + tuple(_dot_name(n) for n in include_dot),
        )


def default_index_dir(vault: Path) -> Path:
    """``$XDG_DATA_HOME/vault-search/<vault-name>-<hash of its absolute path>``.

    Outside the vault on purpose: sync tools (iCloud, Dropbox, Syncthing)
    corrupt SQLite files they copy while they are open.
    """
    return Path(locate.default_index_dir(str(vault)))


def load_config(vault: str | os.PathLike | None = None,
                index_dir: str | os.PathLike | None = None) -> VaultConfig:
    """Resolve the vault folder, its index folder and its settings file.

    ``vault=None``: the vault that the current folder lies in (see ``find_vault``).
    """
    if index_dir is None:
        index_dir = os.environ.get(INDEX_DIR_ENV) or None
    given_idx = Path(index_dir).expanduser().resolve() if index_dir else None
    root = Path(vault).expanduser() if vault is not None else find_vault(Path(os.getcwd()), given_idx)
    if root.is_file():
        raise VaultNotFoundError(f"the vault {root} is a file, not a folder; "
                                 "pass the vault folder with --vault DIR or VAULT_SEARCH_VAULT")
    if not root.is_dir():
        raise VaultNotFoundError(f"vault folder not found: {root} (pass --vault DIR or set VAULT_SEARCH_VAULT)")
    root = root.resolve()
    idx = given_idx or default_index_dir(root)

    stamp = locate.settings_stamp(str(root))   # before the read: an edit meanwhile shows as a change
    settings = _read_settings(root / CONFIG_FILE)
    ignore = _str_list(settings.pop("ignore", []), "ignore")
    include_dot = tuple(_dot_name(n) for n in _str_list(settings.pop("include_dot", []), "include_dot"))
    clamped: list[str] = []
    max_mb = settings.pop("max_file_mb", DEFAULT_MAX_FILE_MB)
    if isinstance(max_mb, bool) or not isinstance(max_mb, (int, float)) or max_mb != max_mb or max_mb <= 0:
        raise ConfigError(f"{root / CONFIG_FILE}: max_file_mb must be a positive number")
    if max_mb > MAX_FILE_MB_CEILING:
        clamped.append(f"max_file_mb = {_shown(max_mb)} is past the most it may be; {MAX_FILE_MB_CEILING:g} used")
        max_mb = MAX_FILE_MB_CEILING
    vault_name = settings.pop("vault_name", root.name)
    if not isinstance(vault_name, str):
        raise ConfigError(f"{root / CONFIG_FILE}: vault_name must be a string")
    fields = {}
    for key, default in (("stale_field", DEFAULT_STALE_FIELD), ("expiry_field", DEFAULT_EXPIRY_FIELD)):
        fields[key] = settings.pop(key, default)
        if not isinstance(fields[key], str) or not fields[key].strip() or '"' in fields[key]:
            raise ConfigError(f"{root / CONFIG_FILE}: {key} must be a frontmatter field name")
    boost = settings.pop("boost", None)
    if boost is not None and (not isinstance(boost, str) or '"' in boost or "\x00" in boost):
        raise ConfigError(f"{root / CONFIG_FILE}: boost must be a frontmatter field name (like \"importance\")")
    log_queries = settings.pop("log_queries", False)
    if not isinstance(log_queries, bool):
        raise ConfigError(f"{root / CONFIG_FILE}: log_queries must be true or false")
    contexts = _contexts(settings.pop("contexts", {}), root / CONFIG_FILE)
    hyperlinks = _hyperlinks(settings.pop("hyperlinks", "file"), root / CONFIG_FILE)
    stale_days = settings.pop("stale_days", DEFAULT_STALE_DAYS)
    if (isinstance(stale_days, bool) or not isinstance(stale_days, (int, float)) or stale_days != stale_days
            or stale_days < 0):
        raise ConfigError(f"{root / CONFIG_FILE}: stale_days must be a number of days (0 or more)")
    if stale_days > MAX_STALE_DAYS:
        clamped.append(f"stale_days = {_shown(stale_days)} is past {MAX_STALE_DAYS} (a hundred years); "
                       f"{MAX_STALE_DAYS} used")
        stale_days = MAX_STALE_DAYS
    return VaultConfig(vault=root, index_dir=idx, ignore=tuple(ignore), include_dot=include_dot,
                       max_file_bytes=int(max_mb * 1024 * 1024), vault_name=vault_name,
                       stale_days=float(stale_days), boost=boost, log_queries=log_queries, contexts=contexts,
                       hyperlinks=hyperlinks, extra=settings,
                       warnings=tuple((CONFIG_FILE, w) for w in clamped + unknown_settings(settings)),
                       settings_stamp=stamp, **fields)


def unknown_settings(settings: dict) -> list[str]:
    """A warning for each key of ``settings`` that nothing reads."""
    out = []
    for key in settings:
        if key in KNOWN_SETTINGS:
            continue
        if key in MISPLACED_SETTINGS:
            out.append(f"unknown setting {key!r} ({MISPLACED_SETTINGS[key]})")
            continue
        close = difflib.get_close_matches(key, KNOWN_SETTINGS, n=1)
        out.append(f"unknown setting {key!r} (did you mean {close[0]!r}?)" if close
                   else f"unknown setting {key!r} (known settings: {', '.join(KNOWN_SETTINGS)})")
    return out


def find_vault(start: Path, index_dir: Path | None = None) -> Path:
    """The vault that ``start`` lies in, found as git finds ``.git``.

    Running from a subfolder must not make that subfolder a second, partial
    vault. An ``index_dir`` whose index records a vault that contains
    ``start`` names it; otherwise the nearest folder at or above ``start``
    with ``.obsidian/``, a settings file or an index in the default place
    wins; with none, ``start`` itself is the vault.
    """
    start = start.resolve()
    if index_dir is not None:
        recorded = _recorded_vault(index_dir)
        if recorded is not None and (recorded == start or recorded in start.parents):
            return recorded
    return Path(locate.nearest_vault(str(start)))


def _exists(path: Path, test) -> bool:
    try:
        return test(path)
    except OSError:  # an unreadable folder on the way up is not a vault
        return False


def _recorded_vault(index_dir: Path) -> Path | None:
    """The vault an existing index was built from (its meta row), or None."""
    path = Path(index_dir) / INDEX_DB
    if not _exists(path, Path.is_file):
        return None
    try:
        conn = sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True, timeout=1)
        try:
            row = conn.execute("SELECT value FROM meta WHERE key = 'vault'").fetchone()
        finally:
            conn.close()
    except sqlite3.Error:  # not an index, an old one, or damaged: the open reports it
        return None
    return Path(row[0]) if row and row[0] else None


def _read_settings(path: Path) -> dict:
    try:
        with open(path, "rb") as fh:
            return tomllib.load(fh)
    except FileNotFoundError:
        return {}
    except (tomllib.TOMLDecodeError, OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read settings ({exc}); fix or remove the file") from None


def _contexts(table, file: Path) -> tuple[tuple[str, str], ...]:
    """``[contexts]``: folder -> description, the folder without a leading or
    trailing ``/`` ("" or "/" : the vault), each description one line."""
    if not isinstance(table, dict):
        raise ConfigError(f"{file}: contexts must be a table of folder = \"description\" "
                          f"(a [contexts] section, \"\" for the whole vault)")
    out: dict[str, str] = {}
    for folder, text in table.items():
        if not isinstance(text, str):
            hint = (" (quote a folder name holding a dot: \"Notes.old\" = \"...\")" if isinstance(text, dict)
                    else "")
            raise ConfigError(f"{file}: contexts.{folder!r} must be a string, a short description of the "
                              f"folder{hint}")
        out[folder.strip().strip("/")] = " ".join(text.split())
    return tuple(out.items())


def _hyperlinks(value, file: Path) -> str:
    if value not in HYPERLINK_TARGETS:
        raise ConfigError(f"{file}: hyperlinks must be one of {', '.join(map(repr, HYPERLINK_TARGETS))}")
    return value


def _str_list(value, key: str) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{CONFIG_FILE}: {key} must be a list of strings")
    return tuple(value)


def _dot_name(name: str) -> str:
    """``learnings``, ``.learnings`` and ``.learnings/`` all name ``.learnings``."""
    name = name.strip().strip("/")
    return name if name.startswith(".") else "." + name


def _shown(number: int | float) -> str:
    """A setting's number as the user wrote it, briefly (an integer of 400
    digits has no float to format: math.isnan and :g raise on it)."""
    text = f"{number:g}" if isinstance(number, float) else str(number)
    return text if len(text) <= 24 else f"{text[:20]}... ({len(text)} digits)"
