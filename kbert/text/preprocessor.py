"""BertPreprocessor: raw text in, BERT's packed model inputs out, as TensorFlow ops."""

import keras
import tensorflow as tf

from kbert.text.offsets import cut_after_words
from kbert.text.packing import SegmentPacker
from kbert.text.tokenizer import BertTokenizer


# Registered so that a task model's `get_config()` can hold its preprocessor.
@keras.saving.register_keras_serializable(package="kbert")
class BertPreprocessor(tf.Module):
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
    ):
        super().__init__(name="bert_preprocessor")
        self.tokenizer = tokenizer
        self.packer = SegmentPacker(
            cls_id=tokenizer.cls_id,
            sep_id=tokenizer.sep_id,
            pad_id=tokenizer.pad_id,
            sequence_length=sequence_length,
            truncation=truncation,
            pad_to=pad_to,
            pad_to_multiple_of=pad_to_multiple_of,
        )

    @classmethod
    def from_preset(cls, preset, sequence_length=512, **kwargs):
        """Builds the preprocessor of a preset, with its `BertTokenizer`.

        Args:
            preset: a registered name, `hf://owner/name`, or a local folder.
            sequence_length: the packed length.
            **kwargs: the other arguments of `BertPreprocessor`.
        """
        return cls(BertTokenizer.from_preset(preset), sequence_length=sequence_length, **kwargs)

    def with_padding(self, pad_to):
        """This preprocessor (the same tokenizer) padding as `pad_to` says."""
        if pad_to == self.packer.pad_to:
            return self
        config = self.packer.get_config()
        return BertPreprocessor(
            self.tokenizer,
            sequence_length=config["sequence_length"],
            truncation=config["truncation"],
            pad_to=pad_to,
            pad_to_multiple_of=config["pad_to_multiple_of"] if pad_to == "longest" else None,
        )

    @property
    def sequence_length(self):
        return self.packer.sequence_length

    def get_config(self):
        config = self.packer.get_config()
        for key in ("cls_id", "sep_id", "pad_id"):
            del config[key]
        return {"tokenizer": self.tokenizer.get_config(), **config}

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        tokenizer = config.pop("tokenizer")
        if isinstance(tokenizer, dict):
            tokenizer = BertTokenizer.from_config(tokenizer)
        return cls(tokenizer, **config)

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
