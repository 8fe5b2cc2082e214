"""BERT's optimizers, for fine-tuning and pre-training.

`bert_adamw` with `WarmupLinearDecay` is what `Task.compile()` uses by default.
"""

import math

import keras

from kbert.training.adamw import AdamW, Lamb
from kbert.training.schedules import WarmupLinearDecay

# Biases and LayerNorm's gamma and beta are not decayed.
NO_WEIGHT_DECAY = ["bias", "gamma", "beta"]


# transformers' `Trainer` (`adam_epsilon`), added where PyTorch adds it. BERT's
# code used 1e-6; Keras adds it before the bias correction of the second
# moment, where it weighs as 3e-5 added after it at the first step, damping
# the updates of weights with small gradients.
EPSILON = 1e-8
BERT_EPSILON = 1e-6


def bert_adamw(learning_rate, weight_decay=0.01, epsilon=EPSILON, bias_corrected_epsilon=True, recipe=None,
               global_clipnorm=None):
    """AdamW as BERT fine-tunes: decay on weights, none on biases and LayerNorm
    (`kbert.training.AdamW`: Keras' AdamW, updating in fused kernels).

    Args:
        learning_rate: a float or a schedule.
        weight_decay: decoupled weight decay.
        epsilon: added to the root of the second moment (transformers'
            `Trainer`: 1e-8; BERT's code: 1e-6).
        bias_corrected_epsilon: True: epsilon is added where PyTorch adds
            it, after the bias correction; False: where Keras does (see
            `kbert.training.AdamW`).
        recipe: the recipe it is made from, kept in its config (see `AdamW`).
        global_clipnorm: the gradients' global norm is clipped at it (None: no clipping).

    Example:
    >>> optimizer = bert_adamw(WarmupLinearDecay(5e-5, total_steps=1000, warmup_steps=100))
    """
    optimizer = AdamW(learning_rate=learning_rate, weight_decay=weight_decay, epsilon=epsilon,
                      bias_corrected_epsilon=bias_corrected_epsilon, recipe=recipe, global_clipnorm=global_clipnorm)
    optimizer.exclude_from_weight_decay(var_names=NO_WEIGHT_DECAY)
    return optimizer


def bert_lamb(learning_rate, weight_decay=0.01):
    """LAMB (You et al. 2020), the optimizer for BERT with large batches.

    Adam's update rescaled per weight matrix by the trust ratio
    `||w|| / ||update||`, which keeps training stable at batch sizes of
    thousands (the paper pre-trains BERT with batches of 32k). Weight decay
    as `bert_adamw`: none on biases and LayerNorm. Keras' `Lamb` decays the
    weights separately from the update (as AdamW), not inside the trust ratio
    as the paper does.

    Args:
        learning_rate: a float or a schedule. LAMB takes larger rates than
            Adam (the paper: about 1e-3 to 6e-3 for batches of 8k to 32k).
        weight_decay: decoupled weight decay.

    Example:
    >>> optimizer = bert_lamb(WarmupLinearDecay(2e-3, total_steps=10000, warmup_steps=1000))
    """
    optimizer = Lamb(learning_rate=learning_rate, weight_decay=weight_decay, epsilon=BERT_EPSILON)
    optimizer.exclude_from_weight_decay(var_names=NO_WEIGHT_DECAY)
    return optimizer


def fine_tuning_optimizer(total_steps, learning_rate=5e-5, warmup=0.1, weight_decay=0.01, epsilon=EPSILON,
                          **options):
    """BERT's fine-tuning optimizer (§A.3): AdamW with linear warm-up over the
    first `warmup` of the run (rounded up, as transformers' `Trainer`), then
    linear decay to 0 at `total_steps`.

    What `Task.compile()` gives by default, with the knobs exposed: use it to
    change the rate, clip gradients, accumulate them, or scale the loss.

    Args:
        total_steps: training steps of the whole run (`fit` batches:
            epochs x steps per epoch).
        learning_rate: the peak rate; §A.3 searches 5e-5, 3e-5 and 2e-5.
        warmup: the share of `total_steps` spent warming up.
        weight_decay: AdamW's decoupled weight decay (none on biases and LayerNorm).
        epsilon: Adam's epsilon (see `bert_adamw`).
        **options: `global_clipnorm` (`Task.compile`'s default and
            transformers' `Trainer` clip at 1.0), `gradient_accumulation_steps`,
            `loss_scale`; see `with_options`.

    Example:
    >>> steps = epochs * math.ceil(len(texts) / 32)
    >>> model.compile(optimizer=kbert.training.fine_tuning_optimizer(steps, learning_rate=3e-5))
    """
    schedule = WarmupLinearDecay(learning_rate, total_steps, warmup_steps(warmup, total_steps))
    return with_options(bert_adamw(schedule, weight_decay, epsilon), **options)


