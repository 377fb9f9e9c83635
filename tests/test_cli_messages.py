"""Messages that say what is wrong: misspelt settings, a file given as the
vault, a malformed line range; and the same tags object as HTTP."""

import json

import pytest
from conftest import start_server, write

WARNING = "warning: .vault-search.toml: unknown setting 'ignor' (did you mean 'ignore'?)"


def test_unknown_settings_are_named_with_the_closest_valid_one(vault, cli, ledger):
    write(vault / ".vault-search.toml", 'ignor = ["Notes/Travel/"]\nstale_dayz = 3\nfrobnicate = 1\n'
                                        '[rerank]\nurl = "http://127.0.0.1:1/v1"\n')
    r = cli("index", "--no-embed")
    assert r.code == 0, r
    lines = r.err.splitlines()
    assert lines.count(WARNING) == 1, r.err
    assert "warning: .vault-search.toml: unknown setting 'stale_dayz' (did you mean 'stale_days'?)" in lines
    assert any(line.startswith("warning: .vault-search.toml: unknown setting 'frobnicate' (known settings: ignore, ")
               for line in lines), r.err
    assert any("unknown setting 'rerank'" in line and "config.toml" in line for line in lines), r.err
    r = cli("search", "tea ceremony", "--json")
    assert r.code == 0 and r.err.splitlines().count(WARNING) == 1, r
    assert r.json()["results"][0]["path"] == "Notes/Travel/Kyoto trip.md"  # the misspelt ignore did nothing
    status = cli("status")
    assert status.err.splitlines().count(WARNING) == 1
    assert "  .vault-search.toml: unknown setting 'ignor' (did you mean 'ignore'?)" in status.out.splitlines()
    data = json.loads(cli("status", "--json").out)
    assert {"path": ".vault-search.toml", "message": "unknown setting 'ignor' (did you mean 'ignore'?)"} \
        in data["warnings"]
    ledger.record("hostile input", "misspelt or unknown keys in .vault-search.toml",
                  "a warning naming the key and the closest valid one, on every command and in status", tries=4)


def test_a_file_as_the_vault_is_named_as_a_file(vault, cli, tmp_path):
    note = vault / "Home.md"
    r = cli("status", vault_dir=note)
    assert r.code == 1 and r.err.strip() == (f"error: the vault {note} is a file, not a folder; "
                                             "pass the vault folder with --vault DIR or VAULT_SEARCH_VAULT"), r
    r = cli("status", vault_dir=tmp_path / "nowhere")
    assert r.code == 1 and "vault folder not found" in r.err


def test_a_malformed_line_range_is_a_usage_error(cli, ledger):
    tries = 0
    for bad in ("abc", "", "5-", "-3", "3-x", "1,2"):
        r = cli("get", f"Home.md:{bad}")
        assert r.code == 2, (bad, r)
        assert f"bad line range {bad!r} in 'Home.md:{bad}'" in r.err, r
        tries += 1
    assert cli("get", "Home:abc").code == 2  # the note named without .md
    assert cli("get", "nowhere.md:abc").code == 2
    r = cli("get", "no-such-folder:x/y.md")  # a colon inside a path is a path, not a range
    assert r.code == 1 and "no such note" in r.err, r
    assert cli("get", "Home.md:1-2").code == 0
    ledger.record("hostile input", "malformed `get` line ranges (PATH:abc, PATH:5-, PATH:-3)",
                  "usage error (exit 2) naming the bad range", tries=tries + 2)


def test_tags_json_is_the_http_object(vault, index_dir, cli):
    assert cli("index", "--no-embed").code == 0
    data = json.loads(cli("tags", "--json").out)
    assert set(data) == {"tags"} and {"tag": "memory", "notes": 4} in data["tags"]
    assert json.loads(cli("tags", "--json", "-n", "2").out)["tags"] == data["tags"][:2]
    proc, info = start_server(vault, index_dir, "--no-watch")
    try:
        from urllib.request import urlopen

        with urlopen(f"http://127.0.0.1:{info['port']}/tags", timeout=30) as resp:
            assert json.loads(resp.read()) == data
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_one_result_is_singular(cli):
    cli("index", "--no-embed")
    r = cli("search", "tea ceremony", "--mode", "fts", "-n", "1", "--no-server")
    assert r.code == 0 and r.out.splitlines()[-1].startswith("1 result (fts, "), r


