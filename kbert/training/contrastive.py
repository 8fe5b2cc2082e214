"""Losses that train sentence embedders, as sentence-transformers computes them.

Each takes `y_pred` of shape `[batch, columns, dim]`: the embeddings of every
column of a batch of examples (anchor, positive, then any hard negatives), as
`BertTextEmbedder.fit` stacks them. They are Keras losses, so they run on the
three backends and are saved in a model's compile config.
"""

import keras
import numpy as np
from keras import ops

from kbert import backend


def _unit(x):
    # (ops.norm breaks under JAX jit in a functional graph.)
    return x / ops.maximum(ops.sqrt(ops.sum(ops.square(x), axis=-1, keepdims=True)), 1e-12)


def _check_columns(y_pred, least, name):
    if len(y_pred.shape) != 3 or (y_pred.shape[1] is not None and y_pred.shape[1] < least):
        raise ValueError(
            f"{name} takes embeddings of shape [batch, columns, dim] with at least {least} columns; got shape "
            f"{tuple(y_pred.shape)}. Fit the embedder on a tuple of texts: (anchors, positives) or "
            "(anchors, positives, negatives)."
        )


@keras.saving.register_keras_serializable(package="kbert")
class MultipleNegativesRankingLoss(keras.losses.Loss):
    """In-batch negatives (Henderson et al. 2017; sentence-transformers'
    `MultipleNegativesRankingLoss`): each anchor's positive is the right answer
    among all positives of the batch (and all hard negatives, when the batch
    has a third column or more), scored by cosine similarity times `scale`,
    with cross-entropy. Under a `tf.distribute` strategy the candidates are
    those of every replica (the global batch), so that the loss is the one
    device's on the whole batch.

    Args:
        scale: the inverse temperature of the softmax (20, as
            sentence-transformers).
        symmetric: also rank, for each positive, its anchor among all
            anchors, and average the two directions (sentence-transformers'
            `MultipleNegativesSymmetricRankingLoss`: `directions=("query_to_doc",
            "doc_to_query")`, `partition_mode="per_direction"`).

    Example:
    >>> embedder.compile(loss=kbert.training.contrastive.MultipleNegativesRankingLoss(symmetric=True))
    >>> embedder.fit((questions, passages), epochs=1)
    """

    def __init__(self, scale=20.0, symmetric=False, name="multiple_negatives_ranking_loss", **kwargs):
        super().__init__(name=name, **kwargs)
        self.scale = float(scale)
        self.symmetric = bool(symmetric)

    def call(self, y_true, y_pred):
        _check_columns(y_pred, 2, type(self).__name__)
        y_pred = _unit(ops.cast(y_pred, "float32"))
        anchors, positives = y_pred[:, 0], y_pred[:, 1]
        # Under a tf.distribute strategy, every replica's examples: the
        # negatives are the global batch's, as on one device.
        everything = backend.gather_replicas(y_pred)
        # Positives first, then each column of hard negatives.
        candidates = ops.reshape(ops.transpose(everything[:, 1:], (1, 0, 2)), (-1, ops.shape(y_pred)[-1]))
        positive = self.scale * ops.sum(anchors * positives, axis=-1)
        loss = ops.logsumexp(self.scale * ops.matmul(anchors, ops.transpose(candidates)), axis=1) - positive
        if self.symmetric:
            # Each positive against every anchor of the batch.
            backward = self.scale * ops.matmul(positives, ops.transpose(everything[:, 0]))
            loss = (loss + ops.logsumexp(backward, axis=1) - positive) / 2
        return loss

    def get_config(self):
        return {**super().get_config(), "scale": self.scale, "symmetric": self.symmetric}


@keras.saving.register_keras_serializable(package="kbert")
class CoSENTLoss(keras.losses.Loss):
    """CoSENT (Su 2022; sentence-transformers' `CoSENTLoss`) for scored pairs:
    `log(1 + sum exp(scale * (cos_i - cos_j)))` over the pairs of the batch
    where pair i is scored lower than pair j. Only the order of the scores
    matters; the loss is one value per batch.

    Args:
        scale: 20, as sentence-transformers.

    Example:
    >>> embedder.compile(loss=kbert.training.contrastive.CoSENTLoss())
    >>> embedder.fit((sentences_a, sentences_b), scores)
    """

    def __init__(self, scale=20.0, name="cosent_loss", **kwargs):
        super().__init__(name=name, **kwargs)
        self.scale = float(scale)

    def call(self, y_true, y_pred):
        _check_columns(y_pred, 2, type(self).__name__)
        y_pred = _unit(ops.cast(y_pred, "float32"))
        scores = self.scale * ops.sum(y_pred[:, 0] * y_pred[:, 1], axis=-1)
        labels = ops.reshape(ops.cast(y_true, "float32"), (-1,))
        # scores[i] - scores[j] wherever labels[i] < labels[j]; -inf elsewhere.
        differences = scores[:, None] - scores[None, :]
        differences = ops.where(labels[:, None] < labels[None, :], differences, -np.inf)
        differences = ops.concatenate([ops.zeros((1,)), ops.reshape(differences, (-1,))], axis=0)
        return ops.logsumexp(differences)

    def get_config(self):
        return {**super().get_config(), "scale": self.scale}


