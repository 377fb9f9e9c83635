"""Without --vault, the vault is found as git finds ``.git``: the nearest
folder at or above the current one with ``.obsidian/``, a
``.vault-search.toml`` or an index in the default place; never in a folder
above that another user owns, unless $VAULT_SEARCH_TRUSTED names it."""

import os
import shutil
import subprocess

import pytest
from conftest import CLI, write

from indexer import locate
from vault_search import fast

OTHER_UID = 65534   # nobody


def _run(cwd, *args, data_home, index_dir=None, env=None):
    """The CLI run from ``cwd`` with no --vault (and no $VAULT_SEARCH_* but ``env``'s)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("VAULT_SEARCH_")} | (env or {})
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


def _planted(tmp_path):
    """A folder of another user (as /tmp is) with a planted vault in it that
    logs queries, and a folder of one's own inside it: (planted, own)."""
    planted = tmp_path.resolve() / "shared"
    write(planted / ".obsidian" / "app.json", "{}")
    write(planted / ".vault-search.toml", "log_queries = true\n")
    write(planted / "planted.md", "# Planted\nplantedword\n")
    own = planted / "mine"
    write(own / "n.md", "# Mine\nmyword\n")
    os.chown(planted, OTHER_UID, OTHER_UID)
    return planted, own


def _refusal(planted):
    return (f"vault-search: not using {planted} as the vault: it belongs to another user (uid {OTHER_UID}); "
            f"set VAULT_SEARCH_TRUSTED={planted} to trust it\n")


needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give a folder to another user")


@needs_root
def test_a_vault_planted_in_another_users_folder_above_is_not_used(tmp_path, ledger):
    planted, own = _planted(tmp_path)
    data = tmp_path / "data"
    r = _run(own, "search", "plantedword", "--json", data_home=data)   # the thin client, then the full CLI
    assert r.returncode == 1 and r.stderr.startswith(_refusal(planted)), r.stderr
    assert r.stderr.count("not using") == 1 and f"no index at {data}/vault-search/mine-" in r.stderr, r.stderr
    r = _run(own, "index", "--no-embed", data_home=data)
    assert r.returncode == 0, r.stderr
    assert "1 note scanned" in r.stdout and r.stderr == _refusal(planted), (r.stdout, r.stderr)
    # its own index marks the folder as a vault now: nothing more to say
    r = _run(own, "search", "plantedword", "--json", data_home=data)
    assert r.returncode == 0 and '"results": []' in r.stdout and r.stderr == "", (r.stdout, r.stderr)
    assert '"n.md"' in _run(own, "search", "myword", "--json", data_home=data).stdout
    [index] = _indexes(data)
    assert index.startswith("mine-") and not (data / "vault-search" / index / "queries.db").exists()
    # trusted by name, it is the vault (with no index of the own folder in
    # the way): its notes and its settings
    data = tmp_path / "data-trusting"
    for trusted in (str(planted), f"/nonexistent{os.pathsep}{planted}", "*"):
        r = _run(own, "index", "--no-embed", data_home=data, env={"VAULT_SEARCH_TRUSTED": trusted})
        assert r.returncode == 0 and r.stderr == "" and "2 notes scanned" in r.stdout, (r.stdout, r.stderr)
    r = _run(own, "search", "plantedword", "--json", data_home=data, env={"VAULT_SEARCH_TRUSTED": str(planted)})
    assert r.returncode == 0 and '"planted.md"' in r.stdout, r.stdout
    [index] = _indexes(data)
    assert index.startswith("shared-") and (data / "vault-search" / index / "queries.db").exists()
    ledger.record("security", ".obsidian/ and a log_queries settings file planted in another user's folder above",
                  "not used as the vault, one line on stderr; used when $VAULT_SEARCH_TRUSTED names it")


