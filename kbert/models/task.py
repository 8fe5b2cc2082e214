"""What every task model shares: the `Task` base, a functional model on
`BertBackbone` with the task's preprocessor (`model.preprocessor`), so that
`fit`, `evaluate`, `predict` and the model's own call take raw text."""

import keras

from kbert import tf_if_present
from kbert.models import task_answers, task_inputs, task_presets
from kbert.models.arguments import check_keras_model_arguments
from kbert.models.bert_backbone import BertBackbone
from kbert.models.task_training import TrainedWeights, schedule_learning_rate, tensorflow_without_strategy
from kbert.presets import to_transformers
from kbert.text.pipeline import check_counts, count_examples, steps
from kbert.tf_if_present import is_dataset
from kbert.training.distribution import DistributedTraining
from kbert.training.optimizers import bert_adamw
from kbert.training.recipes import FROM_RECIPE, RECIPES, SETTINGS, default_batch_size, recipe_settings


class Task(DistributedTraining, TrainedWeights, keras.Model):
    """Base of the task models: a functional model on a backbone of
    `backbone_cls` with an optional preprocessor of `preprocessor_cls`, so
    that `fit`, `evaluate` and `predict` take raw strings. Subclasses build
    their graph on `backbone_inputs(backbone)`, then call
    `super().__init__(inputs, outputs, backbone=..., preprocessor=...)`.

    What a task declares, by role (everything else is shared):
    - built from (KerasHub's two): `backbone_cls`, `preprocessor_cls`;
    - its head: built in `__init__`; `task_config()` (its arguments, saved),
      `head_keys` (those a new head leaves out), `head_settings()` (what
      the preprocessor reads of it);
    - its inputs: `takes_pairs`, `packs_texts`;
    - training: `default_loss()`, `default_metrics()`,
      `default_weighted_metrics()`, `reads_pooler` (`task_training.py`);
    - Hugging Face's checkpoints of it: `hf_head_table()`, `hf_head_config()`;
    - serving: `serving_function()` (what `export` serves),
      `serving_weights_to_cast()`.
    The shared code is split by role too: this file (Keras' lifecycle),
    `task_inputs.py` (raw input), `task_answers.py` (answers and export),
    `task_presets.py` (presets), `task_training.py` (what trains, and its schedule)."""

    backbone_cls = BertBackbone
    preprocessor_cls = None  # set by each task
    head_keys = ()  # head arguments a preset keeps only where its head is kept (e.g. class_names)
    takes_pairs = False  # whether an export may take `text` and `text_pair`
    packs_texts = False  # whether `from_preset` packs (see there) unless told otherwise

    def __init__(self, inputs, outputs, backbone=None, preprocessor=None, input_padding="bucket",
                 length_groups=50, **kwargs):
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
        check_keras_model_arguments(type(self), kwargs)
        super().__init__(inputs=inputs, outputs=outputs, **kwargs)
        self.backbone = backbone
        self.dtype_policy = backbone.dtype_policy  # the policy that runs (see BertBackbone)
        self.preprocessor = None if preprocessor is None else self.preprocessor_cls.from_preprocessor(preprocessor)
        self.input_padding = input_padding
        self.length_groups = int(length_groups)
        self._compiled_by_default = False

    @classmethod
    def backbone_inputs(cls, backbone):
        """The inputs a task's graph is built on: `backbone`'s, once it is
        known to be a `backbone_cls`."""
        if not isinstance(backbone, cls.backbone_cls):
            raise ValueError(
                f"{cls.__name__} is built on a {cls.backbone_cls.__name__}; got {type(backbone).__name__}. Pass "
                f"kbert.{cls.backbone_cls.__name__}(...) or kbert.{cls.backbone_cls.__name__}.from_preset(...), or "
                f"build the task with kbert.{cls.__name__}.from_preset(preset, ...)."
            )
        return backbone.input

    def head_settings(self):
        """What the preprocessor needs to know of this model: the head's
        arguments (`task_config`) and whether the backbone packs rows."""
        return {**self.task_config(), "packing": self.backbone.packing}

    # === Compile ===

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

        `recipe` names the values of every setting not given
        (`kbert.training.recipes.RECIPES`):
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
        kept in the model's compile config, so that `save` and
        `keras.models.load_model`, or `keras.models.clone_model`, give a
        model that trains on as this one would."""
        settings = recipe_settings(recipe, learning_rate=learning_rate, warmup=warmup, schedule=schedule,
                                   epsilon=epsilon, weight_decay=weight_decay, global_clipnorm=global_clipnorm)
        self._recipe = {"recipe": recipe, **{k: settings[k] for k in SETTINGS}}
        by_default = isinstance(optimizer, str) and optimizer == "auto"
        if by_default:
            optimizer = bert_adamw(settings["learning_rate"], settings["weight_decay"], settings["epsilon"],
                                   bias_corrected_epsilon=settings["bias_corrected_epsilon"], recipe=self._recipe,
                                   global_clipnorm=settings["global_clipnorm"])
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
        self._compiled_by_default = by_default

    @property
    def recipe(self):
        """The compile recipe's name and settings (None before `compile`)."""
        return dict(self._recipe) if getattr(self, "_recipe", None) else None

    def compile_from_config(self, config):
        """Compiles as `compile` did, from Keras' compile config (which
        `save`, `load_model` and `clone_model` carry): the optimizer, whose
        config holds the recipe where `compile` built it from one (so that
        `fit` goes on setting its schedule over each run's steps; Keras then
        loads its state), the loss and the metrics."""
        config = keras.saving.deserialize_keras_object(config)
        optimizer = config.get("optimizer")
        recipe = getattr(getattr(optimizer, "inner_optimizer", optimizer), "recipe", None) or {}
        self.compile(**config, **recipe)
        self._compiled_by_default = bool(recipe)
        if self.built:
            self._build_optimizer(any_backend=True)

    def _build_optimizer(self, any_backend=False):
        """Creates the optimizer's variables now, on TensorFlow without a
        strategy (Keras builds them under one): created inside the first
        traced train step instead, each variable's initialisation becomes a
        function of its own, which made a first `fit` seconds slower
        (docs/benchmarks.md, "Measurements behind the code"). An optimizer
        built for other variables (a `fit`, then `enable_lora`) is replaced
        first (`_optimizer_for`)."""
        trained = self._trained_variables()
        self._optimizer_for(trained)
        if (any_backend or tensorflow_without_strategy(self)) and not self.optimizer.built:
            self.optimizer.build(trained)

    def _trained_variables(self):
        """The variables `fit` trains (`TrainedWeights`, the one place that
        decides), in the order the optimizer holds their state (which `save`
        writes and `load_model` reads back by position)."""
        return self.trainable_variables

    # === Raw text in ===

    def fit(self, x=None, y=None, batch_size=None, epochs=1, sample_weight=None, validation_split=0.0,
            validation_data=None, shuffle=True, steps_per_epoch=None, **kwargs):
        """`fit()`, which also takes raw text: lists held in memory (texts,
        pairs of texts, word lists, questions and contexts, as the task
        takes them) or a batched `tf.data.Dataset` of them. Compiles with
        the defaults of `compile()` if not compiled yet.

        On raw text in memory with no `batch_size`, the batch is the
        compile recipe's (`"bert"`: 32, `"trainer"`: 8) or, with kbert's,
        depends on the data: 32 from 8,000 examples, 16 from 4,000, 8
        below, so that an epoch holds about 250 steps or more (see
        `default_batch_size`). `validation_split` holds out the last
        examples, as Keras does. Raw text is shuffled in batches of similar
        lengths (see `length_groups`)."""
        task_inputs.check_batch_size(batch_size)
        if not self.compiled:
            self.compile()
        if task_inputs.is_raw(self, x):
            check_counts(x, y, sample_weight)
            if validation_split and is_dataset(x):
                raise ValueError("validation_split holds out examples of data held in memory; for a "
                                 "tf.data.Dataset, pass validation_data=another_dataset.")
            if validation_split:
                (x, y, sample_weight), validation_data = task_inputs.split(x, y, sample_weight, validation_split)
            if isinstance(validation_data, tuple):
                check_counts(*validation_data)
            examples = count_examples(x)
            if batch_size is None and examples is not None:
                batch_size = RECIPES[self.recipe["recipe"]]["batch_size"] or default_batch_size(examples)
            x = task_inputs.dataset(self, x, y, sample_weight, batch_size,
                                    shuffle=shuffle and not is_dataset(x), labeled=True)
            y = sample_weight = batch_size = None
            validation_split, shuffle = 0.0, False  # done in the pipeline
            if isinstance(validation_data, tuple):
                validation_data = task_inputs.dataset(self, *validation_data, labeled=True)
            elif validation_data is not None:
                validation_data = task_inputs.dataset(self, validation_data, labeled=True)
        if self._compiled_by_default:
            schedule_learning_rate(self, steps_per_epoch or steps(x, batch_size), epochs)
        self._build_optimizer()
        return super().fit(x, y, batch_size=batch_size, epochs=epochs, sample_weight=sample_weight,
                           validation_split=validation_split, validation_data=validation_data, shuffle=shuffle,
                           steps_per_epoch=steps_per_epoch, **kwargs)

    def evaluate(self, x=None, y=None, batch_size=None, sample_weight=None, **kwargs):
        task_inputs.check_batch_size(batch_size)
        if not self.compiled:
            self.compile()
        if task_inputs.is_raw(self, x):
            check_counts(x, y, sample_weight)
            x = task_inputs.dataset(self, x, y, sample_weight, batch_size, sort=True, labeled=True)
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
        token of batches padded to different lengths are given at the
        longest length, the positions past a batch's own length set to 0
        (padding in either case).

        Keras' own loop over a `tf.data` pipeline of the same preprocessing
        runs instead where `callbacks` or `steps` are given, and where the
        model is distributed (a `tf.distribute` strategy of several
        replicas, or a `keras.distribution`), so that the batches are split
        over the devices."""
        task_inputs.check_batch_size(batch_size)
        if not task_inputs.is_raw(self, x):
            return super().predict(x, batch_size=batch_size, verbose=verbose, **kwargs)
        if (is_dataset(x) or any(v is not None for v in kwargs.values())
                or task_inputs.replicas(self) > 1 or keras.distribution.distribution() is not None):
            return task_inputs.in_length_order(
                self, x, lambda x: super(Task, self).predict(task_inputs.dataset(self, x, batch_size=batch_size),
                                                             verbose=verbose, **kwargs))
        return task_inputs.predict_in_memory(self, x, batch_size, verbose)

    def predict_on_batch(self, x):
        """`predict_on_batch()`, which also takes a batch of raw text."""
        if task_inputs.is_raw(self, x):
            x = task_inputs.features(self, x)
        return super().predict_on_batch(x)

    def __call__(self, *args, **kwargs):
        """The model's call; raw text in memory (texts, pairs...) is preprocessed first, as in `predict_on_batch`."""
        if args and task_inputs.is_text_in_memory(args[0]):  # (not a dict of features, nor a dataset)
            if self.preprocessor is None:
                raise ValueError(task_inputs.no_preprocessor(self))
            args = (task_inputs.features(self, args[0]), *args[1:])
        return super().__call__(*args, **kwargs)

    # === Answers and export ===

    def export(self, filepath, format="tf_saved_model", pairs=False, top_k=5, **kwargs):
        """Exports a SavedModel for TF Serving that takes raw strings: the
        task's preprocessing, model and postprocessing in one graph (the same
        functions `fit` and `predict` use), run over a request in bounded
        slices. Returns the version folder written.

        Args:
            filepath: `saved_models/<name>` (the next version number is
                picked) or `saved_models/<name>/<version>`.
            pairs: for a classifier of sentence pairs, or a `BertPretrainer`
                asked for next-sentence probabilities: the signature takes
                `text` and `text_pair`.
            top_k: how many guesses a masked-LM export gives for each [MASK].

        Without a preprocessor (or with another `format`), Keras' own export
        of the id-taking model. Models trained on the JAX or PyTorch backend
        are saved as a preset and exported by a TensorFlow process.
        """
        if format == "tf_saved_model" and not tf_if_present.installed():
            raise ImportError(f"export writes a TensorFlow SavedModel. {tf_if_present.MISSING}")
        if self.preprocessor is None or format != "tf_saved_model":
            return super().export(filepath, format=format, **kwargs)
        return task_answers.export(self, filepath, pairs=pairs, top_k=top_k)

    def serving_function(self, pairs=False, top_k=5, head=None):
        """`(serve, input_signature, fills)` that `export` hands the SavedModel
        writer: raw strings in, the task's answers out, as TensorFlow ops
        (the preprocessor's answering around the model; `head`: the
        `head_settings()` it reads, by default the model's). A subclass
        overrides it to change what its exports serve (e.g. `serve` wrapped
        to add an output); the Python helpers (`classify`, `entities`, ...)
        keep the preprocessor's answers. (On JAX and PyTorch a TensorFlow
        process rebuilds the model to export it, and knows kbert's classes
        only: export a subclass of your own on the TensorFlow backend.)"""
        return task_answers.serving_function(self, pairs=pairs, top_k=top_k, head=head)

    def serving_weights_to_cast(self):
        """The dense layers whose weights a served model stores cast to
        their compute dtype (the backbone's encoder blocks')."""
        return [layer for block in self.backbone.transformer_layers for layer in block.dense_layers()]

    # === Config and presets ===

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
            cls.preprocessor_cls  # noqa: B018 (loads kbert.text at first use: Keras then knows its classes)
            config["preprocessor"] = keras.saving.deserialize_keras_object(config["preprocessor"])
        return cls(**config)

    def save_to_preset(self, folder):
        """Writes backbone, head and vocabulary to `folder` in kbert's layout;
        `from_preset(folder)` restores the model bit for bit, and
        `BertBackbone.from_preset(folder)` its backbone."""
        task_presets.save_task(self, folder)

    @classmethod
    def from_preset(cls, preset, sequence_length=None, **kwargs):
        """Builds the task from a preset: a registered name (`"base"`, ...),
        `"hf://owner/name"`, or a folder in Hugging Face's layout or kbert's.

        The backbone's weights come from the preset, and so do the head's
        when the preset has them: a Hugging Face checkpoint of this task
        (`BertForSequenceClassification`, ...) or a kbert preset saved from
        this task. Otherwise the head starts from its initialisation.

        Args:
            preset: the preset.
            sequence_length: the preprocessor's packed length (default: the
                preset's, at most 512).
            **kwargs: the head's arguments (e.g. `num_classes`), backbone
                settings that leave the architecture alone (`dropout`,
                `dtype`, `packing`: by default on for a task that trains on
                packed texts, `packs_texts`, with a preprocessor), and
                `preprocessor` instead of the preset's (`None`: a model fed
                token ids). Any other argument is refused, naming it: one
                that would change the architecture fixed by the weights
                (`num_layers=3`), a typo (`dropuot`), a `compile` or `fit`
                argument (`learning_rate`).
        """
        return task_presets.task_from_preset(cls, preset, sequence_length, kwargs)

    def export_to_transformers(self, path, dtype="float32"):
        """Writes the model as a Hugging Face folder that transformers'
        `AutoModelFor...` and `pipeline` load (`BertForSequenceClassification`,
        ...; `kbert.presets.to_transformers`), with float32 weights unless
        `dtype` says otherwise; `from_preset(path)` reads it back bit for bit."""
        return to_transformers.export_to_transformers(self, path, dtype)

    @classmethod
    def preset_preprocessor(cls, preset, sequence_length, backbone):
        """The preprocessor `from_preset` builds from what it read of the
        preset (a `kbert.presets.reader.Preset`)."""
        return task_presets.preset_preprocessor(cls, preset, sequence_length, backbone)

    # Hugging Face's heads: `(variable, Hugging Face name, transform)` rows,
    # empty for heads that Hugging Face has no checkpoint of; and the head's
    # arguments read from such a checkpoint's read `Preset` (num_classes ...).
    def hf_head_table(self):
        return []

    @classmethod
    def hf_head_config(cls, preset, tensors):
        return {}
