"""What users of the peers expect (issue 16): notes by name, multi-get and ls,
--full and CSV, relative dates, MCP's schema and MCP over HTTP, bench on your
own vault, config, terminal habits, several vaults in one server.

One keyword index of the sample vault (plus two notes sharing a name) serves
the module: real SQLite, real files, the CLI in-process through click's runner,
a real HTTP server on 127.0.0.1 where a test is about the server."""

import asyncio
import csv
import datetime as dt
import io
import json
import os
import pty
import subprocess
import urllib.request

import pytest
from click.testing import CliRunner

from indexer.embed import HashEmbedder
from tests.conftest import CLI, SAMPLE_VAULT, copy_tree, write
from vault_search import Index
from vault_search.cli import main
from vault_search.filters import user_date


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    root = tmp_path_factory.mktemp("peers")
    vault = copy_tree(SAMPLE_VAULT, root / "vault")
    write(vault / "A/Same.md", "# Same\nthe first of two notes named Same\n")
    write(vault / "B/Same.md", "# Same\nthe second of two notes named Same\n")
    write(vault / "Twin.md", "# Twin\nat the root\n")
    write(vault / "A/Twin.md", "# Twin\nin a folder\n")
    write(vault / "A/Über.md", "---\ntitle: Overview\n---\nnon-ASCII name\n")
    index_dir = root / "index"
    with Index.open(vault, index_dir, create=True) as idx:
        idx.sync(embed=False)
    return vault, index_dir


def run(shared, *args, env=None):
    vault, index_dir = shared
    result = CliRunner().invoke(main, ["--vault", str(vault), "--index-dir", str(index_dir), *args],
                                env=env, prog_name="vault-search")
    return result


# -- 1. notes by name ------------------------------------------------------------

def test_get_and_links_resolve_names_and_aliases_like_a_wikilink(shared):
    vault, _ = shared
    by_name = run(shared, "get", "deep work", "--json")          # file name, any case
    assert by_name.exit_code == 0, by_name.output
    assert json.loads(by_name.output)["path"] == "Notes/Reading/Deep Work.md"
    alias = json.loads(run(shared, "get", "首页", "--json").output)   # Home's alias
    assert alias["path"] == "Home.md" and alias["total_lines"] == len((vault / "Home.md").read_text().splitlines())
    ranged = json.loads(run(shared, "get", "首页:2-3", "--json").output)
    assert (ranged["start_line"], ranged["end_line"]) == (2, 3)
    assert ranged["text"] == "\n".join((vault / "Home.md").read_text().splitlines()[1:3])
    end_of_path = json.loads(run(shared, "get", "Reading/卡片笔记写作法", "--json").output)
    assert end_of_path["path"] == "Notes/Reading/卡片笔记写作法.md"
    links = run(shared, "links", "数据库索引", "--json")
    assert json.loads(links.output)["path"] == "Notes/数据库/数据库索引.md"


def test_an_ambiguous_or_unknown_name_is_a_one_line_error(shared):
    ambiguous = run(shared, "get", "same")
    assert ambiguous.exit_code == 1
    assert ambiguous.output == "error: 'same' names 2 notes: A/Same.md, B/Same.md; give the path\n"
    # The path from the vault root comes before the end of a longer path, as in Obsidian;
    # case is ignored beyond ASCII too.
    assert json.loads(run(shared, "get", "twin", "--json").output)["path"] == "Twin.md"
    assert json.loads(run(shared, "get", "über", "--json").output)["path"] == "A/Über.md"
    assert json.loads(run(shared, "get", "overview", "--json").output)["path"] == "A/Über.md"   # its title
    assert json.loads(run(shared, "get", "A/Same", "--json").output)["path"] == "A/Same.md"
    missing = run(shared, "get", "No Such Note")
    assert missing.exit_code == 1
    assert missing.output.strip().splitlines()[-1] == "error: No Such Note: no note has this path, name or alias"


def test_a_line_range_never_tells_what_lies_outside_the_vault(shared):
    there, absent = run(shared, "get", "/etc/passwd:abc"), run(shared, "get", "/etc/no-such-file:abc")
    assert (there.exit_code, absent.exit_code) == (1, 1)
    assert there.output.replace("passwd", "X") == absent.output.replace("no-such-file", "X")


