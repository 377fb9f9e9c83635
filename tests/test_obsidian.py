"""What Obsidian users and agent memories need: links, names, tags,
staleness, frontmatter filters, daily logs, recency and output formats.

Real-vault tests run on a copy of ../shared/eval/vaults/oldwinter-garden-zh;
the rest on a copy of the bundled sample vault, with dates written relative
to today so staleness never depends on the day the suite runs."""

from __future__ import annotations

import datetime as dt
import json
import re
from pathlib import Path
from urllib.parse import unquote

import pytest
from conftest import write

from indexer.parse import parse_note
from vault_search import Index

TODAY = dt.date.today()


def days_ago(n: int) -> str:
    return (TODAY - dt.timedelta(days=n)).isoformat()


# -- the real vault -----------------------------------------------------------

@pytest.fixture(scope="module")
def real(garden_index):
    vault, index, _ = garden_index
    with Index.open(vault, index) as idx:
        yield idx


def _links(idx, where: str, limit: int = 12) -> list[tuple]:
    return idx.conn.execute(
        f"""SELECT s.path, l.line, l.target, l.subpath, l.alias, l.embed, t.path
            FROM links l JOIN notes s ON s.id = l.source_id JOIN notes t ON t.id = l.target_id
            WHERE {where} ORDER BY s.path, l.line LIMIT ?""", (limit,)).fetchall()


def _names(idx, path: str) -> set[str]:
    title, aliases = idx.conn.execute("SELECT title, aliases FROM notes WHERE path = ?", (path,)).fetchone()
    stem = path.rsplit("/", 1)[-1][:-3]
    return {n.casefold() for n in [stem, title, *json.loads(aliases)]}


def _assert_lands_on_the_named_note(idx, rows):
    vault = Path(idx.config.vault)
    for source, line, target, subpath, alias, embed, resolved in rows:
        # the link text is on that line of the source ...
        text = (vault / source).read_text(encoding="utf-8").split("\n")[line - 1]
        assert f"[[{target}" in text, (source, line, target)
        # ... and the note it resolves to carries that name, with the folders the link gives
        assert target.rsplit("/", 1)[-1].casefold() in _names(idx, resolved), (target, resolved)
        assert resolved.casefold()[:-3].endswith(target.casefold().removesuffix(".md")), (target, resolved)


def test_links_with_an_alias_resolve_to_the_named_note(real):
    rows = _links(real, "l.alias != '' AND l.embed = 0")
    assert len(rows) == 12
    _assert_lands_on_the_named_note(real, rows)
    shown = {(r[0], r[1]): (r[4], r[6]) for r in rows}
    assert shown[("Atlas/Draws/数字时代如何更好地工作与生活 - 图.md", 46)] == (
        "输出系统", "Cards/永久笔记/个人输出发布系统.md")


def test_heading_links_resolve_and_the_heading_exists_in_the_target(real):
    rows = _links(real, "l.subpath LIKE '#%' AND l.subpath NOT LIKE '#^%'")
    assert len(rows) >= 10
    _assert_lands_on_the_named_note(real, rows)
    vault = Path(real.config.vault)
    for source, line, target, subpath, alias, embed, resolved in rows:
        lines = (vault / resolved).read_text(encoding="utf-8").split("\n")
        # Obsidian writes a heading link without the characters links cannot hold ("7.6 X" -> "7 6 X");
        # one target writes its heading without the space ("##**核心三件套**"), which Obsidian accepts.
        wanted = _words(subpath.lstrip("#"))
        assert any(_words(t.lstrip("#")) == wanted for t in lines if t.startswith("#")), (source, subpath, resolved)


def _words(text: str) -> list[str]:
    return re.sub(r"[^\w]+", " ", text).split()


def test_block_references_resolve_and_the_block_exists_in_the_target(real):
    rows = _links(real, "l.subpath LIKE '#^%'")
    assert len(rows) >= 7   # every resolvable block reference in the vault
    _assert_lands_on_the_named_note(real, rows)
    vault = Path(real.config.vault)
    for source, line, target, subpath, alias, embed, resolved in rows:
        assert re.search(rf"\^{re.escape(subpath[2:])}\s*$", (vault / resolved).read_text(encoding="utf-8"),
                         re.M), (source, subpath, resolved)


