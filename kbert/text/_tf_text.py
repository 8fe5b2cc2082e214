"""tensorflow-text, with an error that says how to fix a missing or mismatched install."""

import functools
import importlib

import keras

from kbert.tf_if_present import AtFirstUse, tf


@functools.cache
def _load():
    """tensorflow-text and the kernel behind its `regex_split_with_offsets`
    (None where tensorflow-text keeps it elsewhere), imported now."""
    try:
        module = importlib.import_module("tensorflow_text")
    except Exception as e:  # a wrong version fails with undefined symbols, not ImportError
        major_minor = ".".join(tf.__version__.split(".")[:2])  # (where TensorFlow is absent, says so)
        raise ImportError(
            f"kbert's text processing needs tensorflow-text built for TensorFlow {major_minor} "
            f"(TensorFlow {tf.__version__} is installed); importing it failed with: {e}. "
            f'Fix: pip install "tensorflow-text=={major_minor}.*"'
        ) from e
    try:
        kernels = importlib.import_module("tensorflow_text.python.ops.regex_split_ops").gen_regex_split_ops
    except (ImportError, AttributeError):
        kernels = None
    return module, kernels


# On JAX and PyTorch, imported at the first attribute read, as `tf` (which it needs) is.
tf_text = (_load()[0] if keras.backend.backend() == "tensorflow"
           else AtFirstUse(lambda: _load()[0], "tensorflow-text"))


def regex_split_with_offsets(texts, delim_regex_pattern, keep_delim_regex_pattern=""):
    """`tf_text.regex_split_with_offsets` on a 1-D string tensor, without
    checking the row splits that its own kernel made.

    The public function validates them, which puts a dozen assertion branches
    into the graph at every call. tf.data instantiates each branch again with
    every iterator, so the splits of the tokenizer's word path cost about a
    second at the start of every `fit`, `evaluate` and `predict` on raw text,
    whether the path runs or not. Where tensorflow-text keeps its kernel
    elsewhere, the public function is used as it is.
    """
    kernels = _load()[1]
    if kernels is None:
        return tf_text.regex_split_with_offsets(texts, delim_regex_pattern, keep_delim_regex_pattern)
    tokens, starts, ends, row_splits = kernels.regex_split_with_offsets(
        texts, f"({delim_regex_pattern})", f"({keep_delim_regex_pattern})"
    )
    return tuple(tf.RaggedTensor.from_row_splits(v, row_splits, validate=False) for v in (tokens, starts, ends))
