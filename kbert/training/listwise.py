"""Listwise training of cross-encoders (rerankers), as sentence-transformers
computes it: each query's documents are scored together, and the loss
compares the query's list of logits with its list of labels.

A cross-encoder (`BertClassifier` with `num_classes=1`) scores one
(query, document) pair per row. `query_lists` makes batches that keep each
query's documents together: `queries_per_batch` queries, each padded to
`documents_per_query` documents, so the model sees `[queries *
documents_per_query]` pairs and the loss sees labels of shape `[queries,
documents_per_query]`, with `PADDED` in the slots of padding. The losses
reshape the logits to the labels' shape and leave the padded slots out, as
sentence-transformers does for lists of different lengths. Batches are
shuffled by query, never by pair.

Example:
>>> reranker = kbert.BertClassifier.from_preset(minilm, num_classes=1, score_activation="sigmoid")
>>> reranker.compile(loss=kbert.training.listwise.ListNetLoss())
>>> data = kbert.training.listwise.query_lists(reranker.preprocessor, ["what is a wing?"],
...                                            [["A wing gives lift.", "Boundary layers"]], [[1.0, 0.0]])
>>> reranker.fit(data, epochs=2)
"""

import math
import numbers

import keras
import numpy as np
from keras import ops

from kbert.tf_if_present import tf

# The label of a padded slot (as sentence-transformers fills its label matrix).
PADDED = float("-inf")
# sentence-transformers' logit of a padded slot: its softmax is 0.
_PADDED_LOGIT = -1e16
WEIGHTING_SCHEMES = ("none", "ndcg_loss1", "ndcg_loss2", "lambdarank", "ndcg_loss2++")


def _lists(name, y_true, y_pred):
    """Labels `[queries, documents]` as float32, the logits reshaped to them,
    and which slots hold a document (not `PADDED`)."""
    if len(y_true.shape) != 2 or y_true.shape[-1] is None:
        raise ValueError(
            f"{name} takes labels of shape [queries, documents_per_query] (one row per query, PADDED in the "
            f"slots of padding); got shape {tuple(y_true.shape)}. Batch the data with "
            "kbert.training.listwise.query_lists(preprocessor, queries, documents, labels)."
        )
    labels = ops.cast(y_true, "float32")
    logits = ops.reshape(ops.cast(y_pred, "float32"), ops.shape(labels))
    valid = labels > PADDED
    return labels, ops.where(valid, logits, _PADDED_LOGIT), valid


@keras.saving.register_keras_serializable(package="kbert")
class ListNetLoss(keras.losses.Loss):
    """ListNet (Cao et al. 2007; sentence-transformers' `ListNetLoss`): the
    cross-entropy between the softmax of a query's labels and the softmax
    of its documents' logits, averaged over the queries. Labels may be
    graded or continuous; only padded slots (`PADDED`) are left out.

    Takes labels `[queries, documents_per_query]` and the cross-encoder's
    logits `[queries * documents_per_query, 1]`, as `query_lists` batches
    them.

    Example:
    >>> reranker.compile(loss=kbert.training.listwise.ListNetLoss())
    """

    def __init__(self, name="list_net_loss", **kwargs):
        super().__init__(name=name, **kwargs)

    def call(self, y_true, y_pred):
        labels, logits, valid = _lists(type(self).__name__, y_true, y_pred)
        target = ops.where(valid, ops.softmax(labels, axis=-1), 0.0)
        return -ops.sum(target * ops.log_softmax(logits, axis=-1), axis=-1)


