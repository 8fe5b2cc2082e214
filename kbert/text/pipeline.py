"""Raw input to batched `tf.data` pipelines, for the task models' `fit`,
`evaluate` and `predict`."""

import numpy as np
import tensorflow as tf


def text_tensor(x):
    """Raw text input as string tensors: a list or array of strings, or a
    tuple of two of them (sentence pairs)."""
    if isinstance(x, tuple):
        return tuple(text_tensor(v) for v in x)
    if isinstance(x, (str, bytes)):
        raise ValueError("Got a single string where a batch was expected; pass a list of strings: [text].")
    x = tf.constant(x if isinstance(x, (np.ndarray, tf.Tensor)) else list(x))
    if x.shape.rank and x.shape[0] == 0:
        raise ValueError("Got no texts: the data set is empty. Pass at least one example.")
    if x.dtype != tf.string:
        raise ValueError(f"Expected text (strings) as input, got {x.dtype.name} values.")
    return x


def map_batches(dataset, preprocess):
    """`dataset.map(preprocess)` in parallel, prefetched. The preprocessing is
    TensorFlow ops already, so autograph is off: it would only re-read (and
    re-convert) the Python source at every trace."""
    preprocess = tf.autograph.experimental.do_not_convert(preprocess)
    return dataset.map(preprocess, num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)


def take(x, order):
    """Rows `order` of raw input: texts, pairs of texts, labels or weights."""
    if x is None:
        return None
    if isinstance(x, tuple):
        return tuple(take(v, order) for v in x)
    return np.asarray(x)[order]


def steps(x, batch_size):
    if isinstance(x, tf.data.Dataset):
        return int(x.cardinality())
    if x is None:
        return None
    n = len(next(iter(x.values()))) if isinstance(x, dict) else len(x)
    return -(-n // (batch_size or 32))
