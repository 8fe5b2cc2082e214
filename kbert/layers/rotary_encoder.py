import keras
from keras import ops

from kbert import backend
from kbert.layers.dropout import Dropout
from kbert.layers.gelu import check_gelu, gelu
from kbert.layers.layer_norm import LayerNorm
from kbert.layers.local_attention import attention_mask, banded_attention
from kbert.layers.position_embedding import restarting_positions
from kbert.layers.rotary_embedding import RotaryEmbedding


@keras.saving.register_keras_serializable(package="kbert")
class RotaryEncoder(keras.layers.Layer):
    """A pre-LayerNorm encoder block with rotary positions, a gated (GeGLU)
    feed-forward and, optionally, local attention: ModernBERT's (Warner et
    al. 2024, §2.1), as transformers' `ModernBertEncoderLayer`.

    `x = x + Dropout(Attention(LayerNorm(x)))`, queries and keys rotated
    by their positions (`RotaryEmbedding`), then
    `x = x + Dense(Dropout(GELU(Dense(h)) * Dense_gate(h)))` for
    `h = LayerNorm(x)` (Shazeer 2020's GeGLU). No LayerNorm on the
    residual stream itself: the backbone normalizes the last block's output.

    Args:
        num_heads: attention heads; must divide the hidden size.
        intermediate_dim: width of the feed-forward's input and gate.
        local_attention: the window of a local layer, in tokens: each token
            attends to those within `local_attention // 2` positions of it;
            `None`: a global layer (every token attends to every other).
        rotary_theta: the base of the rotary angles' wavelengths.
        dropout: dropout rate on attention probabilities, on the attention's
            output and inside the feed-forward.
        activation: `"gelu"` (exact) or `"gelu_approximate"`.
        layer_norm_epsilon: LayerNorm epsilon.
        attention_norm: whether the attention reads a LayerNorm of its input
            (ModernBERT's first block reads the normalized embeddings
            directly).
        attention_bias: whether the attention's dense layers have biases.
        feedforward_bias: whether the feed-forward's dense layers have biases.
        norm_bias: whether the LayerNorms have an offset (beta).
        kernel_initializer: initializer of the dense kernels.

    Call arguments:
        inputs: `[batch, length, hidden_dim]`.
        padding_mask: `[batch, length]`, 1 on real tokens: padding is never
            attended to.
        sequence_ids: `[batch, length]` for rows packed with several
            sequences: each attends to its own tokens only, and its
            positions restart at 0 (as `TransformerEncoder`'s).
        return_attention_scores: also return the attention probabilities
            `[batch, num_heads, length, length]`.

    Example:
    >>> x = keras.random.normal((2, 40, 32))
    >>> RotaryEncoder(num_heads=4, intermediate_dim=48, local_attention=16)(x).shape
    (2, 40, 32)
    """

    def __init__(
        self,
        num_heads,
        intermediate_dim,
        local_attention=None,
        rotary_theta=10_000.0,
        dropout=0.0,
        activation="gelu",
        layer_norm_epsilon=1e-5,
        attention_norm=True,
        attention_bias=False,
        feedforward_bias=False,
        norm_bias=False,
        kernel_initializer="glorot_uniform",
        **kwargs,
    ):
        super().__init__(**kwargs)
        check_gelu("RotaryEncoder", activation)
        if local_attention is not None and (local_attention < 2 or local_attention % 2):
            raise ValueError(f"local_attention={local_attention}: the window is an even number of tokens, "
                             "half on each side of a token (ModernBERT's: 128).")
        self.num_heads = num_heads
        self.intermediate_dim = intermediate_dim
        self.local_attention = local_attention
        self.rotary_theta = float(rotary_theta)
        self.dropout = dropout
        self.activation = activation
        self.layer_norm_epsilon = layer_norm_epsilon
        self.attention_norm = bool(attention_norm)
        self.attention_bias = bool(attention_bias)
        self.feedforward_bias = bool(feedforward_bias)
        self.norm_bias = bool(norm_bias)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.supports_masking = True

    def build(self, input_shape):
        hidden_dim = input_shape[-1]
        if hidden_dim % self.num_heads:
            raise ValueError(f"The hidden size {hidden_dim} is not divisible by num_heads={self.num_heads}.")
        self.head_dim = hidden_dim // self.num_heads

        def dense(name, units, in_dim, use_bias):
            layer = keras.layers.Dense(
                units, use_bias=use_bias,
                kernel_initializer=type(self.kernel_initializer).from_config(self.kernel_initializer.get_config()),
                dtype=self.dtype_policy, name=name,
            )
            layer.build((None, None, in_dim))
            return layer

        def layer_norm(name):
            layer = LayerNorm(epsilon=self.layer_norm_epsilon, center=self.norm_bias, dtype=self.dtype_policy,
                              name=name)
            layer.build((None, None, hidden_dim))
            return layer

        self.attention_layer_norm = layer_norm("attention_layer_norm") if self.attention_norm else None
        self.query = dense("query", hidden_dim, hidden_dim, self.attention_bias)
        self.key = dense("key", hidden_dim, hidden_dim, self.attention_bias)
        self.value = dense("value", hidden_dim, hidden_dim, self.attention_bias)
        self.attention_output = dense("attention_output", hidden_dim, hidden_dim, self.attention_bias)
        self.feedforward_layer_norm = layer_norm("feedforward_layer_norm")
        self.intermediate = dense("intermediate", self.intermediate_dim, hidden_dim, self.feedforward_bias)
        self.gate = dense("gate", self.intermediate_dim, hidden_dim, self.feedforward_bias)
        self.output_dense = dense("output", hidden_dim, self.intermediate_dim, self.feedforward_bias)
        self.rotary_embedding = RotaryEmbedding(self.rotary_theta, dtype=self.dtype_policy, name="rotary_embedding")
        self.attention_dropout = Dropout(self.dropout, dtype=self.dtype_policy)
        self.attention_output_dropout = Dropout(self.dropout, dtype=self.dtype_policy)
        self.feedforward_dropout = Dropout(self.dropout, dtype=self.dtype_policy)
        self.built = True

    def dense_layers(self):
        """The block's dense layers (LoRA's targets, by name)."""
        return (self.query, self.key, self.value, self.attention_output, self.intermediate, self.gate,
                self.output_dense)

    def call(self, inputs, padding_mask=None, sequence_ids=None, training=None, return_attention_scores=False):
        x = inputs
        h = x if self.attention_layer_norm is None else self.attention_layer_norm(x, training=training)
        attended, scores = self._attention(h, padding_mask, sequence_ids, training, return_attention_scores)
        x = x + self.attention_output_dropout(attended, training=training)
        h = self.feedforward_layer_norm(x, training=training)
        h = gelu(self.intermediate(h), self.activation) * self.gate(h)
        x = x + self.output_dense(self.feedforward_dropout(h, training=training))
        if return_attention_scores:
            return x, scores
        return x

    def _attention(self, x, padding_mask, sequence_ids, training, return_attention_scores):
        shape = ops.shape(x)
        batch, length = shape[0], shape[1]
        q, k, v = (ops.reshape(layer(x), (batch, length, self.num_heads, self.head_dim))
                   for layer in (self.query, self.key, self.value))
        positions = None if sequence_ids is None else restarting_positions(sequence_ids)
        q, k = self.rotary_embedding(q, positions), self.rotary_embedding(k, positions)
        half_window = None if self.local_attention is None else self.local_attention // 2
        if half_window is not None and isinstance(x.shape[1], int) and x.shape[1] <= half_window + 1:
            half_window = None  # the window holds every token: a global layer's attention, the fused kernel's
        scores = None
        if half_window is not None and not return_attention_scores and self._in_blocks(x.shape[1], half_window):
            context = banded_attention(q, k, v, half_window, padding_mask, sequence_ids, self.attention_dropout,
                                       training)
        else:
            mask = attention_mask(length, half_window, padding_mask, sequence_ids)
            # (A local layer's padding may have no key in its window: the fused kernels give NaN there.)
            fused = half_window is None and not return_attention_scores
            context, scores = self._full_attention(q, k, v, mask, training, fused)
        return self.attention_output(ops.reshape(context, (batch, length, -1))), scores

    @staticmethod
    def _in_blocks(length, half_window):
        """Whether a local layer attends in blocks (`banded_attention`):
        where the length is unknown (a traced graph; JAX's symbolic
        dimensions while Keras infers shapes) or longer than the three
        blocks each query reads there."""
        return not isinstance(length, int) or length > 3 * half_window

    def _full_attention(self, q, k, v, mask, training, fused):
        dropout_rate = self.attention_dropout.rate if training else 0.0
        if fused and backend.fuses_attention(dropout=dropout_rate > 0):
            return backend.attention(q, k, v, mask, dropout_rate), None
        logits = ops.einsum("btnh,bsnh->bnts", ops.cast(q, "float32"), ops.cast(k, "float32"))
        logits = logits * (self.head_dim ** -0.5)
        if mask is not None:
            logits = logits + ops.where(mask, 0.0, -1e9)
        scores = ops.softmax(logits, axis=-1)
        probabilities = self.attention_dropout(ops.cast(scores, v.dtype), training=training)
        return ops.einsum("bnts,bsnh->btnh", probabilities, v), scores

    def get_config(self):
        config = super().get_config()
        config.update({
            "num_heads": self.num_heads,
            "intermediate_dim": self.intermediate_dim,
            "local_attention": self.local_attention,
            "rotary_theta": self.rotary_theta,
            "dropout": self.dropout,
            "activation": self.activation,
            "layer_norm_epsilon": self.layer_norm_epsilon,
            "attention_norm": self.attention_norm,
            "attention_bias": self.attention_bias,
            "feedforward_bias": self.feedforward_bias,
            "norm_bias": self.norm_bias,
            "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
        })
        return config