def warmup_steps(warmup, total_steps):
    """The warm-up's steps for a share `warmup` of `total_steps`: rounded up,
    as transformers' `Trainer` rounds its `warmup_ratio`."""
    return min(math.ceil(warmup * total_steps - 1e-9), int(total_steps))


def pretraining_optimizer(total_steps, learning_rate=1e-4, warmup_steps=10000, optimizer="adamw",
                          weight_decay=0.01, **options):
    """BERT's pre-training optimizer (§A.2): Adam with learning rate 1e-4,
    β1 = 0.9, β2 = 0.999, L2 weight decay 0.01, warm-up over the first 10,000
    steps and linear decay of the rate; or LAMB for large batches.

    Args:
        total_steps: training steps of the whole run (BERT: 1,000,000).
        learning_rate: the peak rate.
        warmup_steps: steps of linear warm-up.
        optimizer: `"adamw"` (BERT's) or `"lamb"` (large batches; see `bert_lamb`).
        weight_decay: decoupled weight decay (none on biases and LayerNorm).
        **options: `global_clipnorm` (BERT's reference code clips at 1.0),
            `gradient_accumulation_steps`, `loss_scale`; see `with_options`.

    Example:
    >>> model.compile(optimizer=kbert.training.pretraining_optimizer(
    ...     100_000, learning_rate=2e-3, warmup_steps=2000, optimizer="lamb", global_clipnorm=1.0))
    """
    # Pre-training keeps Keras' epsilon of 1e-6, as before.
    makers = {"adamw": lambda rate, decay: bert_adamw(rate, decay, BERT_EPSILON, bias_corrected_epsilon=False),
              "lamb": bert_lamb}
    if optimizer not in makers:
        raise ValueError(f'Unknown optimizer "{optimizer}"; pass "adamw" (BERT\'s) or "lamb" (large batches).')
    schedule = WarmupLinearDecay(learning_rate, total_steps, min(warmup_steps, total_steps))
    return with_options(makers[optimizer](schedule, weight_decay), **options)


def with_options(optimizer, global_clipnorm=None, gradient_accumulation_steps=None, loss_scale=False):
    """Adds gradient clipping, gradient accumulation or loss scaling to a
    Keras optimizer that has not been used yet.

    Args:
        optimizer: a `keras.optimizers.Optimizer`, not yet built (before `fit`).
        global_clipnorm: clip the gradients so that their norm over all
            weights together is at most this.
        gradient_accumulation_steps: update the weights every this many
            batches, with their mean gradient: the effect of a batch this many
            times larger, in the memory of one. The learning-rate schedule
            still counts batches, so give it `total_steps` in batches.
        loss_scale: wrap the optimizer in `keras.optimizers.LossScaleOptimizer`,
            which `mixed_float16` needs so that small gradients do not
            underflow. Keras only does it by itself when the model's own dtype
            policy is `mixed_float16`; a task model's policy is float32 even
            when its backbone computes in float16, so ask for it here.
            (`mixed_bfloat16` has float32's range and needs none.)

    Returns:
        The optimizer, or its `LossScaleOptimizer` wrapper.

    Example:
    >>> optimizer = with_options(bert_adamw(1e-4), global_clipnorm=1.0, gradient_accumulation_steps=4)
    """
    if optimizer.built:
        raise ValueError(
            "with_options() needs an optimizer that has not been used yet (its accumulators are made "
            "when it first runs); make a new one."
        )
    if gradient_accumulation_steps is not None and gradient_accumulation_steps < 2:
        raise ValueError(
            f"gradient_accumulation_steps={gradient_accumulation_steps}: it must be at least 2, or None "
            "to update at every batch."
        )
    # Both are read when the optimizer first builds and steps, so setting them
    # now is the same as passing them to its constructor.
    optimizer.global_clipnorm = global_clipnorm
    optimizer.gradient_accumulation_steps = gradient_accumulation_steps
    if loss_scale:
        return keras.optimizers.LossScaleOptimizer(optimizer)
    return optimizer


__all__ = [
    "WarmupLinearDecay",
    "bert_adamw",
    "bert_lamb",
    "fine_tuning_optimizer",
    "pretraining_optimizer",
    "warmup_steps",
    "with_options",
]
