"""The known-item harness (benchmarks/known_items.py) end to end on a tiny
vault: keyword metrics against values worked out by hand, the cached index
reused without re-embedding, and the half-embedded and off-topic checks."""

import json

import pytest
from conftest import write_notes

from benchmarks import known_items
from benchmarks.known_items import score_ranking, summarise

NOTES = {
    "Garden/Tomatoes.md": "# Tomatoes\n\nTomato plants need full sun and deep watering. Stake them early.\n",
    "Garden/Compost.md": "# Compost\n\nKitchen scraps and dry leaves turn into compost within months.\n",
    "Kitchen/Sourdough.md": "# Sourdough\n\nFeed the starter with flour and water; bake when it doubles.\n",
    "Kitchen/Pickles.md": "# Pickles\n\nCucumbers in brine with dill ferment slowly. Tomatoes keep well this way too.\n",
    "Travel/Kyoto.md": "# Kyoto\n\nTemples, tea houses and the bamboo forest of Arashiyama.\n",
    "Travel/Lisbon.md": "# Lisbon\n\nYellow trams climb the hills; custard tarts in Belém.\n",
    "茶道.md": "# 茶道\n\n日本茶道讲究和敬清寂，一期一会。\n",
}

# Keyword search, by hand (each query's words are in the notes named):
#   k1 "sourdough starter"  only Sourdough has them             -> rank 1
#   k2 "compost"            only Compost                        -> rank 1
#   p1 "tomatoes"           Tomatoes (its title) before Pickles -> target Pickles at rank 2
#   x1 "tea ceremony"       only Kyoto has "tea"; the target, the Chinese 茶道, has neither word -> not found
#   t1 "lisbon trams"       Lisbon only; the second target, Kyoto, has neither word -> R@10 1/2
#   q1 "where do cucumbers and dill ferment"  only Pickles      -> rank 1
QUERIES = [
    ("k1", "sourdough starter", "keyword", ["Kitchen/Sourdough.md"]),
    ("k2", "compost", "keyword", ["Garden/Compost.md"]),
    ("p1", "tomatoes", "paraphrase", ["Kitchen/Pickles.md"]),
    ("x1", "tea ceremony", "crosslingual", ["茶道.md"]),
    ("t1", "lisbon trams", "title-ish", ["Travel/Lisbon.md", "Travel/Kyoto.md"]),
    ("q1", "where do cucumbers and dill ferment", "question", ["Kitchen/Pickles.md"]),
]
FTS_BY_HAND = {
    "question": {"n": 1, "hit@1": 1.0, "mrr@10": 1.0, "r@10": 1.0},
    "paraphrase": {"n": 1, "hit@1": 0.0, "mrr@10": 0.5, "r@10": 1.0},
    "keyword": {"n": 2, "hit@1": 1.0, "mrr@10": 1.0, "r@10": 1.0},
    "crosslingual": {"n": 1, "hit@1": 0.0, "mrr@10": 0.0, "r@10": 0.0},
    "title-ish": {"n": 1, "hit@1": 1.0, "mrr@10": 1.0, "r@10": 0.5},
    # 4 of 6 first; MRR (1 + 1 + 1/2 + 0 + 1 + 1) / 6; R@10 (1 + 1 + 1 + 0 + 1/2 + 1) / 6
    "all": {"n": 6, "hit@1": 0.6667, "mrr@10": 0.75, "r@10": 0.75},
}


def tiny_known_items(path, vault):
    rows = [{"id": i, "vault": vault, "query": q, "lang": "en", "kind": k, "targets": t, "why": "test"}
            for i, q, k, t in QUERIES]
    rows.append({"id": "other", "vault": "another-vault", "query": "compost", "lang": "en", "kind": "keyword",
                 "targets": ["Garden/Compost.md"], "why": "a line for another vault: left out"})
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


