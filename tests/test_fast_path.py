"""The thin client's fast path (vault_search/fast.py): a search that a running
server answers prints what the in-process search prints, imports neither
click nor http.client, and every case it cannot answer goes to the full CLI."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time

import pytest
from conftest import CLI, start_server, terminal_output, write

from vault_search.cli import search_flags
from vault_search.fast import parse, parse_globals, query_string
from vault_search.options import MAX_LIMIT, MODES, SearchOptions

TOOK = re.compile(r'("took_ms": )[0-9.]+|\(([a-z]+), [0-9]+ ms\)')


def same_but_time(text: str) -> str:
    """Output with the timing (which differs from run to run) blanked."""
    return TOOK.sub(lambda m: f"{m.group(1)}N" if m.group(1) else f"({m.group(2)}, N ms)", text)


def run(vault, index, *args, env=None, importtime=False):
    cmd = [sys.executable, *(["-X", "importtime"] if importtime else []), str(CLI),
           "--vault", str(vault), "--index-dir", str(index), *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, env={**os.environ, **(env or {})})


def imported(stderr: str) -> set[str]:
    """Top-level module names from ``-X importtime`` output."""
    return {line.split("|")[-1].strip().split(".")[0] for line in stderr.splitlines() if line.startswith("import time:")}


@pytest.fixture
def served(vault, index_dir):
    proc = subprocess.run([str(CLI), "--vault", str(vault), "--index-dir", str(index_dir), "index", "--no-embed"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    server, info = start_server(vault, index_dir, "--no-watch")
    try:
        yield vault, index_dir, info
    finally:
        server.terminate()
        server.wait(timeout=30)


QUERIES = [
    ("数据库", "索引"),
    ("tea ceremony", "--json"),
    ("--json", "C++", "--limit", "3", "--explain"),
    ("deploy", "--tag", "project", "--format", "text", "--related"),
    ("--mode=fts", "-n2", '"quoted" AND *'),
    ("nothing-matches-this-zzzz", "--json"),
    ("drain the node", "--boost", "importance", "--budget-tokens", "120", "--explain", "--last", "36500d"),
    ("stand-up", "--full", "--json", "--today"),
]


@pytest.mark.parametrize("args", QUERIES, ids=lambda a: " ".join(a)[:30])
def test_fast_path_prints_what_the_in_process_search_prints(served, args):
    vault, index, _ = served
    fast = run(vault, index, "search", *args, importtime=True)
    slow = run(vault, index, "search", *args, "--no-server")
    assert fast.returncode == slow.returncode == 0, (fast.stderr[-500:], slow.stderr)
    assert same_but_time(fast.stdout) == same_but_time(slow.stdout) and fast.stdout.strip()
    modules = imported(fast.stderr)
    assert "vault_search" in modules and not modules & {"click", "http", "email", "ssl", "jieba", "numpy",
                                                        "sqlite3", "tomllib"}
    assert not any(line for line in fast.stderr.splitlines() if not line.startswith("import time:"))


def test_other_formats_and_options_go_to_the_full_cli_which_still_asks_the_server(served):
    vault, index, _ = served
    for args in (["--format", "paths"], ["--format", "md"], ["-n", "0"], ["--mode", "nope"], ["--min-score", "2"]):
        fast = run(vault, index, "search", "数据库", *args, importtime=True)
        slow = run(vault, index, "search", "数据库", *args, "--no-server")
        assert "click" in imported(fast.stderr), args
        assert fast.returncode == slow.returncode and same_but_time(fast.stdout) == same_but_time(slow.stdout)
        if fast.returncode:
            assert "Invalid value" in fast.stderr and "Invalid value" in slow.stderr


def test_a_color_terminal_gets_the_same_colours(served):
    vault, index, _ = served
    command = [str(CLI), "--vault", str(vault), "--index-dir", str(index), "search", "数据库"]
    fast, slow = terminal_output(command), terminal_output([*command, "--no-server"])
    assert "\x1b[" in fast and same_but_time(fast) == same_but_time(slow)


def test_without_a_live_server_the_full_cli_answers(served, tmp_path):
    vault, index, info = served
    server_file = index / "server.json"
    good = server_file.read_text()
    expected = same_but_time(run(vault, index, "search", "数据库", "--no-server").stdout)
    # a dead pid; a server for another vault; a port nothing listens on
    for changed in ({"pid": 2 ** 22 + 7}, {"vault": str(tmp_path)}, {"port": _free_port()}):
        server_file.write_text(json.dumps({**info, **changed}))
        r = run(vault, index, "search", "数据库", importtime=True)
        assert r.returncode == 0 and same_but_time(r.stdout) == expected, changed
        assert "click" in imported(r.stderr)
    server_file.write_text(good)


def test_a_settings_file_edited_after_the_server_read_it_is_read_by_the_full_cli(served):
    vault, index, _ = served
    r = run(vault, index, "search", "数据库", importtime=True)
    assert "click" not in imported(r.stderr)
    time.sleep(0.01)
    write(vault / ".vault-search.toml", "ignor = ['x']\n")
    r = run(vault, index, "search", "数据库", importtime=True)
    assert "click" in imported(r.stderr) and "unknown setting 'ignor'" in r.stderr and r.returncode == 0


def test_the_settings_warnings_the_server_read_are_printed_as_the_full_cli_prints_them(vault, index_dir):
    write(vault / ".vault-search.toml", "ignor = ['x']\n")
    assert run(vault, index_dir, "index", "--no-embed").returncode == 0
    server, _ = start_server(vault, index_dir, "--no-watch")
    try:
        fast = run(vault, index_dir, "search", "数据库", importtime=True)
        slow = run(vault, index_dir, "search", "数据库", "--no-server")
    finally:
        server.terminate()
        server.wait(timeout=30)
    assert "click" not in imported(fast.stderr)
    warnings = [line for line in fast.stderr.splitlines() if not line.startswith("import time:")]
    assert warnings == slow.stderr.splitlines() and "unknown setting 'ignor'" in warnings[0]


def test_an_argument_that_is_not_utf8_goes_to_the_full_cli(served):
    vault, index, _ = served
    args = [os.fsencode(str(CLI)), b"--vault", os.fsencode(str(vault)), b"--index-dir", os.fsencode(str(index)),
            b"search", b"caf\xe9 zzq", b"--json"]
    fast = subprocess.run([os.fsencode(sys.executable), b"-X", b"importtime", *args], capture_output=True, timeout=120)
    slow = subprocess.run([*args, b"--no-server"], capture_output=True, timeout=120)
    assert b"click" in fast.stderr and fast.returncode == slow.returncode
    assert same_but_time(fast.stdout.decode()) == same_but_time(slow.stdout.decode())


def test_a_settings_file_is_stamped_before_it_is_read(vault, index_dir):
    from indexer.config import load_config
    from indexer.locate import settings_stamp

    write(vault / ".vault-search.toml", "stale_days = 3\n")
    config = load_config(vault, index_dir)
    assert config.settings_stamp == settings_stamp(str(config.vault)) is not None
    time.sleep(0.01)
    write(vault / ".vault-search.toml", 'stale_days = "x"\n')   # an edit after the server read it
    assert settings_stamp(str(config.vault)) != config.settings_stamp


def parsed(argv: list[str]) -> tuple[dict, dict] | None:
    """What the fast path reads of a command line, with the table `serve` gives it."""
    split = parse_globals(argv)
    params = parse(split[1], json.loads(json.dumps(search_flags()))) if split is not None else None
    return None if params is None else (split[0], params)


def test_parse_reads_what_click_reads_and_hands_the_rest_over():
    parse = parsed
    assert parse(["search", "a", "b"]) == ({}, {"query": "a b", "render": "text"})
    assert parse(["--vault=/v", "--index-dir", "/i", "search", "--tag", "x", "q", "--tag=y", "--json"]) == (
        {"--vault": "/v", "--index-dir": "/i"}, {"tag": ["x", "y"], "query": "q", "render": "json"})
    assert parse(["search", "--json", "--format", "text", "q"])[1]["render"] == "text"   # --format wins
    assert parse(["search", "-n", "5", "--", "--json", "-x"])[1] == {"limit": "5", "query": "--json -x",
                                                                      "render": "text"}
    assert parse(["search", "--mode", "fts", "--mode", "vector", "q"])[1]["mode"] == "vector"   # the last one
    for refused in (["search"], ["search", "--rerank", "q"], ["search", "--no-server", "q"], ["search", "-x", "q"],
                    ["--help"], ["search", "--help"], ["get", "a.md"], ["--vault", "search"], ["search", "q", "-n"],
                    ["search", "q", "-n", "0"], ["search", "q", "-n", "1001"], ["search", "q", "-n", " 5"],
                    ["search", "q", "--mode", "Fts"], ["search", "q", "--min-score", "nan"],
                    ["search", "q", "--min-score", "1.5"], ["search", "q", "--recency-half-life", "0"],
                    ["search", "q", "--format", "paths"], ["search", "q", "--path", ""], ["--verbose", "search", "q"],
                    ["search", "q", "--budget-tokens", "0"], ["search", "q", "--recency-half-life", "-1"],
                    ["search", "q", "-n", "+5"], ["search", "q", "--min-score", "1e400"]):
        assert parse(refused) is None, refused
    assert parse(["search", "q", "-n5", "--min-score=0", "--recency-half-life", "0.5"])[1] == {
        "limit": "5", "min_score": "0", "recency_half_life": "0.5", "query": "q", "render": "text"}


def test_the_fast_path_reads_every_option_a_server_search_takes_but_rerank():
    """search_flags, the table the fast path reads a command line by, comes
    from the CLI's declarations and agrees with SearchOptions."""
    table = search_flags()
    kinds = {(p.names or (name,))[0]: p.kind for name, p, _ in SearchOptions.params() if name != "rerank"}
    assert {entry[0] for entry in table.values()} == set(kinds) | {"json", "format"}
    for flag, (name, takes, repeatable, _) in table.items():
        if name in kinds:
            assert takes == (kinds[name] != "flag") and repeatable == (kinds[name] == "list"), flag
    assert table["-n"] == table["--limit"] and table["--limit"][3] == {"int": [1, MAX_LIMIT, False, False]}
    assert table["--mode"][3] == {"choices": list(MODES)}


def test_a_server_json_without_the_table_leaves_the_search_to_the_full_cli(served):
    vault, index, info = served
    server_file = index / "server.json"
    good = server_file.read_text()
    assert json.loads(good)["search_flags"] == json.loads(json.dumps(search_flags()))
    try:
        server_file.write_text(json.dumps({k: v for k, v in info.items() if k != "search_flags"}))
        r = run(vault, index, "search", "数据库", importtime=True)
        assert r.returncode == 0 and "click" in imported(r.stderr)
        assert same_but_time(r.stdout) == same_but_time(run(vault, index, "search", "数据库", "--no-server").stdout)
    finally:
        server_file.write_text(good)


def test_query_strings_are_utf8_percent_encoded():
    assert query_string({"query": "数据 a&b=c +", "tag": ["x", "y/z"]}) == (
        "query=%E6%95%B0%E6%8D%AE%20a%26b%3Dc%20%2B&tag=x&tag=y%2Fz")


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
