"""While chunks still wait for a vector (a new vault being embedded, or an
interrupted `index`), every response says how many, and the hybrid trusts the
vector list only as far as it reaches (issue 14, target 3)."""

from __future__ import annotations

from conftest import write


def test_waiting_chunks_are_reported_and_the_vector_list_weighs_less(cli, vault):
    assert cli("index", "--model", "hash:64").code == 0
    full = cli("search", "数据库", "--json", "--explain", "--no-server").json()
    assert not [w for w in full["warnings"] if "wait for a vector" in w]
    assert full["explain"]["weights"]["vector"] == 1.0
    for i in range(30):
        write(vault / "Fresh" / f"n{i}.md", f"# Fresh {i}\n\nnew words about 数据库 number {i}\n")
    assert cli("index", "--no-embed").code == 0
    status = cli("status", "--json").json()
    waiting, chunks = status["waiting_chunks"], status["chunks"]
    assert waiting >= 30
    for mode in ("hybrid", "vector"):
        data = cli("search", "数据库", "--json", "--explain", "--mode", mode, "--no-server").json()
        assert f"{waiting} of {chunks} chunks still wait for a vector" in " ".join(data["warnings"]), mode
    fts = cli("search", "数据库", "--json", "--mode", "fts", "--no-server").json()
    assert not [w for w in fts["warnings"] if "vector" in w]   # keywords asked for: vectors do not matter
    hybrid = cli("search", "数据库", "--json", "--explain", "--no-server").json()
    share = (chunks - waiting) / chunks
    assert abs(hybrid["explain"]["weights"]["vector"] - round(share ** 2, 4)) < 1e-4
    text = cli("search", "数据库", "--no-server")
    assert "still wait for a vector" in text.out + text.err
    assert cli("index").code == 0   # embeds them
    again = cli("search", "数据库", "--json", "--explain", "--no-server").json()
    assert not [w for w in again["warnings"] if "wait for a vector" in w]
    assert again["explain"]["weights"]["vector"] == 1.0


def test_each_result_says_how_it_matched(cli, vault):
    assert cli("index", "--model", "hash:64").code == 0
    fts = cli("search", "数据库", "--json", "--mode", "fts", "--no-server").json()["results"]
    assert fts and {r["match"] for r in fts} == {"keyword"}
    vector = cli("search", "数据库", "--json", "--mode", "vector", "--no-server").json()["results"]
    assert vector and {r["match"] for r in vector} == {"vector"}
    hybrid = cli("search", "数据库", "--json", "--explain", "--no-server").json()
    for result, rank in zip(hybrid["results"], hybrid["explain"]["ranks"]):
        expected = {(True, True): "both", (True, False): "keyword", (False, True): "vector"}[
            (rank["fts_rank"] is not None, rank["vector_rank"] is not None)]
        assert result["match"] == (
            "name" if rank.get("name_match") else expected), (result["path"], rank)
    named = cli("search", "首页", "--json", "--no-server").json()["results"]   # Home.md's alias
    assert named[0]["path"] == "Home.md" and named[0]["match"] == "name"
    related = cli("search", "deep work", "--json", "--related", "--no-server").json()["results"]
    assert [r["match"] for r in related if r["related"]] and all(
        r["match"] is None for r in related if r["related"])
