"""For agents' memories (issue 18): similar notes before writing, a context
pack within a token budget, priors from frontmatter, the query log, daily
logs as a timeline. The sample vault (typed memories with importance, a
near-duplicate pair) indexed with the default model once for the module:
similarity is about meaning, so the real embedder."""

import json

import pytest
from click.testing import CliRunner

from tests.conftest import SAMPLE_VAULT, copy_tree, write
from vault_search import Index
from vault_search.cli import main


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    root = tmp_path_factory.mktemp("memories")
    vault = copy_tree(SAMPLE_VAULT, root / "vault")
    index_dir = root / "index"
    import os

    old = os.environ.get("VAULT_SEARCH_CACHE_DIR")
    os.environ["VAULT_SEARCH_CACHE_DIR"] = str(root / "cache")
    try:
        with Index.open(vault, index_dir, create=True) as idx:
            idx.sync()
    finally:
        if old is None:
            os.environ.pop("VAULT_SEARCH_CACHE_DIR")
        else:
            os.environ["VAULT_SEARCH_CACHE_DIR"] = old
    return vault, index_dir


def run(shared, *args):
    vault, index_dir = shared
    result = CliRunner().invoke(main, ["--vault", str(vault), "--index-dir", str(index_dir), *args])
    assert result.exit_code == 0, result.output
    return result


def cli_json(shared, *args):
    return json.loads(run(shared, *args, "--json").stdout)


# -- 1. similar --------------------------------------------------------------------

def test_similar_finds_the_near_duplicate_and_never_the_note_itself(shared):
    data = cli_json(shared, "similar", "memory/deploy-checklist.md")
    paths = [r["path"] for r in data["results"]]
    assert paths[0] == "memory/upgrade-k3s.md" and "memory/deploy-checklist.md" not in paths
    first = data["results"][0]
    assert first["near_duplicate"] is True and first["verdict"] == "near-duplicate" == data["verdict"]
    assert first["similarity"] >= data["levels"]["near_duplicate"] and first["overlap"] >= 0.5
    assert {"drain", "node"} <= set(first["shared"])
    assert all(not r["near_duplicate"] and r["verdict"] == "related" for r in data["results"][1:])
    assert all(r["similarity"] >= data["levels"]["related"] for r in data["results"][1:])
    text = run(shared, "similar", "memory/deploy-checklist.md").stdout
    assert "near-duplicate: update it" in text.splitlines()[0] and "related: link it" in text.splitlines()[2]
    # By name too; a note whose only kin is a daily log's passing mention of its title gets the
    # few closest as weak guesses, said so (the vault's yardstick: nothing is as close as related).
    deep = cli_json(shared, "similar", "Deep Work")
    assert "Notes/Reading/Deep Work.md" not in [r["path"] for r in deep["results"]]
    assert deep["results"][0]["path"] == "memory/2026-11-01.md"   # "Finished two chapters of Deep Work"
    assert deep["verdict"] == "none" and {r["verdict"] for r in deep["results"]} == {"none"}
    assert deep["warnings"] == ["nothing clearly like it: the 3 closest notes, all weak matches"]
    assert "nothing clearly like Notes/Reading/Deep Work.md" in run(shared, "similar", "Deep Work").stdout
    teal = cli_json(shared, "similar", "--text", "My favourite colour of bicycle is teal")
    assert len(teal["results"]) == 3 and teal["warnings"] == [
        "nothing clearly like it: the 3 closest notes, all weak matches"] and teal["verdict"] == "none"


