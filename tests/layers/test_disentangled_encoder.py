import keras
import numpy as np
import pytest
import torch
from transformers.models.deberta_v2 import modeling_deberta_v2

from kbert.layers import DisentangledEncoder, RelativeEmbedding
from kbert.layers.relative_embedding import relative_rows
from tests.helpers import to_numpy


@pytest.mark.parametrize("buckets, max_distance", [(256, 512), (8, 16), (6, 100), (0, 16)])
def test_relative_rows_are_transformers_log_buckets(buckets, max_distance):
    # Past the buckets' range as well: 700 tokens against DeBERTa-v3's 512.
    length = 700
    span = buckets or max_distance
    positions = torch.zeros(1, length, 1)
    theirs = modeling_deberta_v2.build_relative_position(positions, positions, bucket_size=buckets or -1,
                                                         max_position=max_distance)[0]
    expected = torch.clamp(theirs + span, 0, 2 * span - 1).numpy()  # the row c2p and p2c read
    np.testing.assert_array_equal(to_numpy(relative_rows(length, length, buckets, max_distance)), expected)
    first = to_numpy(relative_rows(1, length, buckets, max_distance))  # a first-token-only query
    np.testing.assert_array_equal(first, expected[:1])


@pytest.mark.skipif(keras.backend.backend() != "torch", reason="runs once, in the torch pass: argument checks")
def test_settings_transformers_cannot_have_are_refused():
    # (The block's outputs, its first-token-only path and packed rows are
    # tested against transformers through the backbone: tests/families/test_deberta_v2.py.)
    with pytest.raises(ValueError, match='position_attention=\\[\'c2c\'\\]: each of "c2p"'):
        DisentangledEncoder(num_heads=2, intermediate_dim=24, position_attention=["c2c"])
    with pytest.raises(ValueError, match="the log buckets need at least 4 buckets and a range past half of them"):
        DisentangledEncoder(num_heads=2, intermediate_dim=24, position_buckets=256, max_relative_positions=64)
    with pytest.raises(ValueError, match="span=0: half the rows of the relative-position table"):
        RelativeEmbedding(span=0)
