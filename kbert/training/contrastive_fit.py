"""Contrastive training of a sentence embedder on columns of texts
(anchors, positives, negatives...): the batches, the model that embeds every
column of a batch for the losses of `kbert.training.contrastive`, and
GradCache, for batches larger than fit in memory.

Nothing here knows a model class: `fit_columns` takes the embedder (any
Keras model from a dict of int32 features to one embedding per example) and
the batches already turned into its features, so that the model's own
preprocessing is the only one (`BertTextEmbedder.fit` calls these).
"""

import contextlib
import numbers

import keras
import numpy as np
from keras import ops

from kbert import backend
from kbert.backend import keras_private
from kbert.tf_if_present import tf
from kbert.training.contrastive import batches_without_duplicates
from kbert.training.distribution import DistributedTraining


def check_mini_batch_size(mini_batch_size):
    if mini_batch_size is not None and (isinstance(mini_batch_size, bool) or
                                        not isinstance(mini_batch_size, numbers.Integral) or mini_batch_size < 1):
        raise ValueError(f"mini_batch_size={mini_batch_size!r}: give a positive number of examples, or None.")


def column_batches(columns, scores, batch_size, epochs, seed=None, no_duplicates=False):
    """Every epoch's batches of examples, as texts: a `tf.data.Dataset` of
    `((column texts, ...), scores)`, and the steps of an epoch.

    Each epoch is shuffled anew (`seed + epoch`), and every epoch is cut to
    the shortest's steps (`no_duplicates` leaves some batches short).

    Args:
        columns: string tensors `[examples]`, one per column (anchors,
            positives, negatives...).
        scores: one float per example (a scored pair's), or None (zeros).
        batch_size: the most examples in a batch.
        epochs: how many epochs' batches.
        seed: of the shuffles.
        no_duplicates: batches in which no text appears twice
            (`batches_without_duplicates`).
    """
    if len(columns) < 2:
        raise ValueError(f"Got {len(columns)} list of texts; fit takes (anchors, positives[, negatives]).")
    n = int(columns[0].shape[0])
    if scores is not None and len(scores) != n:
        raise ValueError(f"Got {n} pairs but {len(scores)} scores; pass one score per pair.")
    texts = [[t.decode("utf-8", "replace") for t in c.numpy()] for c in columns] if no_duplicates else None
    per_epoch = []
    for epoch in range(epochs):
        epoch_seed = None if seed is None else seed + epoch
        if no_duplicates:
            per_epoch.append(batches_without_duplicates(texts, batch_size, epoch_seed))
        else:
            order = np.random.default_rng(epoch_seed).permutation(n)
            per_epoch.append([order[i:i + batch_size] for i in range(0, n, batch_size)])
    steps = min(len(b) for b in per_epoch)
    batches = [batch for epoch in per_epoch for batch in epoch[:steps]]
    rows = tf.RaggedTensor.from_row_lengths(np.concatenate(batches).astype("int64"), [len(b) for b in batches])
    scores = tf.constant(np.zeros(n, "float32") if scores is None else np.asarray(scores, "float32"))

    def gather(batch):
        return tuple(tf.gather(c, batch) for c in columns), tf.gather(scores, batch)

    return tf.data.Dataset.from_tensor_slices(rows).map(tf.autograph.experimental.do_not_convert(gather)), steps