def test_similar_text_reads_before_writing(shared):
    draft = "Before upgrading k3s: drain every node, upgrade, then watch Grafana for 15 minutes."
    data = cli_json(shared, "similar", "--text", draft, "-n", "3")
    assert data["source"] == "text" and data["mode"] == "hybrid"
    assert [r["path"] for r in data["results"]][:2] == ["memory/upgrade-k3s.md", "memory/deploy-checklist.md"] or \
        [r["path"] for r in data["results"]][:2] == ["memory/deploy-checklist.md", "memory/upgrade-k3s.md"]
    # A short draft restating one note is related to it, not a near-duplicate of the whole note.
    assert {r["verdict"] for r in data["results"][:2]} == {"related"} and data["verdict"] == "related"
    unrelated = cli_json(shared, "similar", "--text", "量子园艺与火星上的郁金香")
    assert len(unrelated["results"]) <= 3 and any("weak" in w for w in unrelated["warnings"])
    assert unrelated["verdict"] == "none"
    assert all(r["near_duplicate"] is False for r in unrelated["results"])
    bad = CliRunner().invoke(main, ["--vault", str(shared[0]), "--index-dir", str(shared[1]), "similar"])
    assert bad.exit_code == 2 and "similar needs a note or a text" in bad.output


# -- 2. the context pack ---------------------------------------------------------

def test_budget_tokens_packs_whole_sections_within_the_budget(shared):
    vault, index_dir = shared
    for budget in (60, 200, 1000):
        data = cli_json(shared, "search", "数据库 索引", "--budget-tokens", str(budget))
        assert data["token_budget"] == budget and data["token_counter"] == "e5-xlmr"
        assert 0 < data["tokens"] <= budget or (budget == 60 and data["tokens"] <= 60)
        with Index.open(vault, index_dir) as idx:
            from vault_search.pack import counter

            _, count = counter(idx)
            assert sum(count(r["text"]) for r in data["results"]) == data["tokens"]
            for r in data["results"]:
                lines = (vault / r["path"]).read_text().split("\n")
                assert r["text"] == "\n".join(lines[r["start_line"] - 1:r["end_line"]])   # the file's own lines
                # Not mid-sentence: a sentence ends, or a paragraph, a heading or a list item comes next
                # (a passage trimmed to fit the budget ends so too).
                assert r["text"].rstrip()[-1] in ".。!?！？)）`|*" or r["end_line"] >= len(lines) - 1 or \
                    lines[r["end_line"]].strip() == "" or lines[r["end_line"]].startswith("#") or \
                    (r["trimmed"] and lines[r["end_line"]].lstrip().startswith(("- ", "* ", "+ ", ">", "|")))
        spans = [(r["path"], r["start_line"], r["end_line"]) for r in data["results"]]
        assert not any(a[0] == b[0] and a[1] <= b[2] and b[1] <= a[2] for i, a in enumerate(spans)
                       for b in spans[i + 1:])
    small = cli_json(shared, "search", "数据库 索引", "--budget-tokens", "60")
    big = cli_json(shared, "search", "数据库 索引", "--budget-tokens", "1000")
    assert len(small["results"]) < len(big["results"]) and any("did not fit" in w for w in small["warnings"])
    section = next(r for r in big["results"] if r["path"] == "Notes/数据库/数据库索引.md")
    assert section["text"].startswith("## ")   # a whole section, heading included


# -- 3. priors ---------------------------------------------------------------------

def test_boost_multiplies_by_importance_and_explain_shows_it(shared, tmp_path):
    plain = cli_json(shared, "search", "drain the node", "--mode", "fts", "--explain", "-n", "3")
    boosted = cli_json(shared, "search", "drain the node", "--mode", "fts", "--explain", "-n", "3",
                       "--boost", "importance")
    assert [r["path"] for r in plain["results"]][:2] == ["memory/upgrade-k3s.md", "memory/deploy-checklist.md"]
    ranks = {r["path"]: r for r in boosted["explain"]["ranks"]}
    assert ranks["memory/deploy-checklist.md"]["boost_value"] == 0.3
    assert ranks["memory/deploy-checklist.md"]["boost_factor"] == pytest.approx(0.65)
    assert ranks["Projects/Homelab/Kubernetes 集群.md"]["boost_factor"] == pytest.approx(0.75)   # missing: 0.5
    fused = {r["path"]: r["fused_score"] for r in plain["explain"]["ranks"]}
    for path, row in ranks.items():
        assert row["fused_score"] == pytest.approx(fused[path] * row["boost_factor"], rel=1e-4)
    order = [r["path"] for r in boosted["results"]]
    assert order.index("Projects/Homelab/Kubernetes 集群.md") < order.index("memory/deploy-checklist.md")
    assert "boost 0.3 x0.650" in run(shared, "search", "drain the node", "--mode", "fts", "--explain",
                                     "--boost", "importance").stdout


