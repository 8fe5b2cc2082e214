import keras
import numpy as np
import pytest

from kbert import backend
from kbert.layers import TransformerEncoder
from tests.helpers import output_and_weight_gradients, rebuilt_from_config, to_numpy


def built_encoder(**kwargs):
    layer = TransformerEncoder(num_heads=4, intermediate_dim=24, dropout=0.0, **kwargs)
    layer.build((None, None, 16))
    return layer


def test_fused_attention_equals_explicit_softmax_attention():
    layer = built_encoder()
    x = np.random.default_rng(0).normal(size=(2, 6, 16)).astype("float32")
    mask = np.array([[1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1]], "int32")
    fused = to_numpy(layer(x, padding_mask=mask))
    explicit, scores = layer(x, padding_mask=mask, return_attention_scores=True)
    np.testing.assert_allclose(fused, to_numpy(explicit), atol=1e-5)
    assert tuple(scores.shape) == (2, 4, 6, 6)


@pytest.mark.parametrize("masking", ["padding_mask", "sequence_ids"])
def test_attention_written_out_equals_keras_dot_product_attention(monkeypatch, masking):
    # TensorFlow's inference takes the written-out path (backend.fuses_attention).
    layer = built_encoder()
    x = np.random.default_rng(0).normal(size=(2, 7, 16)).astype("float32")
    masks = {"padding_mask": np.array([[1] * 5 + [0] * 2, [1] * 7], "int32"),
             "sequence_ids": np.array([[1, 1, 1, 2, 2, 0, 0], [1, 1, 2, 2, 2, 3, 3]], "int32")}
    keras_attention, written_out = [], []
    for fuses, outputs in ((True, keras_attention), (False, written_out)):
        monkeypatch.setattr(backend._current(), "fuses_attention", lambda dropout=False, fuses=fuses: fuses)
        outputs.append(to_numpy(layer(x, **{masking: masks[masking]})))
    np.testing.assert_allclose(written_out[0], keras_attention[0], rtol=1e-5, atol=1e-5)


@pytest.mark.skipif(keras.backend.backend() == "jax", reason="JAX casts bfloat16 logits to float32")
def test_inference_attention_in_bfloat16_equals_the_float32_softmax(monkeypatch, bfloat16):
    if not backend.exact_bfloat16_softmax(with_gradient=False):
        pytest.skip("this machine's softmax of bfloat16 logits is not exact: they are cast to float32")
    layer = built_encoder(dtype="mixed_bfloat16")
    x = np.random.default_rng(5).normal(size=(2, 9, 16)).astype("float32")
    mask = np.array([[1] * 6 + [0] * 3, [1] * 9], "int32")
    monkeypatch.setattr(backend._current(), "fuses_attention", lambda dropout=False: False)
    taken_as_is = to_numpy(keras.ops.cast(layer(x, padding_mask=mask), "float32"))
    monkeypatch.setattr(TransformerEncoder, "_bfloat16_softmax_is_exact", staticmethod(lambda logits, training: False))
    cast_to_float32 = to_numpy(keras.ops.cast(layer(x, padding_mask=mask), "float32"))
    np.testing.assert_array_equal(taken_as_is, cast_to_float32)