def tiny_offtopic(folder):
    """Stand-ins for cmrc2018/ and scifact/: a few test-split queries each (and one outside it)."""
    sets = {"cmrc2018": ["《红楼梦》的作者是谁？", "长江流经哪些省份？", "唐朝的首都在哪里？"],
            "scifact": ["Aspirin lowers the risk of heart attack.", "Vitamin D deficiency causes rickets.",
                        "Sleep loss impairs memory consolidation."]}
    for name, texts in sets.items():
        (folder / name / "qrels").mkdir(parents=True)
        ids = [f"q{i}" for i in range(len(texts))] + ["train-only"]
        queries = [{"_id": qid, "text": text} for qid, text in zip(ids, texts + ["not in the test split"])]
        (folder / name / "queries.jsonl").write_text(
            "".join(json.dumps(q, ensure_ascii=False) + "\n" for q in queries), encoding="utf-8")
        (folder / name / "corpus.jsonl").write_text(json.dumps({"_id": "d0", "title": "", "text": "x"}) + "\n",
                                                    encoding="utf-8")
        (folder / name / "qrels" / "test.tsv").write_text(
            "query-id\tcorpus-id\tscore\n" + "".join(f"{q}\td0\t1\n" for q in ids[:-1]), encoding="utf-8")
    return folder


def test_score_ranking_by_hand():
    assert score_ranking(["a", "b", "c"], ("b",)) == {"hit@1": 0.0, "mrr@10": 0.5, "r@10": 1.0, "rank": 2}
    assert score_ranking(["a", "b"], ("a", "z")) == {"hit@1": 1.0, "mrr@10": 1.0, "r@10": 0.5, "rank": 1}
    ranked = [f"n{i}" for i in range(12)]
    assert score_ranking(ranked, ("n10",)) == {"hit@1": 0.0, "mrr@10": 0.0, "r@10": 0.0, "rank": None}
    rows = [{"kind": "keyword", "hit@1": 1.0, "mrr@10": 1.0, "r@10": 1.0},
            {"kind": "odd", "hit@1": 0.0, "mrr@10": 0.25, "r@10": 1.0},
            {"kind": "question", "hit@1": 0.0, "mrr@10": 0.0, "r@10": 0.0}]
    assert list(summarise(rows)) == ["question", "keyword", "odd", "all"]   # the README's kind order first
    assert summarise(rows)["all"] == {"n": 3, "hit@1": 0.3333, "mrr@10": 0.4167, "r@10": 0.6667}


