"""The SentencePiece unigram tokenizer of XLM-RoBERTa and CamemBERT, as
TensorFlow ops (tensorflow-text's `SentencepieceTokenizer`, SentencePiece's
own C++).

It gives the ids of transformers 5's fast tokenizer (`tokenizers`: the
Precompiled normalizer, WhitespaceSplit, Metaspace "▁" prefixed to each word,
Unigram), and runs anywhere a TensorFlow graph runs. SentencePiece runs the
model in Hugging Face's id order (`kbert.text.sentencepiece_model` writes the
`ModelProto`), so its ids need no mapping. What `tokenizers` does around the
model is done here: special tokens written in the text are cut out first,
whitespace that the normalizer keeps (U+0085) becomes spaces, as
WhitespaceSplit splits there too, tied pieces of a run of one character are
put in `tokenizers`' order, and the spans moved to its offsets.
"""

import base64
import os
import uuid

from kbert.backend import keras_private
from kbert.presets.files import get_preset_dir
from kbert.text import sentencepiece_model
from kbert.text.sentencepiece_model import WHITE_SPACE, WORD_START, character_class, text_patterns
from kbert.text._tf_text import regex_split_with_offsets, tf_text
from kbert.text.pre_tokenization import any_of_pattern
from kbert.text.ragged import merge_rows, position_in_row, repeat, row_ids
from kbert.text.tokenizer_base import Tokenizer
from kbert.tf_if_present import tf

PAD, UNK, CLS, SEP, MASK = "<pad>", "<unk>", "<s>", "</s>", "<mask>"


class _Vocabulary:
    """The pieces and their ids, in one object that `tf.Module` does not look
    into (see `kbert.text.tokenizer_base.Vocabulary`): 250,002 pieces for XLM-R."""

    def __init__(self, pieces):
        self.pieces = tuple(pieces)
        self.tokens = tuple(piece for piece, _ in self.pieces)
        self.ids = {}
        for i, token in enumerate(self.tokens):
            self.ids.setdefault(token, i)


class _ModelResource(tf.saved_model.experimental.TrackableResource):
    """tensorflow-text's SentencePiece model resource, under a name of its
    own. tensorflow-text's belongs to the kernel of the op that made it
    (its TODO b/318839908), and TensorFlow drops its kernels whenever the
    global seed is set: `keras.utils.set_random_seed` after a tokenizer was
    built left it reading a deleted resource (NOT_FOUND "Resource
    .../_0_SentencepieceOp"). A named resource stays in the resource manager."""

    def __init__(self, proto):
        self._proto = proto
        self._shared_name = f"kbert_sentencepiece_{uuid.uuid4().hex}"
        super().__init__()
        _ = self.resource_handle  # made now, as tensorflow-text's is

    def _create_resource(self):
        return keras_private.get("gen_sentencepiece_tokenizer").sentencepiece_op(model=self._proto,
                                                                                 shared_name=self._shared_name)