@pytest.mark.skipif(keras.backend.backend() != "torch", reason="the bfloat16 softmax is taken as is on PyTorch only")
def test_training_attention_in_bfloat16_equals_the_float32_softmax(monkeypatch, bfloat16):
    layer = built_encoder(dtype="mixed_bfloat16")
    monkeypatch.setattr(backend._current(), "fuses_attention", lambda dropout=False: False)  # written out
    layer.dropout = 0.1  # the training path with probabilities and dropout ...
    layer.attention_dropout.rate = layer.residual_dropout.rate = 0.0  # ... whose masks are identities here
    x = keras.ops.convert_to_tensor(np.random.default_rng(5).normal(size=(2, 9, 16)).astype("float32"))
    mask = np.array([[1] * 6 + [0] * 3, [1] * 9], "int32")

    def output_and_input_gradient():
        inputs = x.clone().requires_grad_()
        y = layer(inputs, padding_mask=mask, training=True)
        (y.float() * keras.ops.arange(16, dtype="float32")).sum().backward()
        return to_numpy(keras.ops.cast(y, "float32")), to_numpy(inputs.grad)

    taken_as_is = output_and_input_gradient()
    monkeypatch.setattr(TransformerEncoder, "_bfloat16_softmax_is_exact", staticmethod(lambda logits, training: False))
    cast_to_float32 = output_and_input_gradient()
    np.testing.assert_array_equal(taken_as_is[0], cast_to_float32[0])  # the same probabilities
    # The softmax's backward reads the probabilities rounded to bfloat16
    # instead of float32: gradients agree to bfloat16's precision.
    scale = np.abs(cast_to_float32[1]).max()
    np.testing.assert_allclose(taken_as_is[1], cast_to_float32[1], rtol=2e-2, atol=2e-2 * scale)


@pytest.mark.skipif(keras.backend.backend() != "tensorflow", reason="inspects a TensorFlow graph")
def test_tensorflow_takes_a_softmax_gradient_in_float32_only(bfloat16):
    import tensorflow as tf

    layer = TransformerEncoder(num_heads=4, intermediate_dim=24, dropout=0.1, dtype="mixed_bfloat16")
    x = tf.random.stateless_normal((2, 9, 16), seed=(0, 1))

    def softmax_dtypes(training):
        graph = tf.function(lambda x: layer(x, training=training)).get_concrete_function(x).graph
        return {op.get_attr("T").name for op in graph.get_operations() if op.type == "Softmax"}

    assert softmax_dtypes(training=True) == {"float32"}
    as_is = backend.exact_bfloat16_softmax(with_gradient=False)
    assert softmax_dtypes(training=False) == {"bfloat16" if as_is else "float32"}


class FixedDropout(keras.layers.Layer):
    """Dropout with a given mask and scale, applied as the layer's call."""

    def __init__(self, mask, scale):
        super().__init__()
        self.mask, self.scale, self.rate = mask, scale, 1 - 1 / scale

    def draws_its_own_mask(self):
        return False

    def call(self, probs, training=False):
        return probs * keras.ops.convert_to_tensor(self.mask) * self.scale


@pytest.mark.skipif(keras.backend.backend() != "torch", reason="the attention dropout's scale moves to the values on PyTorch only")
def test_attention_dropout_scaling_the_values_equals_scaling_the_probabilities(monkeypatch):
    layer = built_encoder()
    monkeypatch.setattr(backend._current(), "fuses_attention", lambda dropout=False: False)  # written out
    layer.dropout = layer.attention_dropout.rate = 0.5  # the training path, with attention dropout ...
    layer.residual_dropout.rate = 0.0  # ... only
    x = np.random.default_rng(6).normal(size=(2, 5, 16)).astype("float32")
    padding = np.array([[1, 1, 1, 0, 0], [1] * 5], "int32")
    mask = (np.random.default_rng(7).random((2, 4, 5, 5)) > 0.5).astype("float32")

    def output_and_gradient():
        inputs = keras.ops.convert_to_tensor(x).requires_grad_()
        y = layer(inputs, padding_mask=padding, training=True)
        (y * keras.ops.arange(16, dtype="float32")).sum().backward()
        return to_numpy(y), to_numpy(inputs.grad)

    monkeypatch.setattr(layer.attention_dropout, "keep_mask", lambda probs: (keras.ops.convert_to_tensor(mask), 2.0))
    on_the_values = output_and_gradient()
    # (Past Keras' tracking, which locks a built layer.)
    object.__setattr__(layer, "attention_dropout", FixedDropout(mask, 2.0))
    on_the_probabilities = output_and_gradient()
    for a, b in zip(on_the_values, on_the_probabilities):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    # And the mask did drop something: without it the output differs.
    object.__setattr__(layer, "attention_dropout", FixedDropout(np.ones_like(mask), 1.0))
    assert np.abs(output_and_gradient()[0] - on_the_values[0]).max() > 1e-2


