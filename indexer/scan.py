"""Walk a vault and list the Markdown files to index.

Skips every dot-prefixed file or folder at any depth (``.obsidian/``,
``.archive/``, ``.trash/``, ``.git/``) unless its name was opted back in,
skips the configured ignore globs, and follows a symlink only when it points
inside the vault and does not lead round a loop.
"""

from __future__ import annotations

import errno
import fnmatch
import os
import stat
from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator

from .config import VaultConfig

MARKDOWN_SUFFIXES = (".md", ".markdown")


@dataclass(frozen=True)
class ScannedFile:
    path: str          # relative to the vault, "/" separators
    abspath: str
    mtime_ns: int
    size: int
    # When the inode last changed (a write, chmod, rename or link): unlike the
    # mtime, no ``touch -r`` or ``cp -p`` can set it back (indexer/sync.py).
    ctime_ns: int = 0


def is_markdown(name: str) -> bool:
    return name.lower().endswith(MARKDOWN_SUFFIXES)


class IgnoreRules:
    """Dot-prefix rule plus gitignore-like globs.

    A glob without ``/`` matches a name at any depth (``*.tmp``, ``drafts``);
    one with ``/`` matches the whole relative path (``Extras/Templates/*``);
    a trailing ``/`` matches folders only.
    """

    def __init__(self, globs: tuple[str, ...] = (), include_dot: tuple[str, ...] = ()):
        self.include_dot = frozenset(include_dot)
        self.name_globs: list[tuple[str, bool]] = []
        self.path_globs: list[tuple[str, bool]] = []
        for glob in globs:
            dir_only = glob.endswith("/")
            anchored = glob.startswith("/") or "/" in glob.strip("/")  # "/drafts": only at the root
            glob = glob.strip("/")
            if not glob:
                continue
            (self.path_globs if anchored else self.name_globs).append((glob, dir_only))

    def skips(self, rel: str, is_dir: bool) -> bool:
        name = rel.rsplit("/", 1)[-1]
        if name.startswith(".") and name not in self.include_dot:
            return True
        for glob, dir_only in self.name_globs:
            if (is_dir or not dir_only) and fnmatch.fnmatchcase(name, glob):
                return True
        for glob, dir_only in self.path_globs:
            if (is_dir or not dir_only) and fnmatch.fnmatchcase(rel, glob):
                return True
        return False

    def skips_path(self, rel: str, is_dir: bool = False) -> bool:
        """Whether any component of a relative path is skipped."""
        parts = rel.split("/")
        for i in range(1, len(parts) + 1):
            if self.skips("/".join(parts[:i]), is_dir=is_dir or i < len(parts)):
                return True
        return False


def gone(exc: OSError) -> bool:
    """Whether an error proves the path no longer exists (rather than that it
    could not be read just now: EACCES, EIO, EMFILE, a stale mount)."""
    return exc.errno in (errno.ENOENT, errno.ENOTDIR)


def covered(path: str, unreadable: Iterable[str]) -> bool:
    """Whether ``path`` is, or lies under, a path that could not be read ("" is the vault)."""
    return any(u == "" or path == u or path.startswith(u + "/") for u in unreadable)


def scan_vault(config: VaultConfig, warn: Callable[[str, str], None] | None = None,
               start: str = "", unreadable: set[str] | None = None) -> Iterator[ScannedFile]:
    """Yield every Markdown file to index, one ``stat`` each.

    ``warn(path, message)`` hears about what was skipped for a reason the user
    may not expect (a symlink out of the vault, a loop, an unreadable folder,
    a file name that is not valid UTF-8). ``start`` limits the walk to one
    vault-relative folder. ``unreadable`` collects the folders that could not
    be listed and the files that could not be stat'ed for any reason but
    their absence: what the index has under them must not be taken for deleted.
    """
    warn = warn or (lambda path, message: None)
    unreadable = unreadable if unreadable is not None else set()
    root = str(config.vault)
    top = os.path.join(root, start) if start else root
    try:
        root_stat = os.stat(top)
    except OSError as exc:
        if not start:
            # Even a vault folder that is gone (an unmounted drive) deletes nothing.
            warn("", f"cannot read the vault folder: {exc.strerror}")
            unreadable.add("")
        elif not gone(exc):
            unreadable.add(start)
        return
    walk = _Walk(IgnoreRules(config.ignore, config.include_dot), os.path.realpath(root), warn, unreadable,
                 seen_dirs={(root_stat.st_dev, root_stat.st_ino)}, stack=[(top, start)])
    while walk.stack or walk.linked:
        if not walk.stack:
            _enter_linked(walk.linked.pop(0), walk.stack, walk.seen_dirs, unreadable, warn)
            continue
        yield from _scan_folder(walk, *walk.stack.pop())


@dataclass
class _Walk:
    """What ``scan_vault`` carries from folder to folder."""

    rules: IgnoreRules
    root_real: str
    warn: Callable[[str, str], None]
    unreadable: set[str]
    seen_dirs: set[tuple[int, int]]            # (st_dev, st_ino) of every folder entered or queued
    stack: list[tuple[str, str]]               # folders to list: (path, vault-relative path)
    # Symlinked folders are entered only after every real folder, so a link
    # never claims a folder that is also reachable without it.
    linked: list[tuple[str, str]] = field(default_factory=list)


