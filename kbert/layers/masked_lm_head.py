import keras
from keras import ops

from kbert.layers.gelu import check_gelu, gelu
from kbert.layers.layer_norm import LayerNorm


@keras.saving.register_keras_serializable(package="kbert")
class MaskedLMHead(keras.layers.Layer):
    """BERT's masked-LM head: logits over the vocabulary at masked positions.

    `Dense(hidden) -> GELU -> LayerNorm`, then the output projection, which is
    the token embedding matrix transposed (tied weights, BERT §A.2 / Press &
    Wolf 2017), plus a per-token bias. Logits are computed only at
    `mask_positions`, so a batch of 512-token sequences with 20 predictions
    each costs 20, not 512, vocabulary-sized rows.

    Args:
        vocabulary_size: size of the vocabulary; only needed without
            `token_embedding`.
        token_embedding: the backbone's `keras.layers.Embedding` whose matrix
            is reused as the output projection (tied). Not serialized: task
            models pass their backbone's embedding when they are rebuilt.
            Without it the head learns its own projection.
        activation: `"gelu"` (exact, BERT's) or `"gelu_approximate"`.
        layer_norm_epsilon: LayerNorm epsilon (BERT: 1e-12).
        use_bias: whether the transform has a bias (ModernBERT's has none).
        norm_bias: whether the LayerNorm has an offset (ModernBERT's has none).
        kernel_initializer: initializer of the transform's kernel.

    Call arguments:
        inputs: the sequence output `[batch, length, hidden_dim]`.
        mask_positions: int `[batch, num_predictions]`, the positions to
            predict.

    Returns float32 logits `[batch, num_predictions, vocabulary_size]`.

    Example:
    >>> embedding = keras.layers.Embedding(100, 16)
    >>> embedding.build((None,))
    >>> head = MaskedLMHead(token_embedding=embedding)
    >>> head(keras.random.normal((2, 8, 16)), mask_positions=ops.array([[1, 3], [0, 2]])).shape
    (2, 2, 100)
    """

    def __init__(
        self,
        vocabulary_size=None,
        token_embedding=None,
        activation="gelu",
        layer_norm_epsilon=1e-12,
        use_bias=True,
        norm_bias=True,
        kernel_initializer="glorot_uniform",
        **kwargs,
    ):
        super().__init__(**kwargs)
        check_gelu("MaskedLMHead", activation)
        if token_embedding is None and vocabulary_size is None:
            raise ValueError(
                "MaskedLMHead needs `token_embedding` (the backbone's token embedding, for tied "
                "weights: MaskedLMHead(token_embedding=backbone.token_embedding)) or `vocabulary_size`."
            )
        if token_embedding is not None:
            vocabulary_size = token_embedding.input_dim
        self.vocabulary_size = vocabulary_size
        self.token_embedding = token_embedding
        self.activation = activation
        self.layer_norm_epsilon = layer_norm_epsilon
        self.use_bias = bool(use_bias)
        self.norm_bias = bool(norm_bias)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)

    def build(self, inputs_shape, mask_positions_shape=None):
        hidden_dim = inputs_shape[-1]
        # The transform maps to the width of the tied embeddings (ELECTRA's
        # are narrower than its hidden states).
        width = self.token_embedding.output_dim if self.token_embedding is not None else hidden_dim
        self.transform = keras.layers.Dense(
            width, use_bias=self.use_bias, kernel_initializer=self.kernel_initializer, dtype=self.dtype_policy,
            name="transform",
        )
        self.transform.build((None, None, hidden_dim))
        self.layer_norm = LayerNorm(
            epsilon=self.layer_norm_epsilon, center=self.norm_bias, dtype=self.dtype_policy, name="layer_norm"
        )
        self.layer_norm.build((None, None, width))
        if self.token_embedding is None:
            self.output_embeddings = self.add_weight(
                name="output_embeddings",
                shape=(self.vocabulary_size, hidden_dim),
                initializer=self.kernel_initializer,
            )
        self.bias = self.add_weight(name="bias", shape=(self.vocabulary_size,), initializer="zeros")
        self.built = True

    def call(self, inputs, mask_positions, training=None):
        mask_positions = ops.cast(mask_positions, "int32")
        x = ops.take_along_axis(inputs, mask_positions[:, :, None], axis=1)
        x = gelu(self.transform(x), self.activation)
        x = self.layer_norm(x, training=training)
        table = self.output_embeddings if self.token_embedding is None else self.token_embedding.embeddings
        embeddings = ops.cast(table, x.dtype)
        logits = ops.matmul(x, ops.transpose(embeddings))
        return ops.cast(logits, "float32") + ops.cast(self.bias, "float32")

    def compute_output_shape(self, inputs_shape, mask_positions_shape):
        return (inputs_shape[0], mask_positions_shape[1], self.vocabulary_size)

    def get_config(self):
        config = super().get_config()
        config.update({
            "vocabulary_size": self.vocabulary_size,
            "activation": self.activation,
            "layer_norm_epsilon": self.layer_norm_epsilon,
            "use_bias": self.use_bias,
            "norm_bias": self.norm_bias,
            "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
        })
        return config