def test_get_line_numbers(shared):
    vault, _ = shared
    out = run(shared, "get", "Home.md:2-3", "--line-numbers").output.splitlines()
    lines = (vault / "Home.md").read_text().splitlines()
    assert out == [f"2  {lines[1]}", f"3  {lines[2]}"]


def test_api_get_takes_the_location_the_text_output_prints(shared):
    vault, index_dir = shared
    with Index.open(vault, index_dir) as idx:
        note = idx.get("Notes/Reading/Deep Work.md:2-3")
        assert (note.path, note.start_line, note.end_line) == ("Notes/Reading/Deep Work.md", 2, 3)
        assert idx.get("Deep Work:2").start_line == 2


# -- 2. multi-get and ls ---------------------------------------------------------

def test_multi_get_by_glob_folder_and_name_within_a_cap(shared):
    vault, _ = shared
    data = json.loads(run(shared, "multi-get", "memory/2026-*.md", "Deep Work", "--json").output)
    assert [n["path"] for n in data["notes"]] == ["memory/2026-11-01.md", "memory/2026-11-02.md",
                                                   "Notes/Reading/Deep Work.md"]
    assert data["notes"][0]["text"] == (vault / "memory/2026-11-01.md").read_text().rstrip("\n")
    assert data["cut"] == [] and data["bytes"] == sum(len(n["text"].encode()) for n in data["notes"])
    deep = [n["path"] for n in json.loads(run(shared, "multi-get", "**/Deep*.md", "--json").output)["notes"]]
    assert deep == ["Notes/Reading/Deep Work.md"]
    folder = json.loads(run(shared, "multi-get", "memory/", "--json").output)
    assert len(folder["notes"]) == 6
    first_size = len((vault / "memory/2026-11-01.md").read_text().rstrip("\n").encode())
    capped = json.loads(run(shared, "multi-get", "memory/2026-*.md", "--max-bytes", str(first_size + 5),
                            "--json").output)
    assert [n["path"] for n in capped["notes"]] == ["memory/2026-11-01.md"]
    assert capped["cut"][0]["path"] == "memory/2026-11-02.md" and "over max_bytes" in capped["cut"][0]["reason"]
    text = run(shared, "multi-get", "memory/2026-*.md", "--max-lines", "2").output
    assert "==> memory/2026-11-01.md:1-2 (of 11 lines) <==" in text and "cut at line 2 of 11: max_lines (2)" in text
    nothing = run(shared, "multi-get", "nowhere/*.md")
    assert nothing.exit_code == 1 and "no indexed note matches this glob" in nothing.output
    # No glob is slow or breaks: many stars against a long name, a range backwards, a lone [.
    assert run(shared, "multi-get", "**a**a**a**a**a**a**a**a**z").exit_code == 1
    assert run(shared, "multi-get", "memory/[z-a]*").exit_code == 1
    assert [n["path"] for n in json.loads(run(shared, "multi-get", "memory/[0-9]*-0[!1].md", "--json")
                                          .output)["notes"]] == ["memory/2026-11-02.md"]
    # --max-lines counts the note's text, not its frontmatter (issue 37): Deep Work's 7 lines of it come whole.
    deep_lines = (vault / "Notes/Reading/Deep Work.md").read_text().splitlines()
    assert deep_lines[6] == "---" and deep_lines[7] == "# Deep Work"
    lines_cut = json.loads(run(shared, "multi-get", "Deep Work", "--max-lines", "2", "--json").output)
    assert lines_cut["cut"] == [{"path": "Notes/Reading/Deep Work.md",
                                 "bytes": len((vault / "Notes/Reading/Deep Work.md").read_text().rstrip("\n").encode()),
                                 "reason": f"cut at line 9 of {len(deep_lines)}: max_lines (2)"}]
    assert lines_cut["notes"][0]["text"] == "\n".join(deep_lines[:9])
    assert (lines_cut["notes"][0]["start_line"], lines_cut["notes"][0]["end_line"]) == (1, 9)
    assert f"==> Notes/Reading/Deep Work.md:1-9 (of {len(deep_lines)} lines) <==" in run(
        shared, "multi-get", "Deep Work", "--max-lines", "2").output