def test_boost_clamps_with_a_warning_and_comes_from_the_settings(tmp_path):
    vault = tmp_path / "v"
    write(vault / "a.md", "---\nimportance: 7\n---\n# A\nzebra crossing\n")
    write(vault / "b.md", "---\nimportance: high\n---\n# B\nzebra stripes\n")
    write(vault / "c.md", "---\nimportance: .nan\n---\n# C\nzebra herd\n")
    write(vault / "d.md", "---\nimportance: true\n---\n# D\nzebra finch\n")
    write(vault / "e.md", '---\nimportance: "NaN"\n---\n# E\nzebra fish\n')
    write(vault / ".vault-search.toml", 'boost = "importance"\n')
    args = ["--vault", str(vault), "--index-dir", str(tmp_path / "i")]
    assert CliRunner().invoke(main, [*args, "index", "--no-embed"]).exit_code == 0
    data = json.loads(CliRunner().invoke(main, [*args, "search", "zebra", "--json", "--explain"]).stdout)
    ranks = {r["path"]: r for r in data["explain"]["ranks"]}
    assert ranks["a.md"]["boost_value"] == 1.0 and ranks["b.md"]["boost_factor"] == 0.75
    for path in ("c.md", "d.md", "e.md"):   # .nan, a boolean, "NaN": not numbers, no NaN scores
        assert ranks[path]["boost_factor"] == 0.75 and ranks[path].get("boost_value") is None, path
    assert any("outside 0..1, clamped: a.md (7)" in w for w in data["warnings"])
    assert any("not a number, counted as 0.5: b.md, c.md, d.md and 1 more" in w for w in data["warnings"])
    assert sorted(r["path"] for r in data["results"]) == ["a.md", "b.md", "c.md", "d.md", "e.md"]
    assert all(isinstance(r["score"], float) and r["score"] == r["score"] for r in data["results"])   # no NaN
    nowhere = json.loads(CliRunner().invoke(main, [*args, "search", "zebra", "--json", "--boost", "importanse"]).stdout)
    assert any("no result has this frontmatter field" in w for w in nowhere["warnings"])
    off = json.loads(CliRunner().invoke(main, [*args, "search", "zebra", "--json", "--explain",
                                               "--boost", "none"]).stdout)
    assert all("boost_factor" not in r for r in off["explain"]["ranks"]) and not off["warnings"]


# -- 4. the query log ----------------------------------------------------------------

def test_the_query_log_is_opt_in_bounded_to_the_index_folder_and_lists_misses(tmp_path):
    vault = copy_tree(SAMPLE_VAULT, tmp_path / "v")
    args = ["--vault", str(vault), "--index-dir", str(tmp_path / "i")]
    runner = CliRunner()
    assert runner.invoke(main, [*args, "index", "--no-embed"]).exit_code == 0
    runner.invoke(main, [*args, "search", "tea ceremony"])
    assert not (tmp_path / "i" / "queries.db").exists()             # off by default
    assert "the query log is off" in runner.invoke(main, [*args, "log"]).stdout
    write(vault / ".vault-search.toml", "log_queries = true\n")
    for query in ("tea ceremony", "zzqx qqzv", "数据库 索引"):
        runner.invoke(main, [*args, "search", query])
    runner.invoke(main, [*args, "get", "Kyoto trip"])                # follows the first search
    logged = json.loads(runner.invoke(main, [*args, "log", "--json"]).stdout)
    assert [e["query"] for e in logged["entries"]] == ["数据库 索引", "zzqx qqzv", "tea ceremony"]
    tea = logged["entries"][2]
    assert tea["followed"] is True and tea["top"][0] == {"path": "Notes/Travel/Kyoto trip.md", "match": "keyword",
                                                         "relevance": 1.0}
    misses = json.loads(runner.invoke(main, [*args, "log", "--misses", "--json"]).stdout)["entries"]
    assert [(e["query"], e["why_missed"]) for e in misses] == [("数据库 索引", "not followed"),
                                                               ("zzqx qqzv", "no results")]
    assert not list(vault.rglob("queries.db"))                       # never in the vault

    with Index.open(vault, tmp_path / "i") as idx:
        first = idx.query_log(limit=1)
        assert len(first.entries) == 1 and first.enabled