@keras.saving.register_keras_serializable(package="kbert")
class CosineSimilarityLoss(keras.losses.Loss):
    """Cosine-similarity regression for scored pairs (sentence-transformers'
    `CosineSimilarityLoss`): the squared difference between each pair's
    cosine similarity and its score (e.g. an STS score scaled to [0, 1]).

    Example:
    >>> embedder.compile(loss=kbert.training.contrastive.CosineSimilarityLoss())
    >>> embedder.fit((sentences_a, sentences_b), scores / 5)
    """

    def __init__(self, name="cosine_similarity_loss", **kwargs):
        super().__init__(name=name, **kwargs)

    def call(self, y_true, y_pred):
        _check_columns(y_pred, 2, type(self).__name__)
        y_pred = _unit(ops.cast(y_pred, "float32"))
        cosine = ops.sum(y_pred[:, 0] * y_pred[:, 1], axis=-1)
        return ops.square(cosine - ops.reshape(ops.cast(y_true, "float32"), (-1,)))


@keras.saving.register_keras_serializable(package="kbert")
class MatryoshkaLoss(keras.losses.Loss):
    """Matryoshka representation learning (Kusupati et al. 2022;
    sentence-transformers' `MatryoshkaLoss`): `loss` on the embeddings cut to
    each of `dims` (their first `d` values), summed with `weights`, so that
    the first dimensions alone embed well and `truncate_dim` can cut them.

    Args:
        loss: the loss to wrap, e.g. `MultipleNegativesRankingLoss()` or
            `CoSENTLoss()`.
        dims: the dimensions trained, e.g. `[384, 256, 128, 64]`.
        weights: each dimension's weight (1 each by default).

    Example:
    >>> loss = kbert.training.contrastive.MatryoshkaLoss(MultipleNegativesRankingLoss(), [384, 128, 64])
    >>> embedder.compile(loss=loss)
    >>> embedder.fit((questions, passages))
    """

    def __init__(self, loss, dims, weights=None, name="matryoshka_loss", **kwargs):
        super().__init__(name=name, **kwargs)
        if isinstance(loss, dict):
            loss = keras.saving.deserialize_keras_object(loss)
        dims = [int(d) for d in dims]
        if not dims or min(dims) < 1:
            raise ValueError(f"dims={dims}: give the embedding sizes to train, e.g. [384, 128, 64].")
        weights = [1.0] * len(dims) if weights is None else [float(w) for w in weights]
        if len(weights) != len(dims):
            raise ValueError(f"Got {len(weights)} weights for {len(dims)} dims; give one weight per dimension.")
        self.loss, self.dims, self.weights = loss, dims, weights

    def call(self, y_true, y_pred):
        if y_pred.shape[-1] is not None and max(self.dims) > y_pred.shape[-1]:
            raise ValueError(f"MatryoshkaLoss dims {self.dims} go past the embedding's {y_pred.shape[-1]} dimensions.")
        # Cut, then unit length again, as sentence-transformers' `shrink`.
        return sum(w * self.loss.call(y_true, _unit(ops.cast(y_pred[..., :d], "float32")))
                   for d, w in zip(self.dims, self.weights))

    def get_config(self):
        return {**super().get_config(), "loss": keras.saving.serialize_keras_object(self.loss), "dims": self.dims,
                "weights": self.weights}


def batches_without_duplicates(columns, batch_size, seed=None):
    """Shuffled batches (lists of example indices) in which no text appears
    twice (sentence-transformers' `NoDuplicatesBatchSampler`): with in-batch
    negatives, a repeated positive would be a false negative. An example that
    would repeat a text waits for a later batch; a batch that cannot be
    filled after looking `10 * batch_size` examples ahead is left short, so
    the cost stays linear even for data full of repeats.

    Args:
        columns: lists of texts, one entry per example in each.
        batch_size: the most examples in a batch.
        seed: of the shuffle.
    """
    n = len(columns[0])
    pending = list(np.random.default_rng(seed).permutation(n))[::-1]  # a stack: pop() is the next example
    batches = []
    while pending:
        batch, seen, skipped = [], set(), []
        while pending and len(batch) < batch_size and len(skipped) < 10 * batch_size:
            i = pending.pop()
            texts = {column[i] for column in columns}
            if texts & seen:
                skipped.append(i)
            else:
                batch.append(i)
                seen |= texts
        pending.extend(reversed(skipped))
        batches.append(batch)
    return batches
