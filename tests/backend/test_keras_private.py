"""Each private Keras API kbert uses (kbert.backend.keras_private) exists in
the installed Keras: run against a new Keras, this says which one moved."""

import subprocess
import sys

import keras
import pytest

from kbert.backend import keras_private


@pytest.mark.parametrize("name", list(keras_private.APIS))
def test_each_private_keras_api_exists_in_this_keras(name):
    if keras_private.APIS[name][3] not in (None, keras.backend.backend()):
        pytest.skip(f"needed on the {keras_private.APIS[name][3]} backend")
    assert keras_private.get(name) is not None


def test_each_overridden_trainer_method_exists_with_its_parameters():
    assert keras_private.missing_trainer_methods() == {}


def test_a_missing_private_api_names_the_feature_and_the_keras_version(monkeypatch):
    monkeypatch.setitem(keras_private.APIS, "moved", ("keras.src.nowhere", "gone", "a feature", None))
    with pytest.raises(RuntimeError, match=rf"a feature needs Keras' private keras.src.nowhere.gone, which "
                                           rf"Keras {keras.version()} does not have"):
        keras_private.get("moved")
    assert not keras_private.available("moved")


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
