"""BERT's learning-rate schedule."""

import keras


@keras.saving.register_keras_serializable(package="kbert")
class WarmupLinearDecay(keras.optimizers.schedules.LearningRateSchedule):
    """BERT's learning rate (§A.2, §A.3): linear warm-up from 0 to `peak` over
    `warmup_steps`, then linear decay to 0 at `total_steps`, counted from the
    optimizer step `start_step`.

    Example:
    >>> schedule = WarmupLinearDecay(5e-5, total_steps=1000, warmup_steps=100)
    """

    def __init__(self, peak, total_steps, warmup_steps, start_step=0):
        self.peak = peak
        self.total_steps = int(total_steps)
        self.warmup_steps = int(warmup_steps)
        self.start_step = int(start_step)

    def __call__(self, step):
        step = keras.ops.cast(step, "float32") - self.start_step
        warmup = step / self.warmup_steps if self.warmup_steps else 1.0
        decay = (self.total_steps - step) / max(self.total_steps - self.warmup_steps, 1)
        return self.peak * keras.ops.clip(keras.ops.minimum(warmup, decay), 0.0, 1.0)

    def get_config(self):
        return {"peak": self.peak, "total_steps": self.total_steps, "warmup_steps": self.warmup_steps,
                "start_step": self.start_step}
