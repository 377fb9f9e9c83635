"""The index holds every note's text and the query history: its folder is
0700 and every file in it 0600, whatever the umask, and an index an older
version left readable by other users is made private the next time it is
opened, with a one-line note. A folder that holds other things too (the
vault or the home folder given as --index-dir) keeps its mode."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

from conftest import CLI

from vault_search.index import Index

UMASK = 0o022   # the usual one: what made the index 0755/0644 before


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def _modes(folder: Path) -> dict[str, str]:
    """Each file's mode in ``folder``, and the folder's own under "."."""
    out = {".": f"{_mode(folder):04o}"}
    out.update({p.name: f"{_mode(p):04o}" for p in folder.iterdir() if not p.is_symlink()})
    return out


def _run(vault: Path, index: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """The installed CLI under the usual umask."""
    return subprocess.run([str(CLI), "--vault", str(vault), "--index-dir", str(index), *args], capture_output=True,
                          text=True, timeout=300, umask=UMASK, env={**os.environ, **(env or {})})


def _loosen(folder: Path) -> None:
    """What an older vault-search left: a 0755 folder of 0644 files."""
    os.chmod(folder, 0o755)
    for p in folder.iterdir():
        if p.is_file() and not p.is_symlink():
            os.chmod(p, 0o644)


def _note(folder: Path) -> str:
    return f"warning: tightened permissions of index folder {folder} (was 0755) so other users cannot read your notes\n"


def test_a_new_index_is_private_to_its_owner(vault, index_dir, ledger):
    r = _run(vault, index_dir, "index", "--no-embed")
    assert r.returncode == 0, r.stderr
    assert "tightened" not in r.stderr   # nothing was exposed: nothing to say
    assert _modes(index_dir) == {".": "0700", "index.db": "0600", "write.lock": "0600"}
    r = _run(vault, index_dir, "index", "--model", "hash:32")
    assert r.returncode == 0, r.stderr
    assert _modes(index_dir) == {".": "0700", "index.db": "0600", "write.lock": "0600", "vectors.npy": "0600",
                                 "vectors.ids.npy": "0600"}
    # SQLite gives -wal and -shm the db file's mode: look while a connection holds them
    old = os.umask(UMASK)
    try:
        with Index.open(vault, index_dir) as idx:
            assert idx.search("tea ceremony", mode="fts").results
            assert _mode(index_dir / "index.db-wal") == 0o600 and _mode(index_dir / "index.db-shm") == 0o600
    finally:
        os.umask(old)
    # a rebuild builds in a private folder too, and swaps in private files
    r = _run(vault, index_dir, "index", "--rebuild", "--no-embed")
    assert r.returncode == 0, r.stderr
    assert _modes(index_dir) == {".": "0700", "index.db": "0600", "write.lock": "0600", "rebuild.lock": "0600"}
    # and so do serve's files (its lock, server.json)
    from conftest import start_server
    old = os.umask(UMASK)
    try:
        proc, _ = start_server(vault, index_dir, "--no-watch")
    finally:
        os.umask(old)
    try:
        modes = _modes(index_dir)
        assert modes["serve.lock"] == modes["server.json"] == "0600" and modes["."] == "0700", modes
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    ledger.record("security", "index folder and files readable by every local user (umask 022)",
                  "folder created 0700, index.db, -wal, -shm, locks and matrix files 0600")


def test_an_index_others_could_read_is_made_private_on_the_next_index(vault, index_dir, tmp_path, ledger):
    assert _run(vault, index_dir, "index", "--model", "hash:32").returncode == 0
    (index_dir / "queries.db").write_bytes(b"")   # an older query log
    outside = tmp_path / "outside.txt"
    outside.write_text("not the index's")
    os.chmod(outside, 0o644)
    (index_dir / "serve.log").symlink_to(outside)   # a symlink is never followed
    _loosen(index_dir)
    r = _run(vault, index_dir, "index", "--no-embed")
    assert r.returncode == 0, r.stderr
    assert r.stderr.count("tightened") == 1 and _note(index_dir) in r.stderr, r.stderr
    assert _modes(index_dir) == {".": "0700", "index.db": "0600", "write.lock": "0600", "vectors.npy": "0600",
                                 "vectors.ids.npy": "0600", "queries.db": "0600"}
    assert _mode(outside) == 0o644
    r = _run(vault, index_dir, "index", "--no-embed")   # said once: now there is nothing to say
    assert r.returncode == 0 and "tightened" not in r.stderr, r.stderr
    ledger.record("security", "an existing index left 0755/0644 (another user reads the notes and the query log)",
                  "made 0700/0600 on the next open, with a one-line note; symlinks in it not followed")


def test_a_search_makes_an_exposed_index_private_too(vault, index_dir, ledger):
    assert _run(vault, index_dir, "index", "--no-embed").returncode == 0
    _loosen(index_dir)
    r = _run(vault, index_dir, "search", "tea ceremony", "--json")
    assert r.returncode == 0, r.stderr
    assert r.stdout.lstrip().startswith("{") and '"Notes/Travel/Kyoto trip.md"' in r.stdout
    assert r.stderr == _note(index_dir), r.stderr
    assert _modes(index_dir) == {".": "0700", "index.db": "0600", "write.lock": "0600"}
    ledger.record("security", "an existing index left 0755/0644, opened only by searches",
                  "made 0700/0600 by the first search, with a one-line note")


def test_a_folder_shared_with_other_files_keeps_its_mode(vault, tmp_path, ledger):
    """--index-dir naming the vault itself, or a folder with the user's own
    files: only the index's files are made private, never the folder or
    anything else in it; an index folder's missing parents are made as the
    umask says (one may be the home folder)."""
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "rebuild-plan.md").write_text("mine\n")
    os.chmod(shared / "rebuild-plan.md", 0o644)
    os.chmod(shared, 0o755)
    r = _run(vault, shared, "index", "--no-embed")
    assert r.returncode == 0, r.stderr
    assert _modes(shared) == {".": "0755", "rebuild-plan.md": "0644", "index.db": "0600", "write.lock": "0600"}
    os.chmod(shared / "index.db", 0o644)
    r = _run(vault, shared, "search", "tea ceremony", "--json")
    assert r.returncode == 0, r.stderr
    assert r.stderr == (f"warning: tightened permissions of the index files in {shared} (index.db) "
                        "so other users cannot read your notes\n"), r.stderr
    assert _modes(shared) == {".": "0755", "rebuild-plan.md": "0644", "index.db": "0600", "write.lock": "0600"}
    # the vault as its own index folder: the notes keep their modes
    assert _run(vault, vault, "index", "--no-embed").returncode == 0
    assert _mode(vault) == 0o755 and _mode(vault / "Notes" / "Travel" / "Kyoto trip.md") == 0o644
    assert _mode(vault / "index.db") == 0o600
    deep = tmp_path / "a" / "b" / "index"
    assert _run(vault, deep, "index", "--no-embed").returncode == 0
    assert (_mode(tmp_path / "a"), _mode(tmp_path / "a" / "b"), _mode(deep)) == (0o755, 0o755, 0o700)
    ledger.record("security", "--index-dir naming a folder with other files (the vault, the home folder)",
                  "only the index's files made 0600; the folder, its parents and other files keep their modes")


def test_serve_tells_when_it_makes_an_older_index_private(vault, index_dir):
    from conftest import start_server

    assert _run(vault, index_dir, "index", "--no-embed").returncode == 0
    os.chmod(index_dir, 0o755)
    os.chmod(index_dir / "index.db", 0o644)
    proc, _ = start_server(vault, index_dir, "--no-watch")
    proc.terminate()
    _, err = proc.communicate(timeout=30)
    assert err.count(f"tightened permissions of index folder {index_dir} (was 0755)") == 1, err
    assert _mode(index_dir) == 0o700 and _mode(index_dir / "index.db") == 0o600
