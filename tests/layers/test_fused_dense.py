import threading

import keras
import numpy as np
import pytest

from kbert.layers.fused_dense import fused_dense, weights_cast_once
from kbert.layers.gelu import gelu
from tests.helpers import to_numpy


def built_dense(units=24, dtype="float32", **kwargs):
    layer = keras.layers.Dense(units, dtype=dtype, bias_initializer="random_normal", **kwargs)
    layer.build((None, None, 16))
    return layer


@pytest.mark.parametrize("activation", [None, "gelu", "gelu_approximate"])
def test_equals_the_layer_then_the_activation(activation):
    layer = built_dense()
    x = np.random.default_rng(0).normal(size=(3, 5, 16)).astype("float32")
    expected = to_numpy(gelu(layer(x), activation) if activation else layer(x))
    np.testing.assert_allclose(to_numpy(fused_dense(layer, x, activation)), expected, atol=1e-5)


def test_mixed_bfloat16_multiplies_in_bfloat16(bfloat16):
    layer = built_dense(dtype="mixed_bfloat16")
    x = np.random.default_rng(1).normal(size=(2, 7, 16)).astype("float32")
    y = fused_dense(layer, x, "gelu")
    assert keras.backend.standardize_dtype(y.dtype) == "bfloat16"
    expected = to_numpy(keras.ops.cast(gelu(layer(x), "gelu"), "float32"))
    np.testing.assert_allclose(to_numpy(keras.ops.cast(y, "float32")), expected, atol=3e-2, rtol=2e-2)


def test_lora_is_kept_and_quantized_layers_are_called():
    layer = built_dense()
    layer.enable_lora(2)
    layer.lora_kernel_b.assign(np.random.default_rng(2).normal(size=(2, 24)).astype("float32"))
    x = np.random.default_rng(3).normal(size=(2, 4, 16)).astype("float32")
    np.testing.assert_allclose(to_numpy(fused_dense(layer, x)), to_numpy(layer(x)), atol=1e-5)

    quantized = built_dense()
    quantized.quantize("int8")
    np.testing.assert_allclose(to_numpy(fused_dense(quantized, x)), to_numpy(quantized(x)), atol=1e-6)


def test_any_leading_shape_and_unknown_dimensions_in_a_tensorflow_graph():
    layer = built_dense()
    for shape in [(4, 16), (2, 3, 16), (2, 2, 3, 16)]:
        x = np.random.default_rng(4).normal(size=shape).astype("float32")
        np.testing.assert_allclose(to_numpy(fused_dense(layer, x, "gelu")), to_numpy(gelu(layer(x), "gelu")),
                                   atol=1e-5)
    if keras.backend.backend() == "tensorflow":  # the 2-D reshape with unknown batch and length
        import tensorflow as tf

        spec = [tf.TensorSpec([None, None, 16])]
        apply = tf.function(lambda x: fused_dense(layer, x, "gelu"), input_signature=spec)
        np.testing.assert_allclose(apply(x[0]).numpy(), to_numpy(gelu(layer(x[0]), "gelu")), atol=1e-5)


def test_weights_cast_once_hold_in_the_exporting_thread_alone():
    # An export's stored weights replace the layer's in the thread that
    # exports; a model applied in another thread meanwhile reads its own.
    layer = built_dense()
    x = np.random.default_rng(2).normal(size=(2, 3, 16)).astype("float32")
    own = to_numpy(fused_dense(layer, x))
    zeros = (keras.ops.zeros(layer.kernel.shape), keras.ops.zeros(layer.bias.shape))
    elsewhere = []
    with weights_cast_once({layer: zeros}):
        assert not to_numpy(fused_dense(layer, x)).any()
        thread = threading.Thread(target=lambda: elsewhere.append(to_numpy(fused_dense(layer, x))))
        thread.start()
        thread.join()
    np.testing.assert_allclose(elsewhere[0], own, atol=1e-6)
    np.testing.assert_allclose(to_numpy(fused_dense(layer, x)), own, atol=1e-6)
