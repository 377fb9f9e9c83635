"""The installed ``vault-search`` command on a real temp vault."""

import json
import os
import re

from conftest import CLI, REPO, write


def test_index_search_json_and_exit_codes(cli):
    r = cli("index", "--no-embed")
    assert r.code == 0, r
    assert re.search(r"22 notes scanned: 22 added", r.out)
    r = cli("search", "tea ceremony", "--json")
    assert r.code == 0, r
    data = r.json()
    assert data["results"][0]["path"] == "Notes/Travel/Kyoto trip.md"
    assert data["mode"] == "fts" and data["warnings"] == []
    # Several words without quotes are one query.
    assert cli("search", "tea", "ceremony", "--json").json()["results"][0]["path"] == "Notes/Travel/Kyoto trip.md"


def test_no_hits_is_success_and_hostile_queries_are_text(cli):
    cli("index", "--no-embed")
    for query in ["zebrafish", "C++", '"', "AND", "*", "foo-bar", "x:y", "", "a" * 10_240]:
        r = cli("search", "--json", "--", query)
        assert r.code == 0, (query, r)
        assert isinstance(r.json()["results"], list)
    assert cli("search", "--json", "--", "*").json()["warnings"] == ["query has no searchable words"]


def test_explain_prints_the_query_even_without_hits(cli):
    cli("index", "--no-embed")
    r = cli("search", "zebrafish", "--explain")
    assert r.code == 0 and "no results" in r.out and 'FTS MATCH: "zebrafish"' in r.out


def test_terminal_output_lists_path_lines_and_snippet(cli):
    cli("index", "--no-embed")
    r = cli("search", "covering index", "-n", "1")
    assert r.code == 0
    lines = r.out.splitlines()
    assert "数据库索引  Notes/数据库/数据库索引.md:" in lines[0]
    assert "\x1b[" not in r.out  # no colour codes when piped
    assert any("covering index" in line for line in lines)


def test_usage_errors_exit_2_runtime_errors_exit_1(cli, tmp_path):
    r = cli("search", "x")
    assert r.code == 1 and r.err.strip() == f"error: no index at {tmp_path / 'index'}; run `vault-search index` first"
    cli("index", "--no-embed")
    r = cli("search", "x", "--after", "next week")
    assert r.code == 2 and "--after expects a date like 2026-11-01" in r.err
    r = cli("search", "x", "--mode", "vector")
    assert r.code == 2 and "needs embeddings" in r.err
    r = cli("search", "x", "--limit", "0")
    assert r.code == 2
    r = cli("index", vault_dir=tmp_path / "missing")
    assert r.code == 1 and "vault folder not found" in r.err
    assert len(r.err.strip().splitlines()) == 1


def test_get_whole_note_and_line_ranges(cli, vault):
    r = cli("get", "Notes/Travel/Kyoto trip.md:6-7")
    assert r.code == 0, r
    lines = (vault / "Notes/Travel/Kyoto trip.md").read_text(encoding="utf-8").splitlines()
    assert r.out == "\n".join(lines[5:7]) + "\n"
    data = cli("get", "Notes/Travel/Kyoto trip.md:12", "--json").json()
    assert (data["start_line"], data["end_line"], data["total_lines"]) == (12, len(lines), len(lines))
    assert cli("get", "Home").out.startswith("---\ntitle: Home")  # .md may be left out
    r = cli("get", "Home.md:999")
    assert r.code == 2 and "past the end" in r.err
    for bad in ("Home.md:0", "Home.md:5-2"):
        r = cli("get", bad)
        assert r.code == 2 and "bad line range" in r.err, r
    r = cli("get", ".archive/old-plan.md")
    assert r.code == 1 and "not served" in r.err and "zebrafish" not in r.out


def test_get_refuses_paths_outside_the_vault(cli, vault, tmp_path):
    write(tmp_path / "secret.md", "top secret")
    os.symlink(tmp_path / "secret.md", vault / "link.md")
    for path in ["../secret.md", str(tmp_path / "secret.md"), "link.md", "Notes/../../secret.md", "/etc/passwd"]:
        r = cli("get", path)
        assert r.code == 1, path
        assert "outside the vault" in r.err and "top secret" not in r.out
    r = cli("get", ".obsidian/app.json")
    assert r.code == 1 and "no such note" in r.err
    r = cli("get", "no/such/note.md")
    assert r.code == 1 and "no such note" in r.err


