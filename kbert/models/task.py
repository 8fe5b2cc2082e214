"""What every task model shares: the `Task` base, a functional model on
`BertBackbone` with a preprocessor; its pieces are mixed in from
`task_inputs` (raw text in), `task_answers` (helpers and export) and
`task_presets` (presets and Hugging Face heads)."""


import keras
import numpy as np
import tensorflow as tf

from kbert.models.task_answers import Answering
from kbert.models.task_inputs import RawTextInput
from kbert.models.task_presets import TaskPresets
from kbert.text.pipeline import check_counts, count_examples, slices, steps, take
from kbert.training.distribution import DistributedTraining
from kbert.training.optimizers import BERT_EPSILON, EPSILON, bert_adamw, warmup_steps
from kbert.training.schedules import WarmupLinearDecay

# What the rate decays to after the warm-up, as a share of its peak.
SCHEDULE_FLOORS = {"linear": 0.0, "linear_to_10%": 0.1, "constant": 1.0}

# `compile(recipe=...)`: fine-tuning recipes by name. `batch_size` is `fit`'s
# batch on raw text held in memory when none is given (None: chosen from the
# data, `default_batch_size`); `bias_corrected_epsilon` as in `bert_adamw`.
# kbert's defaults: BERT's recipe with transformers' epsilon, and the batch
# chosen from the data (docs/finetuning.md).
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


class _FromRecipe:
    """`compile`'s default for a setting: the recipe's value."""

    def __repr__(self):
        return "<the recipe's>"


FROM_RECIPE = _FromRecipe()

# `fit`'s batch on raw text held in memory, when none is given: 32, halved
# (to 16, then 8) while an epoch would hold fewer than this many steps.
STEPS_PER_EPOCH_WANTED = 250


def default_batch_size(examples):
    """`fit`'s batch for this many raw examples when none is given: 32 from
    8,000 examples, 16 from 4,000, 8 below. A short run on a small data set
    needs steps more than it needs large batches: on 2,000 MR sentences,
    one epoch at batch 8 (250 steps) scores 76.0% against 71.6% at batch 32
    (63 steps), and on 2,000 WNUT tweets the entity F1 goes from 0 to 11
    (docs/finetuning.md); on large data sets batch 32 keeps a step's
    matrices large and an epoch fast."""
    batch_size = 32
    while batch_size > 8 and examples < STEPS_PER_EPOCH_WANTED * batch_size:
        batch_size //= 2
    return batch_size