@pytest.mark.skipif(keras.backend.backend() != "torch", reason="the residual's dropout and add are one op on PyTorch only")
def test_residual_dropout_as_one_op_equals_dropout_then_add(monkeypatch):
    layer = built_encoder()
    layer.dropout = layer.residual_dropout.rate = 0.5  # the training path, with residual dropout only
    x = np.random.default_rng(8).normal(size=(2, 5, 16)).astype("float32")
    # (The block's residuals are its flat activations, [batch * length, hidden].)
    mask = (np.random.default_rng(9).random((2 * 5, 16)) > 0.5).astype("float32")

    def output_and_gradient():
        inputs = keras.ops.convert_to_tensor(x).requires_grad_()
        y = layer(inputs, training=True)
        (y * keras.ops.arange(16, dtype="float32")).sum().backward()
        return to_numpy(y), to_numpy(inputs.grad)

    monkeypatch.setattr(layer.residual_dropout, "keep_mask", lambda h: (keras.ops.convert_to_tensor(mask), 2.0))
    one_op = output_and_gradient()
    object.__setattr__(layer, "residual_dropout", FixedDropout(mask, 2.0))
    for a, b in zip(one_op, output_and_gradient()):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    object.__setattr__(layer, "residual_dropout", FixedDropout(np.ones_like(mask), 1.0))
    assert np.abs(output_and_gradient()[0] - one_op[0]).max() > 1e-2


def test_first_token_only_equals_the_first_row_of_the_whole_output():
    layer = built_encoder()
    x = np.random.default_rng(4).normal(size=(2, 7, 16)).astype("float32")
    mask = np.array([[1, 1, 1, 1, 1, 0, 0], [1] * 7], "int32")
    whole = to_numpy(layer(x, padding_mask=mask))
    first = to_numpy(layer(x, padding_mask=mask, first_token_only=True))
    assert first.shape == (2, 1, 16)
    np.testing.assert_allclose(first, whole[:, :1], atol=1e-5)
    # The explicit-softmax path (attention probabilities requested) agrees too.
    explicit, scores = layer(x, padding_mask=mask, first_token_only=True, return_attention_scores=True)
    np.testing.assert_allclose(to_numpy(explicit), whole[:, :1], atol=1e-5)
    assert tuple(scores.shape) == (2, 4, 1, 7)


@pytest.mark.parametrize("masking", ["padding_mask", "sequence_ids"])
def test_first_token_only_has_the_first_rows_values_and_weight_gradients_in_training(masking):
    layer = built_encoder()
    x = np.random.default_rng(5).normal(size=(3, 7, 16)).astype("float32")
    masks = {"padding_mask": np.array([[1] * 4 + [0] * 3, [1] * 7, [1] * 2 + [0] * 5], "int32"),
             "sequence_ids": np.array([[1, 1, 1, 2, 2, 0, 0], [1, 2, 2, 2, 2, 3, 3], [1] * 7], "int32")}
    mask = {masking: masks[masking]}
    whole, whole_grads = output_and_weight_gradients(
        lambda: layer(x, training=True, **mask)[:, :1], layer.trainable_variables)
    first, first_grads = output_and_weight_gradients(
        lambda: layer(x, training=True, first_token_only=True, **mask), layer.trainable_variables)
    np.testing.assert_allclose(first, whole, atol=1e-5)
    assert len(first_grads) == 16
    for variable, a, b in zip(layer.trainable_variables, first_grads, whole_grads):
        np.testing.assert_allclose(a, b, atol=1e-5, err_msg=variable.path)
    assert np.abs(first_grads[0]).max() > 1e-3  # (the query kernel's gradient is not trivially zero)


