import datetime as dt
import os
import sqlite3

import pytest
from conftest import write

from vault_search import Index

RESULT_KEYS = {"path", "title", "heading", "start_line", "end_line", "snippet", "score", "scores",
               "tags", "stale", "uri", "date", "related", "related_to", "match", "relevance"}


@pytest.fixture
def idx(vault, index_dir):
    with Index.open(vault, index_dir, create=True) as index:
        index.sync(embed=False)
        yield index


def paths(idx, query, **kw):
    return [r.path for r in idx.search(query, **kw).results]


def test_json_shape_matches_the_contract(idx):
    data = idx.search("tea ceremony").to_dict()
    assert set(data) == {"query", "mode", "took_ms", "warnings", "results"}
    assert data["mode"] == "fts" and data["query"] == "tea ceremony"
    first = data["results"][0]
    assert set(first) == RESULT_KEYS
    assert set(first["scores"]) == {"fts", "vector", "rerank"}
    assert first["path"] == "Notes/Travel/Kyoto trip.md"
    assert first["uri"] == "obsidian://open?vault=vault&file=Notes%2FTravel%2FKyoto%20trip.md"
    assert first["stale"] is False and first["tags"] == ["travel/japan", "travel"]


def test_a_client_reads_an_answer_carrying_fields_it_does_not_know(idx):
    from vault_search.results import SearchResponse

    data = idx.search("tea ceremony", explain=True).to_dict()
    # A newer server may add fields: the thin client keeps what it knows.
    data["results"][0] = {**data["results"][0], "added_later": 1,
                          "scores": {**data["results"][0]["scores"], "added_later": 2}}
    data["explain"] = {**data["explain"], "added_later": 3,
                       "ranks": [{**data["explain"]["ranks"][0], "added_later": 4}]}
    back = SearchResponse.from_dict(data)
    assert back.results[0].path == "Notes/Travel/Kyoto trip.md" and back.explain.ranks[0].path == back.results[0].path
    assert back.explain.fts_match == data["explain"]["fts_match"]


def test_the_thin_client_reads_back_every_field_a_server_writes(idx):
    """A server's answer read by the thin client (the fast path) is the
    answer: `guesses` was dropped, so pipes printed a server's best guesses."""
    from dataclasses import replace

    from vault_search.results import SearchResponse

    response = replace(idx.search("tea ceremony"), guesses=True, corrections={"ceremny": "ceremony"})
    data = response.to_dict()
    assert data["guesses"] is True and SearchResponse.from_dict(data).to_dict() == data


def test_hit_points_at_the_lines_that_match(idx, vault):
    r = idx.search("covering index").results[0]
    assert r.path == "Notes/数据库/数据库索引.md" and r.heading == "数据库索引 > 覆盖索引"
    lines = (vault / r.path).read_text(encoding="utf-8").splitlines()[r.start_line - 1:r.end_line]
    assert any("covering index" in line for line in lines)
    assert "covering index" in r.snippet and "\n" not in r.snippet


def test_one_result_per_note_best_chunk_first(idx):
    results = idx.search("数据库", limit=50).results
    assert len({r.path for r in results}) == len(results)
    assert results[0].path == "Notes/数据库/数据库索引.md"
    assert [r.score for r in results] == sorted((r.score for r in results), reverse=True)


def test_archive_and_other_dot_folders_never_appear(idx):
    assert paths(idx, "zebrafish") == []
    assert not any(p.startswith(".") for q in ["旧计划代号", "archived plan", "alwaysUpdateLinks"]
                   for p in paths(idx, q, limit=100))


def test_title_alias_and_file_name_matches(idx):
    assert paths(idx, "Zettelkasten")[0] == "Notes/Reading/卡片笔记写作法.md"   # alias
    assert paths(idx, "深度工作")[0] == "Notes/Reading/Deep Work.md"             # Chinese alias of an English note
    assert paths(idx, "k8s cluster")[0] == "Projects/Homelab/Kubernetes 集群.md"


def test_kimono_is_not_and_plus_waiter(idx):
    # 和服 (kimono) is a word; in 我和服务员 the same two characters straddle
    # two words (和 "and" + 服务员 "waiter").
    found = paths(idx, "和服")
    assert found[0] == "Notes/生活/和服与茶道.md"
    assert "Notes/生活/餐厅服务体验.md" not in found


