"""The ranking model's fit (benchmarks/fit.py) and the pool's paired test
(benchmarks/pool.py): the traces, fused again offline, put every note where
``search.run`` puts it; the paired test keeps a real gain and refuses noise
and a loss."""

import json
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from benchmarks import fit, pool
from vault_search import Index, search
from vault_search.options import SearchOptions
from vault_search.search.weights import MODEL

SAMPLE = Path(__file__).resolve().parents[1] / "sample-vault"
QUERIES = [
    "database index", "数据库 索引", "how do I deploy the cluster", "Home", "trading rules", "理财",
    "what did I decide about feedback", "如何升级集群", "reading list books", "deploy-checklist",
    "a question about nothing in these notes at all", "旅行 计划",
]


@pytest.fixture(scope="module")
def sample_index(tmp_path_factory):
    root = tmp_path_factory.mktemp("fit")
    shutil.copytree(SAMPLE, root / "vault")
    with Index.open(root / "vault", root / "index", create=True) as idx:
        idx.sync(embed=True, model="hash:64")
        yield idx


@pytest.mark.parametrize("model", [MODEL, replace(MODEL, rrf_k=2, score_share=1.0, keyword=0.5, title=3.0)],
                         ids=["shipped", "another"])
def test_traces_fused_again_put_every_shown_note_where_search_puts_it(sample_index, tmp_path, monkeypatch, model):
    from vault_search.search import weights

    monkeypatch.setattr(weights, "MODEL", model)     # the model search.run ranks with
    idx = sample_index
    note_ids = dict(idx.conn.execute("SELECT path, id FROM notes").fetchall())
    traces, expected = tmp_path / "traces.jsonl", []
    with open(traces, "w", encoding="utf-8") as out:
        for n, text in enumerate(QUERIES):
            shown = pool.note_paths(search.run(idx, text, SearchOptions(limit=pool.LIMIT, mode="hybrid")))
            unshown = sorted(set(note_ids) - set(shown))[:2]
            for place, path in [*enumerate(shown, 1), *((None, p) for p in unshown)]:
                q = pool.Query("sample", "sample", f"{n}-{path}", text, "all", {path: 1})
                out.write(json.dumps(pool.trace(idx, q, note_ids), ensure_ascii=False) + "\n")
                expected.append(place)
    assert sum(p is not None for p in expected) >= 25     # the queries show notes, several each
    t = fit.load_traces(traces)
    assert any(n >= 0 for n in t.named) and len(t.lists) >= 4   # names and side lists are exercised
    got = fit.first_ranks(t, model)
    assert [None if not np.isfinite(r) else int(r) for r in got] == expected


def test_the_paired_test_keeps_a_gain_and_refuses_noise_and_a_loss():
    def rows(values: dict[str, list[float]]):
        return {(s, str(i)): {"mrr@10": v} for s, vs in values.items() for i, v in enumerate(vs)}

    before = rows({"a": [0.0] * 50, "b": [0.5] * 50})
    gain = pool.paired(before, rows({"a": [1.0] * 25 + [0.0] * 25, "b": [0.5] * 50}), "mrr@10")
    assert gain.keep and gain.low > 0 and gain.gain == pytest.approx(0.25)
    noise = pool.paired(before, rows({"a": [1.0, 0.0] + [0.0] * 48, "b": [0.5] * 50}), "mrr@10")
    assert not noise.keep and noise.low <= 0          # one query moving is noise
    loss = pool.paired(before, rows({"a": [1.0] * 50, "b": [0.0] * 30 + [0.5] * 20}), "mrr@10")
    assert loss.low > 0 and loss.losers == ["b"] and not loss.keep   # a set losing beyond its noise
    assert pool.paired(before, before, "mrr@10").gain == 0.0


def test_the_fit_is_deterministic_and_never_worse_than_where_it_starts(sample_index, tmp_path):
    idx = sample_index
    note_ids = dict(idx.conn.execute("SELECT path, id FROM notes").fetchall())
    traces = tmp_path / "traces.jsonl"
    with open(traces, "w", encoding="utf-8") as out:
        for n, text in enumerate(QUERIES):
            for path in sorted(note_ids)[n::6][:3]:
                q = pool.Query("set" + str(n % 3), "fold" + str(n % 4), f"{n}-{path}", text, "all", {path: 1})
                out.write(json.dumps(pool.trace(idx, q, note_ids), ensure_ascii=False) + "\n")
    t = fit.load_traces(traces)
    everything = np.ones(len(t.sets), bool)
    start = fit.objective(t, fit.first_ranks(t, MODEL), everything)
    model, score = fit.fit(t, MODEL, everything, cautious=False)
    assert score >= start and score == fit.objective(t, fit.first_ranks(t, model), everything)
    assert fit.fit(t, MODEL, everything, cautious=False) == (model, score)
    # The cautious fit (the rule as objective) starts at a gain of 0 over the shipped model, never below.
    safe, bound = fit.fit(t, MODEL, everything)
    reference = fit.first_ranks(t, MODEL)
    assert bound >= 0.0 == fit.lower_bound(t, reference, reference, everything)
    assert bound == fit.lower_bound(t, fit.first_ranks(t, safe), reference, everything)
    written = tmp_path / "model.json"
    fit.write_model(written, model, t, str(traces))
    record = json.loads(written.read_text())
    assert record["parameters"] == fit.model_values(model) and record["data"]["queries"] == len(t.sets)