def test_status_reports_counts_location_and_versions(cli, index_dir):
    cli("index", "--no-embed")
    data = cli("status", "--json").json()
    assert data["notes"] == 22 and data["chunks"] > 21
    assert data["index_dir"] == str(index_dir)
    assert data["schema_version"] == 8 and data["segmenter_version"].startswith("1/")
    assert data["last_sync"]["added"] == 22
    text = cli("status").out
    assert "notes:" in text and str(index_dir) in text and "last sync:" in text


def test_index_progress_is_quiet_when_piped_and_json_report(cli):
    r = cli("index", "--no-embed", "--json")
    report = json.loads(r.out)
    assert report["added"] == 22 and report["warnings"] == []
    assert "Indexing" not in r.out + r.err


def test_index_of_a_folder_without_notes_says_where_it_looked(cli, tmp_path):
    folder = write(tmp_path / "Documents" / "notes.txt", "plain text, not Markdown\n").parent
    r = cli("index", "--no-embed", vault_dir=folder, index=tmp_path / "idx")
    assert r.code == 0 and r.out.startswith("0 notes scanned")
    assert r.err == (f"warning: no Markdown notes (.md) found under {folder}: is it the vault folder? (name it with "
                     "--vault DIR; dot-folders and ignore globs are skipped)\n")
    report = cli("index", "--no-embed", "--json", vault_dir=folder, index=tmp_path / "idx").json()
    assert report["warnings"] == [{"path": "", "message": r.err[len("warning: "):-1]}]
    write(folder / "first.md", "# First\n")
    again = cli("index", "--no-embed", vault_dir=folder, index=tmp_path / "idx")
    assert again.code == 0 and again.err == "" and again.out.startswith("1 note scanned: 1 added")


def test_environment_variables_choose_vault_and_index(vault, index_dir):
    import subprocess

    env = {**os.environ, "VAULT_SEARCH_VAULT": str(vault), "VAULT_SEARCH_INDEX_DIR": str(index_dir)}
    subprocess.run([str(CLI), "index", "--no-embed"], env=env, check=True, capture_output=True)
    out = subprocess.run([str(CLI), "search", "Kyoto", "--json"], env=env, check=True,
                         capture_output=True, text=True).stdout
    assert json.loads(out)["results"][0]["path"] == "Notes/Travel/Kyoto trip.md"


def test_every_command_has_help_and_is_in_the_readme(cli):
    import subprocess

    readme = (REPO / "README.md").read_text(encoding="utf-8")
    out = subprocess.run([str(CLI), "--help"], capture_output=True, text=True, check=True).stdout
    commands = re.findall(r"^  ([\w-]+)\s{2,}\S", out.split("Commands:")[1], re.M)
    assert set(commands) == {"index", "search", "get", "links", "tags", "status", "watch", "serve", "mcp", "cache", "bench", "config", "ls", "multi-get", "open", "similar", "log"}
    for command in commands:
        help_text = subprocess.run([str(CLI), command, "--help"], capture_output=True, text=True, check=True).stdout
        assert len(help_text) > 100
        assert f"vault-search {command}" in readme or f" {command} " in readme, command


PASTE_NOTE = """---
tags: [demo]
---
# Paste test

> [!note] Zephyr facts
> The zephyr is a #weather/wind word, see [[Glossary/Winds|wind list]].

| Wind | Note |
|------|------|
| zephyr | <span style="color:red">west</span> **wind** |

<!-- private: do not show -->
Type `[[Raw]] <b>` to link. %% hidden too %%
"""


