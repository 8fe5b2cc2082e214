"""Batches that JAX's devices do not divide, under a `keras.distribution`.

Keras' JAX trainer sends every batch to the devices with
`jax.make_array_from_process_local_data`, split along its first axis, which
refuses a batch of 2 rows over 4 devices (`IndivisibleError`): the last
batch of most data sets, or a `predict` on a few texts. `tf.distribute`
splits such a batch unevenly instead.

Here a batch travels padded to a multiple of the devices (a `PaddedBatch`),
and each step cuts the padded rows off inside its compiled function, before
the model runs: the loss, its gradients, the metrics and the outputs are
the real rows' alone, exactly as on one device, and the cut batch stays
spread over the devices (XLA pads it within the step as it needs).
`kbert.training.DistributedTraining` wires this into `fit`, `evaluate`,
`predict` and `predict_on_batch`.

Keras' data adapters (what `fit` makes of arrays, `tf.data`, generators ...)
are private Keras API (keras/src/trainers/data_adapters), reached through
`kbert.backend.keras_private`: a Keras without them fails this feature only.
"""

import collections

import keras
import numpy as np

from kbert.backend import keras_private

# A batch on its way to the devices, padded to a multiple of them: `batch`
# (Keras' `(x, y, sample_weight)`, or `(x,)`) with copies of its first rows
# at its end, and `padding`, an array of shape [devices, padded rows]: its
# shape carries the count into the compiled step (which sees shapes, not
# values), and the devices divide it like any batch.
PaddedBatch = collections.namedtuple("PaddedBatch", ["batch", "padding"])


def batch_devices():
    """How many devices the JAX `keras.distribution` in effect splits each
    batch over: 1 on other backends, without one, and with several
    processes (whose batches Keras places as it does)."""
    distribution = keras.distribution.distribution()
    if keras.backend.backend() != "jax" or distribution is None:
        return 1
    import jax

    mesh = distribution.device_mesh
    if jax.process_count() > 1 or distribution.batch_dim_name not in mesh.axis_names:
        return 1
    return mesh.shape[mesh.axis_names.index(distribution.batch_dim_name)]


def pad(batch, devices):
    """`batch` (arrays, first axis the rows) as a `PaddedBatch` whose rows
    `devices` divides."""
    rows = next(v.shape[0] for v in keras.tree.flatten(batch) if v is not None)
    count = -rows % devices
    # Copies of real rows, not zeros: valid ids and labels for any model
    # (though no step runs them).
    padded = keras.tree.map_structure(
        lambda v: v if v is None or not count else np.concatenate([v, np.resize(v, (count, *v.shape[1:]))]), batch)
    return PaddedBatch(padded, np.zeros((devices, count), "int8"))


def spread(batch):
    """`batch` sent to the devices, split along its first axis, as Keras' fit
    sends each of its batches."""
    distribution = keras.distribution.distribution()
    return keras.tree.map_structure(
        lambda v: None if v is None else keras.distribution.distribute_tensor(v, distribution.get_data_layout(v.shape)),
        batch)


def _padded(data):
    """The `PaddedBatch` in a step's data (itself, or the `x` of a `(x,)`,
    as `predict_on_batch` hands it on), or None."""
    if isinstance(data, tuple) and len(data) == 1:
        data = data[0]
    return data if isinstance(data, PaddedBatch) else None


def _rewrapped(data, batch):
    return (batch,) if _padded(data) is not data else batch


def unwrapped(data):
    """A step's data as Keras reads it: a `PaddedBatch`'s batch (padding
    included); other data as it is."""
    padded = _padded(data)
    return data if padded is None else _rewrapped(data, padded.batch)


def real_rows(data):
    """A step's data as Keras reads it, without the padded rows."""
    padded = _padded(data)
    count = padded.padding.shape[1]
    return _rewrapped(data, keras.tree.map_structure(
        lambda v: None if v is None else v[:v.shape[0] - count], padded.batch))


def on_real_rows(step_function, jitted):
    """`step_function(state, data)` (a step of Keras' JAX trainer, compiled
    where `jitted`) taking `PaddedBatch`es. The padding is cut off inside a
    compiled function around the step (a nested jit keeps the step's own
    shardings and donations): cut outside, the batch would be copied whole
    to every device, and each would run all of it."""
    import jax

    def cut(state, data):
        return step_function(state, real_rows(data))

    if jitted:
        cut = jax.jit(cut, donate_argnums=0)

    def step(state, data):
        padded = _padded(data)
        if padded is not None and padded.padding.shape[1]:
            return cut(state, data)
        return step_function(state, unwrapped(data))

    return step


def for_fit(devices, x, y, sample_weight, batch_size, steps, shuffle, class_weight, validation_split,
            validation_data, validation_batch_size, validation_steps):
    """`fit`'s training and validation data as `PaddedBatches`, split as
    Keras' fit splits `validation_split` (arrays only, before batching)."""
    if validation_split and validation_data is None:
        (x, y, sample_weight), validation_data = keras_private.get("train_validation_split")(
            (x, y, sample_weight), validation_split=validation_split)
    training = PaddedBatches.of(devices, x, y, sample_weight, batch_size, steps, shuffle, class_weight)
    if validation_data is not None:
        val_x, val_y, val_sample_weight = keras.utils.unpack_x_y_sample_weight(validation_data)
        validation_data = PaddedBatches.of(devices, val_x, val_y, val_sample_weight, validation_batch_size,
                                           validation_steps)
    return training, validation_data


class PaddedBatches(keras_private.data_adapter_base()):
    """Keras' data adapter of some data (`of`), its batches handed on as
    `PaddedBatch`es. Keras' trainers take an adapter where they take `x`."""

    @classmethod
    def of(cls, devices, x, y=None, sample_weight=None, batch_size=None, steps=None, shuffle=False,
           class_weight=None):
        get_data_adapter = keras_private.get("get_data_adapter")
        return cls(get_data_adapter(x, y, sample_weight, batch_size=batch_size, steps_per_epoch=steps,
                                    shuffle=shuffle, class_weight=class_weight), devices)

    def __init__(self, adapter, devices):
        self.adapter = adapter
        self.devices = devices

    def first_x(self):
        """The inputs of the first batch, unpadded."""
        return keras.utils.unpack_x_y_sample_weight(next(iter(self.adapter.get_numpy_iterator())))[0]

    def get_jax_iterator(self):
        return (pad(batch, self.devices) for batch in self.adapter.get_jax_iterator())

    def get_numpy_iterator(self):
        return (pad(batch, self.devices) for batch in self.adapter.get_numpy_iterator())

    @property
    def num_batches(self):
        return self.adapter.num_batches

    @property
    def batch_size(self):
        return self.adapter.batch_size

    @property
    def has_partial_batch(self):
        return self.adapter.has_partial_batch

    @property
    def partial_batch_size(self):
        return self.adapter.partial_batch_size

    def on_epoch_begin(self):
        self.adapter.on_epoch_begin()

    def on_epoch_end(self):
        self.adapter.on_epoch_end()
