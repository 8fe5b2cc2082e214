"""Where training runs: one device, several GPUs, several machines, a TPU.

The TensorFlow backend distributes with a `tf.distribute` strategy, made once
at the start of the program and entered around model building
(`strategy()`). The JAX backend distributes with `keras.distribution`, set
before the model is built (`data_parallel()`). In both, data parallelism:
every device holds all the weights, each takes a slice of the global batch,
and gradients are averaged over the devices before every update, so `fit`
computes what one device would on the whole batch.

Any `tf.distribute` strategy works, TensorFlow's own included: what Keras 3's
TensorFlow trainer needs to train kbert's models under one is in the models
themselves (`DistributedTraining`), not in the strategy. The same mixin lets
JAX's data parallelism take batches that the devices do not divide (the last
batch of a data set, a `predict` on a few texts).
"""

import json
import os

import keras

from kbert.backend import keras_private
from kbert.tf_if_present import tf
from kbert.training import partial_batches


def strategy(tpu=None):
    """The `tf.distribute` strategy for the machines this program runs on.

    In order:

    - a TPU, when `tpu` is given (a TPU name or `grpc://` address, or
      `"local"` on a TPU VM) or `TPU_NAME` is set: `TPUStrategy`, after
      connecting to the TPU and initialising it;
    - several workers, when `TF_CONFIG` lists more than one:
      `MultiWorkerMirroredStrategy`. Every worker runs the same program with
      its own `TF_CONFIG` task index, and must create the strategy before any
      other TensorFlow op;
    - several GPUs: `MirroredStrategy` over all of them;
    - otherwise TensorFlow's default strategy (one device, no distribution).

    TPUs are only looked for when asked: probing for one on an ordinary
    machine asks a cloud metadata server, which can hang where there is none.

    Build and compile the model inside `strategy.scope()`; `fit` then splits
    every batch of the dataset (its *global* batch) between the replicas. Keep
    the global batch and scale it with `strategy.num_replicas_in_sync` if each
    device should keep its batch.

    Args:
        tpu: a TPU to use, as above; `None` to use one only if `TPU_NAME` says so.

    Returns:
        A `tf.distribute.Strategy`.

    Example:
    >>> strategy = kbert.training.strategy()
    >>> with strategy.scope():
    ...     model = kbert.BertClassifier.from_preset("base", num_classes=2)
    ...     model.compile()
    >>> model.fit(dataset.batch(32 * strategy.num_replicas_in_sync), epochs=3)
    """
    if keras.backend.backend() != "tensorflow":
        raise ValueError(
            f"kbert.training.strategy() makes a tf.distribute strategy, which only the TensorFlow "
            f"backend trains with; this is the {keras.backend.backend()} backend. With JAX use "
            "kbert.training.data_parallel(), or set KERAS_BACKEND=tensorflow."
        )
    import tensorflow as tf

    tpu = tpu or os.environ.get("TPU_NAME")
    if tpu:
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu="" if tpu == "local" else tpu)
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
        return tf.distribute.TPUStrategy(resolver)
    cluster = json.loads(os.environ.get("TF_CONFIG") or "{}").get("cluster", {})
    if len(cluster.get("worker", [])) + len(cluster.get("chief", [])) > 1:
        return tf.distribute.MultiWorkerMirroredStrategy()
    if len(tf.config.list_logical_devices("GPU")) > 1:
        return tf.distribute.MirroredStrategy()
    return tf.distribute.get_strategy()


def data_parallel(devices=None):
    """Data parallelism with JAX: every device gets a slice of each batch.

    Makes `keras.distribution.DataParallel` over `devices` (default: all of
    `keras.distribution.list_devices()`) and sets it with
    `keras.distribution.set_distribution`, so that models built afterwards
    keep their weights replicated on every device and `fit` shards each
    batch along its first axis. Build the model after this call. For several
    hosts, call `keras.distribution.initialize()` first on each of them.

    On CPU, `XLA_FLAGS=--xla_force_host_platform_device_count=N` (set before
    JAX starts) gives N devices to try it on.

    A batch of a size the devices do not divide (the last one of a data set,
    or `predict` on 5 texts with 4 devices) is padded to a multiple of them
    for its way to the devices, and the step drops the padded rows before
    the model sees them, as `tf.distribute` splits such a batch unevenly:
    losses, metrics and outputs are those of the real rows (in the models
    that mix in `DistributedTraining`, as all of kbert's do).

    Args:
        devices: the devices to use, e.g. `keras.distribution.list_devices("gpu")`.

    Returns:
        The `keras.distribution.DataParallel` now in effect;
        `keras.distribution.set_distribution(None)` turns it off.

    Example:
    >>> kbert.training.data_parallel()
    >>> model = kbert.BertClassifier.from_preset("base", num_classes=2)
    >>> model.fit(texts, labels, batch_size=64)  # 64 / number of devices each
    """
    if keras.backend.backend() != "jax":
        raise ValueError(
            f"keras.distribution.DataParallel needs the JAX backend; this is the "
            f"{keras.backend.backend()} backend. With TensorFlow use kbert.training.strategy(), "
            "or set KERAS_BACKEND=jax."
        )
    distribution = keras.distribution.DataParallel(devices=devices or keras.distribution.list_devices())
    keras.distribution.set_distribution(distribution)
    return distribution