def fit_columns(embedder, dataset, steps_per_epoch, num_columns, loss, batch_size, epochs=1, mini_batch_size=None,
                **kwargs):
    """Trains `embedder`'s trainable variables (`embedder.trainable_variables`:
    those it says it trains) on batches of `num_columns` columns:
    `fit` of a `columns_model` of it (or, with `mini_batch_size`, its
    `CachedColumnsModel`) with `loss` and the embedder's optimizer and
    `jit_compile`. Callbacks are given the embedder as their model (what
    they set on it, `stop_training`, stops this fit), and in their `params`
    the `mini_batches` a replica runs a step (0 without GradCache). Returns
    the `History`.

    Args:
        embedder: a compiled Keras model from a dict of int32 `[batch, length]`
            features to `[batch, dim]` embeddings.
        dataset: batches `((features of each column), scores)` of
            `batch_size` examples (or fewer), `steps_per_epoch` of them an epoch.
        loss: a loss of `[batch, columns, dim]` embeddings
            (`kbert.training.contrastive`).
        mini_batch_size: GradCache's mini-batch (see `CachedColumnsModel`), or None.
        **kwargs: for Keras' `fit`.
    """
    # Made in the strategy the embedder was built in (if any), so that fit
    # runs on its replicas.
    strategy = keras_private.distribute_strategy(embedder)
    with strategy.scope() if strategy is not None else contextlib.nullcontext():
        model = columns_model(embedder, num_columns)
        # Under a tf.distribute strategy each replica runs its share of
        # the global batch, in as many mini-batches as that needs.
        replicas = strategy.num_replicas_in_sync if strategy is not None else 1
        per_replica = -(-batch_size // replicas)
        mini_batches = 0  # a replica's per step, with GradCache
        if mini_batch_size is not None and mini_batch_size < per_replica:
            mini_batches = -(-per_replica // mini_batch_size)
            model = CachedColumnsModel(model, mini_batch_size, mini_batches)
        model.compile(optimizer=embedder.optimizer, loss=loss, jit_compile=embedder.jit_compile)
        if not embedder.optimizer.built:
            # Over the variables trained here, in the embedder's order: the
            # optimizer's state is saved and loaded back in this order.
            embedder.optimizer.build(model.trainable_variables)
    kwargs.pop("shuffle", None)  # done in the batches, per epoch
    verbose = kwargs.pop("verbose", "auto")
    verbose = 1 if verbose == "auto" else verbose
    callbacks = keras.callbacks.CallbackList(kwargs.pop("callbacks", None), add_history=True,
                                             add_progbar=verbose != 0, verbose=verbose, epochs=epochs,
                                             steps=steps_per_epoch, mini_batches=mini_batches, model=embedder)
    return model.fit(dataset, epochs=epochs, steps_per_epoch=steps_per_epoch, shuffle=False, verbose=verbose,
                     callbacks=callbacks, **kwargs)


class _ColumnsTraining:
    """Mixed into a model that trains an embedder's variables on behalf of
    the embedder: those the embedder says it trains (its own
    `trainable_variables`, which may leave out some that Keras' flags count
    trainable: a `Task`'s pooler), not Keras' flags of its layers;
    `stop_training` and `history`, which callbacks set on their model, are
    the embedder's."""

    def _train_for(self, embedder):
        # Kept outside Keras' tracking: the embedder is a layer of this
        # model already, and its variables are this model's.
        self.__dict__["_embedder"] = embedder

    def _held(self, variables):
        embedder = self.__dict__.get("_embedder")
        trained = {id(v) for v in (variables if embedder is None else embedder.trainable_variables)}
        return [v for v in variables if id(v) not in trained], [v for v in variables if id(v) in trained]

    @property
    def trainable_variables(self):
        return self._held(super().trainable_variables)[1]

    @property
    def trainable_weights(self):
        return self._held(super().trainable_weights)[1]

    @property
    def non_trainable_variables(self):
        return super().non_trainable_variables + self._held(super().trainable_variables)[0]

    @property
    def non_trainable_weights(self):
        return super().non_trainable_weights + self._held(super().trainable_weights)[0]

    @property
    def stop_training(self):
        embedder = self.__dict__.get("_embedder")
        return embedder.stop_training if embedder is not None else self.__dict__.get("_stop_training", False)

    @stop_training.setter
    def stop_training(self, value):
        embedder = self.__dict__.get("_embedder")
        if embedder is not None:
            embedder.stop_training = value
        else:
            self.__dict__["_stop_training"] = value

    @property
    def history(self):
        return self._embedder.history


class ColumnsModel(_ColumnsTraining, DistributedTraining, keras.Model):
    """The embedder on each column of a batch: a plain functional model with
    the fixes that let Keras train it under any `tf.distribute` strategy."""


def columns_model(embedder, num_columns):
    """A model of `embedder`'s weights that embeds each column of a batch:
    `[batch, columns, dim]`, what the contrastive losses take; it trains
    what `embedder` trains."""
    inputs = tuple(
        {name: keras.Input(shape=(None,), dtype="int32", name=f"{name}_{i}") for name in embedder.input}
        for i in range(num_columns)
    )
    outputs = ops.stack([embedder(features) for features in inputs], axis=1)
    model = ColumnsModel(inputs, outputs, name=f"{embedder.name}_columns")
    model._train_for(embedder)
    return model


class CachedColumnsModel(_ColumnsTraining, DistributedTraining, keras.Model):
    """GradCache (Gao et al. 2021, "Scaling Deep Contrastive Learning Batch
    Size under Memory Limited Setup"; sentence-transformers'
    `CachedMultipleNegativesRankingLoss`). The columns model runs on
    `mini_batch_size` examples at a time, each run rematerialised
    (`kbert.backend.remat_in_turn`): the forward pass keeps only the batch's
    embeddings, and the backward pass computes each mini-batch's again, with
    its share of the loss' gradient, one at a time. The loss itself sees the
    whole batch: the same loss and gradients as without it.

    The recomputation draws the same dropout masks as the first pass: each
    mini-batch sets every seed generator's state from the step's seed and
    its own index, and the model's own seed generator moves on once per
    step.

    Args:
        columns: a `columns_model`.
        mini_batch_size: examples per run of `columns`.
        max_chunks: mini-batches of the largest batch (a TensorFlow graph's
            batch size is unknown).
    """

    # Seed counters of two mini-batches lie this far apart. Keras on PyTorch
    # seeds with the sum of a state's two words, so generator j's draws
    # (base + j, then one more per call) must stay below the next
    # mini-batch's; and the counter runs through its 2**32 values in
    # 2**32 / (_SPACING * mini-batches) steps before masks repeat.
    _SPACING = 2**10

    def __init__(self, columns, mini_batch_size, max_chunks, **kwargs):
        super().__init__(name=f"{columns.name}_cached", **kwargs)
        self.columns = columns
        self.mini_batch_size = int(mini_batch_size)
        self.max_chunks = int(max_chunks)
        self._seed_states = [v for v in columns.non_trainable_variables if v.name == "seed_generator_state"]
        if 2 * len(self._seed_states) > self._SPACING:
            raise ValueError(f"{len(self._seed_states)} dropout layers: GradCache replays at most "
                             f"{self._SPACING // 2}.")
        self.chunk_seeds = keras.random.SeedGenerator()
        self._train_for(columns._embedder)

    def call(self, inputs, training=False):
        size = ops.shape(keras.tree.flatten(inputs)[0])[0]
        chunks = -(-size // self.mini_batch_size) if isinstance(size, int) else self.max_chunks
        # A copy: on TensorFlow `.value` is the variable itself, which the
        # recomputation would read after it has moved on below.
        base = ops.copy(self.chunk_seeds.state.value)
        dtype = base.dtype

        def run(i):  # (`i` a number, or on TensorFlow a scalar tensor)
            # Generator j of mini-batch i: seed word base + j, counter from
            # base + i * _SPACING.
            counter = ops.cast(i, dtype) * self._SPACING
            for j, variable in enumerate(self._seed_states):
                variable.assign(base + ops.stack([ops.convert_to_tensor(j, dtype), counter]))
            start = i * self.mini_batch_size
            part = keras.tree.map_structure(lambda t: t[start:start + self.mini_batch_size], inputs)
            return self.columns(part, training=training)

        outputs = backend.remat_in_turn(run, chunks)
        moved = base + ops.convert_to_tensor([0, chunks * self._SPACING], dtype=dtype)
        self.chunk_seeds.state.assign(moved)
        for variable in self._seed_states:
            variable.assign(moved)  # (under JAX: no value of the remat trace is left behind)
        return ops.concatenate(outputs, axis=0)