@keras.saving.register_keras_serializable(package="kbert")
class LambdaLoss(keras.losses.Loss):
    """The LambdaLoss framework (Wang et al. 2018; sentence-transformers'
    `LambdaLoss`): over each query's pairs of documents ranked in the wrong
    order by their logits, `-log sigmoid(sigma * (s_i - s_j))` weighted by
    what swapping them costs in NDCG, averaged over all such pairs of the
    batch (one value per batch).

    Args:
        weighting_scheme: `"ndcg_loss2++"` (the paper's best, with `mu`),
            `"ndcg_loss2"`, `"lambdarank"`, `"ndcg_loss1"` or `"none"`.
        k: only pairs with a document in the logits' top k count (NDCG@k);
            None: all.
        sigma: the scale of the logits' differences.
        eps: the smallest ideal DCG (a query without relevant documents).
        reduction_log: `"binary"` (log2, as sentence-transformers) or `"natural"`.
        mu: NDCG-Loss2++'s weight of NDCG-Loss2 beside LambdaRank.

    Example:
    >>> reranker.compile(loss=kbert.training.listwise.LambdaLoss(k=10))
    """

    def __init__(self, weighting_scheme="ndcg_loss2++", k=None, sigma=1.0, eps=1e-10, reduction_log="binary",
                 mu=10.0, name="lambda_loss", **kwargs):
        super().__init__(name=name, **kwargs)
        if weighting_scheme not in WEIGHTING_SCHEMES:
            raise ValueError(f"Unknown weighting_scheme={weighting_scheme!r}. Known: {', '.join(WEIGHTING_SCHEMES)}.")
        if reduction_log not in ("binary", "natural"):
            raise ValueError(f"reduction_log={reduction_log!r}: use \"binary\" (log2) or \"natural\".")
        if k is not None and (isinstance(k, bool) or not isinstance(k, numbers.Integral) or k < 1):
            raise ValueError(f"k={k!r}: give the NDCG cut-off as a positive int (e.g. 10), or None for all.")
        self.weighting_scheme, self.k, self.reduction_log = weighting_scheme, k, reduction_log
        self.sigma, self.eps, self.mu = float(sigma), float(eps), float(mu)

    def call(self, y_true, y_pred):
        labels, logits, _ = _lists(type(self).__name__, y_true, y_pred)
        n = labels.shape[-1]
        order = ops.argsort(-logits, axis=-1)
        logits_sorted = ops.take_along_axis(logits, order, axis=-1)
        true_sorted = ops.take_along_axis(labels, order, axis=-1)  # labels in the logits' order
        ideal = -ops.sort(-labels, axis=-1)
        differences = true_sorted[:, :, None] - true_sorted[:, None, :]
        # Pairs of two documents (padding's -inf makes them NaN or infinite),
        # the first more relevant (NDCG-Loss1 keeps every pair).
        pairs = ops.isfinite(differences)
        if self.weighting_scheme != "ndcg_loss1":
            pairs = pairs & (ops.where(pairs, differences, 0.0) > 0)
        k = min(self.k or n, n)
        positions = np.arange(n)
        top = ops.convert_to_tensor((positions[:, None] < k) | (positions[None, :] < k))
        pairs = pairs & top[None]  # the paper's Eq. 18
        true_sorted, ideal = ops.maximum(true_sorted, 0.0), ops.maximum(ideal, 0.0)
        discount = ops.convert_to_tensor(np.log2(2.0 + positions, dtype="float32")[None])  # log2(1 + rank)
        best = ops.maximum(ops.sum(((2.0 ** ideal - 1) / discount)[:, :k], axis=-1), self.eps)
        gain = (2.0 ** true_sorted - 1) / best[:, None]
        weights = self._weights(gain, discount, positions)
        scores = ops.clip(logits_sorted[:, :, None] - logits_sorted[:, None, :], -1e8, 1e8)
        losses = weights * ops.log_sigmoid(self.sigma * scores)
        if self.reduction_log == "binary":
            losses = losses / math.log(2)
        count = ops.maximum(ops.sum(ops.cast(pairs, "float32")), 1.0)
        return -ops.sum(ops.where(pairs, losses, 0.0)) / count

    def _weights(self, gain, discount, positions):
        """What swapping documents i and j (ranks by logit) weighs, `[queries, n, n]`."""
        def lambdarank():
            return ops.abs(1 / discount[:, :, None] - 1 / discount[:, None, :]) * ops.abs(
                gain[:, :, None] - gain[:, None, :])

        def ndcg_loss2():
            apart = np.abs(positions[:, None] - positions[None, :]).astype("float32")
            # |1/D(|i-j|) - 1/D(|i-j|+1)|, D(r) = log2(1 + r); 0 on the diagonal.
            deltas = np.where(apart > 0, np.abs(1 / np.log2(1 + np.maximum(apart, 1)) - 1 / np.log2(2 + apart)), 0)
            return ops.convert_to_tensor(deltas.astype("float32"))[None] * ops.abs(gain[:, :, None] - gain[:, None, :])

        if self.weighting_scheme == "none":
            return ops.ones_like(gain)[:, :, None]
        if self.weighting_scheme == "ndcg_loss1":
            return (gain / discount)[:, :, None]
        if self.weighting_scheme == "ndcg_loss2":
            return ndcg_loss2()
        if self.weighting_scheme == "lambdarank":
            return lambdarank()
        return self.mu * ndcg_loss2() + lambdarank()

    def get_config(self):
        return {**super().get_config(), "weighting_scheme": self.weighting_scheme, "k": self.k, "sigma": self.sigma,
                "eps": self.eps, "reduction_log": self.reduction_log, "mu": self.mu}


