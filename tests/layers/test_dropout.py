import keras
import numpy as np
import pytest

from kbert.layers import Dropout
from tests.helpers import rebuilt_from_config, to_numpy


@pytest.mark.parametrize("rate", [0.1, 0.5])
def test_drops_the_rate_and_keeps_the_expected_value(rate):
    # 32 x 12 x 128 x 127 = 6.2M elements: the dropped fraction's standard
    # error is below 2e-4; an odd last axis uses half of the last draw.
    x = np.ones((32, 12, 128, 127), "float32")
    y = to_numpy(Dropout(rate)(x, training=True))
    assert abs((y == 0).mean() - rate) < 1e-3
    assert abs(y.mean() - 1) < 2e-3
    # JAX keeps Keras' dropout (exact rate); elsewhere the rate is in 1/65,536ths.
    exact = rate if keras.backend.backend() == "jax" else round(rate * 2**16) / 2**16
    np.testing.assert_allclose(np.unique(y), [0, 1 / (1 - exact)], rtol=1e-6)


def test_neighbouring_elements_are_independent():
    # Two elements share one 32-bit draw (four share a 64-bit one on
    # PyTorch); their masks must not correlate, in any of the four lanes.
    dropped = to_numpy(Dropout(0.5)(np.ones((64, 32, 256), "float32"), training=True)) == 0
    lanes = [dropped[..., lane::4].ravel() for lane in range(4)]
    for a in range(4):
        assert abs(lanes[a].mean() - 0.5) < 0.01
        for b in range(a + 1, 4):
            assert abs(np.corrcoef(lanes[a], lanes[b])[0, 1]) < 0.01
    rows = np.corrcoef(dropped[:, :-1].ravel(), dropped[:, 1:].ravel())[0, 1]
    assert abs(rows) < 0.01


def test_a_new_mask_each_call_and_none_outside_training():
    layer = Dropout(0.1)
    x = np.ones((4, 8, 64), "float32")
    first, second = to_numpy(layer(x, training=True)), to_numpy(layer(x, training=True))
    assert (first != second).mean() > 0.1
    np.testing.assert_array_equal(to_numpy(layer(x)), x)
    np.testing.assert_array_equal(to_numpy(Dropout(1.0)(x, training=True)), 0)


class _Weights(keras.layers.Layer):
    def build(self, shape):
        self.w = self.add_weight(shape=(shape[-1],), initializer="ones")

    def call(self, x):
        return x * self.w


def test_fit_draws_a_new_mask_at_every_step_and_in_every_layer():
    # Two dropouts at 0.5 over one weight vector, one step per epoch of SGD
    # at 1.0: the weights that moved are those both masks kept. A mask
    # repeated from step to step (a seed that a traced step does not
    # advance) or shared by the two layers shows in the shares.
    n = 8192
    inputs = keras.Input((n,))
    layer = _Weights()
    kept = Dropout(0.5)(Dropout(0.5)(layer(inputs)))
    model = keras.Model(inputs, keras.layers.Lambda(lambda t: keras.ops.sum(t, axis=-1, keepdims=True))(kept))
    model.compile(optimizer=keras.optimizers.SGD(1.0), loss=lambda _, y: keras.ops.mean(y))
    weights = [to_numpy(layer.w).copy()]
    # (Read at each epoch's end: JAX hands its weights back to the variables then.)
    record = keras.callbacks.LambdaCallback(on_epoch_end=lambda *_: weights.append(to_numpy(layer.w).copy()))
    model.fit(np.ones((1, n), "float32"), np.zeros((1, 1), "float32"), epochs=4, verbose=0, callbacks=[record])
    moved = np.array([before != after for before, after in zip(weights, weights[1:])])
    np.testing.assert_allclose(moved.mean(axis=1), 0.25, atol=0.025)  # kept by both: 0.5 x 0.5
    # Two independent masks keeping a quarter agree on 0.25^2 + 0.75^2 of the elements.
    np.testing.assert_allclose((moved[1:] == moved[:-1]).mean(axis=1), 0.625, atol=0.03)


