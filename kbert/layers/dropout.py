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
    draws one 32-bit integer per two elements and compares each half with a
    threshold, which is 2-3x cheaper. The rate is exact to 1/65,536 (0.1
    drops 6,554 / 65,536 = 0.100006 of the elements) and kept elements are
    scaled by one over the exact keep fraction, so the expected output equals
    the input, as with Keras' dropout.

    Falls back to `keras.layers.Dropout` for a `noise_shape` and on JAX,
    whose `randint` draws two words per element and so saves nothing.

    Args: as `keras.layers.Dropout`.
    """

    def call(self, inputs, training=False):
        if not training or self.rate == 0 or self.noise_shape is not None or keras.backend.backend() == "jax":
            return super().call(inputs, training=training)
        if self.rate == 1:
            return ops.zeros_like(inputs)
        dropped = round(self.rate * _LEVELS)
        bits = _random_int16(ops.shape(inputs), self.seed_generator)
        keep = bits >= ops.cast(-(_LEVELS // 2) + dropped, "int16")
        # One pass to make the scaled mask, one to apply it (and one back).
        scale = ops.cast(_LEVELS / (_LEVELS - dropped), inputs.dtype)
        return inputs * ops.where(keep, scale, ops.zeros_like(scale))


def _random_int16(shape, seed_generator):
    """Uniform int16 of `shape`: int32 draws over half the last axis, split."""
    last = shape[-1]
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
