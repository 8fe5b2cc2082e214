"""DeBERTa's relative positions (He et al. 2021, §3.1, and the log buckets
of DeBERTa-v2/v3): which row of a table of relative-position embeddings
each (query, key) pair reads, and that table."""

import keras
from keras import ops

from kbert.layers.layer_norm import LayerNorm


def relative_rows(query_length, key_length, position_buckets, max_relative_positions):
    """The row of the relative-position table (`RelativeEmbedding`, of
    `2 * span` rows) that query `i` and key `j` read, `[query_length,
    key_length]` int32: the distance `i - j`, within `span // 2` of 0 as it
    is and beyond that in log buckets up to `max_relative_positions`
    (transformers' `make_log_bucket_position`, in float32 as it computes
    them), plus `span`, clamped to the table. `span` is `position_buckets`,
    or `max_relative_positions` where `position_buckets` is 0 (no buckets:
    distances clamped at +-span)."""
    distance = (ops.arange(query_length, dtype="int32")[:, None]
                - ops.arange(key_length, dtype="int32")[None, :])
    span = position_buckets or max_relative_positions
    if position_buckets:
        mid = position_buckets // 2
        size = ops.abs(distance)
        # (Distances within mid of 0 are kept below; mid - 1 keeps their log finite.)
        size = ops.where(size < mid, mid - 1, size)
        log_size = ops.log(ops.cast(size, "float32") / mid) / ops.log(
            ops.convert_to_tensor((max_relative_positions - 1) / mid, "float32"))
        bucket = ops.cast(ops.ceil(log_size * (mid - 1)), "int32") + mid
        distance = ops.where(size <= mid, distance, bucket * ops.sign(distance))
    return ops.clip(distance + span, 0, 2 * span - 1)


@keras.saving.register_keras_serializable(package="kbert")
class RelativeEmbedding(keras.layers.Layer):
    """The table of relative-position embeddings that every block of a
    DeBERTa encoder projects with its own query and key layers
    (`DisentangledEncoder`): `2 * span` rows of the hidden size, one per
    relative distance (or log bucket of one, `relative_rows`), layer-
    normalised (transformers' `norm_rel_ebd="layer_norm"`, DeBERTa-v3's).

    Args:
        span: half the number of rows (transformers' `position_buckets`,
            or `max_relative_positions` without buckets).
        layer_norm: whether the table is layer-normalised before use.
        layer_norm_epsilon: LayerNorm epsilon.
        embeddings_initializer: initializer of the table.

    Call arguments:
        inputs: the hidden states `[batch, length, hidden_dim]`: the table
            has their width and compute dtype, and does not depend on them.

    Returns the table `[2 * span, hidden_dim]`.

    Example:
    >>> RelativeEmbedding(span=8)(keras.random.normal((2, 5, 16))).shape
    (16, 16)
    """

    def __init__(self, span, layer_norm=True, layer_norm_epsilon=1e-7, embeddings_initializer="glorot_uniform",
                 **kwargs):
        super().__init__(**kwargs)
        if isinstance(span, bool) or not isinstance(span, int) or span < 1:
            raise ValueError(f"span={span!r}: half the rows of the relative-position table, a positive int "
                             "(DeBERTa-v3's position_buckets, 256).")
        self.span = span
        self.layer_norm = bool(layer_norm)
        self.layer_norm_epsilon = layer_norm_epsilon
        self.embeddings_initializer = keras.initializers.get(embeddings_initializer)

    def build(self, input_shape):
        width = input_shape[-1]
        self.embeddings = self.add_weight(name="embeddings", shape=(2 * self.span, width),
                                          initializer=self.embeddings_initializer)
        self.embeddings_layer_norm = None
        if self.layer_norm:
            self.embeddings_layer_norm = LayerNorm(epsilon=self.layer_norm_epsilon, dtype=self.dtype_policy,
                                                   name="layer_norm")
            self.embeddings_layer_norm.build((None, width))
        self.built = True

    def call(self, inputs, training=None):
        table = ops.cast(self.embeddings, self.compute_dtype)
        if self.embeddings_layer_norm is not None:
            table = self.embeddings_layer_norm(table, training=training)
        return table

    def compute_output_shape(self, input_shape):
        return (2 * self.span, input_shape[-1])

    def get_config(self):
        config = super().get_config()
        config.update({
            "span": self.span,
            "layer_norm": self.layer_norm,
            "layer_norm_epsilon": self.layer_norm_epsilon,
            "embeddings_initializer": keras.initializers.serialize(self.embeddings_initializer),
        })
        return config


def check_relative_positions(position_buckets, max_relative_positions):
    """Refuses a bucket count or a range that transformers' DeBERTa-v2
    cannot have."""
    for name, value in (("position_buckets", position_buckets), ("max_relative_positions", max_relative_positions)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{name}={value!r}: a non-negative int (DeBERTa-v3's: position_buckets=256, "
                             "max_relative_positions=512).")
    if not max_relative_positions:
        raise ValueError("max_relative_positions=0: the farthest distance the log buckets reach (DeBERTa-v3: 512).")
    if position_buckets and (position_buckets < 4 or max_relative_positions <= position_buckets // 2 + 1):
        raise ValueError(f"position_buckets={position_buckets} and max_relative_positions={max_relative_positions}: "
                         "the log buckets need at least 4 buckets and a range past half of them "
                         "(DeBERTa-v3: 256 and 512).")
