import math

import keras
import numpy as np
import pytest

from kbert.layers import PositionEmbedding
from tests.helpers import rebuilt_from_config, to_numpy


def test_learned_positions_are_sliced_to_the_input_length():
    layer = PositionEmbedding(sequence_length=12)
    out = layer(np.zeros((2, 5, 8), "float32"))
    assert tuple(out.shape) == (5, 8)
    np.testing.assert_array_equal(to_numpy(out), to_numpy(layer.position_embeddings)[:5])


def test_sinusoidal_positions_follow_vaswani():
    out = to_numpy(PositionEmbedding(sequence_length=10, kind="sinusoidal")(np.zeros((1, 10, 6), "float32")))
    pos, i = 7, 2  # dimension 2i uses sin(pos / 10000^(2i/d)), 2i+1 the cosine
    assert math.isclose(out[pos, 2 * i], math.sin(pos / 10000 ** (2 * i / 6)), abs_tol=1e-6)
    assert math.isclose(out[pos, 2 * i + 1], math.cos(pos / 10000 ** (2 * i / 6)), abs_tol=1e-6)
    assert not PositionEmbedding(10, kind="sinusoidal").weights


@pytest.mark.parametrize("kind", ["learned", "sinusoidal"])
def test_a_layer_rebuilt_from_its_config_gives_the_same_positions(kind):
    # A seeded initializer draws the same table: a copy that lost the kind,
    # the length, the initializer or the dtype from its config gives other rows.
    layer = PositionEmbedding(16, kind=kind, initializer=keras.initializers.RandomNormal(seed=3), dtype="float16")
    copies = rebuilt_from_config(layer)
    x = np.zeros((2, 16, 6), "float32")  # every position
    for copy in copies:
        np.testing.assert_array_equal(to_numpy(copy(x)), to_numpy(layer(x)))


def test_unknown_kind_is_refused():
    try:
        PositionEmbedding(8, kind="rotary")
    except ValueError as e:
        assert "learned" in str(e)
    else:
        raise AssertionError("expected a ValueError")
