"""Pre-training at scale on shards: the XLA-compiled train step on packed,
fixed-shape batches trains as the uncompiled one, and workers of a
MultiWorkerMirroredStrategy read disjoint shards covering every row once and
train as one device on the global batches they read.

The multi-worker test starts this file as each worker:

    python -m tests.training.test_pretraining_scale SHARDS OUT   (with TF_CONFIG)
"""

import gzip
import json
import os
import subprocess
import sys

import keras
import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
AUSTEN = os.path.join(ROOT, "examples", "data", "austen.txt.gz")
LENGTH, BATCH = 32, 4


@pytest.fixture(scope="module")
def shards(tmp_path_factory, minilm_dir):
    """Packed shards of four files of Austen's paragraphs (32 tokens a row)."""
    import kbert

    folder = tmp_path_factory.mktemp("pretraining")
    documents = [d for d, _ in zip(kbert.text.read_documents(AUSTEN), range(70))][30:]
    paths = []
    for i in range(4):
        paths.append(str(folder / f"part-{i}.txt.gz"))
        with gzip.open(paths[-1], "wt", encoding="utf-8") as f:
            f.write("\n\n".join("\n".join(d) for d in documents[i::4]) + "\n")
    output = str(folder / "shards")
    kbert.text.write_pretraining_data(paths, output, os.path.join(minilm_dir, "vocab.txt"), sequence_length=LENGTH,
                                      seed=0, processes=1)
    return output


def build_pretrainer(vocabulary_size):
    import kbert

    backbone = kbert.BertBackbone(vocabulary_size=vocabulary_size, num_layers=1, num_heads=2, hidden_dim=32,
                                  intermediate_dim=64, max_sequence_length=LENGTH, dropout=0.0, packing=True)
    return kbert.BertPretrainer(backbone)


# TensorFlow: tf.function(jit_compile=True); JAX: the jitted step, which Keras
# compiles with XLA by default. The reference runs eagerly, op by op.
@pytest.mark.skipif(keras.backend.backend() == "torch", reason="XLA compiles the step on TensorFlow and JAX")
def test_compiled_train_step_on_packed_batches_trains_as_the_uncompiled_one(shards):
    import kbert

    batches = [keras.tree.map_structure(lambda t: t.numpy(), b)
               for b in kbert.text.pretraining_dataset(shards, BATCH, seed=0).take(2)]
    vocabulary_size = len(open(os.path.join(shards, "vocab.txt")).read().splitlines())
    runs = {}
    for jit_compile in (False, True):
        keras.utils.set_random_seed(0)
        model = build_pretrainer(vocabulary_size)
        model.compile(optimizer=kbert.training.pretraining_optimizer(2, learning_rate=1e-3, warmup_steps=0,
                                                                      global_clipnorm=1.0),
                      jit_compile=jit_compile, run_eagerly=not jit_compile)
        assert model.jit_compile is jit_compile  # Keras drops XLA for a model it cannot compile
        initial = model.get_weights()
        losses = [model.train_on_batch(x, y, sample_weight=w, return_dict=True)["loss"] for x, y, w in batches]
        runs[jit_compile] = initial, model.get_weights(), losses
    for a, b in zip(runs[False][0], runs[True][0]):
        np.testing.assert_array_equal(a, b)
    moved = max(np.abs(a - b).max() for a, b in zip(runs[False][0], runs[False][1]))
    assert moved > 1e-4, "the uncompiled steps did not train"
    np.testing.assert_allclose(runs[True][2], runs[False][2], rtol=1e-5)
    difference = max(np.abs(a - b).max() for a, b in zip(runs[False][1], runs[True][1]))
    assert difference < 1e-5, f"compiled and uncompiled weights differ by {difference:.2e} (moved {moved:.2e})"


# (In the jax pass, to share the time out: the workers are tensorflow processes.)
@pytest.mark.skipif(keras.backend.backend() != "jax",
                    reason="runs once, in the jax pass; it starts its own tensorflow processes")