def test_multi_get_reads_the_good_names_and_lists_each_bad_one(shared):
    from mcp import Client

    from vault_search.mcp_server import build_server
    from vault_search.service import SearchService

    names = ["Deep Work", "No Such Note", "Same", "nowhere/*.md", "../up"]
    data = json.loads(run(shared, "multi-get", *names, "--json").stdout)
    assert [n["path"] for n in data["notes"]] == ["Notes/Reading/Deep Work.md"]
    assert data["missing"] == [
        {"pattern": "No Such Note", "error": "No Such Note: no note has this path, name or alias"},
        {"pattern": "Same", "error": "'Same' names 2 notes: A/Same.md, B/Same.md; give the path"},
        {"pattern": "nowhere/*.md", "error": "nowhere/*.md: no indexed note matches this glob"},
        {"pattern": "../up", "error": "../up: outside the vault"}]
    text = run(shared, "multi-get", *names)
    assert text.exit_code == 0   # some notes were read: exit 1 only when no name names a note
    assert text.stdout.endswith("not found (the notes above were read):\n"
                                "  No Such Note: no note has this path, name or alias\n"
                                "  'Same' names 2 notes: A/Same.md, B/Same.md; give the path\n"
                                "  nowhere/*.md: no indexed note matches this glob\n  ../up: outside the vault\n")
    every_bad = run(shared, "multi-get", "No Such Note", "Same")
    assert every_bad.exit_code == 1 and every_bad.stderr == (   # every bad name named, in one line
        "error: No Such Note: no note has this path, name or alias; "
        "'Same' names 2 notes: A/Same.md, B/Same.md; give the path\n")
    vault, index_dir = shared

    async def session():
        async with Client(build_server(lambda: SearchService(vault, index_dir, watch=False, warm=False))) as client:
            many = await client.call_tool("multi_get", {"paths": ["Deep Work", "No Such Note"]})
            assert not many.is_error and len(many.structured_content["notes"]) == 1
            assert many.structured_content["missing"] == [data["missing"][0]]

    asyncio.run(session())


def test_ls_lists_folders_with_counts_then_notes(shared):
    root = json.loads(run(shared, "ls", "--json").output)
    folders = {f["path"]: f["notes"] for f in root["folders"]}
    assert folders["memory/"] == 6 and folders["Notes/"] == 9
    assert [n["path"] for n in root["notes"]] == ["Home.md", "Twin.md"]
    memory = json.loads(run(shared, "ls", "memory", "--json").output)
    titles = {n["path"]: n["title"] for n in memory["notes"]}
    assert titles["memory/feedback-rules.md"] == "Feedback rules" and len(titles) == 6
    assert memory["folders"] == []
    dated = {n["path"]: n["date"] for n in memory["notes"]}
    assert dated["memory/2026-11-01.md"] == "2026-11-01"
    text = run(shared, "ls").output
    assert "memory/  6 notes" in text and "Inbox/  1 note," in text


# -- 3. search options -----------------------------------------------------------

def test_full_and_csv(shared):
    vault, _ = shared
    full = json.loads(run(shared, "search", "tea ceremony", "--full", "--json", "-n", "1").output)
    hit = full["results"][0]
    assert hit["text"] == (vault / hit["path"]).read_text().rstrip("\n")
    plain = json.loads(run(shared, "search", "tea ceremony", "--json", "-n", "1").output)
    assert "text" not in plain["results"][0]
    rows = list(csv.DictReader(io.StringIO(run(shared, "search", "tea ceremony", "--format", "csv").output)))
    assert rows and rows[0]["path"] == plain["results"][0]["path"]
    assert rows[0]["start_line"] == str(plain["results"][0]["start_line"]) and rows[0]["rank"] == "1"


def test_dates_relative_and_at_month_or_year_precision(shared):
    today = dt.date(2026, 3, 31)
    assert user_date("yesterday", today) == "2026-03-30"
    assert user_date("7d", today) == "2026-03-24" and user_date("2w", today) == "2026-03-17"
    assert user_date("1m", today) == "2026-02-28" and user_date("1y", today) == "2025-03-31"
    assert user_date("2026-11") == "2026-11" and user_date("2026") == "2026"
    assert user_date("2026-13") is None and user_date("soon") is None

    def paths(*args):
        return set(run(shared, "search", "迁移 stand-up reading running", "--mode", "fts", "--format", "paths",
                       *args).stdout.split())

    november = paths("--path", "memory", "--after", "2026-11")
    assert november == {"memory/2026-11-01.md", "memory/2026-11-02.md"}
    assert paths("--path", "memory", "--before", "2026-10") == set()
    assert paths("--path", "memory", "--after", "2026-11-02", "--before", "2026") == {"memory/2026-11-02.md"}
    bad = run(shared, "search", "x", "--after", "next week")
    assert bad.exit_code == 2 and "or an age like 7d, 2w, 3m, 1y" in bad.output