def test_known_items_end_to_end(tmp_path, capsys):
    vault = write_notes(tmp_path / "tiny-vault", NOTES)
    queries = tiny_known_items(tmp_path / "known.jsonl", "tiny-vault")
    datasets = tiny_offtopic(tmp_path / "datasets")
    work, report = tmp_path / "work", tmp_path / "report"
    argv = [str(queries), "--vault", str(vault), "--work", str(work), "--model", "hash:64",
            "--datasets", str(datasets), "--misses", "3"]

    assert known_items.main(argv + ["--report", str(report)]) == 0
    out = capsys.readouterr().out
    assert "| kind | n | fts hit@1 | fts MRR@10 | fts R@10 | vector hit@1 |" in out
    assert "Half-embedded index:" in out and "Off-topic queries at the default limit" in out
    first = json.loads((report / "report.json").read_text(encoding="utf-8"))
    assert first["queries"] == 6 and first["notes"] == 7 and first["missing_targets"] == []
    assert first["kinds"] == {"question": 1, "paraphrase": 1, "keyword": 2, "crosslingual": 1, "title-ish": 1}
    assert first["modes"]["fts"]["metrics"] == FTS_BY_HAND
    assert first["modes"]["fts"]["ranks"] == {"k1": 1, "k2": 1, "p1": 2, "x1": None, "t1": 1, "q1": 1}
    fts_misses = first["modes"]["fts"]["misses"]
    assert [m["id"] for m in fts_misses] == ["p1", "x1"]
    assert fts_misses[0]["first"] == "Garden/Tomatoes.md" and fts_misses[1]["rank"] is None
    for mode in ("vector", "hybrid"):   # hash vectors are not worked out by hand: the summary agrees with the ranks
        ranks = first["modes"][mode]["ranks"]
        hits = sum(r == 1 for r in ranks.values()) / 6
        assert first["modes"][mode]["metrics"]["all"]["hit@1"] == pytest.approx(hits, abs=1e-4)
        assert first["modes"][mode]["metrics"]["all"]["mrr@10"] == pytest.approx(
            sum(1 / r for r in ranks.values() if r) / 6, abs=1e-4)
    assert first["index"]["reused"] is False and first["index"]["embedded"] == first["chunks"] > 0
    assert (report / "report.md").read_text(encoding="utf-8").startswith("# Known items: tiny-vault")

    # The half-embedded copy: a seeded half of the chunks with vectors, keyword search untouched.
    partial = first["partial"]
    assert partial["chunks"] == first["chunks"]
    assert partial["embedded_chunks"] == round(first["chunks"] * 0.5)
    assert partial["waiting_chunks"] == first["chunks"] - partial["embedded_chunks"]
    assert partial["default_mode"] == "hybrid"
    assert partial["modes"]["fts"] == FTS_BY_HAND and set(partial["modes"]["default"]) == set(FTS_BY_HAND)
    # Off-topic: the test-split queries of each set, in file order, at the default limit.
    offtopic = first["offtopic"]
    assert offtopic["mode"] == "hybrid"
    assert {name: s["queries"] for name, s in offtopic["sets"].items()} == {"cmrc2018": 3, "scifact": 3}
    assert offtopic["all"]["queries"] == 6 and 0 <= offtopic["all"]["mean_results"] <= 10

    # A second run reuses the index: nothing copied, nothing embedded, the same numbers.
    assert known_items.main(argv + ["--json"]) == 0
    second = json.loads(capsys.readouterr().out)
    assert second["index"]["reused"] is True and second["index"]["forced"] is False
    assert second["index"]["embedded"] == 0 and second["index"]["copied_files"] == 0
    for mode, result in first["modes"].items():
        assert {k: v for k, v in second["modes"][mode].items() if k != "latency_ms_p50"} == {
            k: v for k, v in result.items() if k != "latency_ms_p50"}
    assert second["partial"]["ranks"] == partial["ranks"]
    assert not any(p.name.startswith("partial-") for p in (work / "partial").iterdir())
    for path in vault.rglob("*.md"):   # the vault itself was never written to
        assert path.read_text(encoding="utf-8") == NOTES[path.relative_to(vault).as_posix()]

    # The write path changed (another indexer digest) and the vault gained a note: every note is
    # re-processed, only the new note's text is embedded.
    (manifest,) = work.glob(f"tiny-vault-*/{known_items.MANIFEST}")
    data = json.loads(manifest.read_text(encoding="utf-8"))
    data["identity"]["indexer_source"] = "an older indexer"
    manifest.write_text(json.dumps(data), encoding="utf-8")
    (vault / "Travel" / "Oslo.md").write_text("# Oslo\n\nFerries cross the fjord to the islands.\n", "utf-8")
    assert known_items.main(argv + ["--json", "--modes", "fts"]) == 0
    third = json.loads(capsys.readouterr().out)
    assert third["index"]["forced"] is True and third["index"]["copied_files"] == 1
    assert third["index"]["embedded"] == 1 and third["notes"] == 8


def test_known_items_keyword_only(tmp_path, capsys):
    vault = write_notes(tmp_path / "tiny-vault", NOTES)
    queries = tiny_known_items(tmp_path / "known.jsonl", "tiny-vault")
    assert known_items.main([str(queries), "--vault", str(vault), "--model", "hash:64", "--modes", "fts", "--json",
                             "--datasets", str(tiny_offtopic(tmp_path / "datasets"))]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert list(summary["modes"]) == ["fts"] and summary["modes"]["fts"]["metrics"] == FTS_BY_HAND
    assert summary["embedded_chunks"] == 0 and "no vectors" in summary["partial"]["skipped"]
    assert summary["offtopic"]["mode"] == "fts" and summary["offtopic"]["all"]["queries"] == 6


def test_known_items_refuses_a_vault_without_queries(tmp_path):
    vault = write_notes(tmp_path / "unlisted", NOTES)
    queries = tiny_known_items(tmp_path / "known.jsonl", "tiny-vault")
    with pytest.raises(SystemExit, match="no queries for the vault 'unlisted'"):
        known_items.main([str(queries), "--vault", str(vault), "--model", "hash:64", "--modes", "fts"])
