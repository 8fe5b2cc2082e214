import math

import numpy as np

from kbert.layers import PositionEmbedding
from tests.helpers import to_numpy


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


def test_config_round_trips():
    layer = PositionEmbedding(sequence_length=16, kind="sinusoidal", name="positions")
    clone = PositionEmbedding.from_config(layer.get_config())
    assert clone.get_config() == layer.get_config()


def test_unknown_kind_is_refused():
    try:
        PositionEmbedding(8, kind="rotary")
    except ValueError as e:
        assert "learned" in str(e)
    else:
        raise AssertionError("expected a ValueError")
