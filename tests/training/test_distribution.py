"""Distributed training computes what one device does on the global batch.

Each test starts its own processes with the backend it exercises, whatever
the suite's backend, so it runs in one pass of the suite only.
"""

import json
import os
import socket

import keras
import numpy as np
import pytest

import kbert
from tests.training import tiny_run

# Sums over replicas round differently from sums over one batch: about 1e-8
# here. A replica that trained on the wrong share of the batch moves weights
# by ~1e-3 (the runs move them by 3.7e-3).
TOLERANCE = 1e-4

only_tensorflow = pytest.mark.skipif(
    keras.backend.backend() != "tensorflow",
    reason="runs once, in the tensorflow pass; it starts its own tensorflow processes",
)
only_jax = pytest.mark.skipif(
    keras.backend.backend() != "jax",
    reason="runs once, in the jax pass; it starts its own jax processes",
)


def weights(path, name):
    saved = np.load(path)
    return [saved[f"{name}_{i}"] for i in range(len([k for k in saved if k.startswith(f"{name}_")]))]


def assert_trained_alike(single, distributed, initial):
    moved = max(np.abs(a - b).max() for a, b in zip(single, initial))
    assert moved > 1e-3, "the single-device run did not train"
    difference = max(np.abs(a - b).max() for a, b in zip(single, distributed))
    assert difference < TOLERANCE, f"weights differ by {difference:.2e} (training moved them by {moved:.2e})"


def assert_encodes_once_per_text(out):
    # The model run batch by batch (as entities, answer and fill_mask run it)
    # gives one row per text, not one per replica (predict_on_batch runs a
    # batch on every replica), equal to encode through Keras' loop.
    batched, looped = weights(out, "encoded")
    assert batched.shape == looped.shape == (8, 16)
    np.testing.assert_allclose(batched, looped, atol=1e-5)


def assert_embedders_trained_alike(out, mini_batches):
    # Trained whole on each device, and with GradCache (mini_batch_size=2),
    # as one device on the global batch.
    saved = np.load(out)
    # GradCache's model ran `mini_batches` per replica (none empty); the
    # whole-batch fits ran none.
    assert saved["runs_0"].tolist() == [0, mini_batches, 0]
    for name, i in (("distributed", 1), ("cached", 2)):
        np.testing.assert_allclose(saved[f"loss_{i}"], saved["loss_0"], rtol=1e-5)
        assert_trained_alike(weights(out, "single"), weights(out, name), weights(out, "initial"))
    assert_encodes_once_per_text(out)


def initial(path):
    model = tiny_run.build_model()
    model.load_weights(path)
    return model.get_weights()


@only_tensorflow
def test_mirrored_strategy_over_two_cpus_trains_as_one_device(initial_weights, tmp_path):
    out = tmp_path / "mirrored.npz"
    tiny_run.run_tiny("mirrored", initial_weights, out, KERAS_BACKEND="tensorflow")
    assert_trained_alike(weights(out, "single"), weights(out, "distributed"), initial(initial_weights))


@only_tensorflow
def test_mirrored_strategy_trains_arrays_with_the_default_compile_as_one_device(initial_weights, tmp_path):
    # `fit` sets the default schedule from the number of steps, reading the
    # optimizer's step count, a distributed variable under a strategy (whose
    # `int` raised a TypeError).
    out = tmp_path / "mirrored_arrays.npz"
    tiny_run.run_tiny("mirrored_arrays", initial_weights, out, KERAS_BACKEND="tensorflow")
    assert_trained_alike(weights(out, "single"), weights(out, "distributed"), initial(initial_weights))


@only_tensorflow
def test_in_batch_negatives_span_the_replicas_of_a_mirrored_strategy(tmp_path):
    # Each replica holds 4 of the 8 pairs; with only its own 4 as negatives,
    # the loss and the weights would differ from the one device's.
    out = tmp_path / "embedder.npz"
    tiny_run.run_tiny("mirrored_embedder", "-", out, KERAS_BACKEND="tensorflow")
    assert_embedders_trained_alike(out, mini_batches=2)  # 4 pairs a replica


@only_jax
def test_in_batch_negatives_span_the_devices_of_jax_data_parallel(tmp_path):
    out = tmp_path / "embedder.npz"
    tiny_run.run_tiny("data_parallel_embedder", "-", out, KERAS_BACKEND="jax",
                      XLA_FLAGS=f"{os.environ['XLA_FLAGS']} --xla_force_host_platform_device_count=2")
    assert_embedders_trained_alike(out, mini_batches=4)  # the global batch of 8


def free_ports(count):
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


@only_tensorflow
def test_plain_multi_worker_strategy_over_two_processes_trains_as_one_device(initial_weights, tmp_path):
    # tf.distribute.MultiWorkerMirroredStrategy() as TensorFlow's guides make
    # it. Pins the two Keras failures that kbert.training.DistributedTraining
    # works around: without it both workers fail before the first step.
    out = tmp_path / "multi_worker.npz"
    workers = [f"127.0.0.1:{port}" for port in free_ports(2)]
    processes = [
        tiny_run.start_tiny_run("multi_worker", initial_weights, out, KERAS_BACKEND="tensorflow", TF_CONFIG=json.dumps(
            {"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}}))
        for index in range(2)
    ]
    single = tiny_run.train(initial_weights)  # meanwhile, here
    for process in processes:
        returncode, output = tiny_run.finish(process)
        assert returncode == 0, output[-4000:]
    assert_trained_alike(single.get_weights(), weights(out, "distributed"), initial(initial_weights))
    # The logs are averaged over the workers: each epoch's loss is the one device's.
    np.testing.assert_allclose(np.load(out)["loss_0"], single.history.history["loss"], atol=TOLERANCE)


@only_jax
def test_jax_data_parallel_over_two_devices_trains_as_one_device(initial_weights, tmp_path):
    out = tmp_path / "data_parallel.npz"
    tiny_run.run_tiny("data_parallel", initial_weights, out, KERAS_BACKEND="jax",
                      XLA_FLAGS=f"{os.environ['XLA_FLAGS']} --xla_force_host_platform_device_count=2")
    assert_trained_alike(weights(out, "single"), weights(out, "distributed"), initial(initial_weights))


@only_tensorflow
def test_strategy_on_one_device_is_tensorflows_default(monkeypatch):
    import tensorflow as tf

    monkeypatch.delenv("TF_CONFIG", raising=False)
    monkeypatch.delenv("TPU_NAME", raising=False)
    assert kbert.training.strategy() is tf.distribute.get_strategy()


@pytest.mark.skipif(keras.backend.backend() == "tensorflow", reason="tf.distribute is the tensorflow backend's")
def test_strategy_on_other_backends_points_to_their_way():
    with pytest.raises(ValueError, match="tf.distribute strategy"):
        kbert.training.strategy()


@pytest.mark.skipif(keras.backend.backend() == "jax", reason="keras.distribution works with jax")
def test_data_parallel_on_other_backends_points_to_their_way():
    with pytest.raises(ValueError, match="needs the JAX backend"):
        kbert.training.data_parallel()
