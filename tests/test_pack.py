"""A context pack (``search --budget-tokens``) over a note of several MB: the
note is read once per pack however many of its hits there are, a section far
larger than the budget is refused without being counted whole, and what is
packed is still the file's own lines; and the best hit that does not fit is
trimmed into the room left instead of left out. Real files and a real index;
the token counter comes in through the real ``Embedder`` interface."""

import dataclasses
import json

import pytest

from indexer.chunk import estimate_tokens
from indexer.embed import HashEmbedder, TokenCounter
from tests.conftest import write
from vault_search import Index, pack
from vault_search.options import SearchOptions


class CountingEmbedder(HashEmbedder):
    """The hash embedder with a token counter that notes how much text it was asked to count."""

    def __init__(self, dim: int = 32):
        super().__init__(dim)
        self.counted: list[int] = []

    def token_counter(self) -> TokenCounter:
        def count(text: str) -> int:
            self.counted.append(len(text))
            return estimate_tokens(text)
        return TokenCounter("counted-estimate", count)


@pytest.fixture(scope="module")
def big(tmp_path_factory):
    """(vault, index folder): big.md, 40 sections of ~100 KB, each with one
    walrus, then one 3 MB section (about 7 MB in all), and a small note."""
    root = tmp_path_factory.mktemp("pack")
    parts = ["# Big\n\n"]
    for k in range(40):
        parts.append(f"## Part {k}\n\nA walrus sighting, number {k}, on the shore.\n\n")
        parts.extend(f"Filler line {k}.{n} about nothing in particular.\n" for n in range(2_500))
        parts.append("\n")
    parts.append("## Everything\n\nThe last walrus of the year.\n\n")
    parts.extend(f"Endless filler {n} that goes on and on, one line after another.\n\n" for n in range(45_000))
    vault = root / "vault"
    write(vault / "big.md", "".join(parts))
    write(vault / "small.md", "# Small\n\nOne walrus here, in a small note.\n")
    with Index.open(vault, root / "index", create=True, embedder=CountingEmbedder()) as idx:
        idx.sync(embed=False)
    return vault, root / "index"


def test_a_pack_reads_each_note_once_and_never_counts_a_huge_section_whole(big, monkeypatch, ledger):
    vault, index_dir = big
    assert (vault / "big.md").stat().st_size > 6_000_000
    embedder = CountingEmbedder()
    with Index.open(vault, index_dir, embedder=embedder) as idx:
        found = idx.search("walrus", SearchOptions(mode="fts", limit=10), log=False).results
        assert {r.path for r in found} == {"big.md", "small.md"}
        big = next(r for r in found if r.path == "big.md")
        # Every chunk of big.md that holds a walrus, as a hit of its own.
        spans = idx.conn.execute("SELECT c.start_line, c.end_line FROM chunks c JOIN notes n ON n.id = c.note_id "
                                 "WHERE n.path = 'big.md' AND c.text LIKE '%walrus%' ORDER BY c.start_line").fetchall()
        assert len(spans) == 41
        hits = [dataclasses.replace(big, start_line=s, end_line=e) for s, e in reversed(spans)]
        hits.insert(3, next(r for r in found if r.path == "small.md"))

        reads: dict[str, int] = {}
        real = pack.note_bytes

        def counted(index, path):
            reads[path] = reads.get(path, 0) + 1
            return real(index, path)

        monkeypatch.setattr(pack, "note_bytes", counted)
        embedder.counted.clear()
        packed = pack.pack(idx, hits, 600)

    assert reads == {"big.md": 1, "small.md": 1}   # once per pack, not once per hit
    lines = {p: (vault / p).read_text().split("\n") for p in ("big.md", "small.md")}
    assert packed.results and packed.tokens <= 600 and not packed.changed
    assert packed.tokens == sum(estimate_tokens(r.text) for r in packed.results)
    for r in packed.results:
        assert r.text == "\n".join(lines[r.path][r.start_line - 1:r.end_line])   # the file's own lines
    taken = [(r.path, r.start_line, r.end_line) for r in packed.results]
    assert not any(a[0] == b[0] and a[1] <= b[2] and b[1] <= a[2] for i, a in enumerate(taken) for b in taken[i + 1:])
    # The 3 MB section's hit came first: it got its own chunk, and the section was never counted whole.
    last = packed.results[0]
    assert last.path == "big.md" and "The last walrus" in last.text and last.end_line - last.start_line < 100
    assert max(embedder.counted) < 100_000
    assert any(r.path == "small.md" for r in packed.results) and packed.left_out > 0

    # Through the search, as an agent asks for it: the file's own lines, within the budget.
    with Index.open(vault, index_dir, embedder=CountingEmbedder()) as idx:
        response = idx.search("walrus", SearchOptions(mode="fts", budget_tokens=400), log=False)
    assert response.token_budget == 400 and 0 < response.tokens <= 400 and len(response.results) == 2
    for r in response.results:
        assert r.text == "\n".join(lines[r.path][r.start_line - 1:r.end_line])
    ledger.record("hostile input", "a context pack over a 7 MB note with 41 hits and a 3 MB section",
                  "the note read once per pack; a section far over the budget refused on its first lines")