class Task(DistributedTraining, RawTextInput, Answering, TaskPresets, keras.Model):
    """Base of the task models: a functional model on `BertBackbone` with an
    optional preprocessor, so that `fit`, `evaluate` and `predict` take raw
    strings. Subclasses build their graph, then call `_finish_init`."""

    def __init__(self, inputs, outputs, input_padding="bucket", length_groups=50, **kwargs):
        """Every task's settings of its raw-input pipeline, saved in its config.

        Args:
            input_padding: `"bucket"`: raw text is padded batch by batch (and
                an exported model's request slice by slice) to one of a few
                lengths (16, 24, 32, 48, ..., sequence_length; see
                SegmentPacker's pad_to="bucket"), or, in fit, evaluate and
                predict where a new shape compiles nothing (TensorFlow
                without XLA, PyTorch), to each batch's longest text: real
                sentences are short, and padding is masked, so the outputs
                are the same.
                `"sequence_length"`: fixed shapes.
            length_groups: `fit` on raw text shuffles, sorts each run of
                `length_groups` batches by length, then shuffles the batches,
                so that batches hold similar lengths and little padding
                (Hugging Face's group_by_length); `evaluate` and `predict`
                run the texts sorted by length (`predict` gives its outputs
                back in the input's order). 0: off.
        """
        if input_padding not in ("bucket", "sequence_length"):
            raise ValueError(f'input_padding="{input_padding}": use "bucket" or "sequence_length".')
        super().__init__(inputs=inputs, outputs=outputs, **kwargs)
        self.input_padding = input_padding
        self.length_groups = int(length_groups)

    def _finish_init(self, backbone, preprocessor):
        self.backbone = backbone
        self.preprocessor = preprocessor
        self._compiled_by_default = False

    # === Compile defaults ===

    def default_loss(self):
        raise NotImplementedError

    def default_metrics(self):
        return None

    def default_weighted_metrics(self):
        """Metrics that take the sample weights into account (Keras passes
        sample weights to `weighted_metrics` only): e.g. accuracy over real
        masked tokens or tagged words, not over padding."""
        return None

    def compile(self, optimizer="auto", loss="auto", metrics="auto", weighted_metrics="auto", recipe="kbert",
                learning_rate=FROM_RECIPE, warmup=FROM_RECIPE, schedule=FROM_RECIPE, epsilon=FROM_RECIPE,
                weight_decay=FROM_RECIPE, global_clipnorm=FROM_RECIPE, **kwargs):
        """`compile()` with a fine-tuning recipe for anything not given:
        AdamW (no weight decay on biases and LayerNorm), the task's loss and
        metrics, and with the default optimizer, a schedule that `fit` sets
        over the run's steps: linear warm-up over `warmup` of them (rounded
        up) to `learning_rate`, then the `schedule`: `"linear"` (decay to 0),
        `"linear_to_10%"` (to a tenth of `learning_rate`) or `"constant"`.

        `recipe` names the values of every setting not given (`RECIPES`):
        - `"kbert"` (the default): learning rate 5e-5 (BERT §A.3 searches
          5e-5, 3e-5 and 2e-5), 10% warm-up, linear decay, weight decay
          0.01, Adam's epsilon 1e-8 added after the bias correction and the
          gradients' global norm clipped at 1.0 (transformers' `Trainer`'s,
          so that the same recipe trains the same weights), and `fit`'s
          batch chosen from the data (`default_batch_size`);
        - `"bert"`: BERT's, as TensorFlow's Model Garden fine-tunes it: the
          same, with batch 32 and epsilon 1e-6 added before the bias
          correction (Keras' way);
        - `"trainer"`: transformers' `TrainingArguments` defaults: batch 8,
          no warm-up, no weight decay, epsilon 1e-8, clipping at 1.0.
        The recipe's batch is `fit`'s on raw text held in memory when
        `fit` is given none. `global_clipnorm=None`: no clipping. All are
        kept in the model's compile config."""
        if recipe not in RECIPES:
            names = ", ".join(f'"{name}"' for name in RECIPES)
            raise ValueError(f'recipe="{recipe}": use one of {names}, and give any setting to change as its own '
                             'argument, e.g. compile(recipe="bert", learning_rate=3e-5).')
        given = {"learning_rate": learning_rate, "warmup": warmup, "schedule": schedule, "epsilon": epsilon,
                 "weight_decay": weight_decay, "global_clipnorm": global_clipnorm}
        settings = {**RECIPES[recipe], **{k: v for k, v in given.items() if v is not FROM_RECIPE}}
        if settings["schedule"] not in SCHEDULE_FLOORS:
            raise ValueError(f'schedule="{settings["schedule"]}": use one of '
                             f'{", ".join(map(repr, SCHEDULE_FLOORS))}.')
        self.recipe, self.schedule = recipe, settings["schedule"]
        self._compiled_by_default = optimizer == "auto"
        self.learning_rate, self.warmup = float(settings["learning_rate"]), float(settings["warmup"])
        self.epsilon, self.weight_decay = float(settings["epsilon"]), float(settings["weight_decay"])
        clipnorm = settings["global_clipnorm"]
        self.global_clipnorm = None if clipnorm is None else float(clipnorm)
        if optimizer == "auto":
            optimizer = bert_adamw(self.learning_rate, self.weight_decay, self.epsilon,
                                   bias_corrected_epsilon=settings["bias_corrected_epsilon"])
            optimizer.global_clipnorm = self.global_clipnorm
            if self.backbone.token_embedding.dtype_policy.name == "mixed_float16":
                # float16 gradients underflow without loss scaling.
                optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
        super().compile(
            optimizer=optimizer,
            loss=self.default_loss() if loss == "auto" else loss,
            metrics=self.default_metrics() if metrics == "auto" else metrics,
            weighted_metrics=self.default_weighted_metrics() if weighted_metrics == "auto" else weighted_metrics,
            **kwargs,
        )

    def get_compile_config(self):
        config = super().get_compile_config()
        if config is not None and hasattr(self, "learning_rate"):
            config = {**config, "recipe": self.recipe, "learning_rate": self.learning_rate, "warmup": self.warmup,
                      "schedule": self.schedule, "epsilon": self.epsilon, "weight_decay": self.weight_decay,
                      "global_clipnorm": self.global_clipnorm}
        return config

    def _build_optimizer(self):
        """Creates the optimizer's variables now, on TensorFlow without a
        strategy (Keras builds them under one): created inside the first
        traced train step instead, each variable's initialisation becomes a
        function of its own (about 210 for MiniLM's AdamW: 12 s of a
        profiled first `fit`, against 0.8 s here)."""
        if self._tensorflow_without_strategy() and not self.optimizer.built:
            self.optimizer.build(self.trainable_variables)

    def _tensorflow_without_strategy(self):
        """Whether Keras' TensorFlow trainer runs this model with no
        `tf.distribute` strategy (where its train step is one `tf.function`
        that reads variables as they are when it runs)."""
        return keras.backend.backend() == "tensorflow" and getattr(self, "_distribute_strategy", None) is None

    def _schedule_learning_rate(self, steps_per_epoch, epochs):
        """Gives the default optimizer BERT's schedule over this `fit`'s steps.
        Every `fit` gets its own warm-up and decay, so a second `fit` does
        not train at the learning rate of 0 where the first one ended."""
        if not steps_per_epoch or steps_per_epoch < 0:
            return  # unknown length: keep the learning rate as it is
        total = steps_per_epoch * epochs
        # (`int` of a `tf.distribute` strategy's variable raises: read it as an array.)
        steps = (total, warmup_steps(self.warmup, total), int(keras.ops.convert_to_numpy(self.optimizer.iterations)))
        floor = SCHEDULE_FLOORS[self.schedule]
        optimizer = getattr(self.optimizer, "inner_optimizer", self.optimizer)  # under a LossScaleOptimizer
        schedule = getattr(optimizer, "_learning_rate", None)
        if (self._tensorflow_without_strategy() and isinstance(schedule, WarmupLinearDecay)
                and (schedule.peak, schedule.floor) == (self.learning_rate, floor)):
            # The traced train step reads the schedule's steps when it runs:
            # no new trace (30 s of a second `fit` of a MiniLM classifier).
            schedule.restart(*steps)
            return
        self.optimizer.learning_rate = WarmupLinearDecay(self.learning_rate, *steps[:2], start_step=steps[2],
                                                         floor=floor)
        # Compiled train steps hold the previous schedule: trace them anew.
        self.train_function = None

    def fit(self, x=None, y=None, batch_size=None, epochs=1, sample_weight=None, validation_data=None,
            shuffle=True, steps_per_epoch=None, **kwargs):
        """`fit()`, which also takes raw text: lists held in memory (texts,
        pairs of texts, word lists, questions and contexts, as the task
        takes them) or a batched `tf.data.Dataset` of them. Compiles with
        the defaults of `compile()` if not compiled yet.

        On raw text in memory with no `batch_size`, the batch is the
        compile recipe's (`"bert"`: 32, `"trainer"`: 8) or, with kbert's,
        depends on the data: 32 from 8,000 examples, 16 from 4,000, 8
        below, so that an epoch holds about 250 steps or more (see
        `default_batch_size`).
        Raw text is shuffled in batches of similar lengths (see
        `length_groups`)."""
        if not self.compiled:
            self.compile()
        if self._is_raw(x):
            check_counts(x, y, sample_weight)
            if isinstance(validation_data, tuple):
                check_counts(*validation_data)
            examples = count_examples(x)
            if batch_size is None and examples is not None:
                batch_size = RECIPES[self.recipe]["batch_size"] or default_batch_size(examples)
            x = self._dataset(x, y, sample_weight, batch_size,
                              shuffle=shuffle and not isinstance(x, tf.data.Dataset))
            y = sample_weight = batch_size = None
            shuffle = False  # done in the pipeline
            if isinstance(validation_data, tuple):
                validation_data = self._dataset(*validation_data)
            elif validation_data is not None:
                validation_data = self._dataset(validation_data)
        if self._compiled_by_default:
            self._schedule_learning_rate(steps_per_epoch or steps(x, batch_size), epochs)
        self._build_optimizer()
        return super().fit(x, y, batch_size=batch_size, epochs=epochs, sample_weight=sample_weight,
                           validation_data=validation_data, shuffle=shuffle,
                           steps_per_epoch=steps_per_epoch, **kwargs)

    def evaluate(self, x=None, y=None, batch_size=None, sample_weight=None, **kwargs):
        if not self.compiled:
            self.compile()
        if self._is_raw(x):
            check_counts(x, y, sample_weight)
            order = self._length_order(x)
            if order is not None:
                x, y, sample_weight = (take(v, order) for v in (x, y, sample_weight))
            x = self._dataset(x, y, sample_weight, batch_size)
            y = sample_weight = batch_size = None
        return super().evaluate(x, y, batch_size=batch_size, sample_weight=sample_weight, **kwargs)

    def predict(self, x, batch_size=None, verbose="auto", **kwargs):
        """`predict()`, which also takes raw text (a `tf.data.Dataset` of it,
        or lists held in memory), run sorted by length (see `length_groups`)
        and given back in the input's order.

        Raw text in memory goes batch by batch through the task's
        preprocessing, traced once per model, and `predict_on_batch`: a
        `tf.data` pipeline would be traced and started anew at every call,
        which costs more than the model on a few texts. There, outputs per
        token of batches padded to different lengths (to each batch's
        longest text, or its bucket: see `_pads_to_longest`) are given at the
        longest length, the positions past a batch's own length set to 0
        (padding in either case).

        Keras' own loop over a `tf.data` pipeline of the same preprocessing
        runs instead where `callbacks` or `steps` are given, and where the
        model is distributed (a `tf.distribute` strategy of several
        replicas, or a `keras.distribution`), so that the batches are split
        over the devices."""
        if not self._is_raw(x):
            return super().predict(x, batch_size=batch_size, verbose=verbose, **kwargs)
        if (isinstance(x, tf.data.Dataset) or any(v is not None for v in kwargs.values()) or self._replicas() > 1
                or keras.distribution.distribution() is not None):
            return self._in_length_order(
                x, lambda x: super(Task, self).predict(self._dataset(x, batch_size=batch_size), verbose=verbose,
                                                       **kwargs))
        preprocess = self._traced("predict",
                                  lambda: self._padded_to_longest(lambda *batch: self._preprocess(*batch)[0]))
        return self._in_length_order(x, lambda x: self._predict_raw(self._raw_slices(x), batch_size, verbose,
                                                                    preprocess))

    def _in_length_order(self, x, run):
        """`run(x)` on raw input sorted by length (see `length_groups`), its
        outputs given back in the input's order."""
        order = self._length_order(x)
        if order is None:
            return run(x)
        outputs = run(take(x, order))
        unsort = np.argsort(order)
        return keras.tree.map_structure(lambda v: v[unsort], outputs)

    def _predict_raw(self, parts, batch_size, verbose, preprocess):
        """The model's outputs on the rows of `parts` (see `_raw_slices`),
        `preprocess`ed a batch at a time. A batch of examples may give more
        rows of features (a question answerer's windows): they are run
        `batch_size` rows at a time."""
        batch_size = batch_size or 32
        count = -(-int(tf.nest.flatten(parts)[0].shape[0]) // batch_size)
        progress = keras.utils.Progbar(count, verbose=1 if verbose == "auto" else verbose) if verbose else None
        outputs = []
        for i, part in enumerate(slices(parts, batch_size)):
            features = preprocess(*part)
            outputs += [self._predict_batch(rows) for rows in slices(features, batch_size)]
            if progress is not None:
                progress.update(i + 1)
        return keras.tree.map_structure(_concatenated, *outputs)

    # === Config ===

    def task_config(self):
        """The head's constructor arguments (no backbone, no preprocessor)."""
        raise NotImplementedError

    def get_config(self):
        config = {"name": self.name, "trainable": self.trainable, "input_padding": self.input_padding,
                  "length_groups": self.length_groups, **self.task_config()}
        config["backbone"] = keras.saving.serialize_keras_object(self.backbone)
        config["preprocessor"] = (
            None if self.preprocessor is None else keras.saving.serialize_keras_object(self.preprocessor)
        )
        return config

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        config["backbone"] = keras.saving.deserialize_keras_object(config["backbone"])
        if config.get("preprocessor") is not None:
            config["preprocessor"] = keras.saving.deserialize_keras_object(config["preprocessor"])
        return cls(**config)


def _concatenated(*batches):
    """Outputs of several batches as one array; dimensions past the first
    that differ between batches (tokens of batches padded to different
    lengths) are padded with 0 to the largest."""
    batches = [np.asarray(v) for v in batches]
    if len(batches) == 1:
        return batches[0]
    largest = np.max([v.shape[1:] for v in batches], axis=0) if batches[0].ndim > 1 else ()
    return np.concatenate([np.pad(v, [(0, 0)] + [(0, n - m) for n, m in zip(largest, v.shape[1:])]) for v in batches])
