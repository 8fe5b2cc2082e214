"""Raw input to batched `tf.data` pipelines, for the task models' `fit`,
`evaluate` and `predict`: texts and labels checked in Python first, so that
wrong input fails at once, saying what to fix, on every backend (not after a
trace, buried in a graph error, or not at all)."""

import numpy as np

from kbert.tf_if_present import is_dataset, tf


def text_tensor(x, names=("texts_a", "texts_b")):
    """Raw text input as string tensors: a list or array of strings, or a
    tuple of two of them (sentence pairs: one text of each per example).
    `names` name the pair's two lists in errors."""
    if isinstance(x, tuple):
        if x and all(isinstance(v, (str, bytes)) for v in x):
            example = ", ".join(repr(v[:20]) for v in x[:2])
            raise ValueError(
                f"Got a tuple of {len(x)} strings ({example}): a tuple is read as a pair of lists, "
                f"({names[0]}, {names[1]}), one text of each per example. For {len(x)} separate texts pass a "
                f"list: [{example}]; for one pair of texts pass a tuple of two lists: ([{x[0][:20]!r}], "
                f"[{x[-1][:20]!r}])."
            )
        names = list(names) + [f"texts_{i}" for i in range(len(names), len(x))]
        texts = tuple(_strings(v, name) for v, name in zip(x, names))
        counts = [int(t.shape[0]) for t in texts]
        for i in range(1, len(counts)):
            if counts[i] != counts[0]:
                raise ValueError(
                    f"Got {counts[0]} {names[0]} but {counts[i]} {names[i]}: a pair takes one of each per example; "
                    "pass lists of the same length."
                )
        return texts
    return _strings(x, "texts")


def _strings(x, name):
    if isinstance(x, (str, bytes)):
        raise ValueError("Got a single string where a batch was expected; pass a list of strings: [text].")
    if not isinstance(x, (np.ndarray, tf.Tensor)):
        x = list(x)
    if isinstance(x, list) or (isinstance(x, np.ndarray) and x.dtype == object):
        # By index, before TensorFlow, which would only say "mixed types".
        for i, text in enumerate(x):
            if not isinstance(text, (str, bytes)):
                raise ValueError(
                    f"{name}[{i}] is {text!r} ({type(text).__name__}), not a string; every text must be a str. "
                    'Drop that example or give it a text (e.g. "").'
                )
    x = tf.constant(x)
    if x.shape.rank and x.shape[0] == 0:
        raise ValueError("Got no texts: the data set is empty. Pass at least one example.")
    if x.dtype != tf.string:
        raise ValueError(f"Expected text (strings) as input, got {x.dtype.name} values.")
    return x


def count_examples(x):
    """The number of examples in raw input held in memory: texts, word lists,
    or a tuple of two lists (pairs; questions and contexts). None for a
    dataset or a dict, which hold their own."""
    if isinstance(x, dict) or is_dataset(x) or x is None:
        return None
    if isinstance(x, tuple) and x and all(isinstance(v, (str, bytes)) for v in x):
        text_tensor(x)  # refuses a tuple of strings, saying that a tuple is a pair of lists
    return len(x[0]) if isinstance(x, tuple) else len(x)


def check_counts(x, y=None, sample_weight=None):
    """Refuses raw input whose texts, labels and sample weights differ in
    number (a dataset is left alone: it holds its own examples)."""
    n = count_examples(x)
    if n is None:
        return
    for values, what in ((y, "labels"), (sample_weight, "sample weights")):
        if values is not None and not isinstance(values, dict) and len(values) != n:
            raise ValueError(f"Got {n} texts but {len(values)} {what}; pass one per text, in the same order.")


def class_ids(labels, num_classes):
    """A sparse classifier's labels as int32 class ids, refused (saying how to
    fix them) unless each is one whole number in [0, num_classes): on some
    backends an id out of range trains silently on garbage."""
    y = np.asarray(labels)
    if y.ndim == 2 and y.shape[1] == 1:
        y = y[:, 0]
    if y.ndim == 2 and y.shape[1] == num_classes:
        raise ValueError(
            f"The labels have shape {y.shape}: one-hot rows of {num_classes} classes, but this classifier takes "
            "one class id per text. Pass class ids instead: labels.argmax(axis=-1)."
        )
    if y.ndim != 1:
        raise ValueError(f"The labels have shape {y.shape}; this classifier takes one class id per text (a 1-D list).")
    if y.dtype.kind not in "biuf":
        raise ValueError(f"The labels are {y.dtype} values; give class ids, integers in [0, {num_classes}).")
    # The errors give values, not positions: evaluate has sorted the
    # examples by length already.
    if y.dtype.kind == "f":
        fractions = ~np.isfinite(y) | (y != np.round(y))
        if fractions.any():
            raise ValueError(
                f"Got labels {_some(y[fractions])} ({fractions.sum()} of {len(y)}): labels are class ids, "
                f"whole numbers in [0, {num_classes}). Pass ints (1.0 is fine, 0.3 is not)."
            )
    outside = (y < 0) | (y >= num_classes)
    if outside.any():
        fix = "fix or drop those examples"
        if y.max() >= num_classes:
            fix += f", or build the model with num_classes={int(y.max()) + 1} if there are more classes"
        raise ValueError(
            f"Got labels {_some(y[outside])} ({outside.sum()} of {len(y)}), outside [0, {num_classes}) for "
            f"num_classes={num_classes}. Class ids run from 0 to {num_classes - 1}: {fix}."
        )
    return y.astype("int32")


def _some(values):
    """A few distinct values, for an error message."""
    distinct = np.unique(values)
    return ", ".join(f"{v:g}" for v in distinct[:5]) + (", ..." if len(distinct) > 5 else "")


def map_batches(dataset, preprocess):
    """`dataset.map(preprocess)` in parallel, prefetched. The preprocessing is
    TensorFlow ops already, so autograph is off: it would only re-read (and
    re-convert) the Python source at every trace."""
    preprocess = tf.autograph.experimental.do_not_convert(preprocess)
    return dataset.map(preprocess, num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)


def without_autotune(dataset):
    """`dataset` with tf.data's autotuning off: for the pipelines that kbert
    builds over input held in memory, whose preprocessing is a small share of
    a step, autotuned or not.

    Deleting an iterator waits for its autotuning thread, which wakes at
    periods that grow to seconds. Keras deletes one at the end of each `fit`
    (and makes the next epoch's after the last step), so a `fit` could stall
    for seconds at its end (docs/benchmarks.md, "Measurements behind the
    code")."""
    options = tf.data.Options()
    options.autotune.enabled = False
    return dataset.with_options(options)


def take(x, order):
    """Rows `order` of raw input: texts, pairs of texts, labels or weights."""
    if x is None:
        return None
    if isinstance(x, tuple):
        return tuple(take(v, order) for v in x)
    return np.asarray(x)[order]


def slices(parts, batch_size):
    """`parts` (a structure of tensors with the same number of rows),
    `batch_size` rows at a time."""
    count = int(tf.nest.flatten(parts)[0].shape[0])
    for start in range(0, count, batch_size):
        yield tf.nest.map_structure(lambda t: t[start:start + batch_size], parts)


def steps(x, batch_size):
    if is_dataset(x):
        return int(x.cardinality())
    if x is None:
        return None
    n = len(next(iter(x.values()))) if isinstance(x, dict) else len(x)
    return -(-n // (batch_size or 32))
