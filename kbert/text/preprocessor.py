"""BertPreprocessor: raw text in, BERT's packed model inputs out, as TensorFlow
ops; the base of each task's preprocessor (`kbert.text.task_preprocessors`)."""

import keras
import numpy as np

from kbert.aliases import also_named
from kbert.presets import files, tokenizer_files
from kbert.text import pipeline
from kbert.text.offsets import cut_after_words
from kbert.text.byte_pair_tokenizer import BytePairTokenizer
from kbert.text.packing import SegmentPacker
from kbert.text.sentencepiece_tokenizer import SentencePieceTokenizer
from kbert.text.tokenizer import WordPieceTokenizer
from kbert.tf_if_present import tf


@keras.saving.register_keras_serializable(package="kbert")
class Preprocessor(keras.layers.Layer):
    """Tokenizes text and packs it into `token_ids`, `segment_ids` and `padding_mask`.

    Gives the same ids as Hugging Face's `BertTokenizerFast(texts_a, texts_b,
    truncation=..., max_length=sequence_length, padding="max_length")`. It runs
    as TensorFlow ops, so it works in `tf.data.Dataset.map` (whatever the Keras
    backend), in a `tf.function`, and in an exported SavedModel.

    Args:
        tokenizer: a `kbert.text.BertTokenizer`.
        sequence_length: the most tokens of a packed sequence, `[CLS]` and
            `[SEP]` included.
        truncation: `"longest_first"` (default), `"only_first"` or `"only_second"`,
            as in Hugging Face.
        pad_to: `"sequence_length"` (fixed shape), `"longest"` (the longest
            sequence of the batch) or `"bucket"` (the shortest of 16, 32, 64,
            ..., `sequence_length` that holds the batch's longest).
        pad_to_multiple_of: round the padded length up to a multiple of this.

    Call it on a str, a list of str, a 1-D string tensor, or a tuple
    `(texts_a, texts_b)` of those for sentence pairs. It returns a dict of int32
    tensors [batch, length]; a single string gives [length]. Called as
    `preprocessor(x, y)` or `preprocessor(x, y, sample_weight)` (what
    `dataset.map` does with `(x, y)` elements) it returns `(x, y)` or
    `(x, y, sample_weight)` with `x` preprocessed. A dataset of unlabeled pairs
    therefore needs `dataset.map(lambda a, b: preprocessor((a, b)))`.

    It is a Keras layer without weights, so that a task model saves, loads
    and clones with it (`model.preprocessor`), but it runs TensorFlow ops on
    strings whatever the Keras backend: calling it skips Keras' layer call
    (which would convert its inputs to the backend's arrays).

    A task model reads raw input through its preprocessor's methods:
    `is_raw`, `examples` (input held in memory, checked, as tensors whose
    rows are examples), `lengths`, `batch_function` (a batch of those rows
    to features, labels and weights) and `answering` (what the exported
    model and the task's helpers run). Each task's preprocessor
    (`kbert.text.task_preprocessors`) gives its own; this one reads texts or
    pairs of texts, with labels given as they are.

    Example:
    >>> preprocessor = BertPreprocessor.from_preset("tiny", sequence_length=16)
    >>> preprocessor(("The cat sat.", "It was tired."))["token_ids"]
    >>> dataset = tf.data.Dataset.from_tensor_slices((texts, labels)).batch(32)
    >>> dataset = dataset.map(preprocessor, num_parallel_calls=tf.data.AUTOTUNE)
    """

    def __init__(
        self,
        tokenizer,
        sequence_length=512,
        truncation="longest_first",
        pad_to="sequence_length",
        pad_to_multiple_of=None,
        **kwargs,
    ):
        kwargs.setdefault("name", "bert_preprocessor")
        super().__init__(**kwargs)
        self.built = True  # no weights
        self.tokenizer = tokenizer
        self.packer = SegmentPacker(
            cls_id=tokenizer.cls_id,
            sep_id=tokenizer.sep_id,
            pad_id=tokenizer.pad_id,
            sequence_length=sequence_length,
            truncation=truncation,
            pad_to=pad_to,
            pad_to_multiple_of=pad_to_multiple_of,
            pair_layout=tokenizer.pair_layout,
            second_segment_id=tokenizer.second_segment_id,
        )

    @classmethod
    def from_preset(cls, preset, sequence_length=512, **kwargs):
        """Builds the preprocessor of a preset, with its family's tokenizer
        (`WordPieceTokenizer`, `SentencePieceTokenizer`, ...: `kbert.families`).

        Args:
            preset: a registered name, `hf://owner/name`, or a local folder.
            sequence_length: the packed length.
            **kwargs: the other arguments of `BertPreprocessor`.
        """
        folder = files.get_preset_dir(preset)
        tokenizer = tokenizer_class(tokenizer_files.tokenizer_class_name(folder, files.model_type(folder)))
        return cls(tokenizer.from_preset(folder), sequence_length=sequence_length, **kwargs)

    @classmethod
    def from_preprocessor(cls, preprocessor):
        """`preprocessor` as this class: the same tokenizer and packing (a
        task model given a plain `BertPreprocessor` reads its input through
        its own preprocessor class)."""
        if preprocessor is None or type(preprocessor) is cls:
            return preprocessor
        if not isinstance(preprocessor, BertPreprocessor):
            raise TypeError(
                f"preprocessor={preprocessor!r}: give a kbert.BertPreprocessor (or {cls.__name__}), "
                f"e.g. {cls.__name__}.from_preset(preset, sequence_length=128), or None for a model fed token ids."
            )
        config = preprocessor.get_config()
        config.pop("tokenizer")
        config.pop("name", None)
        return cls(preprocessor.tokenizer, **_packing_config(config))

    def with_padding(self, pad_to):
        """This preprocessor (the same tokenizer) padding as `pad_to` says."""
        if pad_to == self.packer.pad_to:
            return self
        config = self.packer.get_config()
        return type(self)(
            self.tokenizer,
            sequence_length=config["sequence_length"],
            truncation=config["truncation"],
            pad_to=pad_to,
            pad_to_multiple_of=config["pad_to_multiple_of"] if pad_to == "longest" else None,
            name=self.name,
        )

    @property
    def sequence_length(self):
        return self.packer.sequence_length

    def get_config(self):
        config = self.packer.get_config()
        for key in ("cls_id", "sep_id", "pad_id", "pair_layout", "second_segment_id"):  # the tokenizer's
            del config[key]
        tokenizer = self.tokenizer.get_config()
        if not isinstance(self.tokenizer, WordPieceTokenizer):  # WordPiece's is read without a class name
            tokenizer = {"class_name": type(self.tokenizer).__name__, "config": tokenizer}
        return {"name": self.name, "tokenizer": tokenizer, **config}

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        tokenizer = config.pop("tokenizer")
        if isinstance(tokenizer, dict) and "class_name" in tokenizer:
            tokenizer = tokenizer_class(tokenizer["class_name"]).from_config(tokenizer["config"])
        elif isinstance(tokenizer, dict):
            tokenizer = WordPieceTokenizer.from_config(tokenizer)
        return cls(tokenizer, **config)

    # === Raw input of a task: texts, or pairs of texts ===

    # The rank of a batch of raw input in a `tf.data.Dataset` (a batch of
    # texts: 1); None where it has no one rank.
    batched_rank = 1
    # How many rows of features an example gives (None: it varies).
    rows_per_example = 1

    def is_raw(self, x):
        """Whether `x` is raw input for this preprocessor (not features
        already): texts or pairs held in memory, or a `tf.data.Dataset` of
        them (alone, or first in `(x, y[, sample_weight])` elements)."""
        if isinstance(x, tf.data.Dataset):
            spec = x.element_spec
            if isinstance(spec, tuple) and spec and not _all_text(spec):
                spec = spec[0]
            return _all_text(spec)
        # Lists, tuples and arrays are checked as text (`examples`), so that
        # wrong input fails saying what to fix; anything else (a dict of
        # features, Keras' own batches) goes to Keras as it is.
        return isinstance(x, (list, tuple, np.ndarray, str, bytes))

    def examples(self, x, y=None, sample_weight=None, head=None):
        """Raw input held in memory, checked, as the tensors whose rows are
        the examples: `(texts[, labels][, sample weights])`, texts a tuple of
        two where the examples are pairs. Kept a tuple even without labels,
        so that a pair of texts is never mistaken for (texts, labels).
        `head`: the task's settings (`Task.head_settings`)."""
        x = pipeline.text_tensor(x)
        if y is not None:
            y = self.label_ids(y, head)
        return (x,) + tuple(np.asarray(v) for v in (y, sample_weight) if v is not None)

    def training_examples(self, examples, head=None):
        """The rows that `fit` and `evaluate` batch of `examples` (as
        `examples` gives them): here the examples themselves."""
        return examples

    def label_ids(self, y, head=None):
        """Labels held in memory as the model's targets (here: as given)."""
        return np.asarray(y)

    def lengths(self, examples):
        """The tokens each example of `examples` takes once packed (as
        `examples` gives them; `token_counts`), so that batches can hold texts
        of similar lengths; None where the task keeps its examples in their
        order."""
        texts = examples[0]
        return self.token_counts(*(texts if isinstance(texts, tuple) else (texts,))).numpy()

    def token_counts(self, *texts):
        """The tokens each row takes once packed ([CLS], the texts' WordPieces,
        a [SEP] each, at most the sequence length), as an int32 `[batch]`:
        the one count that orders texts by length, in `fit`, `predict` and
        an exported model's requests (`kbert.serving.slices`). TensorFlow
        ops, for a `tf.function` too.

        Text past what a sequence holds is cut first (`cut_after_words`), as
        `_tokenize` cuts it: WordPiece reads at most a sequence's worth of
        words of a text however long it is. Real counts rather than a proxy
        (bytes rank texts by tokens only roughly, differently in each
        script), so that a slice cut by tokens holds no more than its
        budget."""
        pieces = [self.tokenizer(cut_after_words(_as_strings(t), self.sequence_length)).row_lengths() for t in texts]
        specials = self.packer.special_tokens(len(texts))
        return tf.cast(tf.minimum(tf.add_n(pieces) + specials, self.sequence_length), tf.int32)

    def batch_function(self, head=None, pad_to=None, dataset_spec=None, labeled=False):
        """The function that a batch of examples goes through in `tf.data`:
        rows of `examples` (or the elements of a batched dataset of raw
        input, whose `element_spec` is `dataset_spec`) to `(features[,
        labels][, sample weights])`, padded as `pad_to` says (default: this
        preprocessor's `pad_to`). A dataset of two strings is `(texts,
        label names)` where it is `labeled` (fit, evaluate), else a pair
        `(texts_a, texts_b)` (predict); labeled pairs are `((a, b), y)`."""
        preprocessor = self.with_padding(pad_to or self.packer.pad_to)
        if (not labeled and dataset_spec is not None and isinstance(dataset_spec, tuple) and len(dataset_spec) == 2
                and _all_text(dataset_spec)):
            return lambda a, b: preprocessor((a, b))
        labels = self.dataset_labels(head) if dataset_spec is not None else None

        def batch(x, *rest):
            if labels is not None and rest:
                rest = (labels(rest[0]), *rest[1:])
            return (preprocessor(x), *rest)

        return batch

    def dataset_labels(self, head=None):
        """For a `tf.data` of raw input: a function of a batch of labels as
        the dataset gives them to the model's targets; None: as they are."""
        return None

    def answering(self, head=None, pad_to=None, pairs=False, top_k=5):
        """The task's answers as TensorFlow ops, shared by the exported
        model and the task's Python helpers: `(preprocess, postprocess,
        input_signature, fills)`. `preprocess(*strings)` gives the model's
        features and what `postprocess(outputs, context)` needs besides the
        model's outputs to give the answers, a dict of `[batch, ...]`
        tensors; `fills` pads each answer where slices of a request differ
        in their inner dimensions."""
        raise NotImplementedError(
            f"{type(self).__name__} gives no answers; build the task model with its own preprocessor "
            "(e.g. kbert.BertClassifierPreprocessor), or export it without one."
        )

    def _tokenize(self, texts):
        # Text far past what a sequence holds is cut before WordPiece reads
        # it (`cut_after_words`), leaving every id that the packed sequence
        # keeps unchanged.
        return self.tokenizer(cut_after_words(_as_strings(texts), self.sequence_length))

    def _tokenize_pair(self, texts_a, texts_b):
        """Both segments cut as `_tokenize` cuts, and where a cut would hide
        which segment is longer (longest_first gives the odd token to the
        longer one), cut later: a segment cut at `n` chunks has at least `n`
        pieces, so it is cut only past the other segment's length."""
        texts_a, texts_b = _as_strings(texts_a), _as_strings(texts_b)
        if texts_a.shape.rank == 0:  # one pair
            ids_a, ids_b = self._tokenize_pair(texts_a[None], texts_b[None])
            return ids_a[0], ids_b[0]
        length = tf.constant(self.sequence_length, tf.int64)
        cut_a, cut_b = cut_after_words(texts_a, length), cut_after_words(texts_b, length)
        ids_a, ids_b = self.tokenizer(cut_a), self.tokenizer(cut_b)
        shorter = lambda cut, texts: tf.strings.length(cut) < tf.strings.length(texts)  # noqa: E731
        was_a, was_b = shorter(cut_a, texts_a), shorter(cut_b, texts_b)
        if self.packer.truncation != "longest_first":
            return ids_a, ids_b  # there a segment keeps its first pieces whatever the lengths

        def exact_order():
            n_a, n_b = ids_a.row_lengths(), ids_b.row_lengths()
            whole = was_a & was_b  # both lengths unknown: nothing is cut
            # On a tie the second segment counts as the longer one.
            budget_a = tf.where(was_a & (n_a <= n_b), tf.maximum(n_b + 1, length), length)
            budget_b = tf.where(was_b & (n_b < n_a), tf.maximum(n_a, length), length)
            budget_a, budget_b = (tf.where(whole, tf.int64.max, b) for b in (budget_a, budget_b))
            return (self.tokenizer(cut_after_words(texts_a, budget_a)),
                    self.tokenizer(cut_after_words(texts_b, budget_b)))

        return tf.cond(tf.reduce_any(was_a | was_b), exact_order, lambda: (ids_a, ids_b))

    def __call__(self, x, y=None, sample_weight=None):
        if isinstance(x, tuple):
            segments = self._tokenize_pair(*x) if len(x) == 2 else tuple(self._tokenize(texts) for texts in x)
            if len(segments) not in (1, 2):
                raise ValueError(
                    f"BERT takes a text or a pair of texts; got a tuple of {len(segments)}. "
                    "Pass texts, or (texts_a, texts_b)."
                )
            x = self.packer(segments if len(segments) == 2 else segments[0])
        else:
            x = self.packer(self._tokenize(x))
        if y is None and sample_weight is None:
            return x
        if sample_weight is None:
            return x, y
        return x, y, sample_weight


