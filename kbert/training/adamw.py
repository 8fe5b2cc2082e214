"""AdamW with one fused kernel per step where the backend has one (PyTorch), and
LAMB; both take the gradient of the global batch on TensorFlow."""

import keras

from kbert import backend
from kbert.backend import keras_private


class GlobalBatchGradients:
    """Mixed into kbert's optimizers (`AdamW`, `Lamb`): on TensorFlow, each
    step's update takes the gradient that one device computes on the global
    batch. Two Keras 3 behaviours on TensorFlow are changed (elsewhere both
    methods keep Keras' result): sparse gradients of embedding lookups are
    made dense, and under a `tf.distribute` strategy with clipping the
    replicas' gradients are summed before the norm is taken. (Both are
    private Keras methods, listed in `kbert.backend.keras_private.OVERRIDDEN_METHODS`.)"""

    def _clip_gradients(self, grads):
        # (Keras calls this on every step, clipping or not, just before the update.)
        # TensorFlow's sparse gradients hold a row once per use in the batch,
        # and Keras' Adam squares them before it adds the repeated rows up:
        # the second moment of a position embedding, used by every row, then
        # comes out smaller and its step larger (docs/benchmarks.md,
        # "Measurements behind the code"). Keras' clipping does the same (a
        # norm of the slices). Each row once:
        grads = [backend.rows_once(g) for g in grads]
        if self._sums_replicas_before_clipping():
            # Under a tf.distribute strategy Keras clips each replica's
            # gradient before it sums them: the norm would be of a share of
            # the batch. Summed first, the norm is of the global batch's
            # gradient, as on one device.
            grads = backend.sum_replicas(grads)
        if self.global_clipnorm and self.global_clipnorm > 0 and not self.clipnorm:
            return backend.clip_by_global_norm(grads, self.global_clipnorm)
        return super()._clip_gradients(grads)

    def _sums_replicas_before_clipping(self):
        # Only where Keras' optimizer sums them in `_all_reduce_sum_gradients`
        # (TensorFlow's), which then leaves them as they are.
        return bool(self.global_clipnorm or self.clipnorm) and hasattr(super(), "_all_reduce_sum_gradients")

    def _all_reduce_sum_gradients(self, grads_and_vars):
        # Keras' TensorFlow optimizer sums the replicas' gradients here, after
        # `_clip_gradients`, unless that summed them already.
        if self._sums_replicas_before_clipping():
            return grads_and_vars
        return super()._all_reduce_sum_gradients(grads_and_vars)

    # The names excluded from weight decay (`exclude_from_weight_decay(var_names=...)`)
    # are kept in the config, so that a model saved and loaded (or cloned)
    # trains on with the same decay: Keras' optimizers forget them.

    def exclude_from_weight_decay(self, var_list=None, var_names=None):
        super().exclude_from_weight_decay(var_list=var_list, var_names=var_names)
        self._no_decay_names = sorted(set(var_names or ()))

    def get_config(self):
        return {**super().get_config(), "exclude_from_weight_decay_names": getattr(self, "_no_decay_names", [])}

    @classmethod
    def from_config(cls, config, custom_objects=None):
        config = dict(config)
        names = config.pop("exclude_from_weight_decay_names", None)
        optimizer = super().from_config(config, custom_objects=custom_objects)
        if names:
            optimizer.exclude_from_weight_decay(var_names=names)
        return optimizer