class _Tokenization:
    """The SentencePiece model and traced tokenization of one vocabulary,
    shared by every tokenizer with it (`kbert.text.tokenizer_base._SHARED`)."""

    def __init__(self, pieces, unk_id, special_tokens, precompiled_charsmap, lstrip_tokens):
        self.vocabulary = _Vocabulary(pieces)
        proto, ids, types = sentencepiece_model.runnable_model_proto(
            pieces, unk_id, special_tokens, precompiled_charsmap
        )
        self.model = tf_text.SentencepieceTokenizer(model=proto, out_type=tf.int32)
        self.model._model_resource = _ModelResource(proto)  # see there
        self.special_tokens = special_tokens
        self.special_ids = tf.constant([ids[t] for t in special_tokens] or [0], tf.int32)
        self.special_strings = tf.constant(list(special_tokens) or [""])
        # A token of `lstrip_tokens` takes the whitespace before it (XLM-R's <mask>).
        self.whitespace = character_class(WHITE_SPACE)
        self.special_pattern = "|".join(
            (f"{self.whitespace}*" if token in lstrip_tokens else "") + any_of_pattern([token])
            for token in sorted(special_tokens, key=len, reverse=True)
        ) or None
        charsmap = base64.b64decode(precompiled_charsmap)
        self.word_breaks, self.before_piece, self.after_piece, self.unknown_run = text_patterns(
            pieces, charsmap
        )
        # Pieces that repeat one character ("...", "!!"): their codepoint and length.
        repeats = [
            (ord(piece[0]), len(piece)) if kind == sentencepiece_model.NORMAL and len(set(piece)) == 1
            and piece[0] != WORD_START else (-1, 0)
            for (piece, _), kind in zip(pieces, types)
        ]
        self.repeated_char = tf.constant([c for c, _ in repeats], tf.int32)
        self.repeat_length = tf.constant([n for _, n in repeats], tf.int32)

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)], autograph=False)
    def tokenize(self, texts):
        return self._tokenize(texts, with_offsets=False)[0]

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)], autograph=False)
    def tokenize_with_offsets(self, texts):
        return self._tokenize(texts, with_offsets=True)

    def _tokenize(self, texts, with_offsets):
        if self.special_pattern is None:
            return self._run_model(texts, with_offsets)
        has_special = tf.strings.regex_full_match(texts, f"(?s).*(?:{self.special_pattern}).*")
        return tf.cond(
            tf.reduce_any(has_special),
            lambda: _map_rows_of_tuples(
                has_special,
                lambda rows: self._tokenize_sections(tf.gather(texts, rows), with_offsets),
                lambda rows: self._run_model(tf.gather(texts, rows), with_offsets),
            ),
            lambda: self._run_model(texts, with_offsets),
        )

    def _run_model(self, texts, with_offsets):
        """The model on each word of `texts` alone, as `tokenizers` runs it.
        SentencePiece's C++ adds up the scores of a whole input's pieces in
        float32: over a long text (a 3,990-character review sums to about
        -15,000, where float32 steps by 0.001) it cannot tell two cuts of a
        word apart, and may pick the worse one. A word's sum is exact enough.
        (No piece spans whitespace, so the words' pieces are the text's.)"""
        words, word_starts = self._words(texts)
        pieces = self._run_model_on_words(words.flat_values, with_offsets)
        if with_offsets:
            shift = repeat(word_starts, pieces[0].row_lengths())
            pieces = (pieces[0], *(p.with_flat_values(p.flat_values + shift) for p in pieces[1:]))
        return tuple(merge_rows(p, words.row_splits) for p in pieces)

    def _words(self, texts):
        """The words of `texts` as written (`tokenizers`' WhitespaceSplit),
        ragged `[texts, (words)]`, and each one's byte offset in its text.
        (Split at spaces by `tf.strings.split`: tensorflow-text's regex split
        ends a string at U+0000, which SentencePiece reads as <unk>.)"""
        for pattern, spaces in self.word_breaks:
            texts = tf.strings.regex_replace(texts, pattern, spaces)
        words = tf.strings.split(texts, " ")
        rows = row_ids(words)
        lengths = tf.cast(tf.strings.length(words.flat_values), tf.int64)
        before = tf.cumsum(lengths + 1, exclusive=True)  # each word and the space after it
        starts = before - tf.gather(before, tf.gather(tf.cast(words.row_splits, tf.int64), rows))
        kept = lengths > 0
        row_splits = tf.concat([[0], tf.cumsum(tf.math.unsorted_segment_sum(tf.cast(kept, tf.int64), rows,
                                                                            words.nrows()))], 0)
        return (tf.RaggedTensor.from_row_splits(tf.boolean_mask(words.flat_values, kept), row_splits, validate=False),
                tf.boolean_mask(starts, kept))

    def _run_model_on_words(self, words, with_offsets):
        if not with_offsets:
            words = tf.strings.regex_replace(words, self.unknown_run, r"\1")
            return (self._order_runs(self.model.tokenize(words))[0],)
        ids, starts, ends = self.model.tokenize_with_offsets(words)
        starts, ends = self._hugging_face_spans(words, ids, starts, ends)
        ids, order, run = self._order_runs(ids)
        # The reordered pieces of a run share out its bytes in their new order.
        lengths = tf.gather(ends.flat_values - starts.flat_values, order)
        before = tf.cumsum(lengths, exclusive=True)
        before -= tf.gather(tf.math.segment_min(before, run), run)
        new_starts = tf.gather(tf.math.segment_min(starts.flat_values, run), run) + before
        return ids, starts.with_flat_values(new_starts), ends.with_flat_values(new_starts + lengths)

    def _order_runs(self, ids):
        """Puts the pieces of a run of one repeated character ("...." as
        ".", "...") shortest first, as `tokenizers` does: the segmentations
        tie, and SentencePiece's C++ breaks the tie another way."""
        flat = ids.flat_values
        char = tf.gather(self.repeated_char, flat)
        same_run = tf.concat([[False], (char[1:] == char[:-1]) & (char[1:] >= 0)], 0)
        same_run &= tf.not_equal(position_in_row(ids), 0)
        run = tf.cumsum(tf.cast(~same_run, tf.int64)) - 1
        length = tf.cast(tf.gather(self.repeat_length, flat), tf.int64)
        order = tf.argsort(run * 2**20 + length, stable=True)
        return ids.with_flat_values(tf.gather(flat, order)), order, run

    def _hugging_face_spans(self, texts, ids, starts, ends):
        """SentencePiece's byte spans, moved to `tokenizers`' offsets: a word's
        first piece starts after the whitespace before it, and a piece that is
        only the word-start "▁" spans the word's first character."""
        text_of_piece = tf.gather(texts, row_ids(ids))
        flat_starts, flat_ends = starts.flat_values, ends.flat_values
        piece_text = tf.strings.substr(text_of_piece, flat_starts, flat_ends - flat_starts)
        stripped = tf.strings.regex_replace(piece_text, self.before_piece, "")
        flat_starts = flat_ends - tf.cast(tf.strings.length(stripped), flat_ends.dtype)
        if self.after_piece:
            stripped = tf.strings.regex_replace(stripped, self.after_piece, "")
            flat_ends = flat_starts + tf.cast(tf.strings.length(stripped), flat_ends.dtype)
        # The next piece's start, in the same text (a lone "▁" is never last).
        next_starts = tf.concat([flat_starts[1:], flat_starts[-1:]], 0)
        lone = tf.equal(flat_starts, flat_ends)
        flat_starts = tf.where(lone, next_starts, flat_starts)
        # The byte length of the character there (UTF-8 has at most four).
        four = tf.fill(tf.shape(flat_starts), tf.constant(4, tf.int64))
        four_bytes = tf.strings.substr(text_of_piece, flat_starts, four)
        char_bytes = tf.strings.length(tf.strings.substr(four_bytes, 0, 1, unit="UTF8_CHAR"))
        flat_ends = tf.where(lone, flat_starts + tf.cast(char_bytes, flat_starts.dtype), flat_ends)
        return starts.with_flat_values(flat_starts), ends.with_flat_values(flat_ends)

    def _tokenize_sections(self, texts, with_offsets):
        """Cuts out the special tokens written in `texts` (each becomes its
        id), tokenizes the text between them, and joins the pieces again."""
        sections, section_starts, _ = regex_split_with_offsets(texts, self.special_pattern, self.special_pattern)
        flat = sections.flat_values
        token = tf.strings.regex_replace(flat, f"^{self.whitespace}+", "")
        is_token = tf.equal(token[:, None], self.special_strings[None, :])  # [sections, special tokens]
        is_special = tf.reduce_any(is_token, axis=1)
        special_id = tf.gather(self.special_ids, tf.argmax(tf.cast(is_token, tf.int32), 1))

        def special(rows):
            one = tf.ones_like(rows)
            ragged = lambda values: tf.RaggedTensor.from_row_lengths(values, one, validate=False)  # noqa: E731
            ids = ragged(tf.gather(special_id, rows))
            if not with_offsets:
                return (ids,)
            length = tf.cast(tf.strings.length(tf.gather(flat, rows)), tf.int64)
            return ids, ragged(tf.zeros_like(length)), ragged(length)

        pieces = _map_rows_of_tuples(
            is_special, special, lambda rows: self._run_model(tf.gather(flat, rows), with_offsets)
        )
        if with_offsets:
            # Offsets within a section, moved to the text.
            shift = repeat(section_starts.flat_values, pieces[0].row_lengths())
            pieces = (pieces[0], *(p.with_flat_values(p.flat_values + shift) for p in pieces[1:]))
        return tuple(merge_rows(p, sections.row_splits) for p in pieces)


