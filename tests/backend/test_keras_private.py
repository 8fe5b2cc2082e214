"""Each private Keras API kbert uses (kbert.backend.keras_private) exists in
the installed Keras: run against a new Keras, this says which one moved."""

import importlib
import inspect
import pkgutil
import subprocess
import sys

import keras
import numpy as np
import pytest

import kbert
from kbert.backend import keras_private

BACKEND = keras.backend.backend()


def _skip_unless_needed(on):
    if not keras_private.needed(on):
        pytest.skip(f"needed on the {on} backend")


@pytest.mark.parametrize("name", list(keras_private.APIS))
def test_each_private_keras_api_exists_in_this_keras(name):
    _skip_unless_needed(keras_private.APIS[name][3])
    assert keras_private.get(name) is not None


def _instance_of(path, tmp_path):
    """A Keras object of the class `path`, as kbert meets it (built)."""
    if path == "keras.Model":
        return keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    if path == "keras.callbacks.BackupAndRestore":
        return keras.callbacks.BackupAndRestore(str(tmp_path))
    if path == "keras.Variable":
        return keras.Variable(np.zeros(2, "float32"))
    if path in ("keras.optimizers.Optimizer", "keras.optimizers.AdamW"):
        optimizer = keras.optimizers.AdamW()
        optimizer.build([keras.Variable(np.zeros(2, "float32"))])
        return optimizer
    raise AssertionError(f"No example of {path}: add one here.")


@pytest.mark.parametrize("name", list(keras_private.ATTRIBUTES))
def test_each_private_attribute_exists_on_its_keras_class(name, tmp_path):
    path, _, on = keras_private.ATTRIBUTES[name]
    _skip_unless_needed(on)
    instance = _instance_of(path, tmp_path)
    assert isinstance(instance, keras_private.keras_class(path))
    assert hasattr(instance, name), f"{path} has no {name} in Keras {keras.version()}"


def test_each_overridden_method_exists_with_its_parameters():
    assert keras_private.missing_methods() == {}


def _kbert_classes_derived_from_keras():
    for package in (kbert.layers, kbert.models, kbert.training):
        for module_info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            module = importlib.import_module(module_info.name)
            for cls in vars(module).values():
                if (inspect.isclass(cls) and cls.__module__ == module.__name__
                        and issubclass(cls, (keras.Layer, keras.optimizers.Optimizer, keras.callbacks.Callback))):
                    yield cls


def test_kbert_overrides_only_the_listed_private_keras_methods_with_their_parameters():
    overridden = set()
    for cls in _kbert_classes_derived_from_keras():
        keras_bases = [base for base in cls.__mro__ if base.__module__.startswith("keras")]
        for base in cls.__mro__:
            if not base.__module__.startswith("kbert"):
                continue
            for name, member in vars(base).items():
                if not name.startswith("_") or name.startswith("__") or not any(hasattr(k, name) for k in keras_bases):
                    continue
                where = f"{base.__module__}.{base.__qualname__}.{name}"
                assert name in keras_private.OVERRIDDEN_METHODS, (
                    f"{where} overrides Keras' private {name}: list it in keras_private.OVERRIDDEN_METHODS")
                parameters = keras_private.OVERRIDDEN_METHODS[name][1]
                assert tuple(inspect.signature(member).parameters)[1:1 + len(parameters)] == parameters, where
                overridden.add(name)
    # and the table lists no method that kbert no longer overrides
    assert overridden >= {name for name, entry in keras_private.OVERRIDDEN_METHODS.items()
                          if keras_private.needed(entry[3])}


def test_a_missing_private_api_names_the_feature_and_the_keras_version(monkeypatch):
    monkeypatch.setitem(keras_private.APIS, "moved", ("keras.src.nowhere", "gone", "a feature", None))
    with pytest.raises(RuntimeError, match=rf"a feature needs Keras' private keras.src.nowhere.gone, which "
                                           rf"Keras {keras.version()} does not have"):
        keras_private.get("moved")
    assert not keras_private.available("moved")


def test_a_missing_private_api_of_another_framework_names_it_and_its_version(monkeypatch):
    monkeypatch.setitem(keras_private.APIS, "moved", ("numpy", "_gone", "a feature", None))
    with pytest.raises(RuntimeError, match=rf"a feature needs numpy's private numpy._gone, which numpy "
                                           rf"{np.__version__} does not have"):
        keras_private.get("moved")


def test_the_distribute_strategy_is_the_one_the_model_was_made_in():
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    assert keras_private.distribute_strategy(model) is None
    if BACKEND == "tensorflow":
        import tensorflow as tf

        strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
        with strategy.scope():
            model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
        assert keras_private.distribute_strategy(model) is strategy


def test_flatten_layers_reaches_nested_layers():
    inner = keras.Sequential([keras.Input((2,)), keras.layers.Dense(3, name="inner_dense")])
    model = keras.Sequential([keras.Input((2,)), inner, keras.layers.Dense(1)])
    assert "inner_dense" in {layer.name for layer in keras_private.flatten_layers(model)}


def test_the_optimizers_learning_rate_is_its_schedule():
    schedule = keras.optimizers.schedules.PolynomialDecay(1e-3, 10)
    assert keras_private.learning_rate(keras.optimizers.AdamW(schedule)) is schedule


def test_adam_moments_and_weight_decay_are_the_optimizers_own():
    kernel, bias = keras.Variable(np.zeros(2, "float32"), name="kernel"), keras.Variable(np.zeros(2, "float32"),
                                                                                          name="bias")
    optimizer = keras.optimizers.AdamW(weight_decay=0.1, beta_1=0.9, beta_2=0.99)
    optimizer.exclude_from_weight_decay(var_names=["bias"])
    optimizer.apply_gradients([(keras.ops.array([1.0, 2.0]), kernel), (keras.ops.array([3.0, 4.0]), bias)])
    assert [id(v) for v in keras_private.trainable_variables(optimizer)] == [id(kernel), id(bias)]
    m, v = keras_private.adam_moments(optimizer, bias)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(m), [0.3, 0.4], rtol=1e-6)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(v), [0.09, 0.16], rtol=1e-5)
    assert keras_private.use_weight_decay(optimizer, kernel) and not keras_private.use_weight_decay(optimizer, bias)


@pytest.mark.skipif(BACKEND != "tensorflow", reason="TensorFlow's variables and gradient registry")
def test_tensorflows_backend_variable_and_gradient_registry():
    import tensorflow as tf

    assert isinstance(keras_private.backend_variable(keras.Variable(np.zeros(2, "float32"))), tf.Variable)
    assert "MatMul" in keras_private.gradient_registry()  # TensorFlow's own, by op type


_WITHOUT_DATA_ADAPTERS = """
import sys
import keras
# As a Keras that moved them: its data adapter modules cannot be imported.
for name in [m for m in sys.modules if m.startswith("keras.src.trainers.data_adapters")]:
    sys.modules[name] = None
import kbert
from kbert.training import partial_batches
try:
    partial_batches.PaddedBatches.of(2, [[1, 2]])
except RuntimeError as error:
    print(error)
"""


def test_import_kbert_works_without_a_private_api_and_its_feature_says_why():
    result = subprocess.run([sys.executable, "-c", _WITHOUT_DATA_ADAPTERS], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "JAX data parallelism on batches the devices do not divide" in result.stdout
    assert f"Keras {keras.version()} does not have" in result.stdout