@keras.saving.register_keras_serializable(package="kbert")
class AdamW(GlobalBatchGradients, keras.optimizers.AdamW):
    """`keras.optimizers.AdamW`; on PyTorch one fused kernel per step
    (`kbert.backend.adamw_step`: what `torch.optim.AdamW(fused=True)` runs);
    on TensorFlow one `ResourceApplyAdam` op per weight (`kbert.backend.
    adam_update`, also under a `tf.distribute` strategy other than a TPU's),
    with the decay, the rate, the betas and the step's powers computed once
    per step, not once per weight, so that the traced update is a few ops
    a weight and traces in a fraction of the time (docs/benchmarks.md,
    "Measurements behind the code"); clipping included (`kbert.backend.clip_by_global_norm`:
    one pass over a gradient where it needs no scaling). JAX keeps Keras'
    update, which XLA fuses.

    Keras' PyTorch update makes about a dozen passes over every weight and its
    two moments (decay, two moment updates, square, square root, epsilon,
    scale, divide, subtract); the fused kernel reads and writes each once. For
    BERT fine-tuning the update is a small part of a step on a CPU (the
    30,522-row word embedding is updated densely; docs/benchmarks.md, "Where
    a PyTorch training step spends its time").

    Gradients as `GlobalBatchGradients` gives them. Same update as Keras:
    the decay `w -= learning_rate * weight_decay * w` first (none on the
    excluded variables), then Adam's. Variables, moments
    and checkpoints are Keras'. `amsgrad`, and weights that are not float32,
    take Keras' update.

    Args: as `keras.optimizers.AdamW`, and
        recipe: the fine-tuning recipe's name and settings, where a task
            model's `compile` made this optimizer from one (see
            `kbert.training.recipes`).
        bias_corrected_epsilon: where epsilon is added. False: Keras', to the
            root of the second moment before its bias correction (the Adam
            paper's "epsilon hat"), where it weighs `1 / sqrt(1 - beta_2**t)`
            times more: 32 times at the first step, 3 at the 100th. True:
            PyTorch's (`torch.optim.AdamW`, transformers' `Trainer`) and
            Algorithm 1 of the paper, after it, so that the same epsilon
            gives the same updates as PyTorch's.
    """

    def __init__(self, *args, bias_corrected_epsilon=False, recipe=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.bias_corrected_epsilon = bool(bias_corrected_epsilon)
        # The fine-tuning recipe a task model's `compile` built this
        # optimizer from (`kbert.training.recipes`), kept in the config so
        # that the model trains on as it would after `load_model` or
        # `clone_model`.
        self.recipe = dict(recipe) if recipe else None

    def get_config(self):
        return {**super().get_config(), "bias_corrected_epsilon": self.bias_corrected_epsilon, "recipe": self.recipe}

    def _keras_epsilon(self, beta_2_power):
        """The epsilon that Keras' update adds for this one's."""
        if not self.bias_corrected_epsilon:
            return self.epsilon
        return self.epsilon * keras.ops.sqrt(1 - beta_2_power)

    def update_step(self, gradient, variable, learning_rate):
        ops = keras.ops
        scalars = self._step_scalars(learning_rate, variable.dtype)
        if self._decays_in_update_step() and self.weight_decay and keras_private.use_weight_decay(self, variable):
            # As Keras' pass does it, at the rate Keras gives this step.
            self.assign_sub(variable, variable * scalars["decay"])
        if self.amsgrad:
            return super().update_step(gradient, variable, learning_rate)
        lr, beta_1_power, beta_2_power, epsilon = (scalars[k] for k in ("lr", "beta_1_power", "beta_2_power",
                                                                         "epsilon"))
        m, v = keras_private.adam_moments(self, variable)
        if backend.adam_update(variable, gradient, m, v, beta_1_power, beta_2_power, lr, scalars["beta_1"],
                               scalars["beta_2"], epsilon):
            return  # TensorFlow: one op
        if not self.bias_corrected_epsilon:
            return super().update_step(gradient, variable, learning_rate)
        # Keras Adam's update with the epsilon that makes it PyTorch's.
        gradient = ops.cast(gradient, variable.dtype)
        alpha = lr * ops.sqrt(1 - beta_2_power) / (1 - beta_1_power)
        self.assign_add(m, ops.multiply(ops.subtract(gradient, m), 1 - self.beta_1))
        self.assign_add(v, ops.multiply(ops.subtract(ops.square(gradient), v), 1 - self.beta_2))
        self.assign_sub(variable, ops.divide(ops.multiply(m, alpha), ops.add(ops.sqrt(v), epsilon)))

    def _step_scalars(self, learning_rate, dtype):
        """This step's rate, `beta_1 ** t`, `beta_2 ** t`, Keras' epsilon,
        the betas and the decay's factor (rate times weight decay), in
        `dtype`. On TensorFlow computed once per step and dtype, not once per
        variable (each a constant or an op of every variable's update, which
        the first `fit` traces and optimises): Keras gives every variable's
        `update_step` the same `learning_rate` tensor, which keys the cache
        (and is held by it, so its id is not reused)."""
        dtype = keras.backend.standardize_dtype(dtype)
        cached = getattr(self, "_scalars_of_step", None)
        if cached is not None and cached[0] is learning_rate and cached[1] == dtype:
            return cached[2]
        ops = keras.ops
        local_step = ops.cast(self.iterations + 1, dtype)
        beta_2_power = ops.power(ops.cast(self.beta_2, dtype), local_step)
        lr = ops.cast(learning_rate, dtype)
        scalars = {"lr": lr, "beta_1_power": ops.power(ops.cast(self.beta_1, dtype), local_step),
                   "beta_2_power": beta_2_power, "epsilon": self._keras_epsilon(beta_2_power),
                   "beta_1": ops.cast(self.beta_1, dtype), "beta_2": ops.cast(self.beta_2, dtype),
                   "decay": lr * ops.cast(self.weight_decay or 0.0, dtype)}
        if keras.backend.backend() == "tensorflow":
            self._scalars_of_step = (learning_rate, dtype, scalars)
        return scalars

    def _decays_in_update_step(self):
        # TensorFlow: Keras' pass of weight decay computes the learning rate
        # (the schedule) again for every decayed variable, ops that the traced
        # step then carries (docs/benchmarks.md, "Measurements behind the
        # code"). Each variable's update decays it instead.
        return keras.backend.backend() == "tensorflow"

    def _fused(self, variables=None):
        variables = keras_private.trainable_variables(self) if variables is None else variables
        return not self.amsgrad and backend.fuses_adamw(variables)

    def _apply_weight_decay(self, variables):
        if not self._fused(variables) and not self._decays_in_update_step():
            super()._apply_weight_decay(variables)
        # Else the fused step or `update_step` decays the weights.

    def _backend_update_step(self, grads, trainable_variables, learning_rate):
        if not self._fused(trainable_variables):
            super()._backend_update_step(grads, trainable_variables, learning_rate)
            self._scalars_of_step = None  # not kept past the step (nor its graph)
            return
        step = float(keras.ops.convert_to_numpy(self.iterations)) + 1
        lr = float(keras.ops.convert_to_numpy(learning_rate))
        groups = {True: [], False: []}  # decayed or not
        for i, variable in enumerate(trainable_variables):
            groups[bool(self.weight_decay) and keras_private.use_weight_decay(self, variable)].append(i)
        for decay, chosen in groups.items():
            if not chosen:
                continue
            moments = [keras_private.adam_moments(self, trainable_variables[i]) for i in chosen]
            backend.adamw_step(
                [trainable_variables[i] for i in chosen],
                [grads[i] for i in chosen],
                [m for m, _ in moments],
                [v for _, v in moments],
                step=step,
                learning_rate=lr,
                beta_1=self.beta_1,
                beta_2=self.beta_2,
                epsilon=float(self._keras_epsilon(self.beta_2**step)),
                weight_decay=self.weight_decay if decay else 0.0,
            )


@keras.saving.register_keras_serializable(package="kbert")
class Lamb(GlobalBatchGradients, keras.optimizers.Lamb):
    """`keras.optimizers.Lamb` taking the gradients `GlobalBatchGradients`
    gives (Keras' update would square a repeated row's sparse slices too)."""
