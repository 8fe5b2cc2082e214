"""The SentencePiece tokenizers of XLM-RoBERTa, CamemBERT and DeBERTa-v3
(unigram) and of mmBERT (Gemma's BPE with byte fallback), as TensorFlow ops
(tensorflow-text's `SentencepieceTokenizer`, SentencePiece's own C++).

It gives the ids of transformers 5's fast tokenizer (`tokenizers`: XLM-R's
Precompiled normalizer, WhitespaceSplit, Metaspace "▁" prefixed to each word,
Unigram; DeBERTa-v3's Precompiled normalizer that strips trailing spaces and
collapses runs of them, Metaspace; Gemma's spaces replaced by "▁", BPE whose
unknown characters fall back to their `<0xNN>` bytes), and runs anywhere a
TensorFlow graph runs. SentencePiece runs the model in Hugging Face's id order
(`kbert.text.sentencepiece_model` writes the `ModelProto`), so its ids need no
mapping. What `tokenizers` does around the model is done here: special tokens
written in the text are cut out first; a unigram model runs on each word
alone, split where `tokenizers` splits (whitespace that the normalizer keeps,
U+0085, splits XLM-R's words too, as WhitespaceSplit does), tied pieces of a
run of one character put in `tokenizers`' order; and the spans are moved to
its offsets.
"""

import base64
import os
import uuid

from kbert.backend import keras_private
from kbert.presets.files import get_preset_dir
from kbert.text import sentencepiece_model
from kbert.text.sentencepiece_model import (BYTE, WHITE_SPACE, WORD_START,
                                            character_class, text_patterns)
from kbert.text import byte_pair
from kbert.text._tf_text import tf_text
from kbert.text.packing import PAIR_LAYOUTS, SECOND_SEGMENT_IDS
from kbert.text.pre_tokenization import any_of_pattern
from kbert.text.ragged import merge_rows, position_in_row, repeat, row_ids
from kbert.text.tokenizer_base import ROLES, Tokenizer, as_valid_utf8
from kbert.tf_if_present import tf

