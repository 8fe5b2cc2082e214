"""Raw text into a task model: what `fit`, `evaluate` and `predict` do with
strings before the model sees them (the `Task` base's input pipeline)."""

import contextlib
import json

import keras
import numpy as np
import tensorflow as tf

from kbert.text.pipeline import map_batches, text_tensor, without_autotune
from kbert.training.partial_batches import PaddedBatches


class RawTextInput:
    """Turns raw input (texts, pairs, labels) into batched, preprocessed
    `tf.data` pipelines, padded and grouped by length as the task's
    `input_padding` and `length_groups` say."""

    # Subclasses with other raw inputs (words, question/context pairs,
    # next-sentence pairs) override `_is_raw`, `_dataset` or `_preprocess`.

    def _is_raw(self, x):
        """Whether `x` is text for the preprocessor (not ids already)."""
        # (PaddedBatches: batches made already, which DistributedTraining
        # hands on under JAX's data parallelism, validation's included.)
        if self.preprocessor is None or x is None or isinstance(x, PaddedBatches):
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
            spec = x.element_spec
            # A dataset of unlabeled pairs yields (texts_a, texts_b).
            pairs = isinstance(spec, tuple) and len(spec) == 2 and self._is_text_spec(spec)
            return map_batches(x, self._traced_preprocess(pairs=pairs))
        parts = self._raw_slices(x, y, sample_weight)
        dataset = tf.data.Dataset.from_tensor_slices(parts)
        if shuffle:
            dataset = self._shuffled_batches(dataset, parts[0], batch_size or 32)
        else:
            dataset = dataset.batch(batch_size or 32)
        return without_autotune(map_batches(dataset, self._traced_preprocess()))

    # Whether `_traced_preprocess` may trace once per model (see `_traced`).
    _preprocess_traced_once = True

    def _traced_preprocess(self, pairs=False):
        """`_preprocess` for the map of each `tf.data` pipeline that `fit` and
        `evaluate` build, traced once per model: tracing the tokenizer into
        every new pipeline again took seconds a call. `pairs`: for a dataset
        of unlabeled pairs, which yields `(texts_a, texts_b)`."""
        preprocess = (lambda a, b: self._preprocess((a, b))) if pairs else self._preprocess
        if not self._preprocess_traced_once:
            return preprocess
        return self._traced("pair_batches" if pairs else "batches", lambda: self._padded_to_longest(preprocess))

    def _raw_slices(self, x, y=None, sample_weight=None):
        """Raw input held in memory as the tensors whose rows are the
        examples: `(texts[, label ids][, sample weights])`, `texts` a tuple of
        two where the examples are pairs. Kept a tuple even without labels, so
        that a pair of texts is never mistaken for (texts, labels). Batches of
        its rows are what `_preprocess` takes."""
        x = text_tensor(x)
        if y is not None:
            y = self._label_ids(np.asarray(y))
        return (x,) + tuple(np.asarray(v) for v in (y, sample_weight) if v is not None)

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
        only when a dataset's map is traced), or to each batch's longest
        text inside `_longest_padding` (see `_pads_to_longest`)."""
        padding = "longest" if vars(self).get("_to_longest") and self._pads_to_longest() else self.input_padding
        return self.preprocessor.with_padding(padding)

    def _pads_to_longest(self):
        """Whether `input_padding="bucket"` pads the batches of `fit`,
        `evaluate` and `predict` on raw text to their longest text instead of
        its bucket: wherever a new shape costs no compilation (TensorFlow
        traces its steps with relaxed shapes, PyTorch runs eagerly); not
        under JAX, nor where the steps compile with XLA (`jit_compile`),
        which compile every shape: there the buckets bound the compilations.

        Sorted by length (predict, evaluate, fit's groups), a batch then
        carries almost no padding: MR sentences in batches of 32, 1.004
        tokens a real token against 1.20 in buckets. The outputs are the
        same."""
        return self.input_padding == "bucket" and keras.backend.backend() != "jax" and not self.jit_compile

    @contextlib.contextmanager
    def _longest_padding(self):
        """Inside it, `_batch_preprocessor` pads each batch to its longest
        text where `_pads_to_longest`."""
        object.__setattr__(self, "_to_longest", True)  # outside Keras' tracking of attributes
        try:
            yield
        finally:
            object.__setattr__(self, "_to_longest", False)

    def _padded_to_longest(self, function):
        """`function`, run (and so traced by `tf.function`) inside `_longest_padding`."""

        def padded_to_longest(*args):
            with self._longest_padding():
                return function(*args)

        return padded_to_longest

    def _preprocess(self, x, *rest):
        return (self._batch_preprocessor()(x), *rest)

    def _traced(self, name, build):
        """The function `build()` gives, as a `tf.function` traced once for
        this task model's settings: its preprocessor, `input_padding` (and
        `_pads_to_longest`) and head settings (`task_config`: class names, a
        question answerer's stride, an embedder's prompts...), built and
        traced anew where any of them changes. Kept outside Keras' tracking
        of attributes, so that saving and exporting never see it."""
        cache = vars(self).get("_traced_functions")
        if cache is None:
            cache = {}
            object.__setattr__(self, "_traced_functions", cache)
        settings = (self.input_padding, self._pads_to_longest(),
                    json.dumps(self.task_config(), sort_keys=True, default=str))
        entry = cache.get(name)
        if entry is None or entry[0] is not self.preprocessor or entry[1] != settings:
            function = tf.function(build(), reduce_retracing=True, autograph=False)
            entry = cache[name] = (self.preprocessor, settings, function)
        return entry[2]

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