def test_a_pack_trims_the_best_hit_that_did_not_fit_into_the_room_left(tmp_path):
    """Issue 37: a hit whose passage does not fit was left out whole (27 of
    300 tokens used here); now the room left after the whole passages goes to
    its first lines, cut at a paragraph's end, marked trimmed, in its rank's
    place; a later hit that fits whole still comes whole."""
    from click.testing import CliRunner

    from vault_search.cli import main

    vault = tmp_path / "v"
    write(vault / "a.md", "# Alpha\n\nThe walrus, the walrus, the walrus sleeps on the ice.\n")
    log = "".join(f"Line {i} of the log says the tide came in and went out again.\n" + ("\n" if i % 5 == 0 else "")
                  for i in range(1, 41))
    write(vault / "b.md", "# Beta\n\n## Sightings\n\nA walrus, a walrus, a walrus, a walrus, a walrus and another "
                          "walrus were seen on the shore.\n\n" + log)
    write(vault / "c.md", "# Gamma\n\nOne walrus.\n")
    args = ["--vault", str(vault), "--index-dir", str(tmp_path / "i")]
    assert CliRunner().invoke(main, [*args, "index", "--no-embed"]).exit_code == 0
    plain = json.loads(CliRunner().invoke(main, [*args, "search", "walrus", "--json"]).stdout)
    assert [(r["path"], r["start_line"], r["end_line"]) for r in plain["results"]] == [
        ("a.md", 1, 3), ("b.md", 1, 23), ("c.md", 1, 3)]
    assert all("trimmed" not in r for r in plain["results"])   # a pack's field only

    data = json.loads(CliRunner().invoke(main, [*args, "search", "walrus", "--budget-tokens", "300", "--json"]).stdout)
    got = {r["path"]: r for r in data["results"]}
    assert [r["path"] for r in data["results"]] == ["a.md", "b.md", "c.md"]   # rank order kept
    assert [r["trimmed"] for r in data["results"]] == [False, True, False]
    beta = got["b.md"]
    lines = (vault / "b.md").read_text().split("\n")
    assert beta["start_line"] == 1 and 5 < beta["end_line"] < 23
    assert beta["text"] == "\n".join(lines[:beta["end_line"]])   # the file's own whole lines
    assert lines[beta["end_line"]] == "" and beta["text"].endswith("went out again.")   # a paragraph's end
    assert data["tokens"] == sum(estimate_tokens(r["text"]) for r in data["results"]) and 250 < data["tokens"] <= 300
    assert data["warnings"] == [f"trimmed to fit 300 tokens: b.md:1-{beta['end_line']} of 1-23"]
    text = CliRunner().invoke(main, [*args, "search", "walrus", "--budget-tokens", "300"]).stdout
    assert f"┌─ lines 1-{beta['end_line']}, trimmed to fit" in text and "278 of 300 tokens" in text


def test_a_trimmed_passage_ends_a_sentence_or_a_block_and_is_never_a_heading_alone():
    from vault_search.pack import trimmed_lines

    def room(lines, n):   # the tokens of the first n lines
        return estimate_tokens("\n".join(lines[:n]))

    lines = ["## Part", "", "First paragraph, one line.", "", "Second paragraph,", "wrapped here.", "Third sentence",
             "goes on and on."]
    assert trimmed_lines(lines, 1000, estimate_tokens) == (8, room(lines, 8))   # everything fits: no cut
    # Room for seven lines: line 7 ends no sentence, so the cut is after line 6; the paragraph's end
    # (line 3) would keep under half of the seven.
    assert trimmed_lines(lines, room(lines, 7), estimate_tokens) == (6, room(lines, 6))
    # Room for five: the first paragraph's end keeps over half, and "Second paragraph," ends nothing.
    assert trimmed_lines(lines, room(lines, 5), estimate_tokens)[0] == 3
    # A list ends an item a line; a hard-wrapped sentence is never cut inside; a heading alone is no passage.
    steps = ["## Steps", "- one", "- two", "- three"]
    assert trimmed_lines(steps, room(steps, 3), estimate_tokens)[0] == 3
    wrapped = ["## Part", "A sentence that is", "wrapped over", "three lines."]
    assert trimmed_lines(wrapped, room(wrapped, 3), estimate_tokens) is None
    assert trimmed_lines(lines, room(lines, 2), estimate_tokens) is None
    # Never inside a code fence, nor between a table's header and its rule.
    code = ["## Code", "Run this.", "```python", "x = 1.", "y = 2.", "```", "Done."]
    assert trimmed_lines(code, room(code, 5), estimate_tokens)[0] == 2
    table = ["## Table", "Prices follow.", "| a | b |", "|---|---|", "| 1 | 2 |"]
    assert trimmed_lines(table, room(table, 3), estimate_tokens)[0] == 2
