"""Raw text into a task model: the batched `tf.data` pipelines and batches
that `fit`, `evaluate`, `predict` and the model's call make of strings with
the task's preprocessor (`model.preprocessor`), padded and grouped by length
as the model's `input_padding` and `length_groups` say."""

import hashlib
import json
import logging
import numbers
import weakref

import keras
import numpy as np

from kbert.text.pipeline import map_batches, slices, take, without_autotune
from kbert.tf_if_present import is_dataset, tf


class _StepTracesOfEachModel(logging.Filter):
    """Drops TensorFlow's warning of "retracing" about Keras' train, test
    and predict steps: each model traces its own (they hold its variables),
    and TensorFlow counts the traces of every model's steps together, so a
    notebook that built three models warned though no step traced twice."""

    def filter(self, record):
        message = record.getMessage()
        return not ("triggered tf.function retracing" in message and "TensorFlowTrainer." in message)


logging.getLogger("tensorflow").addFilter(_StepTracesOfEachModel())


def is_text_in_memory(x):
    """Whether `x` is raw text held in memory: a list or array of strings
    (or of word lists), or a tuple of such lists."""
    if isinstance(x, (str, bytes)):
        return True
    if isinstance(x, tuple):
        return bool(x) and all(is_text_in_memory(v) for v in x)
    if isinstance(x, np.ndarray):
        return x.dtype.kind in "USO"
    if isinstance(x, list):
        return bool(x) and isinstance(x[0], (str, bytes, list, tuple))
    return False


def check_batch_size(batch_size):
    """Refuses a `batch_size` that is not a whole number of at least 1
    (None: the default)."""
    if batch_size is not None and (isinstance(batch_size, bool) or not isinstance(batch_size, numbers.Integral)
                                   or batch_size < 1):
        raise ValueError(f"batch_size={batch_size!r}: give the number of examples in a batch, a whole number of "
                         "at least 1 (e.g. batch_size=32), or leave it out for the default.")


def is_raw(model, x):
    """Whether `x` is raw input for the model's preprocessor (not features
    already); raw text given to a model without one is refused, saying how
    to add one."""
    if model.preprocessor is None:
        if is_text_in_memory(x) or (is_dataset(x) and _string_spec(x.element_spec)):
            raise ValueError(no_preprocessor(model))
        return False
    return model.preprocessor.is_raw(x)


def no_preprocessor(model):
    name = type(model).__name__
    return (f"This {name} has no preprocessor, so it takes token ids (a dict of token_ids, segment_ids and "
            f"padding_mask), not text. To give it text, build it with one: {name}.from_preset(preset, ...) "
            f"keeps the preset's, or pass preprocessor={model.preprocessor_cls.__name__}.from_preset(preset, "
            "sequence_length=128).")


def _string_spec(spec):
    return any(getattr(s, "dtype", None) == tf.string for s in tf.nest.flatten(spec))


def padding(model):
    """How `fit`, `evaluate` and `predict` pad raw text: with
    `input_padding="bucket"`, to each batch's longest text wherever a new
    shape costs no compilation (TensorFlow traces its steps with relaxed
    shapes, PyTorch runs eagerly); under JAX, or where the steps compile
    with XLA (`jit_compile`), which compile every shape, to the buckets,
    which bound the compilations.

    Sorted by length (predict, evaluate, fit's groups), a batch then carries
    almost no padding (docs/benchmarks.md, "Measurements behind the code").
    The outputs are the same."""
    if model.input_padding == "bucket" and keras.backend.backend() != "jax" and not model.jit_compile:
        return "longest"
    return model.input_padding


class _Traced:
    """The traced functions of one preprocessor class and settings, built
    from a copy of the first preprocessor seen with them (so that they keep
    no model's alive)."""

    def __init__(self, preprocessor):
        self.preprocessor = type(preprocessor).from_config(preprocessor.get_config())
        self.functions = {}


# Preprocessors of one class and settings (the models of one preset) share
# their traced functions, alive while one of them is: tracing the tokenizer
# into each new pipeline took seconds a call, and TensorFlow counts the traces
# of every copy of a function together, so one copy per model warned of
# "retracing" from the fifth model on.
_BY_SETTINGS = weakref.WeakValueDictionary()
_BY_PREPROCESSOR = weakref.WeakKeyDictionary()


def _shared(preprocessor):
    shared = _BY_PREPROCESSOR.get(preprocessor)
    if shared is None:
        config = preprocessor.get_config()
        config.pop("name", None)
        # The tokenizer by a digest of its config, not frozen item by item:
        # its vocabulary is tens of thousands of entries.
        tokenizer = json.dumps(config.pop("tokenizer"), sort_keys=True, default=str).encode()
        settings = (type(preprocessor), hashlib.sha256(tokenizer).hexdigest(), frozen(config))
        shared = _BY_SETTINGS.get(settings)
        if shared is None:
            shared = _BY_SETTINGS[settings] = _Traced(preprocessor)
        _BY_PREPROCESSOR[preprocessor] = shared
    return shared


