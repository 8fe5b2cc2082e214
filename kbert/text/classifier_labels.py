"""A classifier's labels and answers by its problem type, named as Hugging
Face's `problem_type`:

- `single_label_classification`: one class id (or name) per text; softmax;
- `multi_label_classification`: multi-hot rows (or lists of names) per
  text; a sigmoid per class;
- `regression`: a number per text (or `num_classes` numbers); the logits
  are the scores.

Labels held in memory are checked before any training (`label_ids`), those
of a `tf.data` pipeline in the graph (`dataset_labels`)."""

import numpy as np

from kbert.text import pipeline
from kbert.tf_if_present import tf

SINGLE_LABEL = "single_label_classification"
MULTI_LABEL = "multi_label_classification"
REGRESSION = "regression"
PROBLEM_TYPES = (SINGLE_LABEL, MULTI_LABEL, REGRESSION)
# A regression score's activation on the logit (a cross-encoder's): None is none.
# (TensorFlow functions by name: read at use, so that the model path imports no TensorFlow.)
SCORE_ACTIVATIONS = {None: "identity", "sigmoid": "sigmoid", "tanh": "tanh"}


def problem_type(head):
    """The problem type of a classifier's settings (`Task.head_settings`)."""
    return (head or {}).get("problem_type") or SINGLE_LABEL


def class_names(head):
    """The names of a classifier's classes: its `class_names`, or the ids as strings."""
    head = head or {}
    return head.get("class_names") or [str(i) for i in range(head["num_classes"])]


def label_ids(y, head):
    """Labels held in memory as the model's targets: int32 class ids,
    float32 multi-hot rows `[n, num_classes]` or float32 scores `[n,
    num_classes]`, as the problem type says."""
    kind = problem_type(head)
    if kind == REGRESSION:
        return _scores(y, head["num_classes"], head.get("score_activation"))
    if kind == MULTI_LABEL:
        return _multi_hot(y, head)
    y = np.asarray(y)
    if y.dtype.kind in "USO":
        index = _class_index(head, [str(v) for v in y.flat])
        y = np.vectorize(index.__getitem__, otypes=["int32"])(y.astype(str))
    if y.ndim == 2 and y.shape[1] == head["num_classes"] > 1 and y.dtype.kind in "biuf":
        raise ValueError(
            f"The labels have shape {y.shape}: rows of {head['num_classes']} values, but this classifier takes one "
            "class id per text. For one-hot rows pass class ids (labels.argmax(axis=-1)); for multi-hot rows "
            "(several labels per text), build the model with problem_type=\"multi_label_classification\"."
        )
    return pipeline.class_ids(y, head["num_classes"])


def _scores(y, num_classes, activation):
    y = np.asarray(y)
    if y.ndim == 1 and num_classes == 1:
        y = y[:, None]
    if y.ndim != 2 or y.shape[1] != num_classes:
        raise ValueError(
            f"The labels have shape {y.shape}; this regression model takes {num_classes} number(s) per text "
            f"(shape [texts] or [texts, {num_classes}])."
        )
    if y.dtype.kind not in "biuf":
        raise ValueError(f"The labels are {y.dtype} values; a regression model takes numbers (e.g. scores 0.0-5.0).")
    y = y.astype("float32")
    bad = ~np.isfinite(y).all(axis=1)
    if bad.any():
        raise ValueError(f"Labels {np.flatnonzero(bad)[:5].tolist()} are NaN or infinite: a score must be a number.")
    if activation == "sigmoid" and not ((y >= 0) & (y <= 1)).all():
        raise ValueError(f"Got scores from {y.min():g} to {y.max():g}; with score_activation=\"sigmoid\" (a "
                         "cross-encoder's) scores are probabilities in [0, 1]: rescale them, e.g. / 5 for 0-5.")
    return y


def _multi_hot(y, head):
    num_classes = head["num_classes"]
    if isinstance(y, (list, tuple)) and y and all(isinstance(row, (list, tuple, set, frozenset)) for row in y) and \
            any(isinstance(v, str) for row in y for v in row):
        index = _class_index(head, [v for row in y for v in row])
        hot = np.zeros((len(y), num_classes), "float32")
        for i, row in enumerate(y):
            hot[i, [index[v] for v in row]] = 1.0
        return hot
    y = np.asarray(y)
    if y.ndim != 2 or y.shape[1] != num_classes or y.dtype.kind not in "biuf":
        raise ValueError(
            f"The labels have shape {y.shape} ({y.dtype}); this multi-label classifier takes a multi-hot row of "
            f"{num_classes} values in [0, 1] per text, or a list of class_names per text (e.g. [[\"joy\"], "
            "[\"anger\", \"fear\"], []])."
        )
    y = y.astype("float32")
    bad = ~((y >= 0) & (y <= 1)).all(axis=1)  # NaN too
    if bad.any():
        raise ValueError(f"Labels {np.flatnonzero(bad)[:5].tolist()} hold values outside [0, 1]: multi-hot rows "
                         "are 1 for each label of the text and 0 elsewhere.")
    return y