def test_a_get_follows_only_the_last_search_that_listed_the_note(tmp_path):
    vault = copy_tree(SAMPLE_VAULT, tmp_path / "v")
    write(vault / ".vault-search.toml", "log_queries = true\n")
    args = ["--vault", str(vault), "--index-dir", str(tmp_path / "i")]
    runner = CliRunner()
    assert runner.invoke(main, [*args, "index", "--no-embed"]).exit_code == 0
    for query in ("kyoto", "tea ceremony", "数据库 索引", "tea"):
        assert runner.invoke(main, [*args, "search", query, "--mode", "fts"]).exit_code == 0
    assert runner.invoke(main, [*args, "get", "Kyoto trip"]).exit_code == 0
    logged = json.loads(runner.invoke(main, [*args, "log", "--json"]).stdout)["entries"]
    listed = {e["query"]: any(t["path"] == "Notes/Travel/Kyoto trip.md" for t in e["top"]) for e in logged}
    assert listed == {"kyoto": True, "tea ceremony": True, "数据库 索引": False, "tea": True}
    assert {e["query"]: e["followed"] for e in logged} == {"tea": True, "数据库 索引": False, "tea ceremony": False,
                                                           "kyoto": False}
    misses = json.loads(runner.invoke(main, [*args, "log", "--misses", "--json"]).stdout)["entries"]
    assert [e["query"] for e in misses] == ["数据库 索引", "tea ceremony", "kyoto"]


def test_the_log_keeps_only_the_last_entries(tmp_path, monkeypatch):
    from vault_search import querylog
    from vault_search.results import SearchResponse

    monkeypatch.setattr(querylog, "MAX_ENTRIES", 50)
    for i in range(230):
        querylog.record(tmp_path, SearchResponse(query=f"q{i}", mode="fts", took_ms=1.0))
    entries = querylog.read(tmp_path, True, limit=1000).entries
    assert 50 <= len(entries) <= 150 and entries[0].query == "q229"


# -- 5. the timeline -----------------------------------------------------------------

def test_timeline_and_today(shared, tmp_path):
    data = cli_json(shared, "ls", "memory", "--timeline")
    assert [(e["at"], e["title"]) for e in data["entries"]] == [
        ("2026-11-01T09:30", "Stand-up"), ("2026-11-01T11:00", "数据库迁移"), ("2026-11-01T15:45", "Reading"),
        ("2026-11-02T08:50", "Running"), ("2026-11-02T14:10", "代码评审")]
    later = cli_json(shared, "ls", "memory", "--timeline", "--after", "2026-11-02")
    assert [e["title"] for e in later["entries"]] == ["Running", "代码评审"]
    assert "2026-11-01 11:00  数据库迁移  memory/2026-11-01.md:7-8" in run(shared, "ls", "memory", "--timeline").stdout
    import datetime as dt

    today = dt.date.today().isoformat()
    vault = tmp_path / "v"
    write(vault / f"memory/{today}.md", f"# {today}\n\n### 08:15 - Coffee\nzebra notes today\n")
    write(vault / "memory/2020-01-01.md", "# 2020-01-01\n\n### 08:15 - Old\nzebra notes long ago\n")
    args = ["--vault", str(vault), "--index-dir", str(tmp_path / "i")]
    CliRunner().invoke(main, [*args, "index", "--no-embed"])
    found = json.loads(CliRunner().invoke(main, [*args, "search", "zebra", "--today", "--json"]).stdout)
    assert [r["path"] for r in found["results"]] == [f"memory/{today}.md"]
    week = json.loads(CliRunner().invoke(main, [*args, "search", "zebra", "--last", "7d", "--json"]).stdout)
    assert [r["path"] for r in week["results"]] == [f"memory/{today}.md"]
    bad = CliRunner().invoke(main, [*args, "search", "zebra", "--last", "2020"])
    assert bad.exit_code == 2 and "--last takes an age like 7d" in bad.output
    both = CliRunner().invoke(main, [*args, "search", "zebra", "--last", "7d", "--after", "2020-01-01"])
    assert both.exit_code == 2 and "give one" in both.output
    # Two entries logged in the same minute stay two entries.
    write(vault / "memory/2026-01-05.md", "# 2026-01-05\n\n### 09:00 - Alpha\none\n\n### 09:00 - Beta\ntwo\n")
    CliRunner().invoke(main, [*args, "index", "--no-embed"])
    same = json.loads(CliRunner().invoke(main, [*args, "ls", "memory", "--timeline", "--after", "2026-01-05",
                                                "--before", "2026-01-05", "--json"]).stdout)
    assert [e["title"] for e in same["entries"]] == ["Alpha", "Beta"]


