"""JAX's data parallelism on batches that its devices do not divide: the
results of the real rows, as on one device (tf.distribute splits such a
batch unevenly; Keras' JAX trainer refused it with IndivisibleError)."""

import os
import subprocess
import sys

import keras
import numpy as np
import pytest

from tests.training import tiny_run

pytestmark = pytest.mark.skipif(keras.backend.backend() != "jax",
                                reason="runs once, in the jax pass; it starts its own jax process")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The same models on one device, then over 4 (partial_batch_run.py)."""
    out = tmp_path_factory.mktemp("partial") / "runs.npz"
    env = {**os.environ, "KERAS_BACKEND": "jax", "TF_CPP_MIN_LOG_LEVEL": "2",
           "XLA_FLAGS": f"{os.environ['XLA_FLAGS']} --xla_force_host_platform_device_count=4"}
    result = subprocess.run([sys.executable, "-m", "tests.training.partial_batch_run", str(out)], cwd=tiny_run.ROOT,
                            env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    saved = np.load(out)
    return {key: (saved[f"single_{key}"], saved[f"distributed_{key}"])
            for key in {k.split("_", 1)[1] for k in saved}}


def test_predict_on_5_texts_or_arrays_over_4_devices_gives_the_one_devices_outputs(runs):
    for key in ("predict", "predict_arrays"):
        single, distributed = runs[key]
        assert single.shape == distributed.shape == (5, 2), key  # a row per example, none for the padding
        np.testing.assert_allclose(distributed, single, atol=1e-5, err_msg=key)


def test_evaluate_on_a_last_batch_of_2_or_3_gives_the_one_devices_loss_and_accuracy(runs):
    for key in ("evaluate_texts", "evaluate_weighted"):
        single, distributed = runs[key]
        np.testing.assert_allclose(distributed, single, atol=1e-5, err_msg=key)


def test_fit_on_a_last_batch_of_3_trains_as_one_device(runs):
    single, distributed = runs["fit_history"]
    np.testing.assert_allclose(distributed, single, atol=1e-5)  # loss and accuracy, val_ too, of both epochs
    single, distributed = runs["fit_weights"]
    initial, _ = runs["initial_weights"]
    moved = np.abs(single - initial).max()
    assert moved > 1e-3, "the one device's fit did not train"
    np.testing.assert_allclose(distributed, single, atol=1e-4 * moved)


def test_tags_of_5_texts_over_4_devices_are_the_one_devices(runs):
    single, distributed = runs["tag_labels"]
    assert single.size > 5 and (distributed == single).all()  # a tag per word of the 5 texts
    single, distributed = runs["tag_scores"]
    np.testing.assert_allclose(distributed, single, atol=1e-5)