def test_snippets_are_reading_view_text_and_md_pastes_them_as_text(cli, tmp_path):
    vault = tmp_path / "paste-vault"
    write(vault / "Notes" / "Paste.md", PASTE_NOTE)
    assert cli("index", "--no-embed", vault_dir=vault).code == 0
    # Callout marker, table pipes, link target, HTML, comments and emphasis
    # are gone; the callout's title, the cells, the alias, the tag and code stay.
    shown = ("Zephyr facts The zephyr is a #weather/wind word, see wind list. Wind · Note zephyr · west wind "
             "Type [[Raw]] <b> to link.")
    [result] = cli("search", "zephyr", "--json", vault_dir=vault).json()["results"]
    assert result["snippet"] == shown
    text = cli("search", "zephyr", vault_dir=vault).out.splitlines()
    assert f"    {shown}" in text
    # Pasted into a note, the snippet makes no tag, link or HTML there: only
    # the result's own wikilink and its obsidian:// link are Markdown.
    md = cli("search", "zephyr", "--format", "md", vault_dir=vault).out
    assert md == ("- [[Notes/Paste|Paste test]] — [Notes/Paste.md:4-14](obsidian://open?vault=paste-vault"
                  "&file=Notes%2FPaste.md)\n"
                  "  > Zephyr facts The zephyr is a \\#weather/wind word, see wind list. Wind · Note zephyr · west "
                  "wind Type \\[\\[Raw\\]\\] \\<b\\> to link.\n")


def test_progress_lines_count_a_stages_rate_from_its_first_report(monkeypatch, capsys):
    from types import SimpleNamespace

    from vault_search import progress

    clock = iter([100.0, 150.0])
    monkeypatch.setattr(progress, "time", SimpleNamespace(monotonic=lambda: next(clock)))
    lines = progress.ProgressLines("embedding", "chunks", every=0)
    lines(9000, 10000)      # found in the cache at once, at the stage's first report
    lines(10000, 10000)     # then 1,000 embedded in 50 s
    assert capsys.readouterr().err.splitlines()[-1] == "embedding: 10000/10000 chunks (100%), 20.0/s"


def test_a_keyword_only_index_translates_a_question_in_the_notes_other_language(cli, tmp_path):
    """Translation needs no vectors: `index --no-embed` of Chinese notes still
    answers an English question by its translation in a default search; an
    explicit --mode fts searches the words as typed."""
    vault = tmp_path / "zh"
    write(vault / "数据库索引.md", "# 数据库索引\n\n给数据库的表建索引，查询就快了。B 树索引最常见。\n")
    write(vault / "花园.md", "# 花园\n\n春天在花园里种番茄和黄瓜，每天浇水。\n")
    write(vault / "旅行.md", "# 旅行\n\n坐火车去杭州，看西湖，吃小笼包。\n")
    index = tmp_path / "zh-index"
    assert cli("index", "--no-embed", vault_dir=vault, index=index).code == 0
    r = cli("search", "database index", "--json", "--explain", vault_dir=vault, index=index)
    assert r.code == 0, r
    data = r.json()
    assert data["mode"] == "fts" and data["results"][0]["path"] == "数据库索引.md"
    assert "数据库" in data["explain"]["translated_match"]
    exact = cli("search", "database index", "--json", "--explain", "--mode", "fts", vault_dir=vault, index=index)
    assert exact.json()["results"] == [] and exact.json()["explain"]["translated_match"] is None


def test_a_pipe_gets_no_best_guesses_and_nothing_is_returned_at_no_relevance(cli):
    """Issue 37 item 5: `search flibbertigibbet` returned three "best guesses"
    at relevance 0.00, and --format paths piped them as if they were hits."""
    assert cli("index", "--model", "hash:64").code == 0
    nothing = cli("search", "flibbertigibbet", "--json").json()
    assert nothing["results"] == [] and "guesses" not in nothing
    assert any("no note answers this" in w for w in nothing["warnings"])
    weak = cli("search", "ceremony flibbertigibbet wobblefrost quizzaciously", "--json").json()
    assert weak["guesses"] is True and 0 < len(weak["results"]) <= 3
    assert any(r["relevance"] > 0 for r in weak["results"]) and all(r["relevance"] < 0.4 for r in weak["results"])
    for fmt in ("paths", "paths0"):
        piped = cli("search", "ceremony flibbertigibbet wobblefrost quizzaciously", "--format", fmt)
        assert piped.code == 0 and piped.out == "" and "best guesses" in piped.err
    clear = cli("search", "tea ceremony", "--format", "paths")
    assert clear.out.splitlines()[0] == "Notes/Travel/Kyoto trip.md"
    assert "guesses" not in cli("search", "tea ceremony", "--json").json()