def test_embeds_resolve_and_attachments_are_not_unresolved(real):
    rows = _links(real, "l.embed = 1")
    assert len(rows) >= 12
    _assert_lands_on_the_named_note(real, rows)
    homepage = real.links("Cards/Pending/HOMEPAGE.md")
    embed = next(o for o in homepage.outlinks if o.line == 28)
    assert embed.embed and embed.path == "🧰 本库指南/Tutorials/∑ 本库 ACCESS 的文件夹入口汇总.md"
    canvas = real.conn.execute("SELECT kind, target_id FROM links WHERE target LIKE '%.canvas' LIMIT 1").fetchone()
    assert canvas == ("attachment", None)
    status = real.status()
    assert status.unresolved_links == real.conn.execute(
        "SELECT count(*) FROM links WHERE kind = 'note' AND target_id IS NULL").fetchone()[0]
    assert 0 < status.unresolved_links < status.links


def test_plain_links_and_same_name_notes_in_other_folders(real):
    rows = _links(real, "l.alias = '' AND l.subpath = '' AND l.embed = 0")
    _assert_lands_on_the_named_note(real, rows)
    # Two notes are named 国人如何使用chatGPT; a bare link from the same folder means that folder's,
    # and from elsewhere the one nearest the vault root.
    same_folder = real.links("Calendar/Daily notes/2023-05-04.md")
    assert next(o.path for o in same_folder.outlinks if o.target == "国人如何使用chatGPT") == \
        "Calendar/Daily notes/国人如何使用chatGPT.md"
    elsewhere = real.links("Cards/永久笔记/chatGPT.md")
    assert next(o.path for o in elsewhere.outlinks if o.target == "国人如何使用chatGPT") == \
        "Calendar/Daily notes/国人如何使用chatGPT.md"
    # case does not matter: [[HOMEPAGE]]-style links find Homepage.md / HOMEPAGE.md by name
    assert real.conn.execute("SELECT count(*) FROM links l JOIN notes t ON t.id = l.target_id "
                             "WHERE l.target != substr(t.path, length(t.path) - length(l.target) - 2, "
                             "length(l.target))").fetchone()[0] > 0


def test_backlinks_of_a_heavily_linked_note_match_a_text_search(real):
    path = "Cards/永久笔记/个人知识管理.md" if real.conn.execute(
        "SELECT 1 FROM notes WHERE path = 'Cards/永久笔记/个人知识管理.md'").fetchone() else None
    if path is None:
        path = real.conn.execute(
            """SELECT t.path FROM links l JOIN notes t ON t.id = l.target_id
               GROUP BY t.id ORDER BY count(DISTINCT l.source_id) DESC LIMIT 1""").fetchone()[0]
    data = real.links(path)
    sources = {b.path for b in data.backlinks}
    assert len(sources) >= 10
    # An independent oracle: every note whose text links to this name (the name is unique in the vault).
    stem = path.rsplit("/", 1)[-1][:-3]
    assert real.conn.execute("SELECT count(*) FROM names WHERE key = lower(?)", (stem,)).fetchone()[0] == 1
    pattern = re.compile(r"\[\[(?:[^\]|#]*/)?" + re.escape(stem) + r"(?:\.md)?\s*(?:[|#\]])", re.I)
    vault = Path(real.config.vault)
    by_text = set()
    for note_path, in real.conn.execute("SELECT path FROM notes"):
        if note_path != path and pattern.search(_prose(vault / note_path)):
            by_text.add(note_path)
    assert sources == by_text


def _prose(path: Path) -> str:
    note = parse_note(path.name, path.read_text(encoding="utf-8", errors="replace"))
    return "\n".join(f"[[{link.target}{link.subpath}]]" for link in note.link_records)


