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
        self.total_steps = int(total_steps)
        self.warmup_steps = int(warmup_steps)
        self.start_step = int(start_step)
        self.floor = float(floor)

    def __call__(self, step):
        step = keras.ops.cast(step, "float32") - self.start_step
        warmup = step / self.warmup_steps if self.warmup_steps else 1.0
        decay = (self.total_steps - step) / max(self.total_steps - self.warmup_steps, 1)
        decay = self.floor + (1.0 - self.floor) * keras.ops.clip(decay, 0.0, 1.0)
        return self.peak * keras.ops.clip(keras.ops.minimum(warmup, decay), 0.0, 1.0)

    def get_config(self):
        return {"peak": self.peak, "total_steps": self.total_steps, "warmup_steps": self.warmup_steps,
                "start_step": self.start_step, "floor": self.floor}
