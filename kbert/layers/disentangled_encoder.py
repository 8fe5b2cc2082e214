import keras
from keras import ops

from kbert import backend
from kbert.layers.dropout import Dropout
from kbert.layers.relative_embedding import check_relative_positions, relative_rows
from kbert.layers.transformer_encoder import TransformerEncoder

# transformers' pos_att_type: content-to-position, position-to-content.
POSITION_ATTENTION = ("c2p", "p2c")
# A masked logit, as TransformerEncoder's.
_MASKED = -1e9


@keras.saving.register_keras_serializable(package="kbert")
class DisentangledEncoder(TransformerEncoder):
    """DeBERTa's encoder block (He et al. 2021): BERT's post-LN block
    (`TransformerEncoder`: the same layers, residuals and feed-forward)
    whose self-attention adds relative-position terms to the content
    one (§3.1, disentangled attention):

    `logits[i, j] = (q_i . k_j + q_i . Kr[r(i, j)] + k_j . Qr[r(i, j)]) / sqrt(d * (1 + terms))`

    content-to-content, content-to-position ("c2p") and position-to-content
    ("p2c"), where `Qr` and `Kr` are the shared relative-position table
    (`RelativeEmbedding`) through this block's own query and key layers
    (transformers' `share_att_key`, DeBERTa-v3's) and `r(i, j)` is the
    table's row for the distance `i - j` (`relative_rows`: log buckets).
    Each position term is gathered from `[batch, heads, length, 2 * span]`
    products, one gather per term (`kbert.backend.take_per_row`): the
    logits cost about three of BERT's (`length * 2 * span` products each),
    with no loop over positions.

    Args:
        num_heads, intermediate_dim, dropout, activation,
        layer_norm_epsilon, kernel_initializer: as `TransformerEncoder`'s
            (DeBERTa's LayerNorm epsilon: 1e-7).
        position_buckets: the relative distances' log buckets on each side
            (DeBERTa-v3: 256); 0: distances as they are, clamped at
            `max_relative_positions`.
        max_relative_positions: the distance the log buckets reach.
        position_attention: the position terms, among `"c2p"` and `"p2c"`
            (transformers' `pos_att_type`).

    Call arguments:
        inputs: `[batch, length, hidden_dim]`.
        relative_embeddings: the relative-position table `[2 * span,
            hidden_dim]` (`RelativeEmbedding`'s output), `span` being
            `position_buckets` (or `max_relative_positions` without them).
        padding_mask, sequence_ids, return_attention_scores,
        first_token_only: as `TransformerEncoder`'s (relative positions
            need no restart in a packed row: attention stays within each
            sequence, and `i - j` is the same there as alone).

    Example:
    >>> x = keras.random.normal((2, 40, 32))
    >>> table = RelativeEmbedding(span=8)(x)
    >>> DisentangledEncoder(num_heads=4, intermediate_dim=64, position_buckets=8,
    ...                     max_relative_positions=64)(x, relative_embeddings=table).shape
    (2, 40, 32)
    """

    def __init__(self, num_heads, intermediate_dim, position_buckets=256, max_relative_positions=512,
                 position_attention=POSITION_ATTENTION, dropout=0.1, activation="gelu", layer_norm_epsilon=1e-7,
                 kernel_initializer="glorot_uniform", **kwargs):
        super().__init__(num_heads=num_heads, intermediate_dim=intermediate_dim, dropout=dropout, activation=activation,
                         layer_norm_epsilon=layer_norm_epsilon, kernel_initializer=kernel_initializer, **kwargs)
        check_relative_positions(position_buckets, max_relative_positions)
        position_attention = tuple(position_attention)
        unknown = [term for term in position_attention if term not in POSITION_ATTENTION]
        if unknown or len(set(position_attention)) < len(position_attention):
            raise ValueError(f"position_attention={list(position_attention)}: each of \"c2p\" (content to position) "
                             "and \"p2c\" (position to content) at most once (DeBERTa-v3: both).")
        self.position_buckets = position_buckets
        self.max_relative_positions = max_relative_positions
        self.position_attention = position_attention
        self.span = position_buckets or max_relative_positions

    def build(self, input_shape):
        # transformers' pos_dropout: on the relative table, in training.
        self.position_dropout = Dropout(self.dropout, dtype=self.dtype_policy)
        super().build(input_shape)

    def call(self, inputs, relative_embeddings, padding_mask=None, training=None, return_attention_scores=False,
             first_token_only=False, sequence_ids=None):
        def attend(x, queries, shape):
            return self._disentangled_attention(x, queries, shape, relative_embeddings, padding_mask, sequence_ids,
                                                training, return_attention_scores)

        return self._block(inputs, attend, training, return_attention_scores, first_token_only)

    def _disentangled_attention(self, x, queries, shape, relative_embeddings, padding_mask, sequence_ids, training,
                                return_attention_scores):
        # `x` and `queries` are flat, `[batch * length, hidden]`, as TransformerEncoder._attention's.
        batch, length, query_length = shape
        heads, head_dim = self.num_heads, self.head_dim
        # transformers' scale, 1 / sqrt(d * scale_factor), on the queries (of content and of positions).
        scale = ops.cast((head_dim * (1 + len(self.position_attention))) ** -0.5, self.compute_dtype)
        q = ops.reshape(self._dense(self.query, queries), (batch, query_length, heads, head_dim)) * scale
        k = ops.reshape(self._dense(self.key, x), (batch, length, heads, head_dim))
        v = ops.reshape(self._dense(self.value, x), (batch, length, heads, head_dim))
        logits = ops.cast(ops.einsum("btnh,bsnh->bnts", q, k), "float32")

        table = self.position_dropout(ops.cast(relative_embeddings, self.compute_dtype), training=training)
        rows = relative_rows(query_length, length, self.position_buckets, self.max_relative_positions)
        width = 2 * self.span
        if "c2p" in self.position_attention:
            # q_i . Kr[r(i, j)]: each query against every row, then its row for each key.
            position_keys = ops.reshape(self._dense(self.key, table), (width, heads, head_dim))
            c2p = ops.einsum("btnh,rnh->bntr", q, position_keys)
            logits = logits + ops.cast(backend.take_per_row(c2p, rows), "float32")
        if "p2c" in self.position_attention:
            # k_j . Qr[r(i, j)]: each key against every row, then its row for each query.
            position_queries = ops.reshape(self._dense(self.query, table), (width, heads, head_dim)) * scale
            p2c = ops.einsum("bsnh,rnh->bnsr", k, position_queries)
            # (Gathered per key, [.., key, query], as transformers does, then turned.)
            p2c = backend.take_per_row(p2c, ops.transpose(rows))
            logits = logits + ops.cast(ops.swapaxes(p2c, -1, -2), "float32")

        mask = None
        if sequence_ids is not None:
            ids = ops.cast(sequence_ids, "int32")
            mask = ops.equal(ids[:, :query_length, None], ids[:, None, :])[:, None]
        elif padding_mask is not None:
            mask = ops.cast(padding_mask, "bool")[:, None, None, :]
        if mask is not None:
            logits = logits + ops.where(mask, 0.0, _MASKED)
        scores = ops.softmax(logits, axis=-1)
        probabilities = self.attention_dropout(ops.cast(scores, v.dtype), training=training)
        context = ops.einsum("bnts,bsnh->btnh", probabilities, v)
        context = ops.reshape(context, (-1, heads * head_dim))
        return self._dense(self.attention_output, context), (scores if return_attention_scores else None)

    def get_config(self):
        config = super().get_config()
        config.update({
            "position_buckets": self.position_buckets,
            "max_relative_positions": self.max_relative_positions,
            "position_attention": list(self.position_attention),
        })
        return config