def test_alias_queries_rank_the_aliased_note_first(real):
    rows = real.conn.execute(
        """SELECT n.path, je.value FROM notes n, json_each(n.aliases) je
           WHERE length(je.value) BETWEEN 2 AND 30 ORDER BY n.path LIMIT 400""").fetchall()
    checked = 0
    for path, alias in rows:
        owners = real.conn.execute("SELECT count(DISTINCT note_id) FROM names WHERE key = ?",
                                   (" ".join(alias.casefold().split()),)).fetchone()[0]
        if owners != 1:
            continue  # an alias two notes share, or also another note's title
        response = real.search(alias, limit=5, explain=True)
        assert response.results[0].path == path, (alias, path, [r.path for r in response.results])
        assert response.explain.ranks[0].name_match in ("alias", "title", "file")
        checked += 1
        if checked == 12:
            break
    assert checked == 12


def test_nested_tags_filter_on_the_real_vault(real):
    parent = real.conn.execute("SELECT count(DISTINCT note_id) FROM note_tags WHERE tag = '待办' OR tag LIKE '待办/%'"
                               ).fetchone()[0]
    child = real.conn.execute("SELECT count(DISTINCT note_id) FROM note_tags WHERE tag = '待办/持续迭代'").fetchone()[0]
    assert parent > child >= 10
    everything = real.search("笔记 方法 工具 学习", mode="fts", limit=1000, tags=["待办"]).results
    nested = real.search("笔记 方法 工具 学习", mode="fts", limit=1000, tags=["待办/持续迭代"]).results
    assert nested and {r.path for r in nested} < {r.path for r in everything}
    assert all(any(t.casefold() == "待办/持续迭代" for t in r.tags) for r in nested)
    assert all(any(t.casefold() == "待办" or t.casefold().startswith("待办/") for t in r.tags) for r in everything)
    counts = {t.tag: t.notes for t in real.tags().tags}
    assert counts["待办"] == parent and counts["待办/持续迭代"] == child


# -- the sample vault ---------------------------------------------------------

@pytest.fixture
def memory_vault(vault):
    """The sample vault plus agent memories dated relative to today."""
    write(vault / "memory" / "fresh-rule.md",
          f"---\ntype: feedback\ncategory: deploy\nlast_verified: {days_ago(3)}\n---\n# Fresh rule\n\n"
          "Deploy on Tuesdays only; rollback plan first.\n")
    write(vault / "memory" / "old-rule.md",
          f"---\ntype: feedback\ncategory: deploy\nlast_verified: {days_ago(45)}\n---\n# Old rule\n\n"
          "Deploy on Fridays after the rollback plan is written.\n")
    write(vault / "memory" / "expired-offer.md",
          f"---\ntype: reference\nvalid_until: {days_ago(1)}\nprice: 120\n---\n# Expired offer\n\n"
          "The VPS deploy offer: 120 per year.\n")
    write(vault / "memory" / "open-offer.md",
          f"---\ntype: reference\nvalid_until: {(TODAY + dt.timedelta(days=30)).isoformat()}\nprice: 80\n---\n"
          "# Open offer\n\nThe VPS deploy offer: 80 per year.\n")
    return vault


@pytest.fixture
def midx(memory_vault, index_dir):
    with Index.open(memory_vault, index_dir, create=True) as idx:
        idx.sync(embed=False)
        yield idx


def test_stale_notes_are_flagged_and_can_be_left_out(midx):
    flags = {r.path: r.stale for r in midx.search("deploy", mode="fts", limit=20).results}
    assert flags["memory/old-rule.md"] is True          # verified 45 days ago (threshold 30)
    assert flags["memory/fresh-rule.md"] is False       # verified 3 days ago
    assert flags["memory/expired-offer.md"] is True     # valid_until was yesterday
    assert flags["memory/open-offer.md"] is False
    kept = {r.path for r in midx.search("deploy", mode="fts", limit=20, exclude_stale=True).results}
    assert {"memory/fresh-rule.md", "memory/open-offer.md"} <= kept
    assert not kept & {"memory/old-rule.md", "memory/expired-offer.md", "memory/deploy-checklist.md"}


