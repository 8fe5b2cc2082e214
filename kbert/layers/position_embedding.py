import math

import keras
import numpy as np
from keras import ops


@keras.saving.register_keras_serializable(package="kbert")
class PositionEmbedding(keras.layers.Layer):
    """Absolute position embeddings, sliced to the length of the input.

    Learned (BERT) by default; `kind="sinusoidal"` gives the fixed sine/cosine
    table of Vaswani et al. 2017 (§3.5), which has no weights, for models
    trained from scratch.

    Args:
        sequence_length: the longest sequence the layer embeds.
        kind: `"learned"` or `"sinusoidal"`.
        initializer: initializer of the learned table.
        offset: rows of the table before position 0's (RoBERTa's positions
            start after its padding index, at row 2): the table has
            `sequence_length + offset` rows.

    The input is any tensor `[batch, length, ...]`; the output is
    `[length, hidden_dim]` positions to add to it, broadcast over the batch.
    Given `sequence_ids` `[batch, length]` (rows packed with several
    sequences, each a run of one id), positions restart at 0 where each
    sequence starts, and the output is `[batch, length, hidden_dim]`.

    Example:
    >>> tokens = keras.random.normal((2, 10, 16))
    >>> PositionEmbedding(sequence_length=32)(tokens).shape
    (10, 16)
    """

    def __init__(self, sequence_length, kind="learned", initializer="glorot_uniform", offset=0, **kwargs):
        super().__init__(**kwargs)
        if kind not in ("learned", "sinusoidal"):
            raise ValueError(f'PositionEmbedding kind must be "learned" or "sinusoidal", got "{kind}".')
        self.sequence_length = int(sequence_length)
        self.kind = kind
        self.initializer = keras.initializers.get(initializer)
        self.offset = int(offset)

    def build(self, input_shape):
        hidden_dim = input_shape[-1]
        if self.kind == "learned":
            self.position_embeddings = self.add_weight(
                name="embeddings",
                shape=(self.sequence_length + self.offset, hidden_dim),
                initializer=self.initializer,
            )
        else:
            self.position_embeddings = ops.convert_to_tensor(
                _sinusoidal_table(self.sequence_length + self.offset, hidden_dim), dtype=self.compute_dtype
            )
        self.built = True

    def call(self, inputs, sequence_ids=None):
        length = ops.shape(inputs)[1]
        table = ops.convert_to_tensor(self.position_embeddings)
        if sequence_ids is not None:
            positions = restarting_positions(sequence_ids) + self.offset
            return ops.cast(ops.take(table, positions, axis=0), self.compute_dtype)
        return ops.cast(ops.slice(table, (self.offset, 0), (length, ops.shape(table)[1])), self.compute_dtype)

    def compute_output_shape(self, inputs_shape, sequence_ids_shape=None):
        if sequence_ids_shape is not None:
            return (inputs_shape[0], inputs_shape[1], inputs_shape[-1])
        return (inputs_shape[1], inputs_shape[-1])

    def get_config(self):
        config = super().get_config()
        config.update({
            "sequence_length": self.sequence_length,
            "kind": self.kind,
            "initializer": keras.initializers.serialize(self.initializer),
            "offset": self.offset,
        })
        return config


def restarting_positions(sequence_ids):
    """Each token's position within its own sequence, `[batch, length]`
    int32, for rows packed with several sequences (Krell et al. 2021:
    position ids restart at each sequence), each a run of one id.

    Without a cumulative max in `keras.ops`, each token's sequence start is
    looked up: argsort puts the starts first, in order, and a token's run
    number (a cumulative sum of starts) indexes them. O(length log length)
    per row; nothing `[length, length]`.
    """
    ids = ops.cast(sequence_ids, "int32")
    length = ops.shape(ids)[1]
    index = ops.arange(length, dtype="int32")[None, :]
    previous = ops.concatenate([ids[:, :1] - 1, ids[:, :-1]], axis=1)
    is_start = ops.not_equal(ids, previous)
    starts_first = ops.argsort(ops.where(is_start, index, index + length), axis=1)
    run = ops.cumsum(ops.cast(is_start, "int32"), axis=1) - 1
    start = ops.take_along_axis(ops.cast(starts_first, "int32"), run, axis=1)
    return index - start


def _sinusoidal_table(length, dim):
    positions = np.arange(length)[:, None]
    rates = np.exp(-math.log(10000.0) * (np.arange(0, dim, 2) / dim))
    table = np.zeros((length, dim), dtype="float32")
    table[:, 0::2] = np.sin(positions * rates)
    table[:, 1::2] = np.cos(positions * rates[: dim // 2])
    return table