def _map_rows_of_tuples(condition, if_true, if_false):
    """`kbert.text.tokenizer._map_rows` for functions that return tuples of
    ragged tensors: each function traced once."""
    true_rows = tf.where(condition)[:, 0]
    false_rows = tf.where(~condition)[:, 0]
    order = tf.math.invert_permutation(tf.concat([true_rows, false_rows], 0))
    return tuple(
        tf.gather(tf.concat([a, b], axis=0), order) for a, b in zip(if_true(true_rows), if_false(false_rows))
    )


class SentencePieceTokenizer(Tokenizer):
    """XLM-RoBERTa's (and CamemBERT's) SentencePiece unigram tokenizer, as
    TensorFlow ops.

    Gives the same ids as transformers' fast `XLMRobertaTokenizer` with
    `add_special_tokens=False`. It is a `tf.Module`: call it inside
    `tf.data.Dataset.map` or a `tf.function`, and track it from a module you
    export as a SavedModel.

    Args:
        pieces: the vocabulary, a list of `[piece, score]` in id order
            (`tokenizer.json`'s `model.vocab`).
        unk_id: the id of the unknown piece.
        special_tokens: the tokens cut out of the text as they are written
            (`"<mask>"` gives `mask_id`); all are in `pieces`.
        precompiled_charsmap: the normalizer's table, base64 (`tokenizer.json`'s
            Precompiled normalizer); "" normalizes nothing.
        lstrip_tokens: special tokens that take the whitespace before them
            into their span (`lstrip`; XLM-R's `<mask>`).

    Example:
    >>> tokenizer = SentencePieceTokenizer.from_preset("hf://FacebookAI/xlm-roberta-base")
    >>> tokenizer(["Hello world", "a <mask>"])
    <tf.RaggedTensor [[35378, 8999], [10, 250001]]>
    """

    PAD, UNK, CLS, SEP, MASK = PAD, UNK, CLS, SEP, MASK
    # How the preprocessor packs a pair: `<s> A </s></s> B </s>` (`kbert.text.packing`).
    pair_layout = "two_separators"

    def __init__(
        self, pieces, unk_id=3, special_tokens=(CLS, PAD, SEP, UNK, MASK), precompiled_charsmap="", lstrip_tokens=()
    ):
        super().__init__(name="sentencepiece_tokenizer")
        pieces = tuple((str(piece), float(score)) for piece, score in pieces)
        tokens = [piece for piece, _ in pieces]
        missing = [t for t in special_tokens if t not in tokens]
        if missing or not 0 <= unk_id < len(pieces):
            raise ValueError(
                f"The vocabulary ({len(pieces)} pieces) lacks the special tokens {missing} or unk_id "
                f"{unk_id}. Pass the special tokens that are among the pieces, or read the "
                "vocabulary with SentencePieceTokenizer.from_preset."
            )
        self._unk_id = unk_id
        self.precompiled_charsmap = precompiled_charsmap
        self.lstrip_tokens = tuple(lstrip_tokens)
        self._share_tokenization(
            _Tokenization, (pieces, unk_id, tuple(special_tokens), precompiled_charsmap, self.lstrip_tokens)
        )
        # Tracked, so that a SavedModel holds the SentencePiece model.
        self._model = self._tokenization.model

    @classmethod
    def from_preset(cls, preset, **kwargs):
        """Builds the tokenizer from a folder's `tokenizer.json` (transformers
        5) or `sentencepiece.bpe.model` (the hub's XLM-RoBERTa files), read
        as `AutoTokenizer` reads them.

        Args:
            preset: a registered name, `hf://owner/name`, or a local folder.
            **kwargs: override the settings read from the files.
        """
        folder = os.fspath(preset)
        if not os.path.isdir(folder):
            folder = get_preset_dir(preset)
        settings = sentencepiece_model.read_model(folder)
        settings.pop("add_prefix_space")
        return cls(**{**settings, **kwargs})

    def save_to_preset(self, folder, model_max_length=None):
        """Writes `tokenizer.json`, `sentencepiece.bpe.model` (for XLM-R's
        layout of ids), `tokenizer_config.json` and `special_tokens_map.json`,
        which `AutoTokenizer` (and SentencePiece with fairseq's ids) read into
        the same ids. Keys of an existing `tokenizer_config.json` are kept."""
        sentencepiece_model.write_model(
            folder, self._vocabulary.pieces, self._unk_id, self.special_tokens, self.precompiled_charsmap,
            lstrip_tokens=self.lstrip_tokens,
            model_max_length=model_max_length,
        )

    def get_config(self):
        return {
            "pieces": [list(p) for p in self._vocabulary.pieces],
            "unk_id": self._unk_id,
            "special_tokens": list(self.special_tokens),
            "precompiled_charsmap": self.precompiled_charsmap,
            "lstrip_tokens": list(self.lstrip_tokens),
        }

    def tokenize_with_byte_spans(self, texts):
        """Ids of a 1-D batch of texts, with each piece's byte span.

        Returns:
            `(ids, starts, ends)`: ragged `[texts, (pieces)]` tensors, ids
            int32, starts and ends int64 byte offsets into the UTF-8 text:
            Hugging Face's `offset_mapping` in bytes (a piece that is only
            the word-start "▁" spans the word's first character, as there).
        """
        ids, starts, ends = self._tokenization.tokenize_with_offsets(tf.convert_to_tensor(texts, tf.string))
        return ids, tf.cast(starts, tf.int64), tf.cast(ends, tf.int64)

    def _join_tokens(self, tokens):
        """Pieces joined, each "▁" a space, the first one dropped (Hugging
        Face's `decode`)."""
        text = tf.strings.reduce_join(tokens, axis=-1)
        return tf.strings.regex_replace(tf.strings.regex_replace(text, WORD_START, " "), "^ ", "")

    def _continues_word(self, token):
        return not token.startswith(WORD_START)

    @property
    def unk_id(self):
        return self._unk_id