def test_a_timeline_with_nothing_dated_says_so_in_one_line(shared):
    undated = run(shared, "ls", "Notes", "--timeline")
    assert undated.exit_code == 0 and undated.stdout == (
        "no daily-log entries in Notes/ (an entry is a '### HH:MM - Title' heading in a note dated by its "
        "frontmatter or its YYYY-MM-DD file name)\n")
    window = run(shared, "ls", "memory", "--timeline", "--after", "2030-01", "--before", "2030-02")
    assert window.stdout.startswith("no daily-log entries in memory/ from 2030-01 to 2030-02 (an entry is")
    assert run(shared, "ls", "memory", "--timeline", "--before", "2020").stdout.startswith(
        "no daily-log entries in memory/ up to 2020 (")
    assert cli_json(shared, "ls", "Notes", "--timeline") == {"folder": "Notes/", "entries": []}
    vault, index_dir = shared
    missing = CliRunner().invoke(main, ["--vault", str(vault), "--index-dir", str(index_dir), "ls", "nowhere",
                                        "--timeline"])
    assert missing.exit_code == 1 and missing.stderr == "error: nowhere/: no indexed notes in this folder\n"
    for args in (["ls", "notes", "--timeline"], ["ls", "notes"]):   # a folder's case counts: the one meant is named
        wrong_case = CliRunner().invoke(main, ["--vault", str(vault), "--index-dir", str(index_dir), *args])
        assert wrong_case.exit_code == 1
        assert wrong_case.stderr == "error: notes/: no indexed notes in this folder (did you mean Notes/?)\n"


def test_a_pack_leaves_out_a_note_edited_since_it_was_indexed(tmp_path):
    vault = tmp_path / "v"
    write(vault / "a.md", "# A\n\n## Part\nThe walrus sleeps on the ice.\n")
    args = ["--vault", str(vault), "--index-dir", str(tmp_path / "i")]
    CliRunner().invoke(main, [*args, "index", "--no-embed"])
    first = json.loads(CliRunner().invoke(main, [*args, "search", "walrus", "--budget-tokens", "100", "--json"]).stdout)
    assert first["token_counter"] == "estimate" and first["results"][0]["text"].endswith("on the ice.")
    write(vault / "a.md", "# A\n\nnew first lines\nmore\n\n## Part\nThe walrus sleeps on the ice.\n")
    later = json.loads(CliRunner().invoke(main, [*args, "search", "walrus", "--budget-tokens", "100", "--json",
                                                 "--no-server"]).stdout)
    assert later["results"] == [] and any("edited since they were indexed" in w for w in later["warnings"])


