import keras
from keras import ops

# An element is dropped when its 16 random bits, read as a signed integer,
# fall below INT16_MIN + round(rate * 2**16).
_LEVELS = 2**16


@keras.saving.register_keras_serializable(package="kbert")
class Dropout(keras.layers.Dropout):
    """`keras.layers.Dropout` with a mask made from 16 random bits per element.

    Keras draws a random float per element (on PyTorch through
    `bernoulli_`, a quarter of a BERT training step on a CPU); this layer
    draws one 32-bit integer per two elements (on PyTorch one 64-bit integer
    per four) and compares each 16-bit part with a threshold: about half the
    time (a 32 x 12 x 128 x 128 bfloat16 tensor on PyTorch: 47 -> 24 ms). The
    rate is exact to 1/65,536 (0.1 drops 6,554 / 65,536 = 0.100006 of the
    elements) and kept elements are scaled by one over the exact keep
    fraction, so the expected output equals the input, as with Keras' dropout.

    Falls back to `keras.layers.Dropout` for a `noise_shape` and on JAX,
    whose `randint` draws two words per element and so saves nothing.

    Args: as `keras.layers.Dropout`.
    """

    def call(self, inputs, training=False):
        if training and self.rate == 1:
            return ops.zeros_like(inputs)
        if not (training and self.draws_its_own_mask()):
            return super().call(inputs, training=training)
        bits, threshold, scale = self._bits(inputs)
        # One pass to make the scaled mask, one to apply it (and one back).
        scale = ops.cast(scale, inputs.dtype)
        return inputs * ops.where(bits >= threshold, scale, ops.zeros_like(scale))

    def draws_its_own_mask(self):
        """Whether `call` and `keep_mask` use the 16-bit mask (not Keras')."""
        return 0 < self.rate < 1 and self.noise_shape is None and keras.backend.backend() != "jax"

    def keep_mask(self, inputs):
        """The training mask alone, for a caller that applies the scale where
        it touches fewer elements (attention: on the values, not on the
        probabilities): (1 where kept and 0 where dropped, in `inputs`' dtype;
        the scale, 1 / the kept fraction). `inputs * mask * scale` is the
        layer's output in training. Needs `draws_its_own_mask()`."""
        bits, threshold, scale = self._bits(inputs)
        if keras.backend.backend() == "torch":
            import torch

            # The comparison writes its 0 / 1 in the target dtype: one pass.
            mask = torch.empty(bits.shape, dtype=inputs.dtype, device=inputs.device)
            return torch.ge(bits, threshold, out=mask), scale
        return ops.cast(bits >= threshold, inputs.dtype), scale

    def _bits(self, inputs):
        """16 random bits per element, the threshold below which an element
        is dropped, and the scale of the kept ones."""
        dropped = round(self.rate * _LEVELS)
        bits = _random_int16(ops.shape(inputs), self.seed_generator)
        return bits, ops.cast(-(_LEVELS // 2) + dropped, "int16"), _LEVELS / (_LEVELS - dropped)


def _random_int16(shape, seed_generator):
    """Uniform int16 of `shape`: int32 draws over half the last axis, split
    (on PyTorch, 64-bit draws over a quarter of it)."""
    last = shape[-1]
    if keras.backend.backend() == "torch":
        return _torch_random_int16(shape, seed_generator)
    half = (last + 1) // 2
    bits = keras.random.randint(
        (*shape[:-1], half), minval=-(2**31), maxval=2**31 - 1, dtype="int32", seed=seed_generator
    )
    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        # `ops.view` checks the last axis' size in Python, which a graph with
        # a dynamic sequence length does not have.
        halves = tf.bitcast(bits, tf.int16)  # [..., half, 2]
        halves = tf.reshape(halves, tf.concat([tf.shape(bits)[:-1], [2 * half]], axis=0))
    else:
        halves = ops.view(bits, "int16")  # [..., 2 * half]
    return halves[..., :last]


def _torch_random_int16(shape, seed_generator):
    # PyTorch draws a full-range int64 (`random_(-2**63, None)`: two raw
    # 32-bit words) in half the time per bit of a ranged int32 draw, which
    # reduces every word modulo the range: 3.1M words' worth of bits in
    # 5-6 ms instead of 12-13 ms. The generator is seeded as Keras seeds it.
    import torch
    from keras.src.backend.torch.core import get_device
    from keras.src.backend.torch.random import torch_seed_generator

    last = shape[-1]
    words = torch.empty((*shape[:-1], (last + 3) // 4), dtype=torch.int64, device=get_device())
    words.random_(-(2**63), None, generator=torch_seed_generator(seed_generator))
    return words.view(torch.int16)[..., :last]