@needs_root
def test_a_vault_of_ones_own_below_another_users_folder_is_unchanged(tmp_path):
    planted, own = _planted(tmp_path)
    write(own / ".obsidian" / "app.json", "{}")
    deep = own / "sub"
    deep.mkdir()
    r = _run(deep, "index", "--no-embed", data_home=tmp_path / "data")
    assert r.returncode == 0 and r.stderr == "" and "1 note scanned" in r.stdout, (r.stdout, r.stderr)
    # where one stands counts as it always did, whoever owns it
    r = _run(planted, "index", "--no-embed", data_home=tmp_path / "data")
    assert r.returncode == 0 and r.stderr == "" and "2 notes scanned" in r.stdout, (r.stdout, r.stderr)
    # a folder of another user with no vault in or above it: nothing to say
    plain = tmp_path.resolve() / "plain"
    (plain / "mine").mkdir(parents=True)
    os.chown(plain, OTHER_UID, OTHER_UID)
    r = _run(plain / "mine", "status", data_home=tmp_path / "data")
    assert "another user" not in r.stderr, r.stderr


@needs_root
def test_the_thin_client_stops_at_another_users_folder_too(tmp_path, monkeypatch, capsys):
    planted, own = _planted(tmp_path)
    for name in [k for k in os.environ if k.startswith("VAULT_SEARCH_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.setattr(locate, "_said", set(), raising=False)
    monkeypatch.chdir(own)
    assert fast.locate({}) == (str(own), locate.default_index_dir(str(own)))
    assert capsys.readouterr().err == _refusal(planted)
    monkeypatch.setenv("VAULT_SEARCH_TRUSTED", str(planted))
    assert fast.locate({}) == (str(planted), locate.default_index_dir(str(planted)))
    assert capsys.readouterr().err == ""
    # the ceiling still stops the walk first, and then there is nothing to say
    monkeypatch.delenv("VAULT_SEARCH_TRUSTED")
    monkeypatch.setattr(locate, "_said", set(), raising=False)
    monkeypatch.setenv("VAULT_SEARCH_CEILING", str(planted))
    assert fast.locate({}) == (str(own), locate.default_index_dir(str(own)))
    assert capsys.readouterr().err == ""


@needs_root
def test_a_mark_planted_by_another_user_in_a_folder_anyone_may_write_is_not_used(tmp_path, ledger):
    """The folder is one's own (as /tmp is root's), but another user wrote its
    .obsidian/ and settings file there: git checks the owner of .git itself."""
    sticky = tmp_path.resolve() / "sticky"
    write(sticky / "planted.md", "# Planted\nplantedword\n")
    write(sticky / ".obsidian" / "app.json", "{}")
    write(sticky / ".vault-search.toml", 'ignore = ["**"]\nlog_queries = true\n')
    os.chmod(sticky, 0o1777)
    for planted in (sticky / ".obsidian", sticky / ".obsidian" / "app.json", sticky / ".vault-search.toml"):
        os.chown(planted, OTHER_UID, OTHER_UID)
    own = sticky / "mine"
    write(own / "n.md", "# Mine\nmyword\n")
    r = _run(own, "index", "--no-embed", data_home=tmp_path / "data")
    assert r.returncode == 0 and "1 note scanned" in r.stdout, (r.stdout, r.stderr)
    assert r.stderr == (f"vault-search: not using {sticky} as the vault: {sticky / '.obsidian'} belongs to another "
                        f"user (uid {OTHER_UID}); set VAULT_SEARCH_TRUSTED={sticky} to trust it\n"), r.stderr
    ledger.record("security", ".obsidian/ and settings planted by another user in a folder of one's own that "
                  "anyone may write (mode 1777)", "not used as the vault, one line on stderr")


@needs_root
def test_a_folder_of_another_user_inside_ones_vault_does_not_hide_the_vault(tmp_path):
    """A root-owned folder that Docker or sudo made inside the vault: from
    there the vault is still found (git checks the repository's owner, not
    the folders between), with nothing to say."""
    vault = tmp_path.resolve() / "myvault"
    write(vault / ".obsidian" / "app.json", "{}")
    write(vault / "top.md", "# Top\ntopword\n")
    inner = vault / "docker" / "sub"
    write(inner / "deep.md", "# Deep\ndeepword\n")
    os.chown(vault / "docker", OTHER_UID, OTHER_UID)
    os.chown(inner, OTHER_UID, OTHER_UID)
    r = _run(inner, "index", "--no-embed", data_home=tmp_path / "data")
    assert r.returncode == 0 and r.stderr == "" and "2 notes scanned" in r.stdout, (r.stdout, r.stderr)
    assert _indexes(tmp_path / "data")[0].startswith("myvault-")
