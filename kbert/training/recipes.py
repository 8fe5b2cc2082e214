"""Fine-tuning recipes by name: what `Task.compile(recipe=...)` fills in for
every setting not given, and `fit`'s batch on raw text held in memory."""

from kbert.training.optimizers import BERT_EPSILON, EPSILON

# What the rate decays to after the warm-up, as a share of its peak.
SCHEDULE_FLOORS = {"linear": 0.0, "linear_to_10%": 0.1, "constant": 1.0}

# `batch_size` is `fit`'s batch on raw text held in memory when none is
# given (None: chosen from the data, `default_batch_size`);
# `bias_corrected_epsilon` as in `bert_adamw`. kbert's defaults: BERT's
# recipe with transformers' epsilon, and the batch chosen from the data
# (docs/finetuning.md).
_KBERT_RECIPE = dict(learning_rate=5e-5, warmup=0.1, schedule="linear", epsilon=EPSILON, weight_decay=0.01,
                     global_clipnorm=1.0, batch_size=None, bias_corrected_epsilon=True)
RECIPES = {
    "kbert": _KBERT_RECIPE,
    # BERT's (Devlin et al. 2019 §A.3) as TensorFlow's Model Garden
    # fine-tunes it: batch 32, AdamW with epsilon 1e-6 added before the
    # bias correction, as Keras adds it (BERT's first code had no bias
    # correction at all).
    "bert": {**_KBERT_RECIPE, "epsilon": BERT_EPSILON, "batch_size": 32, "bias_corrected_epsilon": False},
    # transformers' `TrainingArguments` defaults.
    "trainer": {**_KBERT_RECIPE, "warmup": 0.0, "weight_decay": 0.0, "batch_size": 8},
}

# The settings a recipe gives, which `compile` takes one by one over it.
SETTINGS = ("learning_rate", "warmup", "schedule", "epsilon", "weight_decay", "global_clipnorm")


class _FromRecipe:
    """`compile`'s default for a setting: the recipe's value."""

    def __repr__(self):
        return "<the recipe's>"


FROM_RECIPE = _FromRecipe()

# `fit`'s batch on raw text held in memory, when none is given: 32, halved
# (to 16, then 8) while an epoch would hold fewer than this many steps.
STEPS_PER_EPOCH_WANTED = 250


def recipe_settings(recipe, **given):
    """The recipe's settings with those `given` (not `FROM_RECIPE`) over
    them, checked."""
    if recipe not in RECIPES:
        names = ", ".join(f'"{name}"' for name in RECIPES)
        raise ValueError(f'recipe="{recipe}": use one of {names}, and give any setting to change as its own '
                         'argument, e.g. compile(recipe="bert", learning_rate=3e-5).')
    settings = {**RECIPES[recipe], **{k: v for k, v in given.items() if v is not FROM_RECIPE}}
    if settings["schedule"] not in SCHEDULE_FLOORS:
        raise ValueError(f'schedule="{settings["schedule"]}": use one of '
                         f'{", ".join(map(repr, SCHEDULE_FLOORS))}.')
    for key in ("learning_rate", "warmup", "epsilon", "weight_decay"):
        settings[key] = float(settings[key])
    clipnorm = settings["global_clipnorm"]
    settings["global_clipnorm"] = None if clipnorm is None else float(clipnorm)
    return settings


def default_batch_size(examples):
    """`fit`'s batch for this many raw examples when none is given: 32 from
    8,000 examples, 16 from 4,000, 8 below. A short run on a small data set
    needs steps more than it needs large batches: about 250 steps an epoch
    score better than a quarter of them at batch 32 on small data sets
    (docs/finetuning.md); on large data sets batch 32 keeps a step's
    matrices large and an epoch fast."""
    batch_size = 32
    while batch_size > 8 and examples < STEPS_PER_EPOCH_WANTED * batch_size:
        batch_size //= 2
    return batch_size