def traced(preprocessor, key, build):
    """`build(p)`'s function as a `tf.function`, `p` a preprocessor of
    `preprocessor`'s class and settings, traced once per such settings and
    `key` (what it was built for: the kind of function, the padding, the
    task's settings, the input's structure)."""
    shared = _shared(preprocessor)
    if key not in shared.functions:
        shared.functions[key] = tf.function(build(shared.preprocessor), reduce_retracing=True, autograph=False)
    return shared.functions[key]


def traced_functions(preprocessor):
    """`{key: tf.function}`: the functions traced for `preprocessor`'s settings so far."""
    shared = _BY_PREPROCESSOR.get(preprocessor)
    return {} if shared is None else dict(shared.functions)


def frozen(value):
    """`value` (the task's settings: dicts, lists, numbers, strings) hashable."""
    if isinstance(value, dict):
        return tuple(sorted((k, frozen(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return tuple(frozen(v) for v in value)
    return value


def _structure(spec):
    """A dataset's element structure as a key: each part's kind, dtype and
    shape past the batch (a new one is checked and traced anew)."""
    def part(s):
        shape = s.shape
        return type(s).__name__, s.dtype.name, None if shape.rank is None else tuple(shape.as_list()[1:])

    return frozen(tf.nest.map_structure(part, spec))


def batch_function(model, pad_to, dataset_spec=None, structure=None, labeled=False):
    """The model's preprocessing of a batch, traced once for these settings."""
    preprocessor, head = model.preprocessor, model.head_settings()
    key = ("batches", pad_to, frozen(head), _structure(dataset_spec) if dataset_spec is not None else structure,
           labeled)
    return traced(preprocessor, key, lambda p: p.batch_function(head, pad_to, dataset_spec, labeled))


def dataset(model, x, y=None, sample_weight=None, batch_size=None, shuffle=False, sort=False, labeled=False):
    """A batched, preprocessed `tf.data.Dataset` from raw input; `shuffle`:
    in batches of similar lengths (`length_groups`), for `fit`; `sort`: in
    order of length, for `evaluate`; `labeled`: for fit and evaluate (a
    dataset's elements hold labels; examples in memory are batched as the
    preprocessor's `training_examples`)."""
    pad_to = padding(model)
    if isinstance(x, tf.data.Dataset):
        if _unbatched(x.element_spec, model.preprocessor):
            raise ValueError("Got an unbatched tf.data.Dataset of text: batch it first, e.g. dataset.batch(32).")
        return map_batches(x, batch_function(model, pad_to, dataset_spec=x.element_spec, labeled=labeled))
    preprocessor, head = model.preprocessor, model.head_settings()
    examples = preprocessor.examples(x, y, sample_weight, head)
    if labeled:
        examples = preprocessor.training_examples(examples, head)
    batch_size = batch_size or 32
    lengths = preprocessor.lengths(examples) if _groups(model, pad_to) and (shuffle or sort) else None
    if lengths is not None and sort:
        examples = tf.nest.map_structure(lambda t: tf.gather(t, np.argsort(lengths, kind="stable")), examples)
    rows = tf.data.Dataset.from_tensor_slices(examples)
    preprocess = batch_function(model, pad_to, structure=len(examples), labeled=labeled)
    if preprocessor.rows_per_example != 1:
        return _windows(rows, preprocess, batch_size, shuffle)
    if shuffle and lengths is not None:
        batches = _grouped_batches(rows, lengths, batch_size, model.length_groups)
    elif shuffle:
        batches = rows.shuffle(int(rows.cardinality()), reshuffle_each_iteration=True).batch(batch_size)
    else:
        batches = rows.batch(batch_size)
    return without_autotune(map_batches(batches, preprocess))


def _unbatched(spec, preprocessor):
    """Whether a dataset of raw input yields single examples, not batches."""
    first = spec[0] if isinstance(spec, tuple) else spec
    rank = getattr(first, "shape", tf.TensorShape(None)).rank
    return preprocessor.batched_rank is not None and rank is not None and rank < preprocessor.batched_rank


def _groups(model, pad_to):
    return bool(model.length_groups) and pad_to != "sequence_length"


def _grouped_batches(rows, lengths, batch_size, length_groups):
    """Shuffled batches for `fit`, each of texts of similar lengths: runs of
    `length_groups` batches sorted by length, then the batches shuffled."""
    size = int(rows.cardinality())
    rows = tf.data.Dataset.zip(rows, tf.data.Dataset.from_tensor_slices(lengths))
    rows = rows.shuffle(size, reshuffle_each_iteration=True).batch(batch_size * length_groups)

    def sorted_batches(parts, lengths):
        order = tf.argsort(lengths, stable=True)
        parts = tf.nest.map_structure(lambda t: tf.gather(t, order), parts)
        return tf.data.Dataset.from_tensor_slices(parts).batch(batch_size)

    batches = rows.flat_map(sorted_batches).shuffle(length_groups, reshuffle_each_iteration=True)
    return batches.apply(tf.data.experimental.assert_cardinality(-(-size // batch_size)))


def _windows(rows, preprocess, batch_size, shuffle):
    """Batches of the rows that each example gives several of (a question
    answerer's windows), counted once so that `fit` knows its steps."""
    windows = without_autotune(map_batches(rows.batch(batch_size), preprocess)).unbatch()
    if shuffle:
        # Made once (the count fills the cache) and shuffled all together
        # each epoch, as transformers' run_qa shuffles its features: the
        # windows of one context then land in different batches.
        windows = windows.cache()
    count = int(windows.reduce(np.int64(0), lambda n, _: n + 1))
    if shuffle:
        windows = windows.shuffle(max(count, 1), reshuffle_each_iteration=True)
    batches = windows.batch(batch_size).apply(tf.data.experimental.assert_cardinality(-(-count // batch_size)))
    return batches.prefetch(tf.data.AUTOTUNE)


def split(x, y, sample_weight, validation_split):
    """`validation_split` of raw input in memory, as Keras splits arrays: the
    last examples held out, before any shuffling. Returns `((x, y,
    sample_weight), validation_data)`."""
    count = len(x[0]) if isinstance(x, tuple) else len(x)
    kept = int(count * (1 - validation_split))
    if not 0 < kept < count:
        raise ValueError(f"validation_split={validation_split} leaves no examples on one side of {count}; "
                         "use a value in (0, 1) that keeps at least one example on each side.")

    def rows(v, part):  # (lists of word lists are ragged: sliced, not made arrays)
        return tuple(rows(u, part) for u in v) if isinstance(v, tuple) else (None if v is None else v[part])

    training = tuple(rows(v, slice(0, kept)) for v in (x, y, sample_weight))
    validation = tuple(rows(v, slice(kept, count)) for v in (x, y, sample_weight) if v is not None)
    return training, validation


def features(model, x):
    """One batch of raw text held in memory as the model's features (numpy,
    which any backend takes), padded to its longest text."""
    examples = model.preprocessor.examples(x, head=model.head_settings())
    batch = batch_function(model, "longest", structure=len(examples))(*examples)
    return keras.tree.map_structure(lambda v: v.numpy(), batch[0])


def in_length_order(model, x, run):
    """`run(x)` on raw input sorted by length (see `length_groups`), its
    outputs given back in the input's order."""
    if isinstance(x, tf.data.Dataset) or not _groups(model, padding(model)):
        return run(x)
    lengths = model.preprocessor.lengths(model.preprocessor.examples(x, head=model.head_settings()))
    if lengths is None:
        return run(x)
    order = np.argsort(lengths, kind="stable")
    outputs = run(take(x, order))
    unsort = np.argsort(order)
    return keras.tree.map_structure(lambda v: v[unsort], outputs)


def predict_in_memory(model, x, batch_size, verbose, preprocess=None):
    """The model's outputs on raw input held in memory, sorted by length,
    preprocessed a batch at a time by a function traced once (`preprocess`
    of a batch of examples' rows to features, default the model's), and run
    with `predict_on_batch`. A batch of examples may give more rows of
    features (a question answerer's windows): they are run `batch_size`
    rows at a time."""
    batch_size = batch_size or 32

    def run(x):
        examples = model.preprocessor.examples(x, head=model.head_settings())
        if preprocess is None:
            batches = batch_function(model, padding(model), structure=len(examples))
            features = lambda *part: batches(*part)[0]  # noqa: E731
        else:
            features = preprocess
        count = -(-int(tf.nest.flatten(examples)[0].shape[0]) // batch_size)
        progress = keras.utils.Progbar(count, verbose=1 if verbose == "auto" else verbose) if verbose else None
        outputs = []
        for i, part in enumerate(slices(examples, batch_size)):
            outputs += [predict_batch(model, rows) for rows in slices(features(*part), batch_size)]
            if progress is not None:
                progress.update(i + 1)
        return keras.tree.map_structure(concatenated, *outputs)

    return in_length_order(model, x, run)


def predict_batch(model, features):
    """The model's outputs on one batch of features (TensorFlow tensors,
    handed over as numpy so that any backend takes them)."""
    features = keras.tree.map_structure(lambda v: v.numpy() if hasattr(v, "numpy") else v, features)
    if replicas(model) > 1:
        # predict_on_batch would run the whole batch on every replica and
        # concatenate their outputs: one row per replica. (predict on many
        # texts runs Keras' distributed loop instead.)
        return keras.tree.map_structure(keras.ops.convert_to_numpy, model(features, training=False))
    return model.predict_on_batch(features)


def replicas(model):
    """How many replicas the model's `tf.distribute` strategy runs (1 without one)."""
    strategy = getattr(model, "distribute_strategy", None)
    return 1 if strategy is None else strategy.num_replicas_in_sync


def concatenated(*batches):
    """Outputs of several batches as one array; dimensions past the first
    that differ between batches (tokens of batches padded to different
    lengths) are padded with 0 to the largest."""
    batches = [np.asarray(v) for v in batches]
    if len(batches) == 1:
        return batches[0]
    largest = np.max([v.shape[1:] for v in batches], axis=0) if batches[0].ndim > 1 else ()
    return np.concatenate([np.pad(v, [(0, 0)] + [(0, n - m) for n, m in zip(largest, v.shape[1:])]) for v in batches])

