import keras
import numpy as np
import pytest
from keras import ops

from kbert.layers import LayerNorm
from tests.backend.test_primitives import gradients_of
from tests.helpers import to_numpy


def pair(**kwargs):
    """kbert's LayerNorm and Keras' with the same weights (not 1 and 0)."""
    ours, keras_ = LayerNorm(**kwargs), keras.layers.LayerNormalization(**kwargs)
    rng = np.random.default_rng(0)
    for layer in (ours, keras_):
        layer.build((16, 16))
    for a, b in zip(ours.weights, keras_.weights):
        value = rng.normal(size=a.shape).astype("float32") + 1
        a.assign(value), b.assign(value)
    return ours, keras_


def test_values_and_gradients_equal_keras_layer_norm():
    # kbert's layer norm takes a gradient written out on TensorFlow in
    # training (kbert.backend.layer_norm); its values and gradients are
    # Keras' layer's, with inputs far from zero mean and unit variance.
    ours, keras_ = pair(epsilon=1e-12)
    assert [w.path.split("/")[-1] for w in ours.weights] == ["gamma", "beta"]  # checkpoints load alike
    x = np.random.default_rng(1).normal(size=(16, 16)).astype("float32") * 3 + 2
    weights = ops.convert_to_tensor(np.random.default_rng(2).normal(size=(16, 16)).astype("float32"))

    def value_and_gradient(layer, training):
        def loss(x):
            y = layer(x, training=training) if isinstance(layer, LayerNorm) else layer(x)
            return ops.sum(y * weights), y
        return gradients_of(loss, ops.convert_to_tensor(x))

    expected = value_and_gradient(keras_, False)
    for training in (False, True):
        for a, b in zip(value_and_gradient(ours, training), expected):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5 * np.abs(b).max())


@pytest.mark.parametrize("kwargs", [{"rms_scaling": True}, {"center": False}, {"axis": 0}])
def test_other_layer_norms_are_keras_own(kwargs):
    ours, keras_ = pair(**kwargs)
    x = np.random.default_rng(1).normal(size=(16, 16)).astype("float32")
    np.testing.assert_allclose(to_numpy(ours(x, training=True)), to_numpy(keras_(x)), rtol=1e-6, atol=1e-6)


def test_mixed_precision_gives_the_compute_dtype():
    ours, keras_ = pair(dtype="mixed_bfloat16")
    x = np.random.default_rng(1).normal(size=(16, 16)).astype("float32")
    for training in (False, True):
        y = ours(x, training=training)
        assert keras.backend.standardize_dtype(y.dtype) == "bfloat16"
        np.testing.assert_allclose(to_numpy(ops.cast(y, "float32")), to_numpy(ops.cast(keras_(x), "float32")),
                                   rtol=1e-2, atol=1e-2)


@pytest.mark.skipif(keras.backend.backend() != "tensorflow", reason="the written-out gradient is TensorFlow's")
def test_training_graph_takes_the_written_out_gradient():
    import tensorflow as tf

    layer, _ = pair(epsilon=1e-12)

    @tf.function
    def step(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            loss = tf.reduce_sum(layer(x, training=True))
        return tape.gradient(loss, [x, *layer.trainable_variables])

    graph = step.get_concrete_function(tf.TensorSpec([None, 16])).graph
    names = [op.name for op in graph.get_operations()]
    assert any("layer_norm_gradient" in name for name in names)
    # 48 ops, where autodiff through Keras' LayerNorm (its moments) makes 116.
    assert len(names) < 60, len(names)
