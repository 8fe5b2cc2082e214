"""Every private framework API that kbert uses, in one place.

Keras' public API does not cover a few things kbert needs: its data
adapters (to pad batches that JAX's devices do not divide), its trainers'
step-building methods (to train under any `tf.distribute` strategy), its
optimizers' slots and per-step hooks (for kbert's faster AdamW and the
gradients of the global batch), two of `BackupAndRestore`'s (to resume
mid-epoch), and a few backend internals (PyTorch's seeded generator,
TensorFlow's stateless scope, a variable's backend variable). kbert's
backends also use a few of TensorFlow's and PyTorch's own (TensorFlow's
gradient registry, its XLA context and oneDNN switch; PyTorch's fused AdamW
kernel). They live in `keras.src`, `tensorflow.python` or `torch._...`,
which a release may move.

Three tables name them:

- `APIS`: the module-level functions and classes, each loaded when first
  used (`get`, `available`);
- `ATTRIBUTES`: the private attributes and methods of Keras objects that
  kbert reads or sets, each only through the function below named after it;
- `OVERRIDDEN_METHODS`: the private Keras methods that kbert's classes
  override, with the parameters their overrides take.

So nothing here is imported before it is used, and a Keras without one of
them fails only the feature that needs it, with a `RuntimeError` that names
the feature, the API and the installed Keras (`get`); where a primitive has
a public fallback, it asks `available` and takes it. `import kbert` works
without any of them. `tests/backend/test_keras_private.py` checks each entry
of the three tables against the installed Keras (and TensorFlow, PyTorch),
so that a run against a new release says which one moved.
"""

import functools
import importlib
import inspect

import keras

_PADDED_BATCHES = "JAX data parallelism on batches the devices do not divide (kbert.training.partial_batches)"
_MULTI_WORKER = "fit under MultiWorkerMirroredStrategy (kbert.training.DistributedTraining)"
_STRATEGY = "training under a tf.distribute strategy (kbert.training.DistributedTraining, kbert.models.task_training)"
_GLOBAL_BATCH = "kbert's optimizers' gradients of the global batch (kbert.training.adamw.GlobalBatchGradients)"
_ADAMW = "kbert.training.AdamW's update (one op a weight on TensorFlow, one kernel a step on PyTorch)"
_RESUME = "resuming a run mid-epoch (kbert.training.BackupAndRestore)"
_CUSTOM_GRADIENTS = "TensorFlow's custom gradients letting go of their graphs (kbert.backend.tensorflow_fused)"

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
    # tensorflow-text's generated op, to name the SentencePiece model's resource
    # (kbert.text.sentencepiece_tokenizer._ModelResource).
    "gen_sentencepiece_tokenizer": ("tensorflow_text.python.ops.sentencepiece_tokenizer", "gen_sentencepiece_tokenizer",
                         "SentencePiece tokenizers that outlive keras.utils.set_random_seed", None),
    # TensorFlow's and PyTorch's own, used by kbert's backends (each with a public fallback).
    "_gradient_registry": ("tensorflow.python.framework.ops", "_gradient_registry", _CUSTOM_GRADIENTS, "tensorflow"),
    "GraphOrParentsInXlaContext": ("tensorflow.python.ops.control_flow_util", "GraphOrParentsInXlaContext",
                                   "TensorFlow's elementwise chains compiled by XLA (kbert.backend.tensorflow_fused)",
                                   "tensorflow"),
    "IsMklEnabled": ("tensorflow.python.util._pywrap_util_port", "IsMklEnabled",
                     "the warning where TensorFlow runs without oneDNN (kbert.backend.onednn)", "tensorflow"),
    "_fused_adamw_": ("torch", "_fused_adamw_", _ADAMW, "torch"),
}

# The private attributes of Keras objects that kbert reads or sets, each
# through the function of this module named after it (`distribute_strategy`
# for `_distribute_strategy`, ...): name: (the Keras class whose instances
# have it, the feature that needs it, the backend it is needed on or None).
ATTRIBUTES = {
    "_distribute_strategy": ("keras.Model", _STRATEGY, "tensorflow"),
    "_flatten_layers": ("keras.Model", _PADDED_BATCHES, None),
    "_initial_epoch": ("keras.Model", _RESUME, None),
    "_current_epoch": ("keras.callbacks.BackupAndRestore", _RESUME, None),
    "_learning_rate": ("keras.optimizers.Optimizer",
                       "a second fit's schedule without a new trace (kbert.models.task_training)", None),
    "_trainable_variables": ("keras.optimizers.Optimizer", _ADAMW + ", and which variables a task's optimizer was "
                             "built for (kbert.models.task_training)", None),
    "_get_variable_index": ("keras.optimizers.AdamW", _ADAMW, None),
    "_momentums": ("keras.optimizers.AdamW", _ADAMW, None),
    "_velocities": ("keras.optimizers.AdamW", _ADAMW, None),
    "_use_weight_decay": ("keras.optimizers.AdamW", _ADAMW, None),
    "_value": ("keras.Variable", "TensorFlow's embedding row reads (kbert.backend.tensorflow.embedding_rows)",
               "tensorflow"),
}