def query_lists(preprocessor, queries, documents, labels, queries_per_batch=8, documents_per_query=None, seed=None,
                pad_to="bucket"):
    """Batches for a listwise loss: a `tf.data.Dataset` of `(features,
    labels)`, each batch `queries_per_batch` queries (the last may hold
    fewer) with their documents as `[queries * documents_per_query]` pairs
    of the cross-encoder's `features` and labels `[queries,
    documents_per_query]` (`PADDED` where a query has fewer documents; its
    padded pairs are (query, "")). The queries are shuffled anew each epoch
    (`seed`), each keeping its documents together.

    Args:
        preprocessor: the cross-encoder's, e.g. `reranker.preprocessor`.
        queries: a list of N query texts.
        documents: N lists of document texts, one list per query (of any
            lengths from 1 to `documents_per_query`).
        labels: N lists of numbers, one per document (graded relevance,
            scores or 0/1).
        queries_per_batch: queries in a batch.
        documents_per_query: the slots of each query; None: the longest list.
        seed: of the shuffle.
        pad_to: how the pairs of a batch are padded (the preprocessor's
            `pad_to`: `"bucket"`, `"longest"` or `"sequence_length"`).
    """
    if not (len(queries) == len(documents) == len(labels)) or not len(queries):
        raise ValueError(f"Got {len(queries)} queries, {len(documents)} document lists and {len(labels)} label "
                         "lists; give one document list and one label list per query (at least one query).")
    for name, value in (("queries_per_batch", queries_per_batch), ("documents_per_query", documents_per_query)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1):
            raise ValueError(f"{name}={value!r}: give a positive int.")
    for i, (query, docs, scores) in enumerate(zip(queries, documents, labels)):
        if not isinstance(query, str) or isinstance(docs, str) or not all(isinstance(d, str) for d in docs):
            raise ValueError(f"Query {i}: give each query as a str and its documents as a list of str; got "
                             f"{type(query).__name__} and {type(docs).__name__}.")
        if not len(docs):
            raise ValueError(f"Query {i} ({query[:50]!r}) has no documents; a listwise loss needs at least one "
                             "per query: leave the query out.")
        if len(scores) != len(docs):
            raise ValueError(f"Query {i} ({query[:50]!r}) has {len(docs)} documents but {len(scores)} labels; give "
                             "one label per document.")
        if not np.isfinite(np.asarray(scores, "float64")).all():
            raise ValueError(f"Query {i} ({query[:50]!r}) has labels {list(scores)[:10]}: each must be a number.")
    longest = max(len(d) for d in documents)
    slots = documents_per_query or longest
    if longest > slots:
        raise ValueError(f"A query has {longest} documents but documents_per_query={slots}: raise it, or keep "
                         f"each query's first {slots} candidates.")
    texts = np.array([list(d) + [""] * (slots - len(d)) for d in documents], dtype=object)
    targets = np.array([list(s) + [PADDED] * (slots - len(s)) for s in labels], "float32")
    preprocess = preprocessor.with_padding(pad_to)

    def pairs(query, docs, y):
        flat = tf.reshape(tf.repeat(query[:, None], slots, axis=1), [-1])
        return preprocess((flat, tf.reshape(docs, [-1]))), y

    groups = tf.data.Dataset.from_tensor_slices((np.array(queries, dtype=object), texts, targets))
    groups = groups.shuffle(len(queries), seed=seed, reshuffle_each_iteration=True).batch(queries_per_batch)
    return groups.map(tf.autograph.experimental.do_not_convert(pairs)).prefetch(tf.data.AUTOTUNE)
