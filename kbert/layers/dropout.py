import keras
from keras import ops

from kbert import backend

# An element is dropped when its 16 random bits, read as a signed integer,
# fall below INT16_MIN + round(rate * 2**16).
_LEVELS = 2**16


@keras.saving.register_keras_serializable(package="kbert")
class Dropout(keras.layers.Dropout):
    """`keras.layers.Dropout` with a mask made from 16 random bits per element.

    Keras draws a random float per element (on PyTorch through
    `bernoulli_`, a quarter of a BERT training step on a CPU); this layer
    draws one 32-bit integer per two elements (on PyTorch one 64-bit integer
    per four) and compares each 16-bit part with a threshold: fewer random
    bits drawn, in about half the time (docs/benchmarks.md). The
    rate is exact to 1/65,536 (0.1 drops 6,554 / 65,536 = 0.100006 of the
    elements) and kept elements are scaled by one over the exact keep
    fraction, so the expected output equals the input, as with Keras' dropout.

    Falls back to `keras.layers.Dropout` for a `noise_shape` and where the
    16 bits cost as much as Keras' float (JAX: `randint` draws two words per
    element; `kbert.backend.random_int16_is_cheap`).

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
        return 0 < self.rate < 1 and self.noise_shape is None and backend.random_int16_is_cheap()

    def keep_mask(self, inputs):
        """The training mask alone, for a caller that applies the scale where
        it touches fewer elements (attention: on the values, not on the
        probabilities): (1 where kept and 0 where dropped, in `inputs`' dtype;
        the scale, 1 / the kept fraction). `inputs * mask * scale` is the
        layer's output in training. Needs `draws_its_own_mask()`."""
        bits, threshold, scale = self._bits(inputs)
        return backend.keep_mask(bits, threshold, inputs.dtype), scale

    def _bits(self, inputs):
        """16 random bits per element, the threshold below which an element
        is dropped, and the scale of the kept ones."""
        dropped = round(self.rate * _LEVELS)
        bits = backend.random_int16(ops.shape(inputs), self.seed_generator)
        return bits, ops.cast(-(_LEVELS // 2) + dropped, "int16"), _LEVELS / (_LEVELS - dropped)