def test_staleness_settings_come_from_the_vault_config(memory_vault, index_dir):
    write(memory_vault / ".vault-search.toml", 'stale_field = "reviewed"\nstale_days = 60\n')
    write(memory_vault / "memory" / "reviewed.md", f"---\nreviewed: {days_ago(90)}\n---\n# Reviewed\n\ndeploy notes\n")
    with Index.open(memory_vault, index_dir, create=True) as idx:
        idx.sync(embed=False)
        flags = {r.path: r.stale for r in idx.search("deploy", mode="fts", limit=20).results}
    assert flags["memory/reviewed.md"] is True
    assert flags["memory/old-rule.md"] is False   # last_verified is no longer the field; 45 < 60 anyway


def test_stale_mark_in_terminal_output(memory_vault, cli):
    cli("index", "--no-embed")
    out = cli("search", "Fridays rollback", "--mode", "fts").out
    assert "memory/old-rule.md" in out and "[stale]" in out


def test_where_filters_on_frontmatter(midx):
    def paths(**kw):
        return {r.path for r in midx.search("deploy rollback offer rules 不追高", mode="fts", limit=50, **kw).results}
    feedback = paths(where=["type=feedback"])
    assert feedback == {"memory/fresh-rule.md", "memory/old-rule.md", "memory/trading-rules.md",
                        "memory/feedback-rules.md"}
    assert paths(where=["type=feedback", "category=trading"]) == {"memory/trading-rules.md"}
    assert paths(where=["TYPE=Feedback"]) == set()    # keys are exact; values ignore case
    assert paths(where=["type=FEEDBACK"]) == feedback
    # a list field matches when it contains the value
    assert paths(where=["tags=finance"]) == {"memory/trading-rules.md", "Areas/理财/投资原则.md"}
    assert paths(where=[f"last_verified>{days_ago(10)}"]) == {"memory/fresh-rule.md"}
    assert paths(where=[f"last_verified<{days_ago(10)}", "type=feedback"]) == {
        "memory/old-rule.md", "memory/trading-rules.md", "memory/feedback-rules.md"}
    assert paths(where=["price<100"]) == {"memory/open-offer.md"}
    assert "memory/fresh-rule.md" not in paths(where=["type!=feedback"])
    assert "memory/expired-offer.md" in paths(where=["type!=feedback"])


def test_where_usage_errors_are_one_line_exit_2(memory_vault, cli):
    cli("index", "--no-embed")
    for bad in ("novalue", "=x", "due>soon"):
        r = cli("search", "deploy", "--where", bad)
        errors = [line for line in r.err.splitlines() if line.startswith("error: vault-search search: ")]
        assert r.code == 2 and len(errors) == 1 and "--where" in errors[0], (bad, r.err)


def test_daily_log_entries_are_chunks_with_their_time(midx):
    r = midx.search("heart rate below 140", mode="fts").results[0]
    assert (r.path, r.date, r.heading) == ("memory/2026-11-02.md", "2026-11-02T08:50", "2026-11-02 > 08:50 — Running")
    assert r.start_line <= 3 and r.end_line == 4
    rows = midx.conn.execute("SELECT c.at FROM chunks c JOIN notes n ON n.id = c.note_id "
                             "WHERE n.path = 'memory/2026-11-01.md' ORDER BY c.seq").fetchall()
    assert [a for (a,) in rows] == ["2026-11-01T09:30", "2026-11-01T11:00", "2026-11-01T15:45"]
    # time filters work at entry granularity: 2026-11-01 10:00 .. 2026-11-02 09:00
    window = {"after": "2026-11-01 10:00", "before": "2026-11-02 09:00", "mode": "fts"}

    def logged(query):
        return [(r.path, r.date) for r in midx.search(query, **window).results if r.path.startswith("memory/2026")]
    assert logged("命名迁移 schema") == [("memory/2026-11-01.md", "2026-11-01T11:00")]
    assert logged("Syncthing corrupted") == []          # 09:30 on the 1st: before the window
    assert logged("heart rate below 140") == [("memory/2026-11-02.md", "2026-11-02T08:50")]
    assert logged("评审 分词模块") == []                  # 14:10 on the 2nd: after the window
    assert logged("评审 分词模块 Syncthing") == []
    # a date alone covers the whole day
    assert [(r.path, r.date) for r in midx.search("评审 分词模块", mode="fts", after="2026-11-02",
                                                  before="2026-11-02").results] == [
        ("memory/2026-11-02.md", "2026-11-02T14:10")]


