"""Keyword-search quality on the shared labelled sets (issue thresholds)."""

import pytest
from conftest import eval_path

from benchmarks.beir import load_beir
from benchmarks.retrieval import build_index, evaluate

pytestmark = pytest.mark.quality


def ndcg(tmp_path, dataset_name, split="test", lang=None, sample=None):
    dataset = load_beir(eval_path("datasets", dataset_name), split, lang, sample, seed=13)
    idx, paths, _ = build_index(dataset, tmp_path)
    with idx:
        result = evaluate(idx, dataset, paths, "fts", depth=10)
    return result.metrics["ndcg@10"], len(dataset.corpus), len(dataset.queries)


def test_cmrc2018_keyword_ndcg(tmp_path):
    score, docs, queries = ndcg(tmp_path, "cmrc2018", sample=500)
    assert (docs, queries) == (1104, 500)
    assert score >= 0.95, score


def test_xquad_chinese_same_language_keyword_ndcg(tmp_path):
    score, docs, queries = ndcg(tmp_path, "xquad", "test_same_language", lang="zh")
    assert (docs, queries) == (240, 1190)
    assert score >= 0.90, score


def test_xquad_english_same_language_keyword_ndcg(tmp_path):
    score, docs, queries = ndcg(tmp_path, "xquad", "test_same_language", lang="en")
    assert (docs, queries) == (240, 1190)
    assert score >= 0.90, score
