"""BERT's learning-rate schedule."""

import keras


@keras.saving.register_keras_serializable(package="kbert")
class WarmupLinearDecay(keras.optimizers.schedules.LearningRateSchedule):
    """BERT's learning rate (§A.2, §A.3): linear warm-up from 0 to `peak` over
    `warmup_steps`, then linear decay to `floor * peak` (BERT: 0) at
    `total_steps`, counted from the optimizer step `start_step`. `floor=1`:
    constant after the warm-up.

    Example:
    >>> schedule = WarmupLinearDecay(5e-5, total_steps=1000, warmup_steps=100)
    """

    def __init__(self, peak, total_steps, warmup_steps, start_step=0, floor=0.0):
        if not 0.0 <= floor <= 1.0:
            raise ValueError(f"floor={floor}: the rate decays to floor * peak; give a floor in [0, 1].")
        self.peak = peak
        self.floor = float(floor)
        # The step counts are a variable that a traced training step reads
        # when it runs, so that `restart` needs no new trace.
        self._steps = keras.Variable([int(total_steps), int(warmup_steps), int(start_step)], dtype="float32",
                                     trainable=False, name="warmup_linear_decay_steps")

    def restart(self, total_steps, warmup_steps, start_step):
        """The same schedule over new steps: a second `fit` gets its own
        warm-up and decay. A training step traced by TensorFlow reads them as
        they are when it runs (JAX's compiled step holds those of its trace)."""
        self._steps.assign([int(total_steps), int(warmup_steps), int(start_step)])

    @property
    def total_steps(self):
        return self._step_count(0)

    @property
    def warmup_steps(self):
        return self._step_count(1)

    @property
    def start_step(self):
        return self._step_count(2)

    def _step_count(self, i):
        return int(keras.ops.convert_to_numpy(self._steps)[i])

    def __call__(self, step):
        total, warmup, start = (self._steps[i] for i in range(3))
        step = keras.ops.cast(step, "float32") - start
        warmup_done = keras.ops.where(warmup > 0, step / keras.ops.maximum(warmup, 1.0), 1.0)
        decay = (total - step) / keras.ops.maximum(total - warmup, 1.0)
        decay = self.floor + (1.0 - self.floor) * keras.ops.clip(decay, 0.0, 1.0)
        return self.peak * keras.ops.clip(keras.ops.minimum(warmup_done, decay), 0.0, 1.0)

    def get_config(self):
        return {"peak": self.peak, "total_steps": self.total_steps, "warmup_steps": self.warmup_steps,
                "start_step": self.start_step, "floor": self.floor}
