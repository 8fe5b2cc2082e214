import keras
import numpy as np
import pytest
from keras import ops

from kbert import backend
from kbert.layers import TransformerEncoder
from tests.helpers import output_and_weight_gradients, to_numpy

BACKEND = keras.backend.backend()


def written_out_attention(q, k, v, mask):
    logits = ops.einsum("btnh,bsnh->bnts", q, k) * q.shape[-1] ** -0.5
    logits = logits + ops.where(mask, 0.0, -1e9)
    return ops.einsum("bnts,bsnh->btnh", ops.softmax(logits, axis=-1), v)


@pytest.mark.parametrize("masking", ["padding", "sequence_ids"])
def test_attention_without_dropout_has_the_written_out_values_and_gradients(masking):
    rng = np.random.default_rng(0)
    q, k, v = (keras.Variable(rng.normal(size=(2, 6, 3, 4)).astype("float32")) for _ in range(3))
    if masking == "padding":
        mask = np.array([[1, 1, 1, 1, 0, 0], [1] * 6], bool)[:, None, None, :]
    else:
        ids = np.array([[1, 1, 2, 2, 2, 0], [1, 1, 1, 1, 2, 2]])
        mask = (ids[:, :, None] == ids[:, None, :])[:, None]
    mask = ops.convert_to_tensor(mask)

    def run(attention):
        return output_and_weight_gradients(lambda: attention(*(ops.convert_to_tensor(t) for t in (q, k, v)), mask),
                                           [q, k, v])

    fused, fused_grads = run(backend.attention)
    written, written_grads = run(written_out_attention)
    np.testing.assert_allclose(fused, written, rtol=1e-5, atol=1e-5)
    for a, b in zip(fused_grads, written_grads):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


@pytest.mark.skipif(BACKEND != "torch", reason="PyTorch's fused attention alone takes a dropout rate")
@pytest.mark.parametrize("rate", [0.1, 0.5])
def test_attention_dropout_drops_the_rate_of_probabilities_and_scales_the_kept(rate):
    # Queries of zeros: each query's probabilities are 1/20 on its 20 real
    # keys. Values one-hot by key: the output is then the probabilities
    # themselves, 0 where dropped and 1/20/(1-rate) where kept.
    batch, heads, length, real = 4, 4, 32, 20
    q = ops.zeros((batch, length, heads, length))
    v = ops.broadcast_to(ops.eye(length)[None, :, None, :], (batch, length, heads, length))
    mask = ops.convert_to_tensor(np.arange(length) < real)[None, None, None, :]
    keras.utils.set_random_seed(1)
    probs = to_numpy(backend.attention(q, q, v, mask, dropout_rate=rate))
    assert np.all(probs[..., real:] == 0)  # padding never attended to
    kept = probs[..., :real] != 0
    # 10,240 probabilities: the dropped fraction's standard deviation is
    # below 0.005, so 0.02 fails a wrong rate, not an unlucky draw.
    assert abs(1 - kept.mean() - rate) < 0.02
    np.testing.assert_allclose(probs[..., :real][kept], 1 / real / (1 - rate), rtol=1e-6)
    again = to_numpy(backend.attention(q, q, v, mask, dropout_rate=rate))
    assert not np.array_equal(again, probs)  # a new mask per call


def test_default_attention_refuses_a_dropout_rate():
    from kbert.backend import default

    q = ops.zeros((1, 2, 1, 4))
    with pytest.raises(ValueError, match="has no dropout"):
        default.attention(q, q, q, None, dropout_rate=0.1)


def test_training_attention_fused_without_dropout_equals_it_written_out(monkeypatch):
    layer = TransformerEncoder(num_heads=4, intermediate_dim=24, dropout=0.0)
    layer.build((None, None, 16))
    x = np.random.default_rng(2).normal(size=(2, 7, 16)).astype("float32")
    mask = np.array([[1] * 5 + [0] * 2, [1] * 7], "int32")
    runs = []
    for fuses in (True, False):
        monkeypatch.setattr(backend._current(), "fuses_attention", lambda dropout=False, fuses=fuses: fuses)
        runs.append(output_and_weight_gradients(lambda: layer(x, padding_mask=mask, training=True),
                                                layer.trainable_variables))
    (fused, fused_grads), (written, written_grads) = runs
    np.testing.assert_allclose(fused, written, rtol=1e-5, atol=1e-5)
    for variable, a, b in zip(layer.trainable_variables, fused_grads, written_grads):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5, err_msg=variable.path)
    assert len(fused_grads) == 16 and np.abs(fused_grads[0]).max() > 1e-3  # (the query kernel's)


@pytest.mark.skipif(BACKEND != "torch", reason="PyTorch's fused attention alone takes a dropout rate")
def test_training_with_attention_dropout_runs_fused_where_the_backend_fuses_it(monkeypatch):
    rates = []
    fused_attention = backend._current().attention
    monkeypatch.setattr(backend._current(), "fuses_attention", lambda dropout=False: True)  # as on a GPU
    monkeypatch.setattr(backend._current(), "attention",
                        lambda *args: rates.append(args[-1]) or fused_attention(*args))
    layer = TransformerEncoder(num_heads=2, intermediate_dim=8, dropout=0.1)
    x = np.ones((2, 5, 8), "float32")
    layer(x, training=True)
    layer(x)
    assert rates == [0.1, 0.0]
