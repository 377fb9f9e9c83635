"""Vaults of any size made of real text, for the speed and scaling harness.

Paragraphs, titles and tags are sampled (with a fixed seed) from the shared
vaults and datasets (../shared/eval: oldwinter-garden-zh, obsidian-tasks-docs-en,
scifact, cmrc2018, xquad). Each note gets a title, frontmatter (tags, a date),
one to four paragraphs and a line of its own, so no two notes, and almost no
two chunks, are identical (identical chunk text would be embedded once and
flatter the numbers).
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass
from pathlib import Path

EVAL = Path(__file__).resolve().parent.parent.parent / "shared" / "eval"
MIN_PARAGRAPH_CHARS = 40
MAX_PARAGRAPH_CHARS = 1500
FRONTMATTER_RE = re.compile(r"\A---\n.*?\n---\n", re.S)
UNSAFE_RE = re.compile(r"[^\w.-]+")
HEX_RE = re.compile(r"[0-9a-fA-F]{3,8}")  # CSS colours, not tags
TAG_RE = re.compile(r"(?<![\w#])#([\w\u4e00-\u9fff][\w/\u4e00-\u9fff-]*)")


@dataclass
class Pool:
    titles: list[str]
    paragraphs: list[str]
    tags: list[str]


def load_pool(eval_dir: Path = EVAL) -> Pool:
    titles, paragraphs, tags = [], [], set()
    for vault in sorted((eval_dir / "vaults").iterdir()):
        for path in sorted(vault.rglob("*.md")):
            if any(part.startswith(".") for part in path.relative_to(vault).parts):
                continue
            try:
                text = path.read_text(encoding="utf-8")
            except (UnicodeDecodeError, OSError):
                continue
            titles.append(path.stem)
            body = FRONTMATTER_RE.sub("", text)
            tags.update(t for t in TAG_RE.findall(body) if not HEX_RE.fullmatch(t))
            paragraphs.extend(_paragraphs(body))
    for dataset in sorted((eval_dir / "datasets").iterdir()):
        corpus = dataset / "corpus.jsonl"
        if not corpus.exists():
            continue
        with open(corpus, encoding="utf-8") as fh:
            for line in fh:
                doc = json.loads(line)
                if doc.get("title"):
                    titles.append(doc["title"][:80])
                paragraphs.extend(_paragraphs(doc.get("text") or ""))
    return Pool(titles, paragraphs, sorted(tags)[:2000] or ["note"])


def _paragraphs(text: str) -> list[str]:
    out = []
    for block in re.split(r"\n\s*\n", text):
        block = block.strip()
        if MIN_PARAGRAPH_CHARS <= len(block):
            out.append(block[:MAX_PARAGRAPH_CHARS])
    return out


def write_synthetic_vault(folder: Path, notes: int, seed: int = 7, pool: Pool | None = None,
                          per_folder: int = 500) -> int:
    """Write ``notes`` notes under ``folder``; returns the bytes written."""
    pool = pool or load_pool()
    rng = random.Random(seed)
    folder = Path(folder)
    written = 0
    for i in range(notes):
        title = rng.choice(pool.titles).replace("/", " ").replace("\n", " ").strip() or "note"
        tags = rng.sample(pool.tags, k=min(len(pool.tags), rng.randint(0, 3)))
        day = f"202{rng.randint(0, 6)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
        paras = [rng.choice(pool.paragraphs) for _ in range(rng.choices((1, 2, 3, 4), (4, 3, 2, 1))[0])]
        front = ["---", f"date: {day}"] + ([f"tags: [{', '.join(json.dumps(t, ensure_ascii=False) for t in tags)}]"]
                                           if tags else []) + ["---"]
        text = "\n".join(front) + f"\n# {title}\n\nNote {i} of the synthetic vault.\n\n" + "\n\n".join(paras) + "\n"
        stem = UNSAFE_RE.sub("_", title)[:60]
        target = folder / f"{i // per_folder:04d}" / f"{stem}-{i}.md"
        target.parent.mkdir(parents=True, exist_ok=True)
        data = text.encode("utf-8")
        target.write_bytes(data)
        written += len(data)
    return written