def test_the_pool_harness_scores_each_set_and_compares_two_runs(tmp_path, capsys):
    from tests.conftest import eval_path

    eval_path("devsets", "known-items.jsonl")
    out, traces = tmp_path / "pool.jsonl", tmp_path / "traces.jsonl"
    assert pool.main(["run", str(out), "--model", "hash:64", "--work", str(tmp_path / "work"), "--queries", "3",
                      "--sets", "known-obsidian|locomo|xquad-en-zh", "--traces", str(traces)]) == 0
    rows = pool.load(out)
    assert {r["set"] for r in rows} == {"known-obsidian-tasks-docs-en", "locomo", "xquad-en-zh"}
    assert len(rows) == 3 * (3 + 5 * 3 + 3) and {r["mode"] for r in rows} == set(pool.MODES)
    assert all(0 <= r[m] <= 1 for r in rows for m in pool.METRICS)
    assert len(fit.load_traces(traces).sets) == 3 + 5 * 3 + 3
    table = capsys.readouterr().out
    assert "| locomo | all | 15 |" in table and "hybrid >= best - 0.02" in table
    assert pool.main(["compare", str(out), str(out)]) == 1            # no change is no gain
    assert "NOT KEPT: the interval reaches zero" in capsys.readouterr().out


def test_the_shipped_model_is_the_file_and_the_file_holds_every_fitted_parameter():
    from dataclasses import MISSING, fields

    from vault_search.search import weights

    record = json.loads(weights.MODEL_FILE.read_text(encoding="utf-8"))
    fitted = {f.name for f in fields(weights.Model) if f.default is MISSING}
    assert set(record["parameters"]) == fitted == set(fit.GRID)      # the fit owns every value the file holds
    assert weights.load_model() == weights.MODEL and "fitted" in record and "by" in record


def test_fused_scores_equal_but_for_rounding_are_a_tie_broken_by_the_best_rank():
    from vault_search.fusion import rrf
    from vault_search.hits import ChunkHit

    def hits(notes):
        return [ChunkHit(chunk_id=n, note_id=n, score=1.0 / r, rank=r) for r, n in enumerate(notes, 1)]

    # A: keyword rank 5 alone, 1.5 / 15 = 0.1; B: vector rank 4 and title rank 25, 1/14 + 1/35 = 0.1 as well,
    # 0.09999999999999999 in floats. B's best rank (4) wins the tie, whichever way the floats fell.
    keyword, vector, title = hits([11, 12, 13, 14, 1]), hits([21, 22, 23, 2]), hits([*range(31, 55), 2])
    order = [f.note_id for f in rrf({"fts": keyword, "vector": vector, "title": title},
                                    {"fts": 1.5, "vector": 1.0, "title": 1.0}, 10)]
    assert order.index(2) < order.index(1)


def test_the_pool_draws_the_same_question_asked_in_several_sets_together():
    assert pool.unit("xquad-zh-en", "zh-5725f39638643c19005acef9") == ("xquad", "5725f39638643c19005acef9")
    assert pool.unit("locomo", "locomo-26-001") == ("locomo", "locomo-26-001")
    # The same questions gain in one direction and lose as much in the other: drawn together, every draw
    # cancels, so the pool's interval is exactly zero; drawn apart it would spread.
    ups = [1.0, 0.0] * 50
    before = {(s, f"{p}-{i}"): {"mrr@10": 0.0} for s, p in (("xquad-en", "en"), ("xquad-zh", "zh")) for i in range(100)}
    after = {("xquad-en", f"en-{i}"): {"mrr@10": ups[i]} for i in range(100)}
    after |= {("xquad-zh", f"zh-{i}"): {"mrr@10": -ups[i]} for i in range(100)}
    v = pool.paired(before, after, "mrr@10")
    assert v.low == v.high == 0.0 and v.sets["xquad-en"][0] == 0.5 and v.losers == ["xquad-zh"]


def test_the_fits_objective_refuses_a_set_losing_beyond_its_noise():
    from types import SimpleNamespace

    # set a: 200 of 400 queries go from a miss to first; set b: 20 of 100 fall out of the first place
    t = SimpleNamespace(sets=["a"] * 400 + ["b"] * 100, ids=[str(i) for i in range(500)])
    against = np.array([np.inf] * 400 + [1.0] * 100)
    ranks = np.array([1.0] * 200 + [np.inf] * 200 + [np.inf] * 20 + [1.0] * 80)
    everything = np.ones(500, bool)
    assert fit.lower_bound(t, ranks, against, everything) == -1.0
    alone = SimpleNamespace(sets=t.sets[:400], ids=t.ids[:400])
    assert fit.lower_bound(alone, ranks[:400], against[:400], everything[:400]) > 0.4   # set a alone: a clear gain