# -- 4. MCP: schema, errors, and over HTTP -----------------------------------------

def test_mcp_schema_an_agent_can_use():
    from vault_search.mcp_server import build_server

    tools = {t.name: t for t in asyncio.run(build_server(lambda: None).list_tools())}
    assert set(tools) == {"search", "get", "multi_get", "similar", "log", "ls", "links", "tags", "status"}
    search = tools["search"].input_schema["properties"]
    assert search["mode"]["anyOf"][0]["enum"] == ["hybrid", "fts", "vector"]
    assert (search["limit"]["minimum"], search["limit"]["maximum"]) == (1, 1000)
    assert (search["min_score"]["minimum"], search["min_score"]["maximum"]) == (0, 1)
    assert {"type": "string"} in search["tags"]["anyOf"] and {"type": "string"} in search["where"]["anyOf"]
    for tool in tools.values():
        for name, prop in tool.input_schema.get("properties", {}).items():
            assert prop.get("description"), (tool.name, name)
    description = tools["search"].description
    assert "relevance" in description and "fewer than `limit` results" in description
    # each tool's vault parameter says what that tool does without one (issue 37)
    vault = {name: tool.input_schema["properties"]["vault"]["description"] for name, tool in tools.items()}
    assert vault["search"].endswith("default: every vault, each result naming its own.")
    assert vault["status"].endswith("default: the only vault's status (with several, each vault's).")
    assert all(v.endswith("default: the only vault (with several, name one).") for name, v in vault.items()
               if name not in ("search", "status")), vault


def test_mcp_errors_name_parameters_and_a_string_stands_for_a_list(shared):
    from mcp import Client

    from vault_search.mcp_server import build_server
    from vault_search.service import SearchService

    vault, index_dir = shared

    async def session():
        server = build_server(lambda: SearchService(vault, index_dir, watch=False, warm=False))
        async with Client(server) as client:
            bad = await client.call_tool("search", {"query": "x", "after": "next week"})
            assert bad.is_error and "after expects a date" in bad.content[0].text and "--after" not in \
                bad.content[0].text
            half = await client.call_tool("search", {"query": "x", "recency_half_life": -1})
            assert half.is_error and "recency_half_life must be" in half.content[0].text
            # an argument the tool does not take is refused, naming the closest one, as HTTP does (issue 37)
            misspelt = await client.call_tool("search", {"query": "索引", "tag": "数据库"})
            assert misspelt.is_error and misspelt.content[0].text == "search takes no parameter 'tag' (did you mean " \
                                                                     "'tags'?)"
            stray = await client.call_tool("get", {"path": "Home.md", "zzz": 1})
            assert stray.is_error and stray.content[0].text == "get takes no parameter 'zzz'"
            tagged = await client.call_tool("search", {"query": "索引", "tags": "数据库", "mode": "fts"})
            assert not tagged.is_error and tagged.structured_content["results"]
            assert all("数据库" in r["tags"] for r in tagged.structured_content["results"])
            ranged = await client.call_tool("get", {"path": "Home.md:2-3"})
            assert (ranged.structured_content["start_line"], ranged.structured_content["end_line"]) == (2, 3)
            many = await client.call_tool("multi_get", {"paths": "memory/2026-*.md", "max_lines": 1})
            assert len(many.structured_content["notes"]) == 2
            tags = await client.call_tool("tags", {"limit": 2})
            assert len(tags.structured_content["tags"]) == 2
            listing = await client.call_tool("ls", {"folder": "memory"})
            assert len(listing.structured_content["notes"]) == 6

    asyncio.run(session())


