"""One rule for a note's date (issue 37, item 6) and filters that leave
notes out (item 14b), through the faces a user meets them in: the installed
CLI, the HTTP server and the MCP server.

A note's date is its frontmatter date, else its daily-log file name; a note
with neither has no date, whatever its file's mtime (a copy or a sync sets
every mtime to today): date filters leave it out and say so, and the JSON
says ``date: null``."""

import asyncio
import datetime as dt
import json
import urllib.request
from urllib.parse import quote

import pytest

from tests.conftest import run_cli, write_notes

TODAY = dt.date.today().isoformat()


@pytest.fixture(scope="module")
def dated(tmp_path_factory):
    """A vault written just now: every file's mtime is today, two notes
    dated today (frontmatter, daily-log name), one long ago, one undated."""
    root = tmp_path_factory.mktemp("dates")
    vault = write_notes(root / "vault", {
        "undated.md": "# Undated\nthe copper kettle, copied here today\n",
        "fresh.md": f"---\ndate: {TODAY}\ntags: [kitchen/tools]\n---\n# Fresh\nthe copper kettle, written today\n",
        f"memory/{TODAY}.md": "### 09:30 — Tea\nboiled the copper kettle\n",
        "Archive/Old.md": "---\ndate: 2020-01-05\n---\n# Old\nthe copper kettle of 2020\n",
    })
    index = root / "index"
    proc = run_cli(vault, index, "index", "--no-embed")
    assert proc.returncode == 0, proc.stderr
    return vault, index


def search(dated, *args):
    proc = run_cli(*dated, "search", "copper kettle", "--mode", "fts", *args)
    assert proc.returncode == 0, proc.stderr
    return proc


def found(dated, *args):
    data = json.loads(search(dated, "--json", *args).stdout)
    return {r["path"]: r["date"] for r in data["results"]}, data["warnings"]


def test_a_note_without_a_date_has_none_in_the_json_whatever_its_mtime(dated):
    dates, warnings = found(dated)
    assert dates == {"undated.md": None, "fresh.md": TODAY, f"memory/{TODAY}.md": f"{TODAY}T09:30",
                     "Archive/Old.md": "2020-01-05"}
    assert warnings == []


@pytest.mark.parametrize("window", [["--today"], ["--last", "7d"], ["--after", "2019-01-01"]])
def test_date_filters_select_only_dated_notes_and_say_what_they_left_out(dated, window):
    dates, warnings = found(dated, *window)
    assert "undated.md" not in dates
    assert {"fresh.md", f"memory/{TODAY}.md"} <= set(dates)
    assert [w for w in warnings if w.startswith("dates: left out 1 note without a date")], warnings


def test_the_date_warning_is_the_first_line_of_the_text_output(dated):
    proc = search(dated, "--today")
    assert "undated.md" not in proc.stdout and "fresh.md" in proc.stdout
    assert proc.stdout.splitlines()[0] == ("warning: dates: left out 1 note without a date (a note's date is its "
                                           "frontmatter date or its YYYY-MM-DD file name, never the file's mtime)")


def test_recency_ages_an_undated_note_by_its_mtime_and_explain_says_so(dated):
    proc = search(dated, "--recency-half-life", "30", "--explain")
    assert "undated.md: fts" in proc.stdout and f"undated, modified {TODAY}" in proc.stdout
    assert "dated 2020-01-05, recency x" in proc.stdout
    rows = {r["path"]: r for r in json.loads(search(dated, "--recency-half-life", "30", "--explain",
                                                    "--json").stdout)["explain"]["ranks"]}
    assert "date" not in rows["undated.md"] and rows["undated.md"]["modified"].startswith(TODAY)
    assert rows["fresh.md"]["date"] == TODAY and "modified" not in rows["fresh.md"]


# -- 14b. a filter that matches no note says so ------------------------------------------

def test_an_unknown_tag_a_wrong_case_folder_and_an_empty_combination_warn(dated):
    assert found(dated, "--tag", "kitchen/tool")[1] == [
        "tag 'kitchen/tool': no note has this tag (did you mean 'kitchen/tools'?)"]
    assert found(dated, "--path", "archive")[1] == [
        "path 'archive': no such folder or note in the vault (did you mean 'Archive'?)"]
    assert found(dated, "--path", "nowhere/at/all")[1] == ["path 'nowhere/at/all': no such folder or note in the vault"]
    assert found(dated, "--tag", "kitchen", "--path", "Archive")[1] == ["no note matches these filters together"]
    # filters that match notes, though not this query, say nothing
    assert found(dated, "--tag", "kitchen", "--path", "fresh.md")[1] == []
    text = search(dated, "--path", "archive").stdout.splitlines()
    assert text == ["warning: path 'archive': no such folder or note in the vault (did you mean 'Archive'?)",
                    "no results for 'copper kettle' (fts, " + text[1].split("(fts, ")[1]]


def _http_json(port, path):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=30) as resp:
        return json.loads(resp.read())


def test_http_and_mcp_carry_the_same_warnings(dated):
    from mcp import Client

    from vault_search.mcp_server import build_server
    from vault_search.server import VaultHTTPServer
    from vault_search.service import SearchService

    vault, index = dated
    service = SearchService(vault, index, watch=False, warm=False)
    httpd = VaultHTTPServer(None, "127.0.0.1", 0).start([service])
    try:
        answer = _http_json(httpd.server_port, f"/search?q={quote('copper kettle')}&mode=fts&tag=kitchen/tool")
        assert answer["warnings"] == ["tag 'kitchen/tool': no note has this tag (did you mean 'kitchen/tools'?)"]
        answer = _http_json(httpd.server_port, f"/search?q={quote('copper kettle')}&mode=fts&today=1")
        assert "undated.md" not in {r["path"] for r in answer["results"]}
        assert answer["warnings"][0].startswith("dates: left out 1 note without a date")
    finally:
        httpd.shutdown()
        httpd.server_close()

    async def session():
        async with Client(build_server(lambda: service)) as client:
            answer = await client.call_tool("search", {"query": "copper kettle", "mode": "fts", "path": "archive"})
            assert answer.structured_content["warnings"] == [
                "path 'archive': no such folder or note in the vault (did you mean 'Archive'?)"]
    try:
        asyncio.run(session())
    finally:
        service.close()
