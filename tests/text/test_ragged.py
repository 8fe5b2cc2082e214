import numpy as np
import pytest
import tensorflow as tf

from kbert.text import BertPreprocessor
from kbert.text.ragged import position_in_row, ranges, repeat, row_ids


def random_batches():
    """Ragged batches with empty rows, empty batches and both split dtypes."""
    rng = np.random.RandomState(0)
    for _ in range(200):
        lengths = rng.randint(0, 4, rng.randint(0, 6)) * (rng.rand(1) > 0.1)
        dtype = tf.int64 if rng.rand() < 0.5 else tf.int32
        values = rng.randint(0, 100, int(lengths.sum())).astype("int32")
        yield tf.RaggedTensor.from_row_lengths(values, tf.constant(lengths, dtype))


def test_row_ids_repeat_and_positions_equal_tensorflows_own():
    traced = tf.function(lambda r: (row_ids(r), position_in_row(r), repeat(tf.range(r.nrows()), r.row_lengths())),
                         autograph=False, reduce_retracing=True)
    for batch in random_batches():
        expected_positions = tf.concat([tf.range(n, dtype=tf.int64) for n in batch.row_lengths().numpy()]
                                       + [tf.zeros([0], tf.int64)], 0)
        for ids, positions, repeated in ((row_ids(batch), position_in_row(batch),
                                          repeat(tf.range(batch.nrows()), batch.row_lengths())), traced(batch)):
            assert ids.dtype == batch.row_splits.dtype
            np.testing.assert_array_equal(ids, batch.value_rowids())
            np.testing.assert_array_equal(positions, expected_positions)
            np.testing.assert_array_equal(repeated, tf.repeat(tf.range(batch.nrows()), batch.row_lengths()))
        np.testing.assert_array_equal(ranges(batch.row_lengths()).flat_values, expected_positions)


@pytest.mark.parametrize("pairs", [False, True])
def test_preprocessing_graph_stays_small(minilm_dir, pairs):
    # Each op is built in Python when a task's preprocessing is traced (the
    # first predict, every export); the general value_rowids and tf.repeat
    # took 50-75 ops each and made 780 of these (1,326 for pairs).
    preprocessor = BertPreprocessor.from_preset(minilm_dir, pad_to="bucket")
    spec = tf.TensorSpec([None], tf.string)
    specs = (spec, spec) if pairs else (spec,)
    graph = tf.function(lambda *texts: preprocessor(texts if pairs else texts[0]),
                        autograph=False).get_concrete_function(*specs).graph
    assert len(graph.get_operations()) < (800 if pairs else 500)
