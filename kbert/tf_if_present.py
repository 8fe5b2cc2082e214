"""TensorFlow where it is present, loaded only where it is needed.

TensorFlow runs kbert's text processing (tokenizers, preprocessors), its
`tf.data` pipelines and the SavedModel export. The model path (layers,
backbones, tasks on token ids, presets, training) runs on JAX and PyTorch
without it. So on those backends `tf` here is a stand-in that imports
TensorFlow at its first use, and raises an ImportError saying what to install
where TensorFlow is absent: `import kbert` then loads no TensorFlow (seconds
saved on every start; docs/benchmarks.md, "Importing kbert"). On the
TensorFlow backend, which Keras has loaded already, `tf` is TensorFlow itself.

This module imports no other kbert module, so every other one may import it.
"""

import importlib
import importlib.util
import sys

import keras

INSTALL = 'pip install "tensorflow>=2.20,<2.22" "tensorflow-text>=2.20,<2.22"'
MISSING = (
    "TensorFlow is not installed. kbert needs it (with tensorflow-text) for raw text (tokenizers and "
    "preprocessors), tf.data input and SavedModel export; models on token ids run without it on the JAX "
    f"and PyTorch backends. Install both: {INSTALL}"
)


def installed():
    """Whether TensorFlow and tensorflow-text are installed, without importing either."""
    return all(importlib.util.find_spec(name) is not None for name in ("tensorflow", "tensorflow_text"))


def tensorflow():
    """TensorFlow, imported now if it was not; an ImportError naming what to
    install where it is absent."""
    try:
        return importlib.import_module("tensorflow")
    except ModuleNotFoundError as e:
        if e.name != "tensorflow":
            raise
        raise ImportError(MISSING) from e


def is_dataset(x):
    """Whether `x` is a `tf.data.Dataset`. Imports nothing: where TensorFlow
    is not loaded, nothing can have made one."""
    tf = sys.modules.get("tensorflow")
    return tf is not None and isinstance(x, tf.data.Dataset)


class AtFirstUse:
    """A module's attributes, the module imported by `load()` at the first
    one read (`tf` here, `tf_text` in kbert.text)."""

    def __init__(self, load, name):
        self._load, self._name = load, name

    def __getattr__(self, attribute):
        if attribute in ("_load", "_name"):  # (read before __init__, by copy)
            raise AttributeError(attribute)
        return getattr(self._load(), attribute)

    def __repr__(self):
        return f"<{self._name}, imported at its first use>"


tf = tensorflow() if keras.backend.backend() == "tensorflow" else AtFirstUse(tensorflow, "TensorFlow")