def test_gradient_is_the_mask_times_the_scale():
    layer = Dropout(0.3)
    x = keras.ops.ones((8, 16, 32))
    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        with tf.GradientTape() as tape:
            tape.watch(x)
            y = layer(x, training=True)
        grad = tape.gradient(y, x)
    elif keras.backend.backend() == "torch":
        x.requires_grad_(True)
        y = layer(x, training=True)
        y.sum().backward()
        grad = x.grad
    else:
        import jax

        key_free = lambda x: layer(x, training=True)  # noqa: E731
        y, vjp = jax.vjp(key_free, x)
        (grad,) = vjp(keras.ops.ones_like(y))
    np.testing.assert_allclose(to_numpy(grad), to_numpy(y), rtol=1e-6)


def test_mixed_bfloat16_keeps_bfloat16(bfloat16):
    y = Dropout(0.1, dtype="mixed_bfloat16")(keras.ops.ones((4, 8, 16), dtype="bfloat16"), training=True)
    assert keras.backend.standardize_dtype(y.dtype) == "bfloat16"


def test_any_shape_and_unknown_dimensions_in_a_tensorflow_graph():
    layer = Dropout(0.5)
    for shape in [(3, 5, 7), (2, 1), (4, 6, 2, 9)]:
        y = to_numpy(layer(np.ones(shape, "float32"), training=True))
        assert y.shape == shape and set(np.unique(y)) <= {0.0, 2.0}
    if keras.backend.backend() == "tensorflow":  # the bitcast path with a dynamic last axis
        import tensorflow as tf

        spec = [tf.TensorSpec([None, None, None])]
        apply = tf.function(lambda x: layer(x, training=True), input_signature=spec)
        y = apply(tf.ones((3, 5, 7))).numpy()
        assert y.shape == (3, 5, 7) and 0 < (y == 0).sum() < y.size


@pytest.mark.parametrize("noise_shape", [None, (8, 1, 256)])
def test_a_layer_rebuilt_from_its_config_drops_the_same_elements(noise_shape):
    # Seeded layers draw the same first mask: a copy that lost the rate, the
    # seed, the noise shape or the dtype from its config drops other elements.
    layer = Dropout(0.3, noise_shape=noise_shape, seed=7, dtype="float16", name="drop")
    copies = rebuilt_from_config(layer)
    x = np.ones((8, 16, 256), "float32")
    expected = to_numpy(layer(x, training=True))
    assert expected.dtype == np.float16 and abs((expected == 0).mean() - 0.3) < 0.05
    for copy in copies:
        np.testing.assert_array_equal(to_numpy(copy(x, training=True)), expected)
        np.testing.assert_array_equal(to_numpy(copy(x)), x)


@pytest.mark.skipif(keras.backend.backend() == "jax", reason="on JAX the layer is Keras' dropout (no 16-bit mask)")
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_keep_mask_is_the_training_mask_without_its_scale(dtype):
    x = keras.ops.ones((3, 8, 64), dtype=dtype)
    policy = "mixed_bfloat16" if dtype == "bfloat16" else dtype
    y = Dropout(0.3, seed=7, dtype=policy)(x, training=True)
    mask, scale = Dropout(0.3, seed=7, dtype=policy).keep_mask(x)  # same seed: same bits
    assert keras.backend.standardize_dtype(mask.dtype) == dtype
    mask = to_numpy(keras.ops.cast(mask, "float32"))
    assert set(np.unique(mask)) == {0.0, 1.0}
    assert scale == 2**16 / (2**16 - round(0.3 * 2**16))
    np.testing.assert_allclose(to_numpy(keras.ops.cast(y, "float32")), mask * float(keras.ops.cast(scale, dtype)))