# The name of the first releases (kbert.aliases).
BertPreprocessor = also_named(Preprocessor, "BertPreprocessor")


def serving_text(name="text"):
    """The input signature of a batch of strings, named as the served input."""
    return tf.TensorSpec([None], tf.string, name=name)


def _all_text(spec):
    specs = spec if isinstance(spec, tuple) else (spec,)
    return all(isinstance(s, tf.TensorSpec) and s.dtype == tf.string for s in specs)


def tokenizer_class(name):
    """A kbert tokenizer class by name, as a saved config names it."""
    tokenizers = {klass.__name__: klass for klass in (WordPieceTokenizer, BytePairTokenizer, SentencePieceTokenizer)}
    tokenizers["BertTokenizer"] = WordPieceTokenizer  # its first name
    if name not in tokenizers:
        raise ValueError(f"Unknown tokenizer class {name!r}; kbert's are {', '.join(tokenizers)}.")
    return tokenizers[name]


def _packing_config(config):
    return {k: config[k] for k in ("sequence_length", "truncation", "pad_to", "pad_to_multiple_of") if k in config}


def _as_strings(texts):
    if isinstance(texts, tf.RaggedTensor):
        raise TypeError(
            "BertPreprocessor takes texts as a str, a list of str or a dense string tensor, not ragged."
        )
    texts = tf.convert_to_tensor(texts)
    if texts.dtype != tf.string:
        raise TypeError(
            f"BertPreprocessor takes text, got a {texts.dtype.name} tensor. To pack token "
            "ids you already have, use kbert.text.SegmentPacker."
        )
    if texts.shape.rank is not None and texts.shape.rank > 1:
        raise ValueError(
            f"BertPreprocessor takes a batch of texts of shape [batch]; got shape {texts.shape}. "
            "Reshape it to 1-D first."
        )
    return texts