def test_global_options_are_taken_after_the_command_too(vault, index_dir, cli):
    import subprocess

    from conftest import CLI

    assert cli("index", "--no-embed").code == 0
    first = cli("search", "tea ceremony", "--json", "--mode", "fts", "--no-server")
    after = subprocess.run([str(CLI), "search", "tea ceremony", "--vault", str(vault), "--json", "--mode", "fts",
                            f"--index-dir={index_dir}", "--no-server", "--color", "never"],
                           capture_output=True, text=True, timeout=300, cwd="/")
    assert after.returncode == 0, after.stderr
    assert [r["path"] for r in json.loads(after.stdout)["results"]] == \
        [r["path"] for r in first.json()["results"]] != []
    # after `--` it is the query's text, not an option
    literal = subprocess.run([str(CLI), "--vault", str(vault), "--index-dir", str(index_dir), "search", "--mode",
                              "fts", "--json", "--no-server", "--", "--vault"], capture_output=True, text=True,
                             timeout=300)
    assert literal.returncode == 0 and json.loads(literal.stdout)["query"] == "--vault", literal.stderr


def test_hoisting_leaves_a_commands_own_option_and_what_follows_the_double_dash():
    from vault_search.argv import hoist_globals
    from vault_search.fast import parse_globals

    serve_owns = {"serve": {"--vault"}}.get
    assert hoist_globals(["search", "due date", "--vault", "V", "-n", "3"], lambda c: ()) == \
        ["--vault", "V", "search", "due date", "-n", "3"]
    assert hoist_globals(["serve", "--vault", "A", "--vault", "B", "--index-dir=I"], lambda c: serve_owns(c, ())) \
        == ["--index-dir=I", "serve", "--vault", "A", "--vault", "B"]
    assert hoist_globals(["search", "--", "--vault", "V"], lambda c: ()) == ["search", "--", "--vault", "V"]
    assert hoist_globals(["--help"], lambda c: ()) == ["--help"]
    for missing in (["search", "x", "--vault"], ["search", "x", "--vault="], ["search", "x", "--color", ""]):
        with pytest.raises(ValueError, match="requires an argument"):   # not "No such option"
            hoist_globals(missing, lambda c: ())
    assert parse_globals(["search", "x", "--vault"]) is None             # the full CLI says so
    # the fast path reads them where the full CLI does
    assert parse_globals(["search", "x", "--color", "never", "--vault=V"]) == \
        ({"--color": "never", "--vault": "V"}, ["x"])


def test_usage_errors_are_one_line_naming_their_command(vault, index_dir, cli):
    for args, command, says in [(("search", "tea", "--bogus"), "search", "No such option"),
                                (("serch", "tea"), "vault-search", "No such command 'serch'"),
                                (("search", "tea", "--mode", "nope"), "search", "Invalid value for '--mode'"),
                                (("get", "Home.md:abc"), "get", "bad line range"),
                                (("search", "tea", "--vault"), "vault-search",
                                 "Option '--vault' requires an argument")]:
        r = cli(*args)
        assert r.code == 2 and r.out == "", r
        line, = r.err.strip().splitlines()
        assert line.startswith(f"error: vault-search {command}: " if command != "vault-search"
                               else "error: vault-search: "), line
        assert says in line and line.endswith("--help`)"), line


def test_a_bare_command_prints_its_help_not_an_error():
    import subprocess

    from conftest import CLI

    r = subprocess.run([str(CLI)], capture_output=True, text=True, timeout=60)
    assert "Usage: vault-search" in r.stdout + r.stderr and "error:" not in r.stdout + r.stderr, r