def _http(port, path, headers=None, data=None):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_mcp_over_http_on_serve_and_several_vaults(shared, tmp_path):
    from mcp import Client

    from vault_search.resident import find_server
    from vault_search.server import VaultHTTPServer
    from vault_search.service import SearchService

    vault, index_dir = shared
    memory = write(tmp_path / "memory" / "kyoto.md", "# Kyoto plan\nBook the tea ceremony in Gion.\n").parent
    services = [SearchService(vault, index_dir, watch=False, warm=False),
                SearchService(memory, tmp_path / "memory-index", watch=False, warm=False, embedder=HashEmbedder(32))]
    httpd = VaultHTTPServer(None, "127.0.0.1", 0).start(services)
    port = httpd.server_port
    try:
        # Each vault's own clients find the one server.
        assert find_server(index_dir, vault) == ("127.0.0.1", port)
        assert find_server(tmp_path / "memory-index", memory) == ("127.0.0.1", port)
        status, both = _http(port, "/search?q=tea+ceremony&mode=fts")
        assert status == 200
        assert {(r["vault"], r["path"]) for r in both["results"]} == {("vault", "Notes/Travel/Kyoto trip.md"),
                                                                       ("memory", "kyoto.md")}
        status, one = _http(port, "/search?q=tea+ceremony&mode=fts&vault=memory")
        assert [r["path"] for r in one["results"]] == ["kyoto.md"]
        assert "vault" not in one["results"][0]   # one vault named: its own answer, as the CLI prints it
        assert _http(port, "/mcp")[0] == 405      # no event streams: POST only
        assert _http(port, "/search?q=x&after=soon&vault=memory")[1]["error"].startswith("after expects")
        assert _http(port, "/search?q=x&after=soon&vault=memory", {"X-Vault-Search-Client": "cli"})[1][
            "error"].startswith("--after expects")
        assert _http(port, "/get?path=kyoto")[0] == 400
        assert _http(port, f"/get?path=kyoto&vault={memory}")[1]["path"] == "kyoto.md"
        assert _http(port, "/search?q=x&vault=elsewhere") == (
            409, {"error": "no vault named 'elsewhere' here; this server serves vault, memory"})
        # an error names vaults, never where they (or their indexes) lie on this machine (issue 37)
        outside = _http(port, f"/get?path={memory.parent}/x.md&vault=memory")
        assert outside[0] == 403 and outside[1]["error"].endswith(": outside the vault (memory); refusing to read it")
        assert str(vault) not in outside[1]["error"].split(":")[-1] and str(memory) + ")" not in outside[1]["error"]
        unreadable = _http(port, f"/get?path={vault}/Home.md&vault=memory")[1]["error"]
        assert "(memory)" in unreadable and "/" + memory.name + ")" not in unreadable
        assert len(_http(port, "/status")[1]["vaults"]) == 2

        # MCP over streamable HTTP, behind the same Host/Origin checks.
        call = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}).encode()
        refused = _http(port, "/mcp", {"Origin": "http://evil.example", "Content-Type": "application/json",
                                       "Accept": "application/json, text/event-stream"}, call)
        assert refused[0] == 403 and "not local" in refused[1]["error"]

        async def session():
            async with Client(f"http://127.0.0.1:{port}/mcp") as client:
                assert client.server_info.name == "vault-search"
                found = await client.call_tool("search", {"query": "tea ceremony", "mode": "fts",
                                                          "vault": "memory"})
                assert [r["path"] for r in found.structured_content["results"]] == ["kyoto.md"]
                everywhere = await client.call_tool("search", {"query": "tea ceremony", "mode": "fts"})
                assert {r["vault"] for r in everywhere.structured_content["results"]} == {"vault", "memory"}
                lines = await client.call_tool("get", {"path": "Home:1-2", "vault": "vault"})
                assert lines.structured_content["end_line"] == 2
                wrong = await client.call_tool("get", {"path": "Home", "vault": str(tmp_path)})
                assert wrong.is_error and wrong.content[0].text.endswith(
                    f": no vault named '{tmp_path}' here; this server serves vault, memory")

        asyncio.run(session())
    finally:
        httpd.shutdown()
        httpd.server_close()
        for service in services:
            service.close()


# -- 5. bench on your own vault ----------------------------------------------------

