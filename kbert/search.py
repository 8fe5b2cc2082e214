"""Search by embedding: cosine similarities and the nearest corpus entries
to each query, as sentence-transformers' `util` computes them, in numpy.

Embeddings come from any embedder (`kbert.BertTextEmbedder.encode`); nothing
here knows a model.

    corpus = embedder.encode(passages)
    scores, ids = kbert.search.semantic_search(embedder.encode(questions), corpus, top_k=10)
"""

import collections

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


def mine_hard_negatives(embedder, queries, positives, corpus=None, range_min=0, range_max=None, max_score=None,
                        min_score=None, absolute_margin=None, relative_margin=None, num_negatives=3,
                        sampling_strategy="top", output_format="triplet", batch_size=32, query_chunk_size=1024,
                        seed=None):
    """Hard negatives for (query, positive) pairs, as sentence-transformers'
    `util.mine_hard_negatives` picks them: the corpus (`corpus` and the
    positives, each text once) ranked by cosine similarity to each query,
    the query itself and its positives left out; of the ranks `range_min` to
    `range_max`, those within the score bounds and margins; the first (or,
    `sampling_strategy="random"`, any) `num_negatives`.

    Args:
        embedder: what embeds: anything with `encode(texts, batch_size=...)`
            (`kbert.BertTextEmbedder`); its `"query"` and `"document"`
            prompts are used where it has them.
        queries, positives: lists of texts, a positive per query (a query
            may come several times).
        corpus: more candidate texts (the positives are candidates too).
        range_min, range_max: the ranks of the candidates considered (by
            default the first `num_negatives`, or 10 times as many where a
            margin or `max_score` may drop some, past the query's positives).
        max_score, min_score: bounds on a negative's similarity.
        absolute_margin: a negative scores at most its query's (lowest)
            positive score less this.
        relative_margin: ... at most that score less this fraction of its
            size (0.05: NV-Retriever's TopK-PercPos).
        num_negatives: negatives per query.
        output_format: `"triplet"`: `(anchors, positives, negatives)`, a row
            per negative found; `"n-tuple"`: `(anchors, positives,
            negatives_1, ..., negatives_n)`, rows with all `num_negatives`.
        query_chunk_size: queries scored at once against the whole corpus
            (memory: `query_chunk_size * len(corpus)` scores).

    Returns:
        A tuple of lists of texts, the columns of `output_format`, ready for
        `BertTextEmbedder.fit`.
    """
    queries, positives = list(queries), list(positives)
    if not queries or len(queries) != len(positives):
        raise ValueError(f"Got {len(queries)} queries and {len(positives)} positives; give one positive per query.")
    if sampling_strategy not in ("top", "random") or output_format not in ("triplet", "n-tuple"):
        raise ValueError(f'sampling_strategy={sampling_strategy!r}, output_format={output_format!r}: sampling is "top" '
                         'or "random", the output "triplet" or "n-tuple".')
    if num_negatives < 1:
        raise ValueError(f"num_negatives={num_negatives}: mine at least 1.")
    corpus = list(dict.fromkeys((positives if corpus is None else list(corpus)) + positives))
    corpus_index = {text: i for i, text in enumerate(corpus)}
    unique = list(dict.fromkeys(queries))
    query_index = {query: i for i, query in enumerate(unique)}
    positive_ids = [[] for _ in unique]
    for query, positive in zip(queries, positives):
        if corpus_index[positive] not in positive_ids[query_index[query]]:
            positive_ids[query_index[query]].append(corpus_index[positive])
    # Rows per query, as sentence-transformers counts them (repeats too).
    most_positives = max(collections.Counter(queries).values())
    if range_max is None:
        filtered = absolute_margin is not None or relative_margin is not None or max_score is not None
        range_max = range_min + num_negatives * (10 if filtered else 1) + most_positives
    if not 0 <= range_min < range_max or num_negatives > range_max - range_min:
        raise ValueError(f"range_min={range_min}, range_max={range_max}: need 0 <= range_min < range_max with room for "
                         f"num_negatives={num_negatives} between them.")

    prompts = getattr(embedder, "prompts", None) or {}
    query_embeddings = _unit_rows(np.asarray(embedder.encode(
        unique, batch_size=batch_size, **({"prompt_name": "query"} if "query" in prompts else {})), "float32"))
    corpus_embeddings = _unit_rows(np.asarray(embedder.encode(
        corpus, batch_size=batch_size, **({"prompt_name": "document"} if "document" in prompts else {})), "float32"))
    rng = np.random.default_rng(seed)
    columns = [[], []] + ([[]] if output_format == "triplet" else [[] for _ in range(num_negatives)])
    for start in range(0, len(unique), query_chunk_size):
        chunk = range(start, min(start + query_chunk_size, len(unique)))
        scores = query_embeddings[chunk.start:chunk.stop] @ corpus_embeddings.T
        for row, q in enumerate(chunk):
            negatives = _negatives(scores[row], q, unique, corpus_index, positive_ids[q], most_positives, range_min,
                                   range_max,
                                   max_score, min_score, absolute_margin, relative_margin, num_negatives,
                                   sampling_strategy, rng)
            for p in positive_ids[q]:
                if output_format == "triplet":
                    for n in negatives:
                        for column, text in zip(columns, (unique[q], corpus[p], corpus[n])):
                            column.append(text)
                elif len(negatives) == num_negatives:
                    for column, text in zip(columns, (unique[q], corpus[p], *(corpus[n] for n in negatives))):
                        column.append(text)
    return tuple(columns)


def _negatives(similarities, q, queries, corpus_index, positive_ids, most_positives, range_min, range_max,
               max_score, min_score, absolute_margin, relative_margin, num_negatives, sampling_strategy, rng):
    """The corpus ids of one query's negatives, best first."""
    # The candidates: the best range_max, and room for the query and its
    # positives, which are left out; only they are ranked (not the corpus).
    count = min(range_max + most_positives + 1, len(similarities))
    kth = -np.partition(-similarities, count - 1)[count - 1]
    above = np.flatnonzero(similarities > kth)  # then ties at the k-th in corpus order, as a stable sort takes them
    candidates = np.concatenate([above, np.flatnonzero(similarities == kth)[:count - len(above)]])
    candidates = candidates[np.lexsort((candidates, -similarities[candidates]))]
    scores = similarities[candidates].astype("float64")
    left_out = set(positive_ids) | ({corpus_index[queries[q]]} if queries[q] in corpus_index else set())
    scores[[i in left_out for i in candidates]] = -np.inf
    # Margins count from the query's lowest-scored positive.
    lowest = float(similarities[positive_ids].min())
    if absolute_margin is not None:
        scores[scores + absolute_margin > lowest] = -np.inf
    if relative_margin is not None:
        scores[scores > lowest - abs(lowest) * relative_margin] = -np.inf
    if max_score is not None:
        scores[scores > max_score] = -np.inf
    if min_score is not None:
        scores[scores < min_score] = -np.inf
    ranked = np.argsort(-scores, kind="stable")[:range_max][range_min:]
    if sampling_strategy == "random":
        options = min(max(int(np.isfinite(scores[ranked]).sum()), num_negatives), len(ranked))
        ranked = ranked[np.sort(rng.choice(options, size=min(num_negatives, options), replace=False))]
    return [int(candidates[i]) for i in ranked[:num_negatives] if np.isfinite(scores[i])]