def test_several_vaults_pack_within_one_budget_and_warm_up_is_not_logged(tmp_path):
    from vault_search.options import SearchOptions
    from vault_search.service import SearchService
    from vault_search.vaults import VaultSet

    services = []
    for name in ("one", "two"):
        vault = copy_tree(SAMPLE_VAULT, tmp_path / name)
        write(vault / ".vault-search.toml", "log_queries = true\n")
        services.append(SearchService(vault, tmp_path / f"{name}-index", watch=False, embedder=None))
    vaults = VaultSet(services)
    try:
        packed = vaults.search("数据库 索引", SearchOptions(mode="fts", budget_tokens=150))
        assert {r.vault for r in packed.results} <= {"one", "two"} and packed.tokens <= 150
        from vault_search.pack import counter

        _, count = counter(services[0].reader)
        assert sum(count(r.text) for r in packed.results) == packed.tokens and packed.token_budget == 150
        assert services[0].query_log().entries[0].query == "数据库 索引"   # the search, not the warm-up's
        assert [e.query for e in services[0].query_log(limit=100).entries] == ["数据库 索引"]
        # each vault trims to the whole budget; a trimmed passage the merge drops takes its warning along
        said = 0
        for budget in (40, 60, 90, 150, 250):
            for query in ("数据库 索引", "tea ceremony kyoto", "python asyncio"):
                packed = vaults.search(query, SearchOptions(mode="fts", budget_tokens=budget, limit=8))
                trimmed = {f"{r.vault}: trimmed to fit {budget} tokens: {r.path}:" for r in packed.results
                           if r.trimmed}
                warned = [w for w in packed.warnings if ": trimmed to fit " in w]
                assert all(any(w.startswith(t) for t in trimmed) for w in warned), (query, budget, warned)
                said += len(warned)
        assert said > 0        # the check above met a trimmed passage
    finally:
        vaults.close()


@pytest.mark.parametrize("action", ["oserror", "interrupt"])
def test_a_failed_query_log_write_loses_nothing_and_locks_nothing(tmp_path, monkeypatch, action):
    from indexer import faults

    vault = copy_tree(SAMPLE_VAULT, tmp_path / "v")
    write(vault / ".vault-search.toml", "log_queries = true\n")
    with Index.open(vault, tmp_path / "i", create=True) as idx:
        idx.sync(embed=False)
        idx.search("tea ceremony", mode="fts")
        faults.reset()
        monkeypatch.setenv(faults.ENV, f"query-log={action}")
        if action == "interrupt":   # Ctrl-C inside the write: it goes up, the write is rolled back
            with pytest.raises(KeyboardInterrupt):
                idx.search("deep work", mode="fts")
        else:                       # a full disk: the search answers anyway
            assert idx.search("deep work", mode="fts").results
        monkeypatch.delenv(faults.ENV)
        idx.search("数据库 索引", mode="fts")            # the log is not locked: this one is written
        assert [e.query for e in idx.query_log().entries] == ["数据库 索引", "tea ceremony"]
        write(vault / "Inbox/after.md", "# After\nthe okapi\n")
        assert idx.sync(embed=False).added == 1             # and the index still takes writes
        assert [r.path for r in idx.search("okapi", mode="fts").results] == ["Inbox/after.md"]


def test_the_mcp_similar_tool_says_update_only_on_a_near_duplicate(shared):
    """Issue 37: the tool told agents to update any note marked near-duplicate on a fixed cosine;
    now its description names the three verdicts, and the answer is the CLI's JSON."""
    import asyncio

    from vault_search.mcp_server import INSTRUCTIONS, build_server

    tools = {t.name: t for t in asyncio.run(build_server(lambda: None).list_tools())}
    description = tools["similar"].description
    for words in ('"near-duplicate"', '"related"', '"none"', "update it rather than write another",
                  "levels gives what each verdict needs on this vault"):
        assert words in description, words
    assert "0.93" not in description and '"near-duplicate" means' in INSTRUCTIONS
    vault, index_dir = shared
    with Index.open(vault, index_dir) as idx:
        answer = idx.similar("memory/deploy-checklist.md").to_dict()
    assert answer["results"] == cli_json(shared, "similar", "memory/deploy-checklist.md")["results"]
    assert answer["verdict"] == "near-duplicate" and set(answer["levels"]) == {"near_duplicate", "related"}