# The private Keras methods that kbert's classes override, with the
# parameters the overrides take and pass on: name: (the Keras class,
# parameters, the feature, the backend whose class calls it, a tuple of
# them, or None for any).
OVERRIDDEN_METHODS = {
    "_maybe_symbolic_build": ("keras.Model", ("iterator", "data_batch"), _MULTI_WORKER, "tensorflow"),
    "_make_function": ("keras.Model", ("step_function",), _MULTI_WORKER + ", and " + _PADDED_BATCHES,
                       ("tensorflow", "jax")),
    "_symbolic_build": ("keras.Model", ("iterator", "data_batch"), _PADDED_BATCHES, "jax"),
    "_clip_gradients": ("keras.optimizers.Optimizer", ("grads",), _GLOBAL_BATCH, None),
    "_all_reduce_sum_gradients": ("keras.optimizers.Optimizer", ("grads_and_vars",), _GLOBAL_BATCH, "tensorflow"),
    "_apply_weight_decay": ("keras.optimizers.AdamW", ("variables",), _ADAMW, None),
    "_backend_update_step": ("keras.optimizers.AdamW", ("grads", "trainable_variables", "learning_rate"), _ADAMW,
                             None),
    "_save_model": ("keras.callbacks.BackupAndRestore", (), _RESUME, None),
}


def needed(on, backend=None):
    """Whether an entry of the tables above needed `on` (a backend, a tuple
    of them, or None for any) is needed on `backend` (default: the current
    one)."""
    return on is None or (backend or keras.backend.backend()) in (on if isinstance(on, tuple) else (on,))


def _not_found(name, feature, error):
    framework = name.split(".")[0]
    if framework != "keras":
        try:
            version = importlib.import_module(framework).__version__
        except (ImportError, AttributeError):
            version = "(not installed)"
        return RuntimeError(f"{feature} needs {framework}'s private {name}, which {framework} {version} does not "
                            f"have ({error}).")
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
    """The private API `name` (a key of `APIS`), or a `RuntimeError`
    naming the feature that needs it and the installed Keras version."""
    return _load(name)


def available(name):
    """Whether this Keras (TensorFlow, PyTorch) has the private API `name`
    (for primitives that fall back to public code without it)."""
    try:
        _load(name)
    except RuntimeError:
        return False
    return True


def data_adapter_base():
    """Keras' `DataAdapter` class to derive from, or `object` where this Keras
    has none (then `get_data_adapter` raises when the feature is used)."""
    return _load("DataAdapter") if available("DataAdapter") else object


def keras_class(path):
    """The public Keras class named `path` in the tables above, e.g.
    `"keras.optimizers.AdamW"`."""
    return functools.reduce(getattr, path.split(".")[1:], keras)


def missing_methods(of=None, backend=None):
    """`{name: reason}` for each of `OVERRIDDEN_METHODS` (those of the Keras
    class `of`, e.g. `"keras.Model"`, or all) that the Keras class of
    `backend` (default: the current one) lacks, or whose parameters differ."""
    backend = backend or keras.backend.backend()
    missing = {}
    for name, (path, parameters, feature, needed_on) in OVERRIDDEN_METHODS.items():
        if not needed(needed_on, backend) or of not in (None, path):
            continue
        method = getattr(keras_class(path), name, None)
        if method is None:
            missing[name] = f"{feature}: {path}.{name} is gone in Keras {keras.version()}"
            continue
        found = tuple(inspect.signature(method).parameters)[1:1 + len(parameters)]
        if found != parameters:
            missing[name] = (f"{feature}: {path}.{name} takes {found} in Keras {keras.version()}, "
                             f"kbert passes {parameters}")
    return missing


# === The private attributes (`ATTRIBUTES`), one function each ===
# Each is a plain read or call: the optimizer's are called inside traced
# train steps, once per variable as the step is traced.


def distribute_strategy(model):
    """The `tf.distribute` strategy Keras' TensorFlow trainer runs `model`
    under (the one in whose scope it was made), or None: none, or another
    backend."""
    return getattr(model, "_distribute_strategy", None)


def flatten_layers(model):
    """`model` and every layer inside it, at any depth."""
    return model._flatten_layers()


def set_initial_epoch(model, epoch):
    """Makes `model`'s running `fit` start at `epoch` (as Keras'
    `BackupAndRestore` does when it restores a backup)."""
    model._initial_epoch = epoch


def current_epoch(callback):
    """The epoch that Keras' `BackupAndRestore` `callback` writes into its
    backup's metadata."""
    return callback._current_epoch


def set_current_epoch(callback, epoch):
    """Sets the epoch that `callback`'s next backup records."""
    callback._current_epoch = epoch


def learning_rate(optimizer):
    """`optimizer`'s learning rate as it was set: its schedule, or the
    variable that holds a constant rate (None where this Keras has neither:
    `optimizer.learning_rate` reads the schedule's current value)."""
    return getattr(optimizer, "_learning_rate", None)


def trainable_variables(optimizer):
    """The variables `optimizer` was built for, in its slots' order."""
    return optimizer._trainable_variables


def adam_moments(optimizer, variable):
    """`(m, v)`: the first and second moments an Adam-family `optimizer`
    keeps for `variable`."""
    index = optimizer._get_variable_index(variable)
    return optimizer._momentums[index], optimizer._velocities[index]


def use_weight_decay(optimizer, variable):
    """Whether `optimizer` decays `variable` (not excluded by
    `exclude_from_weight_decay`)."""
    return optimizer._use_weight_decay(variable)


def backend_variable(variable):
    """The backend's own variable under the Keras `variable` (TensorFlow: a
    `tf.Variable`), read without autocasting; None where it has none."""
    return getattr(variable, "_value", None)


def gradient_registry():
    """TensorFlow's registry of gradient functions, `{name: function}`, which
    `tf.custom_gradient` adds to and never empties; `{}` where it is not
    such a dict in this TensorFlow (then nothing is removed from it)."""
    registry = getattr(get("_gradient_registry"), "_registry", None) if available("_gradient_registry") else None
    return registry if isinstance(registry, dict) else {}
