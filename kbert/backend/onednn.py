"""Whether TensorFlow runs its oneDNN CPU kernels, and a word where it does not.

TensorFlow reads `TF_ENABLE_ONEDNN_OPTS` once, as it loads; `kbert/__init__.py`
sets it to "1" where kbert loads TensorFlow first and the user has not chosen.
This module is for the other case, TensorFlow loaded before kbert.
"""

import os
import warnings

from kbert.backend import keras_private


def tensorflow_runs_onednn():
    """Whether the loaded TensorFlow runs its oneDNN kernels; None where it
    can't be told (its private `IsMklEnabled`, TensorFlow 2.x, is missing)."""
    if not keras_private.available("IsMklEnabled"):
        return None
    return bool(keras_private.get("IsMklEnabled")())


def warn_if_tensorflow_runs_without_onednn():
    """Says how to turn the oneDNN kernels on where TensorFlow, loaded before
    kbert and with no `TF_ENABLE_ONEDNN_OPTS` chosen, runs without them. Not
    on the JAX or PyTorch backends, where TensorFlow only preprocesses."""
    import keras

    if ("TF_ENABLE_ONEDNN_OPTS" in os.environ or keras.backend.backend() != "tensorflow"
            or tensorflow_runs_onednn() is not False):
        return
    warnings.warn(
        "TensorFlow (or Keras, which loads it) was imported before kbert and runs without its oneDNN CPU kernels (its default on CPUs "
        "without AVX-512 VNNI, BF16 or AMX), with which BERT trains and predicts faster (docs/benchmarks.md, \"oneDNN\"). "
        "To turn them on, import kbert before TensorFlow or Keras, or set TF_ENABLE_ONEDNN_OPTS=1 before "
        "TensorFlow is imported; TF_ENABLE_ONEDNN_OPTS=0 keeps them off and silences this.",
        stacklevel=2,
    )
