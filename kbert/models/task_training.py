"""What a task model trains, and over which schedule.

Which weights train is decided here, once (`TrainedWeights`): Keras'
trainable weights, less the backbone's pooler where the task's outputs do
not read it (the token classifier's, the question answerer's and the text
embedder's, as in transformers' `BertForTokenClassification` and
`BertForQuestionAnswering`, which have none; left out, it gets no gradient
to warn about and no optimizer state, and counts as non-trainable; it is
still saved, loaded and exported with the backbone). Keras' train step, the
optimizer's build (`Task._build_optimizer`), `BertTextEmbedder`'s
contrastive fit and the LoRA files (`save_lora_weights`) all read it.

Also here: the default optimizer's warm-up and decay over each `fit`."""

import contextlib

import keras

from kbert.backend import keras_private
from kbert.models import backbone_lora
from kbert.training.optimizers import warmup_steps
from kbert.training.recipes import SCHEDULE_FLOORS
from kbert.training.schedules import WarmupLinearDecay


def tensorflow_without_strategy(model):
    """Whether Keras' TensorFlow trainer runs `model` with no
    `tf.distribute` strategy (where its train step is one `tf.function`
    that reads variables as they are when it runs)."""
    return keras.backend.backend() == "tensorflow" and keras_private.distribute_strategy(model) is None


def schedule_learning_rate(model, steps_per_epoch, epochs):
    """Gives the default optimizer BERT's schedule over this `fit`'s steps.
    Every `fit` gets its own warm-up and decay, so a second `fit` does not
    train at the learning rate of 0 where the first one ended."""
    if not steps_per_epoch or steps_per_epoch < 0:
        return  # unknown length: keep the learning rate as it is
    recipe = model.recipe
    total = steps_per_epoch * epochs
    # (`int` of a `tf.distribute` strategy's variable raises: read it as an array.)
    steps = (total, warmup_steps(recipe["warmup"], total), int(keras.ops.convert_to_numpy(model.optimizer.iterations)))
    floor = SCHEDULE_FLOORS[recipe["schedule"]]
    schedule = _schedule(model.optimizer)
    if (tensorflow_without_strategy(model) and isinstance(schedule, WarmupLinearDecay)
            and (schedule.peak, schedule.floor) == (recipe["learning_rate"], floor)):
        # The traced train step reads the schedule's steps when it runs: no
        # new trace (docs/benchmarks.md, "Measurements behind the code").
        schedule.restart(*steps)
        return
    model.optimizer.learning_rate = WarmupLinearDecay(recipe["learning_rate"], *steps[:2], start_step=steps[2],
                                                      floor=floor)
    # Compiled train steps hold the previous schedule: trace them anew.
    model.train_function = None


def _schedule(optimizer):
    return keras_private.learning_rate(_inner(optimizer))


def _inner(optimizer):
    return getattr(optimizer, "inner_optimizer", optimizer)  # under a LossScaleOptimizer


class TrainedWeights:
    """`Task`'s trainable and non-trainable weights, the optimizer and
    compiled steps kept in step with them, and the LoRA files of what
    trained (a mixin before `keras.Model`)."""

    reads_pooler = True  # whether the task's outputs read the backbone's pooler

    def _untrained(self):
        # The one place that decides which of Keras' trainable weights `fit`
        # leaves as they are (what LoRA freezes, Keras' own flags say: see
        # `enable_lora`).
        pooler = self.backbone.pooled_dense  # (None in a backbone without one: ModernBERT's)
        return set() if self.reads_pooler or pooler is None else {id(v) for v in pooler.weights}

    @property
    def trainable_weights(self):
        unread = self._untrained()
        return [v for v in super().trainable_weights if id(v) not in unread]

    trainable_variables = trainable_weights

    @property
    def non_trainable_weights(self):
        unread = self._untrained()
        return super().non_trainable_weights + [v for v in super().trainable_weights if id(v) in unread]

    @property
    def non_trainable_variables(self):
        unread = self._untrained()
        return super().non_trainable_variables + [v for v in super().trainable_weights if id(v) in unread]

    # === The optimizer and compiled steps, for the weights as they are now ===

    def _optimizer_for(self, trained):
        """Replaces an optimizer built for other variables than `trained`
        (a first `fit`, then `enable_lora`) by a new one of the same
        settings, not built: Keras' optimizer trains only the variables it
        was built for ("Unknown variable"), and the train step traced for
        it would train those. The new one counts its steps from 0, as does
        its schedule: Adam's moments start anew."""
        optimizer = self.optimizer
        if not optimizer.built:
            return
        if [id(v) for v in keras_private.trainable_variables(_inner(optimizer))] == [id(v) for v in trained]:
            return
        strategy = keras_private.distribute_strategy(self)
        with strategy.scope() if strategy is not None else contextlib.nullcontext():
            self.optimizer = keras.optimizers.deserialize(keras.optimizers.serialize(optimizer))
        schedule = _schedule(self.optimizer)
        if isinstance(schedule, WarmupLinearDecay):
            schedule.restart(schedule.total_steps, schedule.warmup_steps, 0)
        self.train_function = None

    # Keras' compiled steps hold the model as it was when they were traced
    # (TensorFlow's `tf.function`s): a `predict` traced before `enable_lora`
    # ran the model without its adapters. They are traced anew once the
    # model's weights are others.
    def make_train_function(self, force=False):
        return super().make_train_function(force=self._forget_steps_of_other_weights() or force)

    def make_test_function(self, force=False):
        return super().make_test_function(force=self._forget_steps_of_other_weights() or force)

    def make_predict_function(self, force=False):
        return super().make_predict_function(force=self._forget_steps_of_other_weights() or force)

    def _forget_steps_of_other_weights(self):
        """Forgets the compiled steps if the model's weights changed since
        they were traced; whether it did."""
        weights = tuple(id(v) for v in self.weights)
        if getattr(self, "_weights_traced", None) == weights:
            return False
        self.train_function = self.test_function = self.predict_function = None
        self._weights_traced = weights
        return True

    # === LoRA: what trained, saved and loaded alone ===

    def save_lora_weights(self, path):
        """Writes what `fit` trains with LoRA on (`backbone.enable_lora`):
        the adapters and the head (every trained weight, none of the frozen
        backbone's), a few hundred kB, to a safetensors file that
        `load_lora_weights` reads into this task built on the same base
        weights. (`backbone.save_lora_weights` writes the adapters alone.)"""
        backbone_lora.save_trained(self.backbone, self._trained_variables(), path)

    def load_lora_weights(self, path):
        """Reads a file of `save_lora_weights` into this model: the adapters
        into the backbone (enabling LoRA with the file's rank and layers if
        it is off) and the head's weights. Refused where the file does not
        hold every weight this model trains besides the backbone's (a file
        of `backbone.save_lora_weights`, of the adapters alone, loads with
        `model.backbone.load_lora_weights`), or holds others."""
        backbone = {id(v) for v in self.backbone.weights}
        head = [v for v in self._trained_variables() if id(v) not in backbone]
        backbone_lora.load_trained(self.backbone, path, self.weights, head)