PAD, UNK, CLS, SEP, MASK = "<pad>", "<unk>", "<s>", "</s>", "<mask>"
# XLM-RoBERTa's special tokens by their roles (Hugging Face's names).
XLM_ROBERTA_SPECIAL_TOKENS = {"cls_token": CLS, "sep_token": SEP, "pad_token": PAD, "unk_token": UNK,
                              "mask_token": MASK}


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

    def __init__(self, pieces, unk_id, special_tokens, precompiled_charsmap, lstrip_tokens, whitespace_split,
                 merges):
        self.vocabulary = _Vocabulary(pieces)
        proto, ids, types = sentencepiece_model.runnable_model_proto(
            pieces, unk_id, special_tokens, precompiled_charsmap, merges
        )
        self.bpe = merges is not None
        self.unk_id = unk_id
        self.merges = merges
        self.whitespace_split = whitespace_split
        # Each id's piece: whether it is a byte piece (BPE), or the lone word start "▁".
        self.is_byte = tf.constant([kind == BYTE for kind in types])
        self.word_start_id = ids.get(WORD_START, -1)
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
            pieces, charsmap, whitespace_split
        )
        # What splits words where no WhitespaceSplit does: what the normalizer makes spaces.
        self.break_class = character_class(" " + "".join(
            c for c, n in sentencepiece_model.charsmap_of_characters(charsmap).items() if n and set(n) == {" "}))
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
        """The model on each word of `texts` alone, as `tokenizers` runs a
        unigram model. SentencePiece's C++ adds up the scores of a whole
        input's pieces in float32: over a long text (a 3,990-character
        review sums to about -15,000, where float32 steps by 0.001) it cannot
        tell two cuts of a word apart, and may pick the worse one. A word's
        sum is exact enough. (No piece spans whitespace, so the words' pieces
        are the text's.) A BPE runs on the whole text, as `tokenizers` runs
        Gemma's: it adds up no scores."""
        if self.bpe:
            return self._run_bpe(texts, with_offsets)
        words, word_starts = self._words(texts)
        pieces = self._run_model_on_words(words.flat_values, with_offsets)
        if with_offsets:
            shift = repeat(word_starts, pieces[0].row_lengths())
            pieces = (pieces[0], *(p.with_flat_values(p.flat_values + shift) for p in pieces[1:]))
            if not self.whitespace_split:
                pieces = self._take_space_before(texts, words, word_starts, *pieces)
        return tuple(merge_rows(p, words.row_splits) for p in pieces)

    def _take_space_before(self, texts, words, word_starts, ids, starts, ends):
        """Where Metaspace splits words (DeBERTa's), a word's first piece
        spans the whitespace character before it (its "▁"), and a lone "▁"
        that character alone."""
        text_of_word = tf.gather(texts, row_ids(words))
        space = tf.zeros_like(word_starts)
        for n in (1, 2, 3):  # the byte length of the character before the word, if it is whitespace
            before = tf.strings.substr(text_of_word, tf.maximum(word_starts - n, 0), tf.minimum(word_starts, n))
            space = tf.where((word_starts >= n) & tf.strings.regex_full_match(before, self.break_class),
                             tf.cast(n, space.dtype), space)
        first = tf.equal(position_in_row(ids), 0)
        shift = repeat(space, ids.row_lengths())
        flat_starts, flat_ends = starts.flat_values, ends.flat_values
        lone = first & tf.equal(ids.flat_values, self.word_start_id) & (shift > 0)
        new_starts = tf.where(first, flat_starts - shift, flat_starts)
        new_ends = tf.where(lone, new_starts + shift, flat_ends)
        return ids, starts.with_flat_values(new_starts), ends.with_flat_values(new_ends)

    def _run_bpe(self, texts, with_offsets):
        if not with_offsets:
            return (self._in_vocabulary(self.model.tokenize(texts)),)
        ids, starts, ends = self.model.tokenize_with_offsets(texts)
        ids = self._in_vocabulary(ids)
        # SentencePiece gives a character's bytes (its fallback) the span of
        # the whole character on its last byte and none on the others;
        # `tokenizers` the whole character's on each. (Starts only grow in a row.)
        flat_starts, flat_ends = tf.cast(starts.flat_values, tf.int64), tf.cast(ends.flat_values, tf.int64)
        rows = tf.cast(row_ids(ids), tf.int64)
        new_group = tf.concat([[True], (flat_starts[1:] != flat_starts[:-1]) | (rows[1:] != rows[:-1])],
                              0)[:tf.size(flat_starts)]
        group = tf.cumsum(tf.cast(new_group, tf.int64)) - 1
        group_end = tf.gather(tf.math.segment_max(flat_ends, group), group)
        flat_ends = tf.where(tf.gather(self.is_byte, ids.flat_values), group_end, flat_ends)
        return ids, starts.with_flat_values(flat_starts), ends.with_flat_values(flat_ends)

    def _in_vocabulary(self, ids):
        """A byte piece past the vocabulary (which `tokenizers` would not
        fall back to) as the unknown piece."""
        size = len(self.vocabulary.tokens)
        return ids.with_flat_values(tf.where(ids.flat_values < size, ids.flat_values, self.unk_id))

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
        # (U+0000 kept: tensorflow-text's split would end a text there.)
        sections, section_starts, section_ends = byte_pair.regex_split(texts, self.special_pattern)
        sections = byte_pair.as_written(texts, sections, section_starts, section_ends)
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
    """A SentencePiece tokenizer, as TensorFlow ops: the unigram models of
    XLM-RoBERTa, CamemBERT and DeBERTa-v3, and the BPE with byte fallback
    of mmBERT (Gemma's).

    Gives the same ids as transformers' fast tokenizer of the same files
    (`XLMRobertaTokenizer`, `DebertaV2Tokenizer`, or the
    `PreTrainedTokenizerFast` of a Gemma-style `tokenizer.json`) with
    `add_special_tokens=False`. It is a `tf.Module`: call it inside
    `tf.data.Dataset.map` or a `tf.function`, and track it from a module you
    export as a SavedModel. `from_preset` reads all its settings from the
    tokenizer's files; the defaults are XLM-R's.

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
        special_tokens_map: the token of each role, by Hugging Face's names
            (`cls_token`, `sep_token`, `pad_token`, `unk_token`,
            `mask_token`); None: XLM-R's (`<s>`, `</s>`, `<pad>`, `<unk>`,
            `<mask>`).
        pair_layout: how the preprocessor packs a pair (`kbert.text.packing`):
            `"two_separators"` (`<s> A </s></s> B </s>`, XLM-R) or
            `"one_separator"` (`[CLS] A [SEP] B [SEP]`, DeBERTa-v3).
        second_segment_id: the segment id of B and the separators after A's,
            as the template sets it (None: the layout's; DeBERTa-v3: 1).
        whitespace_split: whether words are split at every whitespace
            character the normalizer keeps (`tokenizers`' WhitespaceSplit,
            XLM-R's) and spans leave it out; else (DeBERTa-v3's Metaspace)
            only where the normalizer makes spaces, a word's span starting
            at the space before it.
        merges: a BPE's merges, lowest rank first (`[a, b]` pairs); None
            for a unigram model. Characters that no piece holds become
            their `<0xNN>` byte pieces.

    Example:
    >>> tokenizer = SentencePieceTokenizer.from_preset("hf://FacebookAI/xlm-roberta-base")
    >>> tokenizer(["Hello world", "a <mask>"])
    <tf.RaggedTensor [[35378, 8999], [10, 250001]]>
    """

    def __init__(
        self, pieces, unk_id=3, special_tokens=(CLS, PAD, SEP, UNK, MASK), precompiled_charsmap="", lstrip_tokens=(),
        special_tokens_map=None, pair_layout="two_separators", second_segment_id=None, whitespace_split=True,
        merges=None,
    ):
        super().__init__(name="sentencepiece_tokenizer")
        pieces = tuple((str(piece), float(score)) for piece, score in pieces)
        tokens = [piece for piece, _ in pieces]
        special_tokens_map = dict(XLM_ROBERTA_SPECIAL_TOKENS if special_tokens_map is None else special_tokens_map)
        unknown = sorted(set(special_tokens_map) - set(ROLES))
        if unknown:
            raise ValueError(f"special_tokens_map names {', '.join(unknown)}; the roles are {', '.join(ROLES)}.")
        missing = [t for t in special_tokens if t not in tokens]
        if missing or not 0 <= unk_id < len(pieces):
            raise ValueError(
                f"The vocabulary ({len(pieces)} pieces) lacks the special tokens {missing} or unk_id "
                f"{unk_id}. Pass the special tokens that are among the pieces, or read the "
                "vocabulary with SentencePieceTokenizer.from_preset."
            )
        if pair_layout not in PAIR_LAYOUTS:
            raise ValueError(f'Unknown pair_layout "{pair_layout}". Use one of: {", ".join(PAIR_LAYOUTS)}.')
        if merges is not None:
            merges = tuple(tuple(merge.split(" ") if isinstance(merge, str) else merge) for merge in merges)
        self._unk_id = unk_id
        self.precompiled_charsmap = precompiled_charsmap
        self.lstrip_tokens = tuple(lstrip_tokens)
        self.special_tokens_map = {role: special_tokens_map.get(role) for role in ROLES}
        # What `Tokenizer` reads the special ids by (`cls_id` ...): the files' tokens.
        for role, attribute in ROLES.items():
            setattr(self, attribute, self.special_tokens_map[role])
        # How the preprocessor packs a pair (`kbert.text.packing`).
        self.pair_layout = pair_layout
        self.second_segment_id = int(SECOND_SEGMENT_IDS[pair_layout] if second_segment_id is None
                                     else second_segment_id)
        self.whitespace_split = bool(whitespace_split)
        self._share_tokenization(
            _Tokenization, (pieces, unk_id, tuple(special_tokens), precompiled_charsmap, self.lstrip_tokens,
                            self.whitespace_split, merges)
        )
        # Tracked, so that a SavedModel holds the SentencePiece model.
        self._model = self._tokenization.model

    @classmethod
    def from_preset(cls, preset, **kwargs):
        """Builds the tokenizer from a folder's `tokenizer.json` (transformers
        5) or SentencePiece model (the hub's `sentencepiece.bpe.model`,
        `spm.model` or `tokenizer.model`), read as `AutoTokenizer` reads
        them: the special tokens and the pair layout as the post-processor
        adds them, else as the vocabulary layout of the class that
        `tokenizer_config.json` names.

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
            special_tokens_map=self.special_tokens_map, pair_layout=self.pair_layout,
            second_segment_id=self.second_segment_id, whitespace_split=self.whitespace_split, merges=self.merges,
        )

    @property
    def merges(self):
        """A BPE's merges (`[a, b]` pairs), None for a unigram model."""
        return self._tokenization.merges

    def get_config(self):
        return {
            "pieces": [list(p) for p in self._vocabulary.pieces],
            "unk_id": self._unk_id,
            "special_tokens": list(self.special_tokens),
            "precompiled_charsmap": self.precompiled_charsmap,
            "lstrip_tokens": list(self.lstrip_tokens),
            "special_tokens_map": dict(self.special_tokens_map),
            "pair_layout": self.pair_layout,
            "second_segment_id": self.second_segment_id,
            "whitespace_split": self.whitespace_split,
            "merges": None if self.merges is None else [list(m) for m in self.merges],
        }

    def tokenize_with_byte_spans(self, texts):
        """Ids of a 1-D batch of texts, with each piece's byte span.

        Returns:
            `(ids, starts, ends)`: ragged `[texts, (pieces)]` tensors, ids
            int32, starts and ends int64 byte offsets into the UTF-8 text:
            Hugging Face's `offset_mapping` in bytes (a piece that is only
            the word-start "▁" spans the word's first character, as there).
            (In a text that is not UTF-8, bytes of the text as read:
            `kbert.text.tokenizer_base.as_valid_utf8`.)
        """
        texts = as_valid_utf8(tf.convert_to_tensor(texts, tf.string))
        ids, starts, ends = self._tokenization.tokenize_with_offsets(texts)
        return ids, tf.cast(starts, tf.int64), tf.cast(ends, tf.int64)

    def _join_tokens(self, tokens):
        """Pieces joined, each "▁" a space, the first one dropped (Hugging
        Face's `decode`); a BPE's byte pieces as their bytes (those that are
        not UTF-8 U+FFFD), its first space kept (Gemma's decoder)."""
        if self.merges is None:
            text = tf.strings.reduce_join(tokens, axis=-1)
            return tf.strings.regex_replace(tf.strings.regex_replace(text, WORD_START, " "), "^ ", "")
        # "<0xNN>" back to its byte, as ByteFallback decodes it.
        pieces = tf.ragged.map_flat_values(_piece_bytes, tokens)
        text = tf.strings.regex_replace(tf.strings.reduce_join(pieces, axis=-1), WORD_START, " ")
        return tf.strings.unicode_transcode(text, "UTF-8", "UTF-8", errors="replace", replacement_char=0xFFFD)

    def _continues_word(self, token):
        return not token.startswith(WORD_START)


_BYTE_STRINGS = [bytes([b]) for b in range(256)]


def _piece_bytes(tokens):
    """Each "<0xNN>" byte piece of a 1-D string tensor as its byte, the others as they are."""
    is_byte = tf.strings.regex_full_match(tokens, "<0x[0-9A-F]{2}>")
    hex_digits = tf.where(is_byte, tf.strings.regex_replace(tokens, "^<0x(..)>$", r"\1"), "00")
    digits = tf.strings.unicode_decode(hex_digits, "UTF-8").to_tensor(shape=[None, 2])
    values = tf.where(digits >= ord("A"), digits - ord("A") + 10, digits - ord("0"))
    byte = tf.clip_by_value(values[:, 0] * 16 + values[:, 1], 0, 255)
    return tf.where(is_byte, tf.gather(tf.constant(_BYTE_STRINGS), byte), tokens)
