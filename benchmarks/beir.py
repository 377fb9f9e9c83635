"""Load a BEIR-layout dataset and turn it into a vault of one note per document.

Layout (see shared/eval/README.md): ``corpus.jsonl`` (``_id``, ``title``,
``text``[, ``lang``]), ``queries.jsonl`` (``_id``, ``text``), and
``qrels/<split>.tsv`` with a ``query-id corpus-id score`` header.
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass
from pathlib import Path


@dataclass
class Dataset:
    name: str
    corpus: dict[str, dict]              # doc id -> {"title", "text", "lang"?}
    queries: dict[str, str]              # query id -> text (only those with qrels)
    qrels: dict[str, dict[str, int]]     # query id -> {doc id: relevance}


def load_beir(folder: str | Path, split: str = "test", lang: str | None = None,
              sample: int | None = None, seed: int = 13, doc_lang: str | None = None,
              query_lang: str | None = None) -> Dataset:
    """Read a BEIR folder; ``lang`` keeps only documents and queries in that
    language (ids or a ``lang`` field), ``doc_lang``/``query_lang`` one side
    only (cross-lingual runs); ``sample`` draws queries with ``seed``."""
    folder = Path(folder)
    doc_lang = doc_lang or lang
    query_lang = query_lang or lang
    corpus = {}
    with open(folder / "corpus.jsonl", encoding="utf-8") as fh:
        for line in fh:
            doc = json.loads(line)
            if doc_lang and _lang(doc) != doc_lang:
                continue
            corpus[doc["_id"]] = doc
    texts = {}
    with open(folder / "queries.jsonl", encoding="utf-8") as fh:
        for line in fh:
            q = json.loads(line)
            if query_lang and _lang(q) != query_lang:
                continue
            texts[q["_id"]] = q["text"]
    qrels: dict[str, dict[str, int]] = {}
    with open(folder / "qrels" / f"{split}.tsv", encoding="utf-8") as fh:
        next(fh)
        for line in fh:
            qid, did, score = line.rstrip("\n").split("\t")
            if int(score) > 0 and qid in texts and did in corpus:
                qrels.setdefault(qid, {})[did] = int(score)
    qids = sorted(qrels)
    if sample is not None and sample < len(qids):
        qids = sorted(random.Random(seed).sample(qids, sample))
    return Dataset(folder.name, corpus, {q: texts[q] for q in qids}, {q: qrels[q] for q in qids})


def _lang(record: dict) -> str | None:
    if record.get("lang"):
        return record["lang"]
    m = re.match(r"^([a-z]{2})-", record["_id"])
    return m.group(1) if m else None


def safe_name(doc_id: str) -> str:
    return re.sub(r'[\\/:*?"<>|#^\[\]\s]+', "_", doc_id)[:120] or "_"


def note_paths(dataset: Dataset, shard: int = 100) -> dict[str, str]:
    """doc id -> the vault-relative path ``write_vault`` gives its note."""
    return {doc_id: f"{i // shard:03d}/{safe_name(doc_id)}.md" for i, doc_id in enumerate(sorted(dataset.corpus))}


def write_vault(dataset: Dataset, vault: str | Path, shard: int = 100) -> dict[str, str]:
    """One note per document (frontmatter id/title, body = title heading +
    text); returns doc id -> vault-relative path (``note_paths``)."""
    vault = Path(vault)
    paths = note_paths(dataset, shard)
    for doc_id, doc in sorted(dataset.corpus.items()):
        rel = paths[doc_id]
        title = (doc.get("title") or "").replace("\n", " ").strip()
        front = ["---", "id: " + json.dumps(doc_id, ensure_ascii=False)]
        if title:
            front.append("title: " + json.dumps(title, ensure_ascii=False))
        if doc.get("lang"):
            front.append("lang: " + doc["lang"])
        front.append("---")
        body = (f"# {title}\n\n" if title else "") + doc["text"].strip() + "\n"
        target = vault / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text("\n".join(front) + "\n" + body, encoding="utf-8")
    return paths
