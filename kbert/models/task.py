"""What every task model shares: raw strings in, presets, default compile."""

import json
import os
import subprocess
import sys
import tempfile
import warnings

import keras
import numpy as np
import tensorflow as tf

from kbert.models.bert_backbone import BertBackbone
from kbert import serving
from kbert.presets import files, huggingface, loading
from kbert.text import BertPreprocessor
from kbert.text.pipeline import map_batches, steps, take, text_tensor
from kbert.training.distribution import DistributedTraining
from kbert.training.optimizers import bert_adamw
from kbert.training.schedules import WarmupLinearDecay

TASK_WEIGHTS = "task.weights.h5"

# A model trained on JAX or PyTorch is exported by a TensorFlow process that
# loads it from a preset: argv is preset, path, pairs, top_k.
_EXPORT_IN_TENSORFLOW = """
import sys
from kbert.models.task import load_task
preset, path, pairs, top_k = sys.argv[1:]
load_task(preset).export(path, pairs=pairs == "True", top_k=int(top_k))
"""


def load_task(folder):
    """The task model saved in a kbert preset folder, whatever its class."""
    task = (files.load_json(folder, files.KBERT_CONFIG).get("task") or {}).get("class")
    cls = keras.saving.get_registered_object(f"kbert>{task}") if task else None
    if cls is None:
        raise ValueError(f"{folder} holds no kbert task model (its {files.KBERT_CONFIG} names none); "
                         "save one with model.save_to_preset(folder).")
    return cls.from_preset(folder)


def serving_text(name="text"):
    """The input signature of a batch of strings, named as the served input."""
    return tf.TensorSpec([None], tf.string, name=name)


