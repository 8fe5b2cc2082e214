"""Search by embedding: cosine similarities and the nearest corpus entries
to each query, as sentence-transformers' `util` computes them, in numpy.

Embeddings come from any embedder (`kbert.BertTextEmbedder.encode`); nothing
here knows a model.

    corpus = embedder.encode(passages)
    scores, ids = kbert.search.semantic_search(embedder.encode(questions), corpus, top_k=10)
"""

import numpy as np


def _unit_rows(x):
    return x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), 1e-12)


def similarity(a, b):
    """Cosine similarities of two sets of embeddings: float32 numpy
    `[len(a), len(b)]` (sentence-transformers' `util.cos_sim`).

    Example:
    >>> similarity([[1.0, 0.0]], [[1.0, 0.0], [0.0, 2.0]])
    array([[1., 0.]], dtype=float32)
    """
    a, b = (np.asarray(v, "float32") for v in (a, b))
    return _unit_rows(a) @ _unit_rows(b).T


def semantic_search(query_embeddings, corpus_embeddings, top_k=10, corpus_chunk_size=50_000, query_chunk_size=100):
    """The `top_k` corpus entries nearest (by cosine similarity) to each
    query, computed chunk by chunk so that memory stays bounded by
    `query_chunk_size * corpus_chunk_size` scores whatever the corpus size
    (sentence-transformers' `util.semantic_search`).

    Returns:
        `(scores, ids)`: float32 and int64 numpy `[queries, min(top_k, corpus)]`,
        best first.
    """
    queries = np.asarray(query_embeddings, "float32")
    corpus = np.asarray(corpus_embeddings, "float32")
    if queries.ndim != 2 or corpus.ndim != 2 or queries.shape[1] != corpus.shape[1]:
        raise ValueError(f"semantic_search takes [queries, dim] and [corpus, dim] embeddings; got shapes "
                         f"{queries.shape} and {corpus.shape}.")
    k = min(int(top_k), len(corpus))
    queries = _unit_rows(queries)
    norms = np.maximum(np.linalg.norm(corpus, axis=1, keepdims=True), 1e-12)
    scores = np.full((len(queries), k), -np.inf, "float32")
    ids = np.zeros((len(queries), k), "int64")
    for q in range(0, len(queries), query_chunk_size):
        best, best_ids = scores[q:q + query_chunk_size], ids[q:q + query_chunk_size]
        for c in range(0, len(corpus), corpus_chunk_size):
            rows = slice(c, c + corpus_chunk_size)
            chunk = queries[q:q + query_chunk_size] @ (corpus[rows] / norms[rows]).T
            merged = np.concatenate([best, chunk], axis=1)
            merged_ids = np.concatenate([best_ids, np.arange(c, c + chunk.shape[1])[None].repeat(len(chunk), 0)], 1)
            top = np.argsort(-merged, axis=1, kind="stable")[:, :k]
            best, best_ids = np.take_along_axis(merged, top, 1), np.take_along_axis(merged_ids, top, 1)
        scores[q:q + query_chunk_size], ids[q:q + query_chunk_size] = best, best_ids
    return scores, ids