def _scan_folder(walk: _Walk, dirpath: str, reldir: str) -> Iterator[ScannedFile]:
    """One folder's Markdown files; its subfolders go on the walk's stack
    (in name order), its symlinked ones wait in ``linked``."""
    warn = walk.warn
    try:
        with os.scandir(dirpath) as it:
            entries = sorted(it, key=lambda e: e.name)
    except OSError as exc:
        if not gone(exc):
            warn(reldir or ".", f"cannot read folder: {exc.strerror}; what the index has under it is kept")
            walk.unreadable.add(reldir)
        return
    subdirs = []
    for entry in entries:
        rel = f"{reldir}/{entry.name}" if reldir else entry.name
        if not _valid_utf8(entry.name):
            warn(rel.encode("utf-8", "surrogateescape").decode("utf-8", "replace"),
                 "file name is not valid UTF-8; skipped (rename it to index it)")
            continue
        found = _stat_entry(walk, entry, rel)
        if found is None:
            continue
        st, is_link = found
        is_dir = stat.S_ISDIR(st.st_mode)
        if walk.rules.skips(rel, is_dir):
            continue
        if is_link:
            problem = _link_problem(entry.path, walk.root_real, walk.rules, is_dir)
            if problem:
                warn(rel, problem)
                continue
            if is_dir:
                walk.linked.append((entry.path, rel))
                continue
        if is_dir:
            key = (st.st_dev, st.st_ino)
            if key in walk.seen_dirs:
                warn(rel, "folder already visited (symlink loop or duplicate link); skipped")
                continue
            walk.seen_dirs.add(key)
            subdirs.append((entry.path, rel))
        elif stat.S_ISREG(st.st_mode) and is_markdown(entry.name):
            yield ScannedFile(rel, entry.path, st.st_mtime_ns, st.st_size, st.st_ctime_ns)
    walk.stack.extend(reversed(subdirs))


def _stat_entry(walk: _Walk, entry: os.DirEntry, rel: str) -> tuple[os.stat_result, bool] | None:
    """A folder entry's stat (through a symlink) and whether it is one; None
    (with a warning where it is worth one) when it cannot be stat'ed."""
    is_link = False
    try:
        is_link = entry.is_symlink()
        return entry.stat(follow_symlinks=True), is_link
    except OSError as exc:
        if is_link and gone(exc):
            walk.warn(rel, "broken symlink skipped")
        elif not gone(exc):   # else: vanished between listing and stat
            walk.warn(rel, f"cannot read: {exc.strerror}; what the index has for it is kept")
            walk.unreadable.add(rel)
        return None


def _enter_linked(folder: tuple[str, str], stack: list[tuple[str, str]], seen_dirs: set[tuple[int, int]],
                  unreadable: set[str], warn: Callable[[str, str], None]) -> None:
    """Queue a symlinked folder for the walk, unless it was visited already."""
    path, rel = folder
    try:
        st = os.stat(path)
    except OSError as exc:
        if not gone(exc):
            unreadable.add(rel)
        return
    if (st.st_dev, st.st_ino) in seen_dirs:
        warn(rel, "folder already visited (symlink loop or duplicate link); skipped")
        return
    seen_dirs.add((st.st_dev, st.st_ino))
    stack.append((path, rel))


def _link_problem(path: str, root_real: str, rules: IgnoreRules, is_dir: bool) -> str | None:
    """Why a symlink is not followed (out of the vault, into a skipped path), or None."""
    target = os.path.realpath(path)
    if not _inside(target, root_real):
        return "symlink points outside the vault; skipped"
    target_rel = os.path.relpath(target, root_real).replace(os.sep, "/")
    if target_rel != "." and rules.skips_path(target_rel, is_dir):
        return f"symlink points into a skipped path ({target_rel}); skipped"
    return None


def scan_paths(config: VaultConfig, paths: Iterable[str],
               warn: Callable[[str, str], None] | None = None,
               unreadable: set[str] | None = None) -> Iterator[ScannedFile]:
    """``scan_vault`` for a few vault-relative paths (files or folders), as
    reported by a file watcher; paths that do not exist yield nothing."""
    warn = warn or (lambda path, message: None)
    unreadable = unreadable if unreadable is not None else set()
    rules = IgnoreRules(config.ignore, config.include_dot)
    root_real = os.path.realpath(config.vault)
    seen: set[str] = set()
    for rel in sorted(set(paths)):
        rel = rel.strip("/")
        if not rel or rules.skips_path(rel) or any(rel.startswith(d + "/") for d in seen):
            continue
        full = os.path.join(config.vault, rel)
        try:
            st = os.stat(full)
        except OSError as exc:
            if not gone(exc):
                warn(rel, f"cannot read: {exc.strerror}; what the index has for it is kept")
                unreadable.add(rel)
            continue
        if os.path.islink(full):
            target = os.path.realpath(full)
            target_rel = os.path.relpath(target, root_real).replace(os.sep, "/")
            if not _inside(target, root_real) or rules.skips_path(target_rel, stat.S_ISDIR(st.st_mode)):
                continue
        if stat.S_ISDIR(st.st_mode):
            seen.add(rel)
            yield from scan_vault(config, warn, start=rel, unreadable=unreadable)
        elif stat.S_ISREG(st.st_mode) and is_markdown(rel) and _valid_utf8(rel):
            yield ScannedFile(rel, full, st.st_mtime_ns, st.st_size, st.st_ctime_ns)


def _valid_utf8(name: str) -> bool:
    try:
        name.encode("utf-8")
        return True
    except UnicodeEncodeError:
        return False


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)

