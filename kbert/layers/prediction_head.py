import keras

from kbert.layers.gelu import check_gelu, gelu
from kbert.layers.layer_norm import LayerNorm


@keras.saving.register_keras_serializable(package="kbert")
class PredictionHead(keras.layers.Layer):
    """The transform a task head reads features through: `Dense(width) ->
    activation -> LayerNorm`, keeping the width (transformers'
    `ModernBertPredictionHead`, `head`, before every ModernBERT task's
    output layer; BERT's masked-LM transform is the same computation).

    Args:
        activation: `"gelu"` (exact) or `"gelu_approximate"`.
        layer_norm_epsilon: LayerNorm epsilon.
        use_bias: whether the dense layer has a bias.
        norm_bias: whether the LayerNorm has an offset (beta).
        kernel_initializer: initializer of the dense kernel.

    Example:
    >>> PredictionHead(use_bias=False, norm_bias=False)(keras.random.normal((2, 16))).shape
    (2, 16)
    """

    def __init__(self, activation="gelu", layer_norm_epsilon=1e-5, use_bias=True, norm_bias=True,
                 kernel_initializer="glorot_uniform", **kwargs):
        super().__init__(**kwargs)
        check_gelu("PredictionHead", activation)
        self.activation = activation
        self.layer_norm_epsilon = layer_norm_epsilon
        self.use_bias = bool(use_bias)
        self.norm_bias = bool(norm_bias)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)

    def build(self, input_shape):
        width = input_shape[-1]
        self.dense = keras.layers.Dense(width, use_bias=self.use_bias, kernel_initializer=self.kernel_initializer,
                                        dtype=self.dtype_policy, name="dense")
        self.dense.build(input_shape)
        self.layer_norm = LayerNorm(epsilon=self.layer_norm_epsilon, center=self.norm_bias, dtype=self.dtype_policy,
                                    name="layer_norm")
        self.layer_norm.build(input_shape)
        self.built = True

    def call(self, inputs, training=None):
        return self.layer_norm(gelu(self.dense(inputs), self.activation), training=training)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        config = super().get_config()
        config.update({
            "activation": self.activation,
            "layer_norm_epsilon": self.layer_norm_epsilon,
            "use_bias": self.use_bias,
            "norm_bias": self.norm_bias,
            "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
        })
        return config