def test_two_workers_read_disjoint_shards_and_train_as_one_device(shards, tmp_path):
    from tests.text.test_pretraining_data import one_epoch, sequences
    from tests.training.test_distribution import free_ports, weights
    from tests.training.tiny_run import finish

    workers = [f"127.0.0.1:{port}" for port in free_ports(2)]
    processes = []
    for index in range(2):
        tf_config = json.dumps({"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}})
        env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "KERAS_BACKEND": "tensorflow", "TF_CONFIG": tf_config}
        processes.append(subprocess.Popen(
            [sys.executable, "-m", "tests.training.test_pretraining_scale", shards, str(tmp_path / f"{index}")],
            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    everything = sequences(one_epoch(shards, 2, drop_remainder=False))  # meanwhile, here
    for process in processes:
        returncode, output = finish(process)
        assert returncode == 0, output[-4000:]
    shares = [[tuple(s) for s in json.load(open(tmp_path / f"{index}.json"))] for index in range(2)]
    assert shares[0] and shares[1]
    assert not set(shares[0]) & set(shares[1]), "a row was read by both workers"
    assert sorted(shares[0] + shares[1]) == sorted(everything), "the workers did not read every row once"

    # Training: each step's global batch is the two workers' local batches.
    initial, trained = (weights(tmp_path / "0.npz", name) for name in ("initial", "trained"))
    np.testing.assert_array_equal(weights(tmp_path / "1.npz", "trained")[0], trained[0])  # one model, mirrored
    runs = [np.load(tmp_path / f"{index}-batches.npz") for index in range(2)]
    model = build_pretrainer(len(open(os.path.join(shards, "vocab.txt")).read().splitlines()))
    model.compile(optimizer=worker_optimizer())
    model.set_weights(initial)
    for step in range(STEPS):
        local = [[batch_part(run, f"step{step}_{part}") for part in ("x", "y", "w")] for run in runs]
        x, y, w = (keras.tree.map_structure(lambda *halves: np.concatenate(halves), *parts) for parts in zip(*local))
        # Each replica's loss is its weighted mean (over its masked tokens, its
        # sequences), and the strategy averages the replicas' gradients, as
        # BERT's TPU code does: on one device, the weights of each half sum to 1.
        w = {name: np.concatenate([half[2][name] / half[2][name].sum() for half in local]) for name in w}
        model.train_on_batch(x, y, sample_weight=w)
    moved = max(np.abs(a - b).max() for a, b in zip(initial, trained))
    assert moved > 1e-4, "the workers did not train"
    difference = max(np.abs(a - b).max() for a, b in zip(model.get_weights(), trained))
    assert difference < 1e-5, f"the workers' weights differ from one device's by {difference:.2e} (moved {moved:.2e})"


STEPS = 2


def worker_optimizer():
    import kbert

    return kbert.training.pretraining_optimizer(STEPS, learning_rate=1e-3, warmup_steps=0, global_clipnorm=1.0)


def batch_part(saved, name):
    """The dict of arrays that a worker saved as `name.key` (see below)."""
    return {key[len(name) + 1:]: saved[key] for key in saved if key.startswith(name + ".")}


def read_and_train_as_a_worker(shards, out):
    """One worker: reads an epoch through the strategy as Keras' `fit` does
    (experimental_distribute_dataset, which shards by file) and writes the
    sequences it got to OUT.json; then `fit`s a pre-trainer for STEPS steps of
    global batches of 2 * BATCH rows and writes its initial and trained weights
    to OUT.npz, and the local batches that its replica trained on to
    OUT-batches.npz."""
    import tensorflow as tf

    strategy = tf.distribute.MultiWorkerMirroredStrategy()  # before any other op
    assert strategy.num_replicas_in_sync == 2, strategy
    import kbert
    from tests.text.test_pretraining_data import sequences
    from tests.training.tiny_run import save

    dataset = kbert.text.pretraining_dataset(shards, 2, drop_remainder=False)
    batches = []
    for batch in strategy.experimental_distribute_dataset(dataset):
        local = tf.nest.map_structure(lambda v: strategy.experimental_local_results(v)[0], batch)
        batches.append(tf.nest.map_structure(lambda t: t.numpy(), local))
    with open(out + ".json", "w") as f:
        json.dump([[int(t) for t in s] for s in sequences(batches)], f)

    vocabulary_size = len(open(os.path.join(shards, "vocab.txt")).read().splitlines())
    keras.utils.set_random_seed(0)  # the same initial weights on both workers
    with strategy.scope():
        model = build_pretrainer(vocabulary_size)
        model.compile(optimizer=worker_optimizer())
    seen, structure = [], []
    initial = model.get_weights()
    train_step = model.train_step

    def recording_train_step(data):
        # The batch this worker's replica trains on, as `fit` gives it.
        structure.append(data)
        flat = tf.nest.flatten(data)
        with tf.control_dependencies([tf.py_function(lambda *t: seen.append([v.numpy() for v in t]), flat, [])]):
            return train_step(data)

    model.train_step = recording_train_step
    model.fit(kbert.text.pretraining_dataset(shards, 2 * BATCH, seed=0), steps_per_epoch=STEPS, verbose=0)
    assert len(seen) == STEPS, len(seen)
    save(out + ".npz", initial=initial, trained=model.get_weights())
    np.savez(out + "-batches.npz", **{
        f"step{step}_{part}.{key}": array
        for step, flat in enumerate(seen)
        for part, value in zip(("x", "y", "w"), tf.nest.pack_sequence_as(structure[0], flat))
        for key, array in value.items()
    })


if __name__ == "__main__":
    read_and_train_as_a_worker(*sys.argv[1:])