def test_bench_scores_the_users_known_items(shared, tmp_path):
    items = tmp_path / "items.jsonl"
    items.write_text("\n".join(json.dumps(x, ensure_ascii=False) for x in [
        {"query": "tea ceremony", "targets": ["Notes/Travel/Kyoto trip.md"]},
        {"query": "covering index", "targets": "数据库索引", "kind": "keyword"},
        {"query": "zzzz nothing matches", "targets": ["Home"]},
    ]) + "\n", encoding="utf-8")
    out = json.loads(run(shared, "bench", str(items), "--json").output)
    fts = out["modes"]["fts"]
    assert out["items"] == 3 and list(out["modes"]) == ["fts"]   # a keyword index scores its one mode
    assert fts["metrics"]["all"]["hit@1"] == pytest.approx(2 / 3, abs=1e-3)
    assert fts["metrics"]["keyword"] == {"n": 1, "hit@1": 1.0, "mrr@10": 1.0, "r@10": 1.0}
    assert [m["query"] for m in fts["misses"]] == ["zzzz nothing matches"]
    text = run(shared, "bench", str(items)).output
    assert "3 known items" in text and "zzzz nothing matches" in text
    items.write_text('{"query": "x"}\n')
    bad = run(shared, "bench", str(items))
    assert bad.exit_code == 2 and ':1: each line needs "query"' in bad.output


