"""kbert.search against sentence-transformers' `util`."""

import numpy as np
import pytest

from kbert.search import semantic_search, similarity


def test_similarity_equals_sentence_transformers_cos_sim():
    import torch
    from sentence_transformers import util

    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(5, 8)), rng.normal(size=(7, 8))
    expected = util.cos_sim(torch.tensor(a, dtype=torch.float32), torch.tensor(b, dtype=torch.float32)).numpy()
    got = similarity(a, b)
    assert got.dtype == np.float32 and got.shape == (5, 7)
    np.testing.assert_allclose(got, expected, atol=1e-6)


def test_semantic_search_gives_the_whole_corpus_when_top_k_exceeds_it():
    import torch
    from sentence_transformers import util

    rng = np.random.default_rng(1)
    queries, corpus = rng.normal(size=(3, 8)), rng.normal(size=(4, 8))
    scores, ids = semantic_search(queries, corpus, top_k=10, corpus_chunk_size=3)
    hits = util.semantic_search(torch.tensor(queries, dtype=torch.float32), torch.tensor(corpus, dtype=torch.float32),
                                top_k=10)
    assert ids.shape == (3, 4)
    np.testing.assert_array_equal(ids, [[h["corpus_id"] for h in q] for q in hits])
    np.testing.assert_allclose(scores, [[h["score"] for h in q] for q in hits], atol=1e-6)


def test_semantic_search_refuses_embeddings_of_different_widths():
    with pytest.raises(ValueError, match=r"\[queries, dim\] and \[corpus, dim\].*\(2, 8\) and \(3, 4\)"):
        semantic_search(np.zeros((2, 8)), np.zeros((3, 4)))
