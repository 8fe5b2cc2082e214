import keras
from keras import ops


@keras.saving.register_keras_serializable(package="kbert")
class RotaryEmbedding(keras.layers.Layer):
    """Rotary position embeddings (RoFormer, Su et al. 2021, §3.4.2), in the
    half-split layout of GPT-NeoX and transformers' `rotate_half`: channel
    `i` of the first half of each head is rotated with channel `i` of the
    second half, by the angle `position * theta ** (-2i / head_dim)`.

    No weights: the angles are computed in float32 from the positions, and
    the rotated queries or keys are cast back to the input's dtype (as
    transformers' `apply_rotary_pos_emb`).

    Args:
        theta: the base of the angles' wavelengths (RoFormer: 10,000;
            ModernBERT's global layers 160,000, its local ones 10,000).

    Call arguments:
        inputs: queries or keys `[batch, length, num_heads, head_dim]`, with
            an even `head_dim`.
        positions: int `[batch, length]`, each token's position; `None`:
            0, 1, ... (`kbert.layers.position_embedding.restarting_positions`
            gives those of rows packed with several sequences).

    Example:
    >>> rotary = RotaryEmbedding(theta=10_000.0)
    >>> rotary(keras.random.normal((2, 8, 4, 16))).shape
    (2, 8, 4, 16)
    """

    def __init__(self, theta=10_000.0, **kwargs):
        super().__init__(**kwargs)
        self.theta = float(theta)

    def call(self, inputs, positions=None):
        head_dim = inputs.shape[-1]
        if head_dim % 2:
            raise ValueError(f"RotaryEmbedding rotates pairs of channels; head_dim={head_dim} is odd.")
        if positions is None:
            positions = ops.arange(ops.shape(inputs)[1], dtype="float32")[None, :]
        # RoFormer eq. 15: theta_i = theta ** (-2i / d), here in float32 as transformers computes it.
        exponents = ops.arange(0, head_dim, 2, dtype="float32") / ops.cast(head_dim, "float32")
        inverse_frequencies = 1.0 / ops.power(ops.cast(self.theta, "float32"), exponents)
        angles = ops.cast(positions, "float32")[:, :, None] * inverse_frequencies
        angles = ops.concatenate([angles, angles], axis=-1)[:, :, None, :]  # [batch, length, 1, head_dim]
        x = ops.cast(inputs, "float32")
        first, second = x[..., : head_dim // 2], x[..., head_dim // 2:]
        rotated = ops.concatenate([-second, first], axis=-1)
        return ops.cast(x * ops.cos(angles) + rotated * ops.sin(angles), inputs.dtype)

    def compute_output_shape(self, inputs_shape, positions_shape=None):
        return inputs_shape

    def get_config(self):
        config = super().get_config()
        config.update({"theta": self.theta})
        return config