def test_related_adds_linked_notes_after_the_hits(midx):
    response = midx.search("数据库索引", mode="fts", limit=2, related=True)
    hits = [r for r in response.results if not r.related]
    related = [r for r in response.results if r.related]
    assert len(hits) == 2 and hits[0].path == "Notes/数据库/数据库索引.md"
    assert related and response.results[:2] == hits          # related never outrank a hit
    assert all(r.score == 0.0 and r.related_to in {h.path for h in hits} for r in related)
    assert "Home.md" in {r.path for r in related}            # Home links to 数据库索引 (a backlink)
    assert not {r.path for r in related} & {h.path for h in hits}
    plain = midx.search("数据库索引", mode="fts", limit=2)
    assert [r.path for r in plain.results] == [h.path for h in hits]


def test_recency_prior_puts_the_newer_of_two_equal_notes_first(vault, index_dir):
    write(vault / "Notes" / "old-twin.md", f"---\ndate: {days_ago(400)}\n---\n# Twin\n\nzeppelin hangar maintenance\n")
    write(vault / "Notes" / "new-twin.md", f"---\ndate: {days_ago(2)}\n---\n# Twin\n\nzeppelin hangar maintenance\n")
    with Index.open(vault, index_dir, create=True) as idx:
        idx.sync(embed=False)
        plain = [r.path for r in idx.search("zeppelin hangar", mode="fts").results]
        assert sorted(plain) == ["Notes/new-twin.md", "Notes/old-twin.md"]
        response = idx.search("zeppelin hangar", mode="fts", recency_half_life=30, explain=True)
    assert [r.path for r in response.results] == ["Notes/new-twin.md", "Notes/old-twin.md"]
    factors = {row.path: row.recency_factor for row in response.explain.ranks}
    assert factors["Notes/new-twin.md"] > 0.9 and factors["Notes/old-twin.md"] < 0.0001
    assert response.explain.to_dict()["recency_half_life"] == 30   # the JSON names the half-life used


def test_format_paths_and_md(memory_vault, cli):
    cli("index", "--no-embed")
    paths = cli("search", "deploy", "--mode", "fts", "--format", "paths").out.splitlines()
    assert paths and all(not line.startswith(" ") and line.endswith(".md") for line in paths)
    assert len(paths) == len(set(paths)) and "memory/fresh-rule.md" in paths
    md = cli("search", "deploy", "--mode", "fts", "--format", "md", "-n", "3").out
    first = md.splitlines()[0]
    m = re.match(r"^- \[\[(.+?)(?:\|(.+?))?\]\] — \[(.+?):(\d+)-(\d+)\]\((obsidian://open\?vault=vault&file=.+?)\)", first)
    assert m, first
    assert unquote(m.group(6).split("file=")[1]) == m.group(3)
    assert md.count("\n- [[") == 2 and "  > " in md


def test_format_md_links_to_the_heading_of_the_hit(tmp_path, cli):
    """Issue 37 item 15: `[[Note#Heading]]`, so the link opens the section that matched."""
    vault = tmp_path / "v"
    write(vault / "Guide.md", "# Guide\n\nIntro words.\n\n## Setup [beta] | #1\n\nInstall the zephyrine tool.\n\n"
                              "## Usage\n\nRun it daily.\n")
    write(vault / "Top.md", "# Top\n\nzephyrine at the top.\n")
    cli("index", "--no-embed", vault_dir=vault)
    md = cli("search", "zephyrine", "--format", "md", vault_dir=vault).out
    assert "[[Guide#Setup beta 1|Guide]]" in md and "[[Top]]" in md and "[[Top#" not in md


