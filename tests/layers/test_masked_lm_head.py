import keras
import numpy as np

from kbert.layers import MaskedLMHead
from tests.helpers import to_numpy


def erf_gelu(x):
    from math import erf

    return x * 0.5 * (1.0 + np.vectorize(erf)(x / np.sqrt(2.0)))


def test_logits_at_mask_positions_use_the_tied_embedding():
    embedding = keras.layers.Embedding(30, 8)
    embedding.build((None,))
    head = MaskedLMHead(token_embedding=embedding, layer_norm_epsilon=1e-12)
    x = np.random.default_rng(0).normal(size=(2, 5, 8)).astype("float32")
    positions = np.array([[1, 4], [0, 0]], "int32")
    logits = to_numpy(head(x, mask_positions=positions))
    assert logits.shape == (2, 2, 30)

    # The same computation in numpy: gather, dense, GELU, LayerNorm, E^T + b.
    kernel, bias = to_numpy(head.transform.kernel), to_numpy(head.transform.bias)
    h = erf_gelu(x[[0, 0, 1, 1], [1, 4, 0, 0]] @ kernel + bias)
    h = (h - h.mean(-1, keepdims=True)) / np.sqrt(h.var(-1, keepdims=True) + 1e-12)
    expected = h @ to_numpy(embedding.embeddings).T + to_numpy(head.bias)
    np.testing.assert_allclose(logits.reshape(4, 30), expected, atol=1e-4)
    # Tied: the only vocabulary-by-hidden matrix the head holds is the embedding itself.
    assert [w for w in head.weights if tuple(w.shape) == (30, 8)] == [embedding.embeddings]


def test_untied_head_learns_its_own_projection_and_round_trips_config():
    head = MaskedLMHead(vocabulary_size=20, name="mlm")
    out = head(np.zeros((1, 3, 4), "float32"), mask_positions=np.array([[2]]))
    assert tuple(out.shape) == (1, 1, 20)
    clone = MaskedLMHead.from_config(head.get_config())
    assert clone.get_config() == head.get_config()
