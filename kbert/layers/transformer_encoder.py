import keras
from keras import ops

from kbert import backend
from kbert.layers.dropout import Dropout
from kbert.layers.fused_dense import fused_dense
from kbert.layers.gelu import check_gelu
from kbert.layers.layer_norm import LayerNorm


@keras.saving.register_keras_serializable(package="kbert")
class TransformerEncoder(keras.layers.Layer):
    """BERT's encoder block: post-LayerNorm self-attention and feed-forward.

    `x = LayerNorm(x + Dropout(Attention(x)))`, then
    `x = LayerNorm(x + Dropout(Dense(GELU(Dense(x)))))` (Devlin et al. 2019,
    following Vaswani et al. 2017 §3.1), with exact (erf) GELU.

    Args:
        num_heads: attention heads; must divide the hidden size.
        intermediate_dim: width of the feed-forward layer.
        dropout: dropout rate on attention probabilities and on both residual
            branches.
        activation: feed-forward activation, `"gelu"` (exact, BERT's) or
            `"gelu_approximate"` (tanh approximation).
        layer_norm_epsilon: LayerNorm epsilon (BERT: 1e-12).
        kernel_initializer: initializer of the dense kernels.

    Call arguments:
        inputs: `[batch, length, hidden_dim]`.
        padding_mask: `[batch, length]`, 1 on real tokens, 0 on padding;
            padding is never attended to.
        sequence_ids: `[batch, length]` ints for rows packed with several
            sequences (Krell et al. 2021): each token attends only to tokens
            of its own id (block-diagonal attention), so a packed row gives
            each sequence what it gets alone. Ids are 1, 2, ... on the
            sequences and 0 on padding (which then attends only to padding,
            never to a sequence); `padding_mask` is then not needed. The
            `[batch, 1, length, length]` boolean mask is built here, in-graph,
            from the ids.
        return_attention_scores: also return the attention probabilities
            `[batch, num_heads, length, length]`.
        first_token_only: compute the block's output at the first position
            only (`[batch, 1, hidden_dim]`, attending over every position),
            for a last block whose only reader is the [CLS] pooler: the same
            values for ~1/length of the queries' and feed-forward work.

    Example:
    >>> x = keras.random.normal((2, 8, 32))
    >>> TransformerEncoder(num_heads=4, intermediate_dim=64)(x).shape
    (2, 8, 32)
    """

    def __init__(
        self,
        num_heads,
        intermediate_dim,
        dropout=0.1,
        activation="gelu",
        layer_norm_epsilon=1e-12,
        kernel_initializer="glorot_uniform",
        **kwargs,
    ):
        super().__init__(**kwargs)
        check_gelu("TransformerEncoder", activation)
        self.num_heads = num_heads
        self.intermediate_dim = intermediate_dim
        self.dropout = dropout
        self.activation = activation
        self.layer_norm_epsilon = layer_norm_epsilon
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.supports_masking = True

    def build(self, input_shape):
        hidden_dim = input_shape[-1]
        if hidden_dim % self.num_heads:
            raise ValueError(
                f"The hidden size {hidden_dim} is not divisible by num_heads={self.num_heads}."
            )
        self.head_dim = hidden_dim // self.num_heads

        def dense(name, units, in_dim):
            layer = keras.layers.Dense(
                units,
                # A copy for each layer; not through keras.initializers.serialize,
                # which imports TensorFlow wherever it is installed.
                kernel_initializer=type(self.kernel_initializer).from_config(self.kernel_initializer.get_config()),
                dtype=self.dtype_policy,
                name=name,
            )
            layer.build((None, None, in_dim))
            return layer

        def layer_norm(name):
            layer = LayerNorm(
                epsilon=self.layer_norm_epsilon, dtype=self.dtype_policy, name=name
            )
            layer.build((None, None, hidden_dim))
            return layer

        self.query = dense("query", hidden_dim, hidden_dim)
        self.key = dense("key", hidden_dim, hidden_dim)
        self.value = dense("value", hidden_dim, hidden_dim)
        self.attention_output = dense("attention_output", hidden_dim, hidden_dim)
        self.attention_layer_norm = layer_norm("attention_layer_norm")
        self.intermediate = dense("intermediate", self.intermediate_dim, hidden_dim)
        self.output_dense = dense("output", hidden_dim, self.intermediate_dim)
        self.output_layer_norm = layer_norm("output_layer_norm")
        self.attention_dropout = Dropout(self.dropout, dtype=self.dtype_policy)
        self.residual_dropout = Dropout(self.dropout, dtype=self.dtype_policy)
        self.built = True

    def _attention(self, x, queries, shape, padding_mask, training, return_attention_scores, sequence_ids=None):
        # `x` and `queries` are flat, `[batch * length, hidden]`; `shape` is
        # (batch, length of x, length of queries).
        batch, length, query_length = shape
        q = ops.reshape(self._dense(self.query, queries), (batch, query_length, self.num_heads, self.head_dim))
        k = ops.reshape(self._dense(self.key, x), (batch, length, self.num_heads, self.head_dim))
        v = ops.reshape(self._dense(self.value, x), (batch, length, self.num_heads, self.head_dim))
        mask = None
        if sequence_ids is not None:
            keys = ops.cast(sequence_ids, "int32")
            mask = ops.equal(keys[:, :query_length, None], keys[:, None, :])[:, None]
        elif padding_mask is not None:
            mask = ops.cast(padding_mask, "bool")[:, None, None, :]
        dropout_rate = self.attention_dropout.rate if training else 0.0
        if not return_attention_scores and backend.fuses_attention(dropout=dropout_rate > 0):
            # Fused attention where the backend has it (on PyTorch with the
            # dropout too); no probabilities needed.
            context = backend.attention(q, k, v, mask, dropout_rate)
            scores = None
        else:
            # The mask is added as a bias (no backward work). In training the
            # queries are scaled: [batch, length, hidden] elements, forward and
            # back, not [batch, heads, length, length]. In inference the
            # logits are scaled instead: TensorFlow's oneDNN pass then fuses
            # the matmul, the scale and the bias into one op
            # (`_MklFusedBatchMatMulV2`), two passes fewer.
            if training:
                q = q * ops.cast(self.head_dim**-0.5, q.dtype)
            logits = ops.einsum("btnh,bsnh->bnts", q, k)
            if not training:
                logits = logits * ops.cast(self.head_dim**-0.5, logits.dtype)
            if return_attention_scores or not self._bfloat16_softmax_is_exact(logits, training):
                logits = ops.cast(logits, "float32")
            if mask is not None:
                logits = logits + ops.cast(ops.where(mask, 0.0, -1e9), logits.dtype)
            scores = ops.softmax(logits, axis=-1)
            probs = ops.cast(scores, v.dtype)
            if self._mask_by_hand(self.attention_dropout, training):
                # (probs * mask * scale) @ v as (probs * mask) @ (v * scale):
                # the scale touches [batch, length, hidden], not
                # [batch, heads, length, length], and the 0/1 mask is
                # written by the comparison itself.
                mask01, scale = self.attention_dropout.keep_mask(probs)
                probs, v = probs * mask01, v * ops.cast(scale, v.dtype)
            else:
                probs = self.attention_dropout(probs, training=training)
            context = ops.einsum("bnts,bsnh->btnh", probs, v)
        context = ops.reshape(context, (-1, self.num_heads * self.head_dim))
        return self._dense(self.attention_output, context), scores

    @staticmethod
    def _bfloat16_softmax_is_exact(logits, training):
        """Whether bfloat16 logits give the float32 softmax's probabilities
        rounded to bfloat16, and in `training` (where kbert takes gradients)
        a float32 gradient, so [batch, heads, length, length] is not cast to
        float32 and back. (The mask's bias, 0 or -1e9, leaves unmasked
        logits exact in bfloat16.)"""
        return (keras.backend.standardize_dtype(logits.dtype) == "bfloat16"
                and backend.exact_bfloat16_softmax(with_gradient=bool(training)))

    def _residual(self, x, h, training):
        """`x + dropout(h)`: on PyTorch in training one op of the 0/1 mask
        and the scale (two passes fewer, forward and back)."""
        if self._mask_by_hand(self.residual_dropout, training):
            mask01, scale = self.residual_dropout.keep_mask(h)
            return backend.dropout_add(x, h, mask01, scale)
        return x + self.residual_dropout(h, training=training)

    @staticmethod
    def _mask_by_hand(dropout, training):
        """Whether to apply `dropout`'s 0/1 mask and scale here, fused with
        the neighbouring op (PyTorch, in training, with kbert's own mask)."""
        return bool(training) and backend.fuses_keep_masks() and dropout.draws_its_own_mask()

    def dense_layers(self):
        """The block's dense layers, which it applies with `fused_dense`."""
        return (self.query, self.key, self.value, self.attention_output, self.intermediate, self.output_dense)

    def _dense(self, layer, x, activation=None, training=False):
        return fused_dense(layer, x, activation, compute_dtype=self.compute_dtype, training=training)

    def call(
        self, inputs, padding_mask=None, training=None, return_attention_scores=False, first_token_only=False,
        sequence_ids=None,
    ):
        def attend(x, queries, shape):
            return self._attention(x, queries, shape, padding_mask, training, return_attention_scores, sequence_ids)

        return self._block(inputs, attend, training, return_attention_scores, first_token_only)

    def _block(self, inputs, attend, training, return_attention_scores, first_token_only):
        """The block around its attention, `attend(x, queries, shape) ->
        (attended, scores)` (a subclass's attention reads more inputs)."""
        # The block runs on `[batch * length, hidden]`: its dense layers,
        # dropout and LayerNorms need no reshape of their own (on TensorFlow
        # about a third fewer ops to trace and run); only attention splits
        # the heads.
        shape = ops.shape(inputs)
        batch, length, hidden = shape[0], shape[1], inputs.shape[-1]
        query_length = 1 if first_token_only else length
        x = ops.reshape(inputs, (-1, hidden))
        queries = ops.reshape(inputs[:, :1], (-1, hidden)) if first_token_only else x
        attended, scores = attend(x, queries, (batch, length, query_length))
        x = self.attention_layer_norm(self._residual(queries, attended, training), training=training)
        h = self._dense(self.intermediate, x, activation=self.activation, training=training)
        h = self._dense(self.output_dense, h)
        x = self.output_layer_norm(self._residual(x, h, training), training=training)
        x = ops.reshape(x, (batch, query_length, hidden))
        if return_attention_scores:
            return x, scores
        return x

    def get_config(self):
        config = super().get_config()
        config.update({
            "num_heads": self.num_heads,
            "intermediate_dim": self.intermediate_dim,
            "dropout": self.dropout,
            "activation": self.activation,
            "layer_norm_epsilon": self.layer_norm_epsilon,
            "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
        })
        return config