def dataset_labels(head):
    """Labels of a `tf.data` pipeline as targets, checked as labels held in
    memory are, in the graph: a bad label stops the pipeline with an error
    naming it."""
    head = head or {}
    num_classes, kind = head["num_classes"], problem_type(head)

    def labels(y):
        if kind != SINGLE_LABEL:
            if y.dtype == tf.string:
                raise ValueError(f"The dataset's labels are strings; a {kind} model takes numbers. Map them first, "
                                 "e.g. to multi-hot rows of 0 and 1.")
            y = tf.cast(y, tf.float32)
            if kind == REGRESSION and num_classes == 1 and y.shape.rank == 1:
                y = y[:, None]
            probabilities = kind == MULTI_LABEL or head.get("score_activation") == "sigmoid"
            good = tf.reduce_all((y >= 0) & (y <= 1) if probabilities else tf.math.is_finite(y))
            what = "values in [0, 1]" if probabilities else "numbers (no NaN or infinity)"
            check = tf.debugging.Assert(good, [f"Labels must be {what}; got", y], summarize=10)
            with tf.control_dependencies([check]):
                return tf.ensure_shape(tf.identity(y), [None, num_classes])
        if y.dtype == tf.string:
            known = tf.constant(_names_for_labels(head, "a string"))
            matches = tf.equal(y[..., None], known)
            found = tf.reduce_any(matches, axis=-1)
            check = tf.debugging.Assert(
                tf.reduce_all(found),
                ["Labels not among class_names", known, "got", tf.boolean_mask(y, tf.logical_not(found))],
                summarize=10,
            )
            with tf.control_dependencies([check]):
                return tf.argmax(tf.cast(matches, tf.int32), axis=-1, output_type=tf.int32)
        if y.shape.rank == 2 and y.shape[-1] == num_classes and num_classes > 1:
            raise ValueError(
                f"The dataset's labels have shape {y.shape}: rows of {num_classes} values, but this classifier "
                "takes one class id per text. Map one-hot rows to ids first: dataset.map(lambda x, y: (x, "
                "tf.argmax(y, axis=-1))); for multi-hot rows, build the model with "
                "problem_type=\"multi_label_classification\"."
            )
        values = tf.cast(y, tf.float64)
        good = tf.reduce_all((values == tf.round(values)) & (values >= 0) & (values < num_classes))
        check = tf.debugging.Assert(
            good, [f"Labels must be class ids, whole numbers in [0, {num_classes}); got", y], summarize=10)
        with tf.control_dependencies([check]):
            return tf.cast(y, tf.int32)

    return labels


def answers(logits, head):
    """What a classifier answers for its logits, by problem type:
    `label_id`, `label` and `probabilities` (softmax); `labels` (each class
    over the `threshold`, "" for the others, in class order) and
    `probabilities` (sigmoid); or `score` (regression, one class; after
    the `score_activation`)."""
    logits = tf.cast(logits, tf.float32)
    kind = problem_type(head)
    if kind == REGRESSION:
        scores = getattr(tf, SCORE_ACTIVATIONS[head.get("score_activation")])(logits)
        return {"score": scores[:, 0]} if head["num_classes"] == 1 else {"scores": scores}
    names = tf.constant(class_names(head))
    if kind == MULTI_LABEL:
        probabilities = tf.sigmoid(logits)
        chosen = probabilities > head.get("threshold", 0.5)
        return {"logits": logits, "probabilities": probabilities,
                "labels": tf.where(chosen, names[None, :], tf.constant(""))}
    label_id = tf.argmax(logits, axis=-1, output_type=tf.int32)
    return {"logits": logits, "probabilities": tf.nn.softmax(logits, axis=-1), "label_id": label_id,
            "label": tf.gather(names, label_id)}


def _class_index(head, labels):
    """`{name: class id}` of the model's `class_names`, every one of
    `labels` (names) checked to be among them."""
    names = _names_for_labels(head, next((v for v in labels if isinstance(v, str)), ""))
    unknown = sorted(set(labels) - set(names), key=str)
    if unknown:
        raise ValueError(f"Labels {unknown[:5]} are not among class_names {names}.")
    return {name: i for i, name in enumerate(names)}


def _names_for_labels(head, example):
    names = head.get("class_names")
    if not names:
        raise ValueError(
            f"The labels are strings (e.g. {example!r}); give the model class_names=[...] "
            "to map them, or pass label ids 0, 1, ..."
        )
    return names