class DistributedTraining:
    """Mixed into kbert's models (`kbert.models.Task`).

    On TensorFlow, works around two Keras 3 trainer failures under
    `tf.distribute`, so that `fit` and `evaluate` run with any strategy,
    `tf.distribute.MultiWorkerMirroredStrategy()` as TensorFlow's guides make
    it included (`_maybe_symbolic_build`, `_make_function`).

    On JAX under a `keras.distribution` (`data_parallel()`), lets `fit`,
    `evaluate`, `predict` and `predict_on_batch` take batches that the
    devices do not divide, with the losses, metrics and outputs of their
    real rows (`kbert.training.partial_batches`).

    The overrides of `_maybe_symbolic_build`, `_symbolic_build` and
    `_make_function` are of private Keras methods
    (keras/src/backend/{tensorflow,jax}/trainer.py), listed in
    `kbert.backend.keras_private.OVERRIDDEN_METHODS`, as are the data adapters
    used on JAX (`APIS`): where a backend or Keras version does not call them, they
    are never called, and the two features that need them refuse to run on
    a Keras that lacks them (`_check_trainer`) rather than train wrongly.
    """

    def _check_trainer(self):
        missing = keras_private.missing_methods("keras.Model")
        if missing:
            raise RuntimeError("; ".join(missing.values()) + ". Install Keras 3.15 (pip install 'keras==3.15.*') "
                               "for this feature.")

    def _maybe_symbolic_build(self, iterator=None, data_batch=None):
        # Keras' TensorFlow trainer builds the model on a first batch that it
        # reduce("MEAN")s over the replicas; under MultiWorkerMirroredStrategy
        # that fails before the first step ("Attempt to convert a value
        # ({'token_ids': PerReplica...}) ... to a Tensor", keras-team/keras#20585).
        # The build only needs shapes and dtypes: one replica's batch has them.
        # Drop this override once Keras no longer reduces the batch.
        import tensorflow as tf

        strategy = keras_private.distribute_strategy(self)
        if strategy is not None and iterator is not None:
            for _, _, batches in iterator:
                data_batch = next(batches)
                break
            data_batch = keras.tree.map_structure(
                lambda v: strategy.experimental_local_results(v)[0]
                if isinstance(v, tf.distribute.DistributedValues) else v,
                data_batch,
            )
        return super()._maybe_symbolic_build(data_batch=data_batch)

    def _make_function(self, step_function, *args, **kwargs):
        if keras.backend.backend() == "jax":  # steps that take PaddedBatches (see `fit` below)
            jitted = not self.run_eagerly and self.jit_compile
            return super()._make_function(partial_batches.on_real_rows(step_function, jitted), *args, **kwargs)
        # Keras' TensorFlow trainer averages each step's logs (loss and
        # metrics: scalars) over the workers of a MultiWorkerMirroredStrategy
        # with strategy.reduce("MEAN", v, axis=0) (reduce_per_replica), which
        # TensorFlow rejects for scalars: "Invalid reduction dimension 0 for
        # input with 0 dimensions" at the first step of every `fit`
        # (tensorflow/tensorflow#72388, a Keras 3 bug; in Keras 3.13 to 3.15).
        # So the step hands its scalars over as vectors of one value:
        # their mean along axis 0 over all workers is the mean over the
        # workers. The logs are made scalars again afterwards, which also keeps
        # them scalars once Keras reduces with axis=None (then drop this).
        strategy = keras_private.distribute_strategy(self)
        if keras.backend.backend() != "tensorflow" or strategy is None:
            return super()._make_function(step_function, *args, **kwargs)
        import tensorflow as tf

        if not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
            return super()._make_function(step_function, *args, **kwargs)
        scalars = set()  # positions, in keras.tree.flatten order, of the step's scalar outputs

        def step_with_scalars_as_vectors(data):
            outputs = step_function(data)
            flat = keras.tree.flatten(outputs)
            for i, value in enumerate(flat):
                if isinstance(value, tf.Tensor) and value.shape.rank == 0:
                    scalars.add(i)
                    flat[i] = tf.reshape(value, [1])
            return keras.tree.pack_sequence_as(outputs, flat)

        function = super()._make_function(step_with_scalars_as_vectors, *args, **kwargs)

        def function_with_scalar_logs(iterator):
            outputs = function(iterator)
            flat = [tf.reshape(value, []) if i in scalars else value
                    for i, value in enumerate(keras.tree.flatten(outputs))]
            return keras.tree.pack_sequence_as(outputs, flat)

        return function_with_scalar_logs

    # === JAX: batches the devices do not divide (kbert.training.partial_batches) ===

    def fit(self, x=None, y=None, batch_size=None, sample_weight=None, shuffle=True, class_weight=None,
            steps_per_epoch=None, validation_split=0.0, validation_data=None, validation_batch_size=None,
            validation_steps=None, **kwargs):
        devices = partial_batches.batch_devices()
        if devices > 1 or self._multi_worker():
            self._check_trainer()
        if devices > 1 and not isinstance(x, partial_batches.PaddedBatches):
            x, validation_data = partial_batches.for_fit(
                devices, x, y, sample_weight, batch_size, steps_per_epoch, shuffle, class_weight,
                validation_split, validation_data, validation_batch_size or batch_size, validation_steps)
            y = sample_weight = class_weight = None
            validation_split = 0.0
        return super().fit(x, y, batch_size=batch_size, sample_weight=sample_weight, shuffle=shuffle,
                           class_weight=class_weight, steps_per_epoch=steps_per_epoch,
                           validation_split=validation_split, validation_data=validation_data,
                           validation_batch_size=validation_batch_size, validation_steps=validation_steps, **kwargs)

    def evaluate(self, x=None, y=None, batch_size=None, sample_weight=None, steps=None, **kwargs):
        devices = partial_batches.batch_devices()
        if devices > 1 or self._multi_worker():
            self._check_trainer()
        if devices > 1 and not isinstance(x, partial_batches.PaddedBatches):
            x = partial_batches.PaddedBatches.of(devices, x, y, sample_weight, batch_size, steps)
            y = sample_weight = None
        return super().evaluate(x, y, batch_size=batch_size, sample_weight=sample_weight, steps=steps, **kwargs)

    def predict(self, x, batch_size=None, steps=None, **kwargs):
        devices = partial_batches.batch_devices()
        if devices > 1:
            self._check_trainer()
        if devices > 1 and not isinstance(x, partial_batches.PaddedBatches):
            x = partial_batches.PaddedBatches.of(devices, x, batch_size=batch_size, steps=steps)
            self._build_on(x.first_x)
        return super().predict(x, batch_size=batch_size, steps=steps, **kwargs)

    def predict_on_batch(self, x):
        devices = partial_batches.batch_devices()
        if devices <= 1:
            return super().predict_on_batch(x)
        self._build_on(lambda: x)
        # Keras' JAX predict_on_batch hands `x` to the step as it is, where
        # the whole batch would run on every device: spread it.
        return super().predict_on_batch(partial_batches.spread(partial_batches.pad(x, devices)))

    def _multi_worker(self):
        strategy = keras_private.distribute_strategy(self)
        if strategy is None or keras.backend.backend() != "tensorflow":
            return False
        return isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy)

    def _build_on(self, first_x):
        # As Keras' predict builds an unbuilt model on its first batch's
        # inputs (`first_x()`), which it cannot read from a PaddedBatch.
        if not all(layer.built for layer in keras_private.flatten_layers(self)):
            with keras.StatelessScope():
                self(first_x())

    def _symbolic_build(self, iterator=None, data_batch=None):
        # Keras' JAX fit and evaluate build the model and its losses and
        # metrics on the first batch of `iterator`, which must be Keras'
        # `(x, y, sample_weight)`: hand it the padded batch itself (only its
        # structure, shapes and dtypes count).
        if iterator is not None and data_batch is None and keras.backend.backend() == "jax":
            iterator = ((begin, end, map(partial_batches.unwrapped, batches)) for begin, end, batches in iterator)
        return super()._symbolic_build(iterator=iterator, data_batch=data_batch)