def test_padded_keys_do_not_change_real_outputs():
    layer = built_encoder()
    x = np.random.default_rng(1).normal(size=(1, 4, 16)).astype("float32")
    noise = np.random.default_rng(2).normal(size=(1, 3, 16)).astype("float32")
    padded = np.concatenate([x, noise], axis=1)
    mask = np.array([[1, 1, 1, 1, 0, 0, 0]], "int32")
    np.testing.assert_allclose(
        to_numpy(layer(x))[:, :4], to_numpy(layer(padded, padding_mask=mask))[:, :4], atol=1e-5
    )


def test_feed_forward_uses_exact_erf_gelu():
    layer = built_encoder()
    x = np.random.default_rng(3).normal(size=(1, 3, 16)).astype("float32")
    approximate = built_encoder(activation="gelu_approximate")
    approximate.set_weights(layer.get_weights())
    assert np.abs(to_numpy(layer(x)) - to_numpy(approximate(x))).max() > 1e-6


def test_hidden_size_must_divide_into_heads():
    with pytest.raises(ValueError, match="not divisible by num_heads=4"):
        TransformerEncoder(num_heads=4, intermediate_dim=8).build((None, None, 18))


def test_a_layer_rebuilt_from_its_config_computes_the_same_and_weights_are_named():
    layer = TransformerEncoder(num_heads=4, intermediate_dim=24, dropout=0.0, activation="gelu_approximate",
                               layer_norm_epsilon=0.5, name="block")
    x = np.random.default_rng(0).normal(size=(2, 5, 16)).astype("float32")
    mask = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], "int32")
    expected = to_numpy(layer(x, padding_mask=mask))
    for clone in rebuilt_from_config(layer):
        clone(x, padding_mask=mask)
        clone.set_weights(layer.get_weights())
        np.testing.assert_allclose(to_numpy(clone(x, padding_mask=mask)), expected, atol=1e-6)
    names = {w.path for w in layer.weights}
    assert {"block/query/kernel", "block/attention_layer_norm/gamma", "block/output/kernel"} <= names


def test_dropout_is_active_only_in_training():
    layer = TransformerEncoder(num_heads=2, intermediate_dim=8, dropout=0.5)
    x = np.ones((2, 5, 8), "float32")
    np.testing.assert_array_equal(to_numpy(layer(x)), to_numpy(layer(x)))
    assert np.abs(to_numpy(layer(x, training=True)) - to_numpy(layer(x))).max() > 1e-3


@pytest.mark.skipif(keras.backend.backend() != "tensorflow", reason="inspects a TensorFlow graph")
@pytest.mark.parametrize("training", [False, True])
def test_tensorflow_scales_and_masks_the_logits_in_the_matmul_in_inference(training):
    # oneDNN's Grappler pass fuses BatchMatMulV2 -> Mul by a scalar -> AddV2
    # of a [batch, 1, ., length] mask into one `_MklFusedBatchMatMulV2`. In
    # training the queries are scaled instead: the Mul's backward would be a
    # pass over [batch, heads, length, length], the queries' is 1/heads of it.
    import tensorflow as tf

    layer = TransformerEncoder(num_heads=4, intermediate_dim=24, dropout=0.1)
    x = tf.TensorSpec((None, None, 16), tf.float32)
    mask = tf.TensorSpec((None, None), tf.int32)
    graph = tf.function(lambda x, mask: layer(x, padding_mask=mask, training=training)).get_concrete_function(
        x, mask).graph
    logits = [op for op in graph.get_operations() if op.type == "BatchMatMulV2"][0]  # then the context's
    consumer = logits.outputs[0].consumers()
    if training:
        assert [op.type for op in consumer] != ["Mul"]
        return
    assert [op.type for op in consumer] == ["Mul"]
    (scale,) = [t for t in consumer[0].inputs if t is not logits.outputs[0]]
    assert scale.shape.rank == 0
    (add,) = consumer[0].outputs[0].consumers()
    assert add.type == "AddV2"
    (bias,) = [t for t in add.inputs if t is not consumer[0].outputs[0]]
    assert bias.shape.rank == 4 and bias.shape[1] == 1
