"""The real oldwinter-garden-zh vault (3,176 notes, mostly Chinese), indexed
by the installed command."""

import json
import os
import sqlite3
import subprocess

import pytest
from conftest import CLI


@pytest.fixture(scope="module")
def garden(garden_index):
    return garden_index


def search(garden, *args):
    vault, index, _ = garden
    proc = subprocess.run([str(CLI), "--vault", str(vault), "--index-dir", str(index), "search", "--json", *args],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)["results"]


def test_every_non_empty_note_is_indexed_and_nothing_from_dot_folders(garden):
    vault, index, report = garden
    expected, empty = set(), set()
    for root, dirs, files in os.walk(vault):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        for name in files:
            if name.endswith(".md") and not name.startswith("."):
                rel = os.path.relpath(os.path.join(root, name), vault).replace(os.sep, "/")
                text = open(os.path.join(root, name), "rb").read()
                (expected if text.strip() else empty).add(rel)
    assert len(expected) + len(empty) == 3176
    with sqlite3.connect(index / "index.db") as conn:
        with_chunks = {p for (p,) in conn.execute(
            "SELECT path FROM notes n WHERE EXISTS (SELECT 1 FROM chunks c WHERE c.note_id = n.id)")}
        all_notes = {p for (p,) in conn.execute("SELECT path FROM notes")}
    assert with_chunks == expected
    assert all_notes == expected | empty
    assert not any(part.startswith(".") for p in all_notes for part in p.split("/"))
    assert report["added"] == 3176 and report["skipped"] == 0
    # The one note with broken YAML is reported, and indexed anyway.
    assert [w["path"] for w in report["warnings"]] == ["Extras/Templates/其他/微信读书同步模板.md"]


@pytest.mark.parametrize("query,expected", [
    ("飞轮效应", "Sources/Courses/人文社科通识/心理学/常见心理学效应/飞轮效应.md"),
    ("收藏者谬误", "Sources/Courses/人文社科通识/心理学/常见心理学效应/收藏者谬误.md"),
    ("运动后延迟性肌肉疼痛", "Cards/永久笔记/DOMS.md"),      # an alias
    ("网红", "Cards/永久笔记/KOL.md"),                     # an alias
    ("docker compose", "Cards/永久笔记/docker compose.md"),
    ("Elasticsearch", "Spaces/2-Area/云计算与云原生/ELK.md"),
    ("Map Of Content", "Cards/永久笔记/MOC.md"),
])
def test_chinese_and_english_terms_find_the_right_note(garden, query, expected):
    assert search(garden, query, "-n", "3")[0]["path"] == expected


def test_tag_filters_on_the_real_vault(garden):
    movies = search(garden, "电影", "--tag", "movie", "-n", "20")
    assert len(movies) >= 5 and all("movie" in [t.lower() for t in r["tags"]] for r in movies)
    todo = search(garden, "今天", "--tag", "待办", "-n", "20")
    assert todo and all(any(t == "待办" or t.startswith("待办/") for t in r["tags"]) for r in todo)
    assert any("待办/今天" in r["tags"] for r in todo)


def test_line_ranges_point_into_the_real_files(garden):
    vault = garden[0]
    for result in search(garden, "卡片笔记", "-n", "10"):
        lines = (vault / result["path"]).read_text(encoding="utf-8").splitlines()
        assert 1 <= result["start_line"] <= result["end_line"] <= len(lines)