def test_links_and_tags_commands(memory_vault, cli):
    write(memory_vault / "Inbox" / "dangling.md", "# Dangling\n\nSee [[No Such Note]] and ![[photo.png]] and [[Home]].\n")
    cli("index", "--no-embed")
    data = json.loads(cli("links", "Home.md", "--json").out)
    assert {"Inbox/dangling.md"} <= {b["path"] for b in data["backlinks"]}
    assert any(o["path"] == "Notes/数据库/数据库索引.md" for o in data["outlinks"])
    dangling = json.loads(cli("links", "Inbox/dangling", "--json").out)
    assert [u["target"] for u in dangling["unresolved"]] == ["No Such Note"]
    assert {o["kind"] for o in dangling["outlinks"]} == {"note", "attachment"}
    text = cli("links", "Inbox/dangling.md").out
    assert "unresolved (1)" in text and "[[No Such Note]]" in text
    assert cli("links", "nowhere.md").code == 1
    status = json.loads(cli("status", "--json").out)
    assert status["unresolved_links"] >= 1
    tags = json.loads(cli("tags", "--json").out)["tags"]  # the object HTTP /tags answers
    counts = {t["tag"]: t["notes"] for t in tags}
    assert counts["project"] >= counts["project/vault-search"] >= 1 and counts["memory"] >= 3
    assert cli("tags").out.splitlines()[0].split()[0].isdigit()


def test_obsidian_uri_uses_the_configured_vault_name(vault, index_dir):
    write(vault / ".vault-search.toml", 'vault_name = "My Notes"\n')
    with Index.open(vault, index_dir, create=True) as idx:
        idx.sync(embed=False)
        uri = idx.search("Kyoto", mode="fts").results[0].uri
    assert uri.startswith("obsidian://open?vault=My%20Notes&file=")


def test_links_follow_notes_that_appear_change_aliases_and_vanish(vault, index_dir):
    with Index.open(vault, index_dir, create=True) as idx:
        write(vault / "Inbox" / "waiting.md", "# Waiting\n\nsee [[Later Note]] and [[Nickname]]\n")
        idx.sync(embed=False)
        targets = lambda: {o.target: o.path for o in idx.links("Inbox/waiting.md").outlinks}
        assert targets() == {"Later Note": None, "Nickname": None}
        write(vault / "Notes" / "Later Note.md", "# Later Note\n\ntext\n")
        idx.sync(embed=False)
        assert targets() == {"Later Note": "Notes/Later Note.md", "Nickname": None}
        write(vault / "Notes" / "Other.md", "---\naliases: [Nickname]\n---\n# Other\n")
        idx.sync(embed=False)
        assert targets()["Nickname"] == "Notes/Other.md"
        write(vault / "Notes" / "Other.md", "---\naliases: [Someone else]\n---\n# Other\n")   # alias removed
        idx.sync(embed=False)
        assert targets()["Nickname"] is None
        write(vault / "Inbox" / "waiting.md", "# Waiting\n\nsee [[Later Note]] and [[Nickname]] and [[Other]]\n")
        idx.sync(embed=False)   # only the linking note changed
        assert targets() == {"Later Note": "Notes/Later Note.md", "Nickname": None, "Other": "Notes/Other.md"}
        (vault / "Notes" / "Later Note.md").unlink()
        idx.sync(embed=False)
        assert targets()["Later Note"] is None and idx.status().unresolved_links >= 2


def test_links_written_by_a_run_that_died_are_resolved_by_the_next(vault, index_dir, cli):
    cli("index", "--no-embed")
    write(vault / "Inbox" / "quick-ideas.md", "# Ideas\n\nsee [[Home]] and [[Deep Work]]\n")   # no note added
    r = cli("index", "--no-embed", env={"VAULT_SEARCH_FAULT": "resolve"})   # killed before the final pass
    assert r.code == -9
    assert cli("index", "--no-embed").code == 0   # nothing left to write, but the links still wait
    outlinks = json.loads(cli("links", "Inbox/quick-ideas.md", "--json").out)["outlinks"]
    assert {o["target"]: o["path"] for o in outlinks} == {"Home": "Home.md", "Deep Work": "Notes/Reading/Deep Work.md"}
