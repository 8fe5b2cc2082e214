"""Refusing weights that would load without a word and answer wrong.

Shapes and names are checked where tensors are matched to variables; this
module checks the values. A tensor stored as int32 where a kernel is
expected would be cast to float, and one holding NaN makes every answer
NaN. Both are refused before anything is assigned, naming the tensor and
its file.

Every load pays for the check, so it is one vectorised `isfinite` pass
over each tensor (its cost: docs/benchmarks.md).
"""

import h5py
import ml_dtypes
import numpy as np

from kbert.presets.files import how_to_replace

# Optimizer state (its step count is an int) is no weight: a Keras weights
# file written by `save_weights` after `fit` holds it under this group.
_OPTIMIZER = "optimizer/"


def problem(name, value):
    """What makes the numpy array `value`, tensor `name`, unusable as a
    weight; None where it is a floating-point tensor of finite values."""
    if not (np.issubdtype(value.dtype, np.floating) or value.dtype == ml_dtypes.bfloat16):
        return f"tensor {name} holds {value.dtype} values; weights are floating point (float32, float16, bfloat16)"
    if not np.isfinite(value).all():
        bad = value.size - np.count_nonzero(np.isfinite(value))
        return f"tensor {name} holds {bad} NaN or infinite values (of {value.size})"
    return None


def check(problems, source):
    """Raises a ValueError listing `problems` (`problem`'s answers; None
    for a good tensor) of the weights read from `source`, if any."""
    problems = [p for p in problems if p]
    if problems:
        raise ValueError(
            f"The weights in {source} cannot be used:\n  " + "\n  ".join(problems)
            + f"\nThe file is damaged, or was saved from a model whose training diverged. {how_to_replace(source)}"
        )


def check_tensors(tensors, source):
    """Refuses `tensors` ({name: numpy array}) read from `source` unless
    each is a floating-point tensor of finite values."""
    check((problem(name, value) for name, value in tensors.items()), source)


def check_keras_file(path):
    """Refuses a Keras weights file (`.weights.h5`: a kbert preset's
    `model.weights.h5`, `task.weights.h5`) unless each weight in it is a
    floating-point tensor of finite values. It is read one tensor at a time,
    so that a large model is not held twice."""
    problems = []

    def visit(name, item):
        if isinstance(item, h5py.Dataset) and not name.startswith(_OPTIMIZER):
            problems.append(problem(name, item[()]))

    with h5py.File(path, "r") as f:
        f.visititems(visit)
    check(problems, path)
