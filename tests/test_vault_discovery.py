"""Without --vault, the vault is found as git finds ``.git``: the nearest
folder at or above the current one with ``.obsidian/``, a
``.vault-search.toml`` or an index in the default place."""

import os
import shutil
import subprocess

from conftest import CLI, write


def _run(cwd, *args, data_home, index_dir=None):
    """The CLI run from ``cwd`` with no --vault (and no $VAULT_SEARCH_*)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("VAULT_SEARCH_")}
    env["XDG_DATA_HOME"] = str(data_home)
    cmd = [str(CLI)] + (["--index-dir", str(index_dir)] if index_dir else []) + list(args)
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, env=env, timeout=300)


def _indexes(data_home):
    root = data_home / "vault-search"
    return sorted(p.name for p in root.iterdir()) if root.is_dir() else []


def test_search_and_index_from_a_subfolder_use_the_whole_vault(vault, tmp_path):
    data = tmp_path / "data"
    sub = vault / "Notes" / "数据库"
    r = _run(sub, "index", "--no-embed", data_home=data)  # .obsidian/ marks the vault root
    assert r.returncode == 0, r.stderr
    assert "22 notes scanned: 22 added" in r.stdout
    assert len(_indexes(data)) == 1 and _indexes(data)[0].startswith("vault-")
    r = _run(sub, "search", "tea ceremony", "--json", data_home=data)
    assert r.returncode == 0, r.stderr
    assert '"Notes/Travel/Kyoto trip.md"' in r.stdout  # a note outside the current folder
    r = _run(sub, "index", "--no-embed", data_home=data)
    assert r.returncode == 0 and "22 unchanged" in r.stdout and len(_indexes(data)) == 1


def test_an_existing_index_or_a_settings_file_marks_the_vault(vault, tmp_path):
    data = tmp_path / "data"
    shutil.rmtree(vault / ".obsidian")
    deep = vault / "Projects" / "vault-search"
    # no marker at all: the current folder is the vault, as before
    r = _run(deep, "status", data_home=data)
    assert r.returncode == 1 and f"no index at {data}/vault-search/vault-search-" in r.stderr, r.stderr
    assert _run(vault, "index", "--no-embed", data_home=data).returncode == 0
    # the index in the default place marks the vault now
    r = _run(deep, "search", "tea ceremony", "--json", data_home=data)
    assert r.returncode == 0 and '"Notes/Travel/Kyoto trip.md"' in r.stdout, r.stderr
    # a .vault-search.toml marks a vault too, and the nearest one wins
    write(vault / "Projects" / ".vault-search.toml", "max_file_mb = 5\n")
    r = _run(deep, "status", data_home=data)
    assert r.returncode == 1 and f"no index at {data}/vault-search/Projects-" in r.stderr, r.stderr


def test_an_index_dir_that_records_the_vault_finds_it(vault, tmp_path):
    data, index_dir = tmp_path / "data", tmp_path / "elsewhere"
    shutil.rmtree(vault / ".obsidian")
    assert _run(vault, "index", "--no-embed", data_home=data, index_dir=index_dir).returncode == 0
    assert _indexes(data) == []
    r = _run(vault / "Notes", "search", "tea ceremony", "--json", data_home=data, index_dir=index_dir)
    assert r.returncode == 0 and '"Notes/Travel/Kyoto trip.md"' in r.stdout, r.stderr
    # outside that vault the index dir is not a reason to go anywhere else
    elsewhere = tmp_path / "other"
    elsewhere.mkdir()
    r = _run(elsewhere, "search", "tea", data_home=data, index_dir=index_dir)
    assert r.returncode == 1 and "belongs to the vault" in r.stderr


def test_a_settings_file_in_the_home_folder_never_makes_home_the_vault(tmp_path):
    home = tmp_path / "home"
    write(home / ".vault-search.toml", "")             # stray, or left by an experiment
    write(home / "other" / "secret.md", "# Secret\nzanzibarsecret\n")
    write(home / "mem" / "today.md", "# Today\nzanzibarmemo\n")
    data = tmp_path / "data"
    env_home = {"HOME": str(home)}
    env = {k: v for k, v in os.environ.items() if not k.startswith("VAULT_SEARCH_")} | env_home
    env["XDG_DATA_HOME"] = str(data)
    r = subprocess.run([str(CLI), "index", "--no-embed"], cwd=home / "mem", capture_output=True, text=True,
                       env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "1 note scanned" in r.stdout, r.stdout
    r = subprocess.run([str(CLI), "search", "zanzibarsecret", "--format", "paths"], cwd=home / "mem",
                       capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0 and r.stdout == "", (r.stdout, r.stderr)
    # A ceiling of one's own stops the walk too.
    write(tmp_path / "top" / ".obsidian" / "app.json", "{}")
    write(tmp_path / "top" / "a" / "b" / "n.md", "# N\nceilingword\n")
    ceiling = {**env, "VAULT_SEARCH_CEILING": str(tmp_path / "top" / "a")}
    r = subprocess.run([str(CLI), "index", "--no-embed"], cwd=tmp_path / "top" / "a" / "b", capture_output=True,
                       text=True, env=ceiling, timeout=300)
    assert r.returncode == 0 and "1 note scanned" in r.stdout, r.stdout


def test_the_index_folder_name_keeps_what_the_regex_kept():
    """indexer.locate avoids ``re``, so the thin client starts fast; the name
    must stay what ``re.sub(r"[^\\w.-]+", "_", name).strip("._")`` gave, or
    every existing index would be orphaned."""
    import re

    from hypothesis import given
    from hypothesis import strategies as st

    from indexer.locate import safe_name

    @given(st.text(max_size=30))
    def same(name):
        assert safe_name(name) == (re.sub(r"[^\w.-]+", "_", name).strip("._") or "vault")

    same()
    assert safe_name("My Vault (2026)") == "My_Vault_2026" and safe_name("笔记 库") == "笔记_库"
    assert safe_name("...") == "vault" and safe_name("a\0b") == "a_b"
