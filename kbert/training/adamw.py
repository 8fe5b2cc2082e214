"""AdamW with one fused kernel per step where the backend has one (PyTorch)."""

import keras

from kbert import backend


@keras.saving.register_keras_serializable(package="kbert")
class AdamW(keras.optimizers.AdamW):
    """`keras.optimizers.AdamW`; on PyTorch one fused kernel per step
    (`kbert.backend.adamw_step`: what `torch.optim.AdamW(fused=True)` runs).
    TensorFlow and JAX keep Keras' update.

    Keras' PyTorch update makes about a dozen passes over every weight and its
    two moments (decay, two moment updates, square, square root, epsilon,
    scale, divide, subtract); the fused kernel reads and writes each once. For
    BERT fine-tuning the update is a few percent of a step on a CPU (the
    30,522-row word embedding is updated densely).

    Same update as Keras: the decay `w -= learning_rate * weight_decay * w`
    first (none on the excluded variables), then Adam's, with Keras' epsilon.
    Variables, moments and checkpoints are Keras'. `amsgrad`, and weights that
    are not float32, take Keras' update.

    Args: as `keras.optimizers.AdamW`.
    """

    def _fused(self, variables=None):
        variables = self._trainable_variables if variables is None else variables
        return not self.amsgrad and backend.fuses_adamw(variables)

    def _apply_weight_decay(self, variables):
        if not self._fused(variables):
            super()._apply_weight_decay(variables)
        # Else the fused step decays the weights.

    def _backend_update_step(self, grads, trainable_variables, learning_rate):
        if not self._fused(trainable_variables):
            return super()._backend_update_step(grads, trainable_variables, learning_rate)
        step = float(keras.ops.convert_to_numpy(self.iterations)) + 1
        lr = float(keras.ops.convert_to_numpy(learning_rate))
        groups = {True: [], False: []}  # decayed or not
        for i, variable in enumerate(trainable_variables):
            groups[bool(self.weight_decay) and self._use_weight_decay(variable)].append(i)
        for decay, chosen in groups.items():
            if not chosen:
                continue
            slots = [self._get_variable_index(trainable_variables[i]) for i in chosen]
            backend.adamw_step(
                [trainable_variables[i] for i in chosen],
                [grads[i] for i in chosen],
                [self._momentums[j] for j in slots],
                [self._velocities[j] for j in slots],
                step=step,
                learning_rate=lr,
                beta_1=self.beta_1,
                beta_2=self.beta_2,
                epsilon=self.epsilon,
                weight_decay=self.weight_decay if decay else 0.0,
            )
