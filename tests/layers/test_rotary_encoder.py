import keras
import numpy as np
import pytest

from kbert.layers import RotaryEmbedding, RotaryEncoder
from kbert.layers.local_attention import attention_mask, banded_attention
from tests.helpers import output_and_weight_gradients, rebuilt_from_config, to_numpy

RNG = np.random.default_rng(0)
# The sizes of tests/families/test_modernbert.py (JAX compiles each op once per shape): a window of +-8.
HIDDEN, LENGTH = 32, 40
MASK = (np.arange(LENGTH)[None] < np.array([[LENGTH], [24], [3]])).astype("int32")


def built_encoder(**kwargs):
    layer = RotaryEncoder(num_heads=2, intermediate_dim=48, local_attention=16, **kwargs)
    layer.build((None, None, HIDDEN))
    return layer


def hidden_states():
    return RNG.normal(size=(3, LENGTH, HIDDEN)).astype("float32")


def softmax_attention(q, k, v, mask):
    logits = np.einsum("btnh,bsnh->bnts", q, k) / np.sqrt(q.shape[-1]) + np.where(to_numpy(mask), 0, -1e9)
    p = np.exp(logits - logits.max(-1, keepdims=True))
    return np.einsum("bnts,bsnh->btnh", p / p.sum(-1, keepdims=True), v)


@pytest.mark.parametrize("length", [3, 13, 29])
@pytest.mark.parametrize("masking", ["padding_mask", "sequence_ids"])
def test_banded_attention_equals_attention_masked_to_the_window(length, masking):
    q, k, v = (RNG.normal(size=(2, length, 2, 4)).astype("float32") for _ in range(3))
    cut = max(1, length // 2)
    masks = {"padding_mask": (np.arange(length)[None] < np.array([[length], [cut]])).astype("int32"),
             "sequence_ids": np.array([[1] * cut + [2] * (length - cut), [1] * cut + [0] * (length - cut)])}
    given = {masking: masks[masking]}
    expected = softmax_attention(q, k, v, attention_mask(length, 4, **given))
    got = to_numpy(banded_attention(q, k, v, 4, **given))
    real = masks["padding_mask"] > 0 if masking == "padding_mask" else np.ones((2, length), bool)
    np.testing.assert_allclose(got[real], expected[real], atol=1e-5)


def test_rotary_logits_depend_on_relative_positions_only():
    rotary = RotaryEmbedding(theta=10_000.0)
    q, k = RNG.normal(size=(2, 1, 1, 8)).astype("float32")
    def logit(i, j):
        positions = lambda p: np.array([[p]], "int32")
        return float(np.sum(to_numpy(rotary(q[None], positions(i))) * to_numpy(rotary(k[None], positions(j)))))
    np.testing.assert_allclose(logit(3, 1), logit(12, 10), rtol=1e-4)
    assert abs(logit(3, 1) - logit(3, 2)) > 1e-3


def test_a_local_layer_attends_within_its_window_only():
    layer = built_encoder()
    x = hidden_states()
    changed = x.copy()
    changed[0, 39] = RNG.normal(size=HIDDEN)  # past the window of tokens 0-30 (+-8)
    out, again = to_numpy(layer(x)), to_numpy(layer(changed))
    np.testing.assert_allclose(again[0, :31], out[0, :31], atol=1e-6)
    assert np.abs(again[0, 31:] - out[0, 31:]).max() > 1e-3
    glob = RotaryEncoder(num_heads=2, intermediate_dim=48)  # global: every token sees token 39
    assert np.abs(to_numpy(glob(changed))[0, 0] - to_numpy(glob(x))[0, 0]).max() > 1e-4


def test_blocks_and_the_full_mask_give_the_same_block_output():
    layer = built_encoder()
    x = hidden_states()
    blocked = to_numpy(layer(x, padding_mask=MASK))  # 40 > 3 * 8: in blocks
    full, scores = layer(x, padding_mask=MASK, return_attention_scores=True)
    np.testing.assert_allclose(blocked[MASK > 0], to_numpy(full)[MASK > 0], atol=1e-5)
    assert tuple(scores.shape) == (3, 2, LENGTH, LENGTH) and to_numpy(scores)[0, 0, 20, 0] == 0
    # Within the window (9 <= 8 + 1 tokens), a local layer attends as a global one.
    short, short_mask = x[:, :9], MASK[:, :9]
    fused = to_numpy(layer(short, padding_mask=short_mask))
    written_out, _ = layer(short, padding_mask=short_mask, return_attention_scores=True)
    np.testing.assert_allclose(fused, to_numpy(written_out), atol=1e-5)


def test_a_layer_rebuilt_from_its_config_computes_the_same_and_weights_are_named():
    layer = built_encoder(attention_norm=False, feedforward_bias=True, norm_bias=True, rotary_theta=160_000.0)
    x = hidden_states()
    for copy in rebuilt_from_config(layer):
        copy(x)
        copy.set_weights(layer.get_weights())
        np.testing.assert_allclose(to_numpy(copy(x)), to_numpy(layer(x)), atol=1e-6)
    names = [w.path.split("/", 1)[1] for w in layer.weights]
    assert "attention_layer_norm/gamma" not in names and "output/bias" in names and "query/bias" not in names
    assert "feedforward_layer_norm/beta" in names and "gate/kernel" in names


def test_local_attention_must_be_an_even_window():
    with pytest.raises(ValueError, match="local_attention=7: the window is an even number"):
        RotaryEncoder(num_heads=2, intermediate_dim=8, local_attention=7)


def test_blocks_and_the_full_mask_give_the_same_weight_gradients(monkeypatch):
    layer = built_encoder()
    # (13 tokens, forced into blocks and out of them: the backward pass compiles per shape on JAX.)
    x, mask = keras.ops.convert_to_tensor(hidden_states()[:, :13]), keras.ops.convert_to_tensor(MASK[:, :13])
    results = []
    for in_blocks in (True, False):
        monkeypatch.setattr(RotaryEncoder, "_in_blocks", staticmethod(lambda length, half, b=in_blocks: b))
        # (Padding's own outputs differ: a query with no key in its window attends evenly to what it is given.)
        real_outputs = lambda: layer(x, padding_mask=mask, training=True) * keras.ops.cast(mask, "float32")[..., None]
        results.append(output_and_weight_gradients(real_outputs, layer.trainable_variables))
    (blocked, blocked_grads), (full, full_grads) = results
    real = to_numpy(mask) > 0
    np.testing.assert_allclose(blocked[real], full[real], atol=1e-5)
    for got, expected in zip(blocked_grads, full_grads):
        np.testing.assert_allclose(got, expected, atol=1e-4)