def test_two_character_word_inside_a_long_han_run_unlike_unicode61_and_trigram(tmp_path):
    text = "在京都的茶室里主人穿着和服按照茶道的礼法点茶客人先欣赏茶碗再分三口喝完"
    distractor = "昨天晚上在楼下的餐厅吃饭我和服务员聊了很久她推荐了今天的特价菜"
    vault = tmp_path / "v"
    write(vault / "kimono.md", text + "\n")
    write(vault / "waiter.md", distractor + "\n")
    with Index.open(vault, tmp_path / "i", create=True) as idx:
        idx.sync(embed=False)
        assert paths(idx, "和服") == ["kimono.md"]
        assert paths(idx, "茶碗") == ["kimono.md"]

    # The same documents in SQLite's own tokenizers, as other tools index them:
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE VIRTUAL TABLE u USING fts5(body, tokenize='unicode61')")
    conn.execute("CREATE VIRTUAL TABLE t USING fts5(body, tokenize='trigram')")
    conn.execute("CREATE VIRTUAL TABLE c USING fts5(body, tokenize='unicode61')")  # one char per token
    for name, body in [("kimono", text), ("waiter", distractor)]:
        conn.execute("INSERT INTO u VALUES (?)", (body,))
        conn.execute("INSERT INTO t VALUES (?)", (body,))
        conn.execute("INSERT INTO c VALUES (?)", (" ".join(body),))
    # unicode61 sees the whole Han run as one token: the word is not found.
    assert conn.execute("SELECT rowid FROM u WHERE u MATCH '\"和服\"'").fetchall() == []
    # trigram cannot match a query shorter than three characters.
    assert conn.execute("SELECT rowid FROM t WHERE t MATCH '\"和服\"'").fetchall() == []
    # Per-character phrase matching finds it, and the waiter too.
    assert conn.execute("SELECT rowid FROM c WHERE c MATCH '\"和 服\"'").fetchall() == [(1,), (2,)]


def test_tag_filter_includes_nested_tags_and_combines_with_and(idx):
    assert paths(idx, "milestones", tags=["project"]) == ["Projects/vault-search/Roadmap.md"]
    assert paths(idx, "milestones", tags=["planning", "project/vault-search"]) == ["Projects/vault-search/Roadmap.md"]
    assert paths(idx, "milestones", tags=["planning", "travel"]) == []
    assert set(paths(idx, "BM25 分词", tags=["project"])) == {"Projects/vault-search/设计笔记.md",
                                                              "Projects/vault-search/Roadmap.md"}
    assert paths(idx, "tea", tags=["travel/japan"]) == ["Notes/Travel/Kyoto trip.md"]
    assert paths(idx, "tea", tags=["#Travel"]) == ["Notes/Travel/Kyoto trip.md"]  # case and '#' ignored
    assert paths(idx, "数据库", tags=["数据库", "sqlite"]) == ["Notes/数据库/SQLite WAL 模式.md"]
    assert paths(idx, "数据库", tags=["trav"]) == []  # a prefix is not a parent tag
    assert "Notes/Reading/卡片笔记写作法.md" in paths(idx, "卡片", tags=["写作/方法"])  # inline nested tag


def test_path_filter_is_a_folder_prefix(idx):
    found = paths(idx, "数据库", path="Notes/数据库/")
    assert set(found) == {"Notes/数据库/数据库索引.md", "Notes/数据库/SQLite WAL 模式.md"}
    assert paths(idx, "数据库", path="Notes/数据") == []  # a folder, not a string prefix
    assert paths(idx, "running", path="./Areas") == ["Areas/Health/Running plan.md"]


def test_date_filters_use_frontmatter_then_daily_name_never_mtime(idx, vault):
    assert set(paths(idx, "数据库", after="2026-09-15")) == {
        "Projects/vault-search/设计笔记.md", "Notes/数据库/SQLite WAL 模式.md", "memory/2026-11-01.md",
        "Home.md"}
    assert paths(idx, "reading", after="2026-11-01", before="2026-11-01") == ["memory/2026-11-01.md"]
    assert paths(idx, "数据库", before="2026-09-12") == ["Notes/数据库/数据库索引.md"]
    # A note with no date in frontmatter or name has none, whatever its mtime.
    old = dt.datetime(2020, 5, 17, 12, 0).timestamp()
    os.utime(vault / "Inbox/quick-ideas.md", (old, old))
    idx.sync(embed=False)
    assert "Inbox/quick-ideas.md" in paths(idx, "ideas")
    assert paths(idx, "ideas", before="2020-12-31") == []
    assert "Inbox/quick-ideas.md" not in paths(idx, "ideas", after="2000-01-01")


def test_bad_filter_values_are_usage_errors(idx):
    from vault_search.filters import FilterError

    with pytest.raises(FilterError, match="--after expects a date"):
        idx.search("x", after="the day after tomorrow")