def test_bench_runs_from_anywhere_and_the_benchmarks_are_not_installed(shared, tmp_path):
    """`bench` scores with the product's own module (vault_search.bench); the
    development benchmarks stay in the checkout and are not installed."""
    import tomllib

    from tests.conftest import REPO

    packages = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    assert "benchmarks" not in str(packages)
    items = tmp_path / "items.jsonl"
    items.write_text(json.dumps({"query": "tea ceremony", "targets": ["Notes/Travel/Kyoto trip.md"]}) + "\n")
    out = subprocess.run([str(CLI), "--vault", str(shared[0]), "--index-dir", str(shared[1]), "bench",
                          str(items), "--json"], cwd="/", capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["modes"]["fts"]["metrics"]["all"]["hit@1"] == 1.0
    imported = subprocess.run([str(CLI.parent / "python"), "-c",
                               "import sys; sys.path.remove(''); import vault_search.bench, vault_search.cli"],
                              cwd="/", capture_output=True, text=True)
    assert imported.returncode == 0, imported.stderr


# -- 6. settings you can see -------------------------------------------------------

def test_config_says_where_each_setting_comes_from(shared, tmp_path):
    vault = write(tmp_path / "v" / ".vault-search.toml", "stale_days = 7\n").parent
    write(vault / "n.md", "# n\n")
    env = {"VAULT_SEARCH_RERANK_URL": "http://127.0.0.1:1/v1", "VAULT_SEARCH_RERANK_API_KEY": "sekrit",
           "XDG_CONFIG_HOME": str(tmp_path / "config")}
    result = CliRunner().invoke(main, ["--vault", str(vault), "--index-dir", str(tmp_path / "i"), "config", "--json"],
                                env=env)
    data = json.loads(result.output)
    settings = {s["name"]: s for s in data["settings"]}
    assert data["settings_file"] == str(vault / ".vault-search.toml")
    assert (settings["stale_days"]["value"], settings["stale_days"]["source"]) == (7, str(vault / ".vault-search.toml"))
    assert settings["stale_field"]["source"] == "default"
    assert settings["vault"]["source"] == "--vault" and settings["index_dir"]["source"] == "--index-dir"
    assert settings["rerank.url"]["source"] == "environment VAULT_SEARCH_RERANK_URL"
    assert settings["rerank.api_key"]["value"] == "(set)" and "sekrit" not in result.output
    text = CliRunner().invoke(main, ["--vault", str(vault), "--index-dir", str(tmp_path / "i"), "config"], env=env)
    assert "stale_days" in text.output and "[environment VAULT_SEARCH_RERANK_URL]" in text.output
    status = run(shared, "status", "--json")
    assert json.loads(status.output)["settings_file"] is None


# -- 7. terminal habits ------------------------------------------------------------

def test_color_flag_and_plural_and_help(shared, tmp_path):
    vault, index_dir = shared
    always = CliRunner().invoke(main, ["--vault", str(vault), "--index-dir", str(index_dir), "--color", "always",
                                       "search", "tea ceremony", "-n", "1"])
    never = CliRunner().invoke(main, ["--vault", str(vault), "--index-dir", str(index_dir), "--color", "never",
                                      "search", "tea ceremony", "-n", "1"])
    assert "\x1b[" in always.output and "\x1b[" not in never.output
    assert never.output.rstrip().splitlines()[-1].startswith("1 result (")
    one = write(tmp_path / "one" / "n.md", "# n\nsolo\n").parent
    indexed = CliRunner().invoke(main, ["--vault", str(one), "--index-dir", str(tmp_path / "oi"), "index",
                                        "--no-embed"])
    assert indexed.output.startswith("1 note scanned: 1 added") and "1 chunk written" in indexed.output
    listing = CliRunner().invoke(main, ["--help"]).output
    assert "..." not in listing.split("Commands:")[1]
    assert "outgoing (and where each resolves), backlinks, unresolved" in " ".join(listing.split())


def test_no_color_on_a_terminal(shared):
    """A real terminal (a pty): colours by default, none with NO_COLOR or --color never."""
    vault, index_dir = shared

    def on_a_tty(extra_env, *flags):
        master, slave = pty.openpty()
        env = {**{k: v for k, v in os.environ.items() if k != "NO_COLOR"}, **extra_env}
        proc = subprocess.run([str(CLI), "--vault", str(vault), "--index-dir", str(index_dir), *flags, "search",
                               "tea ceremony", "-n", "1", "--no-server"], stdout=slave, stderr=subprocess.PIPE,
                              env=env, timeout=120)
        os.close(slave)
        out = b""
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:
                break
            if not chunk:
                break
            out += chunk
        os.close(master)
        assert proc.returncode == 0, proc.stderr
        return out

    assert b"\x1b[" in on_a_tty({})
    assert b"\x1b[" not in on_a_tty({"NO_COLOR": "1"})
    assert b"\x1b[" in on_a_tty({"NO_COLOR": "1"}, "--color", "always")


def test_completion_of_paths_folders_and_tags(shared):
    vault, index_dir = shared

    def complete(words):
        env = {"_VAULT_SEARCH_COMPLETE": "bash_complete", "COMP_WORDS": " ".join(
            ["vault-search", "--vault", str(vault), "--index-dir", str(index_dir), *words]),
            "COMP_CWORD": str(4 + len(words))}
        out = CliRunner().invoke(main, [], env=env, prog_name="vault-search").output
        return [line.split(",", 1)[1] for line in out.splitlines()]

    assert complete(["get", "Notes/R"]) == ["Notes/Reading/Deep Work.md", "Notes/Reading/卡片笔记写作法.md"]
    assert complete(["ls", "No"]) == ["Notes/"]
    assert "project/vault-search" in complete(["search", "x", "--tag", "proj"])
    assert complete(["mul"]) == ["multi-get"]


def test_progress_lines_when_piped_and_streamed_events(tmp_path):
    vault = tmp_path / "v"
    for i in range(12):
        write(vault / f"n{i}.md", f"# note {i}\nword{i}\n")
    piped = CliRunner().invoke(main, ["--vault", str(vault), "--index-dir", str(tmp_path / "i"), "index",
                                      "--no-embed"], env={"VAULT_SEARCH_PROGRESS_S": "0"})
    assert "indexing: " in piped.stderr and "/24 note reads and writes" in piped.stderr
    assert piped.stdout.startswith("12 notes scanned")
    write(vault / "n12.md", "# note 12\n")
    streamed = CliRunner().invoke(main, ["--vault", str(vault), "--index-dir", str(tmp_path / "i"), "index",
                                         "--no-embed", "--json", "--stream"])
    events = [json.loads(line) for line in streamed.stdout.splitlines()]
    assert events[-1]["event"] == "done" and events[-1]["report"]["added"] == 1
    assert any(e["event"] == "progress" and e["stage"] == "indexing" for e in events[:-1])


def test_an_error_hides_whole_folders_only():
    """A vault's folder is its name in an error, and a neighbour that only
    starts the same (~/notes-old beside ~/notes) keeps its own name."""
    import types

    from vault_search.vaults import VaultSet

    home = os.path.expanduser("~")
    config = types.SimpleNamespace(vault_name="notes", vault=f"{home}/notes", index_dir=f"{home}/.idx")
    vaults = VaultSet.__new__(VaultSet)
    vaults.services = [types.SimpleNamespace(config=config)]
    message = f"{home}/notes/a.md; {home}/notes-old/x.md; {home}/.idx/db; {home}"
    assert vaults.without_paths(message) == "notes/a.md; ~/notes-old/x.md; <index of notes>/db; ~"
