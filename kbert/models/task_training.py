"""What a task model trains, and over which schedule: Keras' trainable
weights, less the backbone's pooler where the task's outputs do not read it
(the token classifier's and the question answerer's, as in transformers'
`BertForTokenClassification` and `BertForQuestionAnswering`, which have
none; left out, it gets no gradient to warn about and no optimizer state,
and counts as non-trainable; it is still saved, loaded and exported with the
backbone), and the default optimizer's warm-up and decay over each `fit`."""

import keras

from kbert.training.optimizers import warmup_steps
from kbert.training.recipes import SCHEDULE_FLOORS
from kbert.training.schedules import WarmupLinearDecay


def tensorflow_without_strategy(model):
    """Whether Keras' TensorFlow trainer runs `model` with no
    `tf.distribute` strategy (where its train step is one `tf.function`
    that reads variables as they are when it runs)."""
    return keras.backend.backend() == "tensorflow" and getattr(model, "_distribute_strategy", None) is None


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
    optimizer = getattr(model.optimizer, "inner_optimizer", model.optimizer)  # under a LossScaleOptimizer
    schedule = getattr(optimizer, "_learning_rate", None)
    if (tensorflow_without_strategy(model) and isinstance(schedule, WarmupLinearDecay)
            and (schedule.peak, schedule.floor) == (recipe["learning_rate"], floor)):
        # The traced train step reads the schedule's steps when it runs: no
        # new trace (30 s of a second `fit` of a MiniLM classifier).
        schedule.restart(*steps)
        return
    model.optimizer.learning_rate = WarmupLinearDecay(recipe["learning_rate"], *steps[:2], start_step=steps[2],
                                                      floor=floor)
    # Compiled train steps hold the previous schedule: trace them anew.
    model.train_function = None


class TrainedWeights:
    """`Task`'s trainable and non-trainable weights (a mixin before
    `keras.Model`)."""

    reads_pooler = True  # whether the task's outputs read the backbone's pooler

    def _unread(self):
        return set() if self.reads_pooler else {id(v) for v in self.backbone.pooled_dense.weights}

    @property
    def trainable_weights(self):
        unread = self._unread()
        return [v for v in super().trainable_weights if id(v) not in unread]

    trainable_variables = trainable_weights

    @property
    def non_trainable_weights(self):
        unread = self._unread()
        return super().non_trainable_weights + [v for v in super().trainable_weights if id(v) in unread]

    @property
    def non_trainable_variables(self):
        unread = self._unread()
        return super().non_trainable_variables + [v for v in super().trainable_weights if id(v) in unread]