def test_explain_shows_the_fts_query_and_ranks(idx):
    response = idx.search("C++ 智能指针", explain=True)
    assert response.explain.fts_match.startswith('"c++"')
    assert response.explain.ranks[0].fts_rank == 1
    assert "explain" in response.to_dict()


def test_snippets_show_the_matched_word_in_any_of_its_forms(tmp_path):
    vault = tmp_path / "v"
    filler = "Unrelated filler sentence about nothing in particular. " * 12
    write(vault / "a.md", f"# A\n\n{filler}\n\nThis study measured sleep in owls.\n")
    write(vault / "b.md", f"# B\n\n{filler}\n\nUn café noir à Paris.\n")
    write(vault / "c.md", f"# C\n\n{filler}\n\n型号 ＸＹＺ１２３ 的说明。\n")
    with Index.open(vault, tmp_path / "i", create=True) as idx:
        idx.sync(embed=False)
        for query, path, shown in [("studies", "a.md", "study"), ("cafe", "b.md", "café"),
                                   ("xyz123", "c.md", "ＸＹＺ１２３")]:
            r = idx.search(query).results[0]
            assert r.path == path and shown in r.snippet, (query, r.snippet)


def test_folder_filter_is_case_sensitive(tmp_path):
    vault = tmp_path / "v"
    write(vault / "Notes/a.md", "# A\nheron\n")
    write(vault / "notes/b.md", "# B\nheron\n")
    with Index.open(vault, tmp_path / "i", create=True) as idx:
        idx.sync(embed=False)
        assert paths(idx, "heron", path="notes") == ["notes/b.md"]
        assert paths(idx, "heron", path="Notes") == ["Notes/a.md"]


def test_dates_given_by_the_user_must_be_exact(idx):
    from vault_search.filters import FilterError

    for bad in ["2026-11-01x", "2026-11-01 09:99", "2026-13-01", "01/11/2026"]:
        with pytest.raises(FilterError):
            idx.search("x", after=bad)
    assert paths(idx, "reading", after="2026-11-01T15:00", before="2026-11-01 23:59") == ["memory/2026-11-01.md"]


def test_scores_of_very_common_words_are_not_rounded_to_zero(tmp_path):
    vault = tmp_path / "v"
    for i in range(6):
        write(vault / f"n{i}.md", f"# N{i}\ncommon word here, note {i}\n")
    with Index.open(vault, tmp_path / "i", create=True) as idx:
        idx.sync(embed=False)
        assert all(r.score != 0 for r in idx.search("common").results)


def test_a_notes_folder_is_searched_with_its_tags_and_follows_a_move(tmp_path):
    """A page in a topic folder rarely repeats the topic, while the folder's
    overview lists every page in it: the folder a note is in is a word of the
    note (as its tags are; the folders above it only sort), and a note moved to
    another folder takes the new one."""
    vault = tmp_path / "vault"
    write(vault / "王者荣耀" / "草丛与视野.md", "# 草丛与视野\n\n站在草丛里，对面看不到你的位置。\n")
    write(vault / "Spaces" / "Games" / "bushes.md", "# Bushes\n\nStanding in a bush hides you from the other side.\n")
    write(vault / "Notes" / "cooking.md", "# Cooking\n\nRice and miso soup.\n")
    with Index.open(vault, tmp_path / "index", create=True) as idx:
        idx.sync(embed=False)
        # The overview comes later, and its name joins the segmenter's dictionary:
        # the page written before is segmented again, its folder word too.
        write(vault / "王者荣耀" / "§ 王者荣耀.md", "# § 王者荣耀\n\n- [[草丛与视野]]\n- [[出装与对线]]\n")
        idx.sync(embed=False)
        row = idx.conn.execute("SELECT f.tags FROM chunks_fts f JOIN chunks c ON c.id = f.rowid "
                               "JOIN notes n ON n.id = c.note_id WHERE n.path = '王者荣耀/草丛与视野.md'").fetchone()
        assert "王者荣耀" in row[0].split()
        assert paths(idx, "王者荣耀 对面 看不到 位置")[0] == "王者荣耀/草丛与视野.md"
        assert paths(idx, "games") == ["Spaces/Games/bushes.md"]
        assert paths(idx, "spaces") == []                  # a folder above the note's own
        assert paths(idx, "games", tags=["games"]) == []   # a folder is a word, not a tag
        (vault / "Spaces" / "Games").rename(vault / "Spaces" / "Moba")
        idx.sync(embed=False)
        assert paths(idx, "games") == [] and paths(idx, "moba") == ["Spaces/Moba/bushes.md"]
