import keras
from keras import ops

from kbert import backend


@keras.saving.register_keras_serializable(package="kbert")
class LayerNorm(keras.layers.LayerNormalization):
    """`keras.layers.LayerNormalization` through `kbert.backend.layer_norm`:
    the same values (in the layer's compute dtype, as Keras'), and on
    TensorFlow in training the gradient written out in float32: a graph of
    fewer ops than autodiff's through Keras' mean and variance
    (docs/benchmarks.md).

    Falls back to Keras' layer for anything but BERT's LayerNorm: over the
    last axis, with both `gamma` and `beta`, no RMS scaling.

    Args: as `keras.layers.LayerNormalization`.
    """

    def call(self, inputs, training=None):
        if self.axis != [-1] or self.rms_scaling or not (self.center and self.scale):
            return super().call(inputs)
        # Keras does not cast a LayerNormalization's inputs (`autocast` off);
        # Keras' layer casts its result to the compute dtype, this its input.
        return backend.layer_norm(ops.cast(inputs, self.compute_dtype), self.gamma, self.beta, self.epsilon,
                                  training=bool(training))