def _decoded(value):
    """Numpy strings as str (bytes that are not UTF-8 replaced)."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, np.ndarray) and value.dtype == object:
        return np.vectorize(lambda b: b.decode("utf-8", "replace"), otypes=[object])(value)
    return value


class Task(DistributedTraining, keras.Model):
    """Base of the task models: a functional model on `BertBackbone` with an
    optional preprocessor, so that `fit`, `evaluate` and `predict` take raw
    strings. Subclasses build their graph, then call `_finish_init`."""


    def __init__(self, inputs, outputs, input_padding="bucket", length_groups=50, **kwargs):
        """Every task's settings of its raw-input pipeline, saved in its config.

        Args:
            input_padding: `"bucket"`: raw text is padded batch by batch (and
                an exported model's request slice by slice) to one of a few
                lengths (16, 24, 32, 48, ..., sequence_length; see
                SegmentPacker's pad_to="bucket"): real sentences are short,
                and padding is masked, so the outputs are the same.
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

    def compile(self, optimizer="auto", loss="auto", metrics="auto", weighted_metrics="auto", learning_rate=5e-5,
                warmup=0.1, **kwargs):
        """`compile()` with BERT's fine-tuning defaults for anything not given:
        AdamW (weight decay 0.01, none on biases and LayerNorm), the task's loss
        and metrics. With the default optimizer, `fit` uses BERT's schedule:
        linear warm-up over `warmup` of the run's steps to `learning_rate`
        (BERT §A.3 searches 5e-5, 3e-5 and 2e-5), then linear decay to 0.
        Both are kept in the model's compile config."""
        self._compiled_by_default = optimizer == "auto"
        self.learning_rate, self.warmup = float(learning_rate), float(warmup)
        if optimizer == "auto":
            optimizer = bert_adamw(self.learning_rate)
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
            config = {**config, "learning_rate": self.learning_rate, "warmup": self.warmup}
        return config

    def _schedule_learning_rate(self, steps_per_epoch, epochs):
        """Gives the default optimizer BERT's schedule over this `fit`'s steps.
        Every `fit` gets its own warm-up and decay, so a second `fit` does
        not train at the learning rate of 0 where the first one ended."""
        if not steps_per_epoch or steps_per_epoch < 0:
            return  # unknown length: keep the learning rate as it is
        total = steps_per_epoch * epochs
        self.optimizer.learning_rate = WarmupLinearDecay(
            self.learning_rate, total, int(self.warmup * total),
            start_step=int(self.optimizer.iterations),
        )
        # Compiled train steps hold the previous schedule: trace them anew.
        self.train_function = None

    # === Raw strings in ===
    # Subclasses with other raw inputs (words, question/context pairs,
    # next-sentence pairs) override `_is_raw`, `_dataset` or `_preprocess`.

    def _is_raw(self, x):
        """Whether `x` is text for the preprocessor (not ids already)."""
        if self.preprocessor is None or x is None:
            return False
        if isinstance(x, tf.data.Dataset):
            spec = x.element_spec
            first = spec[0] if isinstance(spec, tuple) and len(spec) and not self._is_text_spec(spec) else spec
            return self._is_text_spec(first)
        return not isinstance(x, dict)

    @staticmethod
    def _is_text_spec(spec):
        specs = spec if isinstance(spec, tuple) else (spec,)
        return all(isinstance(s, tf.TensorSpec) and s.dtype == tf.string for s in specs)

    def _dataset(self, x, y=None, sample_weight=None, batch_size=None, shuffle=False):
        """A batched, preprocessed `tf.data.Dataset` from raw text input."""
        if isinstance(x, tf.data.Dataset):
            dataset = x
        else:
            x = text_tensor(x)
            if y is not None:
                y = self._label_ids(np.asarray(y))
            parts = (x,) + tuple(np.asarray(v) for v in (y, sample_weight) if v is not None)
            # Kept a tuple even without labels, so that a pair of texts is never
            # mistaken for (texts, labels).
            dataset = tf.data.Dataset.from_tensor_slices(parts)
            if shuffle:
                dataset = self._shuffled_batches(dataset, x, batch_size or 32)
            else:
                dataset = dataset.batch(batch_size or 32)
        preprocess = self._preprocess
        spec = dataset.element_spec
        if isinstance(spec, tuple) and len(spec) == 2 and self._is_text_spec(spec):
            # A dataset of unlabeled pairs yields (texts_a, texts_b).
            preprocess = lambda a, b: self._batch_preprocessor()((a, b))  # noqa: E731
        return map_batches(dataset, preprocess)

    def _shuffled_batches(self, dataset, texts, batch_size):
        """Shuffled batches for `fit`, grouped by length (see `length_groups`)."""
        size = int(dataset.cardinality())
        if not self.length_groups or self.input_padding == "sequence_length":
            return dataset.shuffle(size, reshuffle_each_iteration=True).batch(batch_size)
        dataset = tf.data.Dataset.zip(dataset, tf.data.Dataset.from_tensor_slices(self._text_lengths(texts)))
        dataset = dataset.shuffle(size, reshuffle_each_iteration=True).batch(batch_size * self.length_groups)

        def sorted_batches(parts, lengths):
            order = tf.argsort(lengths, stable=True)
            parts = tf.nest.map_structure(lambda t: tf.gather(t, order), parts)
            return tf.data.Dataset.from_tensor_slices(parts).batch(batch_size)

        dataset = dataset.flat_map(sorted_batches).shuffle(self.length_groups, reshuffle_each_iteration=True)
        return dataset.apply(tf.data.experimental.assert_cardinality(-(-size // batch_size)))

    def _text_lengths(self, texts):
        """Tokens in each text (or pair) of raw input."""
        texts = text_tensor(texts)
        tokenizer = self.preprocessor.tokenizer
        return sum(tokenizer(t).row_lengths().numpy() for t in (texts if isinstance(texts, tuple) else (texts,)))

    def _length_order(self, x):
        """The order that sorts raw text input by length, or None where the
        input is a dataset or grouping is off."""
        if not self.length_groups or self.input_padding == "sequence_length" or isinstance(x, tf.data.Dataset):
            return None
        return np.argsort(self._text_lengths(x), kind="stable")

    def _batch_preprocessor(self):
        """The preprocessor that fit/evaluate/predict use on raw text: padding
        as `input_padding` says (a new packer on the same tokenizer; called
        only when a dataset's map is traced)."""
        return self.preprocessor.with_padding(self.input_padding)

    def _preprocess(self, x, *rest):
        return (self._batch_preprocessor()(x), *rest)

    def _label_ids(self, y):
        """Labels as ids: names are looked up in `class_names` when the task has them."""
        if y.dtype.kind not in "USO":
            return y
        names = getattr(self, "class_names", None)
        if not names:
            raise ValueError(
                f"The labels are strings (e.g. {y.flat[0]!r}); give the model class_names=[...] "
                "to map them, or pass label ids 0, 1, ..."
            )
        index = {name: i for i, name in enumerate(names)}
        unknown = sorted({str(v) for v in y.flat} - set(index))
        if unknown:
            raise ValueError(f"Labels {unknown[:5]} are not among class_names {names}.")
        return np.vectorize(index.__getitem__, otypes=["int32"])(y.astype(str))

    def fit(self, x=None, y=None, batch_size=None, epochs=1, sample_weight=None, validation_data=None,
            shuffle=True, steps_per_epoch=None, **kwargs):
        if not self.compiled:
            self.compile()
        if self._is_raw(x):
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
        return super().fit(x, y, batch_size=batch_size, epochs=epochs, sample_weight=sample_weight,
                           validation_data=validation_data, shuffle=shuffle,
                           steps_per_epoch=steps_per_epoch, **kwargs)

    def evaluate(self, x=None, y=None, batch_size=None, sample_weight=None, **kwargs):
        if not self.compiled:
            self.compile()
        if self._is_raw(x):
            order = self._length_order(x)
            if order is not None:
                x, y, sample_weight = (take(v, order) for v in (x, y, sample_weight))
            x = self._dataset(x, y, sample_weight, batch_size)
            y = sample_weight = batch_size = None
        return super().evaluate(x, y, batch_size=batch_size, sample_weight=sample_weight, **kwargs)

    def predict(self, x, batch_size=None, **kwargs):
        if not self._is_raw(x):
            return super().predict(x, batch_size=batch_size, **kwargs)
        order = self._length_order(x)
        if order is not None:
            x = take(x, order)
        outputs = super().predict(self._dataset(x, batch_size=batch_size), **kwargs)
        if order is None:
            return outputs
        unsort = np.argsort(order)
        return keras.tree.map_structure(lambda v: v[unsort], outputs)

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
        if self.preprocessor is None or format != "tf_saved_model":
            return super().export(filepath, format=format, **kwargs)
        if pairs and not self.takes_pairs:
            raise ValueError(f"pairs=True is for a model of sentence pairs; a {type(self).__name__} takes "
                             "single texts: export it without pairs.")
        path = serving.check_new_version(filepath)
        if keras.backend.backend() != "tensorflow":
            self._export_through_tensorflow(path, pairs, top_k)
            return path
        serve, signature, fills = self.serving_function(pairs=pairs, top_k=top_k)
        return serving.write(self, path, serve, signature, fills)

    # Whether the task reads pairs of texts (an export with `pairs=True`).
    takes_pairs = False

    def _answering(self, pairs=False, top_k=5):
        """The task's answering, as TensorFlow ops: `(preprocess, postprocess,
        input_signature, fills)`. `preprocess(*strings)` gives the model's
        features and what `postprocess(outputs, context)` needs besides the
        model's outputs to give the answers, a dict of `[batch, ...]` tensors.
        The exported model runs them in its graph, and the task's Python
        helpers (`entities`, `answer`, `fill_mask`) run them around
        `predict_on_batch` on any backend."""
        raise NotImplementedError(f"kbert cannot export a {type(self).__name__} yet.")

    def serving_function(self, pairs=False, top_k=5):
        """`(serve, input_signature, fills)` for `kbert.serving.write`: raw
        strings in, the task's answers out, as TensorFlow ops."""
        preprocess, postprocess, signature, fills = self._answering(pairs=pairs, top_k=top_k)

        def serve(*inputs):
            features, context = preprocess(*inputs)
            return postprocess(self(features, training=False), context)

        return serve, signature, fills

    def _predict_batch(self, features):
        """The model's outputs on one batch of features (TensorFlow tensors,
        handed over as numpy so that any backend takes them)."""
        return self.predict_on_batch(keras.tree.map_structure(lambda v: v.numpy(), features))

    def _answers_in_slices(self, inputs, batch_size=32, pairs=False, top_k=5):
        """What the exported model answers, computed here: a list of dicts of
        numpy values, one per row of `inputs` (a tuple of lists of str)."""
        if self.preprocessor is None:
            raise ValueError(f"{type(self).__name__} needs a preprocessor to read text; build the model with one.")
        preprocess, postprocess, _, _ = self._answering(pairs=pairs, top_k=top_k)
        inputs = text_tensor(tuple(inputs))
        rows = []
        for start in range(0, int(tf.shape(inputs[0])[0]), batch_size):
            part = [x[start:start + batch_size] for x in inputs]
            features, context = preprocess(*part)
            outputs = keras.tree.map_structure(
                lambda v: tf.convert_to_tensor(keras.ops.convert_to_numpy(v)), self._predict_batch(features))
            answers = {k: v.numpy() for k, v in postprocess(outputs, context).items()}
            rows += [{k: _decoded(v[i]) for k, v in answers.items()} for i in range(int(tf.shape(part[0])[0]))]
        return rows

    def _export_through_tensorflow(self, path, pairs, top_k):
        with tempfile.TemporaryDirectory() as preset:
            self.save_to_preset(preset)
            command = [sys.executable, "-c", _EXPORT_IN_TENSORFLOW, preset, path, str(pairs), str(top_k)]
            result = subprocess.run(command, env={**os.environ, "KERAS_BACKEND": "tensorflow"},
                                    capture_output=True, text=True)
        if result.returncode:
            raise RuntimeError(f"Exporting through a TensorFlow process failed:\n{result.stderr[-3000:]}")

    # === Presets ===

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

    def save_to_preset(self, folder):
        """Writes backbone, head and vocabulary to `folder` in kbert's layout;
        `from_preset(folder)` restores the model bit for bit, and
        `BertBackbone.from_preset(folder)` its backbone."""
        loading.save_backbone(self.backbone, folder)
        config = files.load_json(folder, files.KBERT_CONFIG)
        config["task"] = {"class": type(self).__name__, "config": self.task_config()}
        if self.preprocessor is not None:
            config["sequence_length"] = self.preprocessor.sequence_length
            self.preprocessor.tokenizer.save_to_preset(folder)
        with open(os.path.join(folder, files.KBERT_CONFIG), "w") as f:
            json.dump(config, f, indent=2)
        self.save_weights(os.path.join(folder, TASK_WEIGHTS))

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
            **kwargs: the head's arguments (e.g. `num_classes`), and backbone
                settings that leave the architecture alone (`dropout`,
                `dtype`).
        """
        folder = files.get_preset_dir(preset)
        backbone_kwargs = {k: kwargs.pop(k) for k in ("dropout", "dtype") if k in kwargs}
        backbone = BertBackbone.from_preset_config(loading.checked_backbone_config(folder, preset, backbone_kwargs))
        preprocessor = cls.preset_preprocessor(folder, sequence_length, backbone)
        if files.is_kbert_layout(folder):
            saved = files.load_json(folder, files.KBERT_CONFIG).get("task") or {}
            same_task = saved.get("class") == cls.__name__
            model = cls(backbone=backbone, preprocessor=preprocessor,
                        **{**(saved["config"] if same_task else {}), **kwargs})
            if same_task:
                model.load_weights(os.path.join(folder, TASK_WEIGHTS))
            else:
                backbone.load_weights(os.path.join(folder, loading.KBERT_WEIGHTS))
            return model
        path = files.weights_file(folder)
        tensors = huggingface.read_checkpoint(path)
        hf_config = files.load_json(folder, "config.json")
        model = cls(backbone=backbone, preprocessor=preprocessor,
                    **{**cls.hf_head_config(hf_config, tensors), **kwargs})
        loading.load_hf_backbone_weights(backbone, path, tensors)
        model.load_hf_head(tensors, path)
        return model

    @classmethod
    def preset_preprocessor(cls, folder, sequence_length, backbone):
        if not os.path.exists(os.path.join(folder, files.VOCABULARY)):
            return None
        if sequence_length is None and files.is_kbert_layout(folder):
            sequence_length = files.load_json(folder, files.KBERT_CONFIG).get("sequence_length")
        if sequence_length and sequence_length > backbone.max_sequence_length:
            raise ValueError(
                f"sequence_length={sequence_length} is longer than this model's maximum, "
                f"{backbone.max_sequence_length} positions; use sequence_length <= {backbone.max_sequence_length}."
            )
        return BertPreprocessor.from_preset(
            folder, sequence_length=sequence_length or min(512, backbone.max_sequence_length)
        )

    # === Hugging Face heads ===

    def hf_head_table(self):
        """(variable, Hugging Face name, transform) rows of the head; empty
        for heads that Hugging Face has no checkpoint of."""
        return []

    @classmethod
    def hf_head_config(cls, hf_config, tensors):
        """Head arguments read from a Hugging Face checkpoint (e.g. num_classes)."""
        return {}

    def load_hf_head(self, tensors, path):
        table = self.hf_head_table()
        if not table:
            return
        if not all(name in tensors for _, name, _ in table):
            warnings.warn(
                f"{path} has no {type(self).__name__} head ({table[0][1]} and others); "
                "the head starts from its initialisation: fine-tune before use."
            )
            return
        huggingface.assign(table, tensors, source=path)
