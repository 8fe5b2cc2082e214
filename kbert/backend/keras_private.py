"""Every private Keras API that kbert uses, in one place.

Keras' public API does not cover a few things kbert needs: its data
adapters (to pad batches that JAX's devices do not divide), its trainers'
step-building methods (to train under any `tf.distribute` strategy), and
two backend internals (PyTorch's seeded generator, TensorFlow's stateless
scope). They live in `keras.src`, which a Keras release may move.

So nothing here is imported before it is used, and a Keras without one of
them fails only the feature that needs it, with a `RuntimeError` that names
the feature, the API and the installed Keras (`get`); where a primitive has
a public fallback, it asks `available` and takes it. `import kbert` works
without any of them. `tests/backend/test_keras_private.py` checks that each
API listed here exists in the installed Keras, so that a run against a new
Keras says which one moved.
"""

import functools
import importlib
import inspect

import keras

_PADDED_BATCHES = "JAX data parallelism on batches the devices do not divide (kbert.training.partial_batches)"

# name: (module, attribute, the feature that needs it, the backend it is needed on or None for any).
APIS = {
    "DataAdapter": ("keras.src.trainers.data_adapters.data_adapter", "DataAdapter", _PADDED_BATCHES, "jax"),
    "get_data_adapter": ("keras.src.trainers.data_adapters", "get_data_adapter", _PADDED_BATCHES, "jax"),
    "train_validation_split": ("keras.src.trainers.data_adapters.array_slicing", "train_validation_split",
                               _PADDED_BATCHES, "jax"),
    "get_device": ("keras.src.backend.torch.core", "get_device",
                   "PyTorch's fast dropout bits (kbert.backend.torch.random_int16)", "torch"),
    "torch_seed_generator": ("keras.src.backend.torch.random", "torch_seed_generator",
                             "PyTorch's fast dropout bits (kbert.backend.torch.random_int16)", "torch"),
    "in_stateless_scope": ("keras.src.backend.common.stateless_scope", "in_stateless_scope",
                           "TensorFlow's embedding row reads (kbert.backend.tensorflow.embedding_rows)", "tensorflow"),
}

# The private trainer methods that `kbert.training.DistributedTraining`
# overrides, with the parameters it passes on: name: (parameters, the
# feature, the backend whose trainer calls it).
TRAINER_METHODS = {
    "_maybe_symbolic_build": (("iterator", "data_batch"),
                              "fit under MultiWorkerMirroredStrategy (kbert.training.DistributedTraining)",
                              "tensorflow"),
    "_make_function": (("step_function",), "fit under MultiWorkerMirroredStrategy, and " + _PADDED_BATCHES,
                       "tensorflow"),
    "_symbolic_build": (("iterator", "data_batch"), _PADDED_BATCHES, "jax"),
}


def _not_found(name, feature, error):
    return RuntimeError(
        f"{feature} needs Keras' private {name}, which Keras {keras.version()} does not have ({error}). "
        "kbert runs it with Keras 3.15; install that (pip install 'keras==3.15.*') to use this feature, "
        "or leave it out.")


@functools.cache
def _load(name):
    module, attribute, feature, _ = APIS[name]
    try:
        return getattr(importlib.import_module(module), attribute)
    except (ImportError, AttributeError) as error:
        raise _not_found(f"{module}.{attribute}", feature, error) from None


def get(name):
    """The private Keras API `name` (a key of `APIS`), or a `RuntimeError`
    naming the feature that needs it and the installed Keras version."""
    return _load(name)


def available(name):
    """Whether this Keras has the private API `name` (for primitives that
    fall back to public code without it)."""
    try:
        _load(name)
    except RuntimeError:
        return False
    return True


def data_adapter_base():
    """Keras' `DataAdapter` class to derive from, or `object` where this Keras
    has none (then `get_data_adapter` raises when the feature is used)."""
    return _load("DataAdapter") if available("DataAdapter") else object


def missing_trainer_methods(backend=None):
    """`{name: reason}` for each of `TRAINER_METHODS` that the trainer of
    `backend` (default: the current one) lacks, or whose parameters differ."""
    backend = backend or keras.backend.backend()
    missing = {}
    for name, (parameters, feature, needed_on) in TRAINER_METHODS.items():
        if needed_on != backend:
            continue
        method = getattr(keras.Model, name, None)
        if method is None:
            missing[name] = f"{feature}: keras.Model.{name} is gone in Keras {keras.version()}"
            continue
        found = tuple(inspect.signature(method).parameters)[1:1 + len(parameters)]
        if found != parameters:
            missing[name] = (f"{feature}: keras.Model.{name} takes {found} in Keras {keras.version()}, "
                             f"kbert passes {parameters}")
    return missing
