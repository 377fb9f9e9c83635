"""Terminal hyperlinks (issue 37 item 15): where colours are on, each hit's
path is an OSC 8 link to the file (or, by the vault's ``hyperlinks``
setting, the note in Obsidian); never in a pipe, JSON, paths or Markdown,
and a file name cannot break out of its link."""

from __future__ import annotations

import json
import re
import socket
import subprocess
from pathlib import Path
from urllib.parse import quote, unquote

import pytest
from conftest import CLI, run_cli, start_server, terminal_output, write, write_notes

from vault_search.hyperlinks import file_uri, hyperlink

OSC8 = "\x1b]8;;"
LINK = re.compile(r"\x1b\]8;;([^\x1b]*)\x1b\\(.*?)\x1b\]8;;\x1b\\")
NOTES = {"Travel/Kyoto trip.md": "# Kyoto trip\n\nA quokka in Gion.\n", "数据库/索引.md": "# 索引\n\nquokka 索引。\n"}


@pytest.fixture
def linked(tmp_path) -> tuple[Path, Path]:
    vault = write_notes(tmp_path / "vault", NOTES)
    index = tmp_path / "index"
    assert run_cli(vault, index, "index", "--no-embed").returncode == 0
    return vault, index


def search(vault, index, *args, color="always"):
    return subprocess.run([str(CLI), "--vault", str(vault), "--index-dir", str(index), "--color", color, "search",
                           *args], capture_output=True, text=True, timeout=120)


def test_a_uri_a_link_cannot_carry_leaves_the_text_as_it_is():
    assert hyperlink("a.md", "file://h/a.md") == "\x1b]8;;file://h/a.md\x1b\\a.md\x1b]8;;\x1b\\"
    for bad in (None, "", "file://h/\x1b\\x", "file://h/é", "file://h/a\nb"):
        assert hyperlink("a.md", bad) == "a.md"


def test_file_uris_are_percent_encoded_ascii_with_the_host(tmp_path):
    path = tmp_path / "a b" / "数据库 \x1b]8;;x\x07\n%.md"
    uri = file_uri(path)
    host = quote(socket.gethostname(), safe="")
    assert uri.startswith(f"file://{host}/") and all(" " <= c <= "~" for c in uri)
    assert unquote(uri[len(f"file://{host}"):]) == str(path)
    assert "%1B" in uri and "%07" in uri and "%0A" in uri and "%25.md" in uri


def test_colour_on_links_each_hits_path_to_its_file(linked):
    vault, index = linked
    out = search(vault, index, "quokka").stdout
    links = LINK.findall(out)
    assert len(links) == 2 == out.count(OSC8) // 2
    shown = {re.sub(r"\x1b\[[0-9;]*m", "", text).rsplit(":", 1)[0]: uri for uri, text in links}
    assert shown == {p: file_uri(vault / p) for p in NOTES}


@pytest.mark.parametrize("how", ["never", "auto", "json", "md", "paths", "csv"])
def test_no_link_where_colours_are_off_or_the_format_is_for_a_program(linked, how):
    vault, index = linked
    args = {"json": ["--json"], "md": ["--format", "md"], "paths": ["--format", "paths"],
            "csv": ["--format", "csv"]}.get(how, [])
    color = how if how in ("never", "auto") else "always"   # auto: a pipe here
    proc = search(vault, index, "quokka", *args, color=color)
    assert proc.returncode == 0 and "Kyoto" in proc.stdout
    assert "\x1b]" not in proc.stdout and "]8;;" not in proc.stdout


def on_a_terminal(vault, index, *args, env=None) -> str:
    return terminal_output([str(CLI), "--vault", str(vault), "--index-dir", str(index), "search", *args], env)


def test_a_terminal_gets_links_unless_no_color_says_otherwise(linked):
    vault, index = linked
    assert len(LINK.findall(on_a_terminal(vault, index, "quokka", env={"NO_COLOR": ""}))) == 2
    plain = on_a_terminal(vault, index, "quokka", env={"NO_COLOR": "1"})
    assert "Kyoto" in plain and "\x1b" not in plain


@pytest.mark.parametrize("setting, expect", [("obsidian", "uri"), ("none", None), ("file", "file")])
def test_the_vault_chooses_what_a_path_links_to(linked, setting, expect):
    vault, index = linked
    write(vault / ".vault-search.toml", f'hyperlinks = "{setting}"\n')
    out = search(vault, index, "kyoto", "-n", "1").stdout
    uri = search(vault, index, "kyoto", "-n", "1", "--json").stdout
    result = json.loads(uri)["results"][0]
    links = LINK.findall(out)
    if expect is None:
        assert not links and "\x1b[36m" in out   # colours stay
    else:
        assert [u for u, _ in links] == [result["uri"] if expect == "uri" else file_uri(vault / result["path"])]


def test_a_bad_hyperlinks_setting_is_one_line(linked):
    vault, index = linked
    write(vault / ".vault-search.toml", 'hyperlinks = "https"\n')
    proc = search(vault, index, "kyoto")
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1
    assert "hyperlinks must be one of 'file', 'obsidian', 'none'" in proc.stderr


def test_a_file_name_with_escapes_cannot_break_out_of_its_link(tmp_path):
    vault = write_notes(tmp_path / "vault", {"evil\x1b]8;;https:x.example\x1b\\\x07.md": "# Evil\n\nquokka\n"})
    index = tmp_path / "index"
    assert run_cli(vault, index, "index", "--no-embed").returncode == 0
    out = search(vault, index, "quokka").stdout
    assert out.count("\x1b]") == 2 and out.count("\x07") == 0       # one link: its opening and its end
    (uri, text), = LINK.findall(out)
    assert uri.startswith("file://") and "/evil%1B%5D8%3B%3Bhttps%3Ax.example%1B%5C%07.md" in uri
    assert "evil\\x1b]8;;https:x.example\\x1b\\\\x07.md" in text   # the path shown escaped


def test_the_fast_path_links_as_the_full_cli_does(linked):
    vault, index = linked
    server, _ = start_server(vault, index, "--no-watch")
    try:
        fast = search(vault, index, "quokka").stdout
        slow = search(vault, index, "quokka", "--no-server").stdout
        took = re.compile(r"[0-9]+ ms")
        assert LINK.findall(fast) and took.sub("", fast) == took.sub("", slow)
        assert OSC8 not in search(vault, index, "quokka", color="never").stdout
    finally:
        server.terminate()
        server.communicate(timeout=30)


@pytest.mark.parametrize("command", [["ls", "Travel"], ["links", "Travel/Kyoto trip.md"],
                                     ["similar", "数据库/索引.md"]])
def test_ls_links_and_similar_link_the_paths_they_print(linked, command):
    vault, index = linked
    write(vault / "Travel/Kyoto trip.md", "# Kyoto trip\n\nA quokka in Gion, see [[索引]].\n")
    assert run_cli(vault, index, "index", "--no-embed").returncode == 0

    def shown(color: str) -> str:
        proc = subprocess.run([str(CLI), "--vault", str(vault), "--index-dir", str(index), "--color", color,
                               *command], capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    uris = {uri for uri, _ in LINK.findall(shown("always"))}
    assert uris and uris <= {file_uri(vault / p) for p in NOTES}
    assert OSC8 not in shown("never") and OSC8 not in shown("auto")
