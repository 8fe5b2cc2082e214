import keras
import numpy as np

from kbert.layers import MaskedLMHead
from tests.helpers import rebuilt_from_config, to_numpy


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


def test_untied_head_learns_its_own_projection():
    head = MaskedLMHead(vocabulary_size=20)
    out = head(np.zeros((1, 3, 4), "float32"), mask_positions=np.array([[2]]))
    assert tuple(out.shape) == (1, 1, 20)
    assert [tuple(w.shape) for w in head.weights if w.path.endswith("output_embeddings")] == [(20, 4)]


def test_a_head_rebuilt_from_its_config_gives_the_same_logits():
    # Every setting differs from its default: a copy that lost one from the
    # config initializes its transform or computes the logits differently.
    head = MaskedLMHead(
        vocabulary_size=20, activation="gelu_approximate", layer_norm_epsilon=0.5,
        kernel_initializer=keras.initializers.RandomNormal(seed=3), dtype="float16",
    )
    rng = np.random.default_rng(0)
    x, positions = rng.normal(size=(2, 5, 4)), np.array([[1, 4], [0, 2]], "int32")
    copies = rebuilt_from_config(head)
    for layer in [head, *copies]:
        layer(x, mask_positions=positions)  # builds
    for copy in copies:
        for ours, theirs in zip(copy.get_weights(), head.get_weights(), strict=True):
            np.testing.assert_array_equal(ours, theirs)
    weights = [rng.normal(size=w.shape) for w in head.get_weights()]
    for layer in [head, *copies]:
        layer.set_weights(weights)
    for copy in copies:
        np.testing.assert_array_equal(to_numpy(copy(x, positions)), to_numpy(head(x, positions)))
