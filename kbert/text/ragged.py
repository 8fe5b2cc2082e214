"""Row ids, repeats and positions of ragged batches, in a few graph ops each.

`RaggedTensor.value_rowids()` and `tf.repeat` are general (any axis,
broadcasting, checks) and put 50-75 ops each into a graph; the text pipelines
call them a dozen times per batch, so tracing a task's preprocessing (every
first `predict`, every export) spent nearly half its time building them. Here
each is one binary search and a gather over the row splits, with the same
results.

Example:
>>> ragged = tf.ragged.constant([[5, 6], [], [7]], row_splits_dtype=tf.int64)
>>> row_ids(ragged)
<tf.Tensor: shape=(3,), dtype=int64, numpy=array([0, 0, 2])>
>>> position_in_row(ragged)
<tf.Tensor: shape=(3,), dtype=int64, numpy=array([0, 1, 0])>
"""

from kbert.tf_if_present import tf


def row_ids_of_splits(row_splits):
    """The row of each value of a ragged tensor with these row splits, as
    `value_rowids()` gives it (the splits' dtype)."""
    values = tf.range(row_splits[-1], dtype=row_splits.dtype)
    # The row of value i is the number of row ends at or before i.
    return tf.raw_ops.UpperBound(sorted_inputs=row_splits[None, 1:], values=values[None],
                                 out_type=row_splits.dtype)[0]


def row_ids(ragged):
    """`ragged.value_rowids()`: the row of each value of `ragged`'s outer dimension."""
    return row_ids_of_splits(ragged.row_splits)


def repeat(values, lengths):
    """`tf.repeat(values, lengths)` along the first axis: row `i` of `values`
    `lengths[i]` times."""
    return tf.gather(values, row_ids_of_splits(_row_splits(lengths)))


def position_in_row(ragged):
    """Each value's index within its row of `ragged` (one ragged dimension),
    int64."""
    return _positions(tf.cast(ragged.row_splits, tf.int64))


def ranges(lengths):
    """`tf.ragged.range(lengths)` (row `i` is `0 .. lengths[i] - 1`), int64,
    built without checking the row lengths it made itself: each check is a
    branch that tf.data instantiates again with every iterator."""
    row_splits = _row_splits(lengths)
    return tf.RaggedTensor.from_row_splits(_positions(row_splits), row_splits, validate=False)


def _positions(row_splits):
    """Each value's index within its row, from int64 row splits."""
    return tf.range(row_splits[-1]) - tf.gather(row_splits, row_ids_of_splits(row_splits))


def _row_splits(lengths):
    """Int64 row splits of rows of these lengths."""
    return tf.concat([tf.zeros([1], tf.int64), tf.cumsum(tf.cast(lengths, tf.int64))], 0)


def merge_rows(ragged, row_splits):
    """Concatenates the rows of `ragged` that `row_splits` groups together
    (valid row splits of valid row splits: nothing to check)."""
    return tf.RaggedTensor.from_row_splits(ragged.values, tf.gather(ragged.row_splits, row_splits), validate=False)
