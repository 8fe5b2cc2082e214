"""RoBERTa's byte-level BPE tokenizer (GPT-2's), written with TensorFlow ops.

It reproduces Hugging Face's `RobertaTokenizerFast` (the `tokenizers`
library's ByteLevel pre-tokenizer and BPE model) id for id with
`add_special_tokens=False`, and runs anywhere a TensorFlow graph runs.

The steps, in Hugging Face's order: special tokens written in the text are
split off (`<mask>` taking the whitespace before it, as RoBERTa's `lstrip`
says), the rest is split into GPT-2's words (`kbert.text.byte_pair`), and
each word's bytes are merged by rank. A word that BPE makes one token (most
words of the language the vocabulary was trained on) is looked up in a hash
table instead: the merge loop then runs over the other words only, and only
as many rounds as the longest of them needs. (SentencePiece's BPE, which
tensorflow-text runs in C++, scores pieces, not pairs: it may merge two
pieces that Hugging Face's merges never join, so it is not used. Where the
time goes: docs/benchmarks.md, Tokenization.)
"""

import os

from kbert.presets import files
from kbert.presets.byte_pair_files import parse_merge, read_merges, read_preset, read_vocabulary, write_preset
from kbert.text import byte_pair
from kbert.text.pre_tokenization import any_of_pattern
from kbert.text.ragged import position_in_row, repeat, row_ids
from kbert.text.tokenizer_base import Tokenizer
from kbert.tf_if_present import tf

CLS, PAD, SEP, UNK, MASK = "<s>", "<pad>", "</s>", "<unk>", "<mask>"
SPECIAL_TOKENS = (CLS, PAD, SEP, UNK, MASK)
_BYTE_CHARS = byte_pair.bytes_to_unicode()
_CHAR_BYTES = {c: b for b, c in _BYTE_CHARS.items()}
_SPACE = _BYTE_CHARS[ord(" ")]


def _token_bytes(token):
    """The bytes a token stands for, or None for a token not made of byte characters."""
    if any(c not in _CHAR_BYTES for c in token):
        return None
    return bytes(_CHAR_BYTES[c] for c in token)


class _Vocabulary:
    """The tokens and merges in one object that `tf.Module` does not walk
    (saving a SavedModel reads a module's lists and dicts again and again)."""

    def __init__(self, tokens, merges):
        self.tokens = tuple(tokens)
        self.ids = {token: i for i, token in enumerate(self.tokens)}
        self.merges = tuple(merges)


class _Tokenization:
    """The traced tokenization of one vocabulary and set of settings, shared
    by every tokenizer with them (`kbert.text.tokenizer_base._SHARED`)."""

    def __init__(self, tokens, merges, add_prefix_space, trim_offsets, lstrip_tokens, rstrip_tokens):
        self.vocabulary = vocabulary = _Vocabulary(tokens, merges)
        self.add_prefix_space, self.trim_offsets = add_prefix_space, trim_offsets
        for left, right in merges:
            for token in (left, right, left + right):
                if token not in vocabulary.ids:
                    raise ValueError(f'The merge "{left} {right}" uses "{token}", which is not in the vocabulary; '
                                     "the vocabulary and merges must come from one trained tokenizer.")
        self.merges = byte_pair.Merges(vocabulary.ids, merges, _BYTE_CHARS)
        self.special_tokens = [t for t in SPECIAL_TOKENS if t in vocabulary.ids]
        # Words that BPE makes a single token, looked up rather than merged:
        # the tokens whose own bytes the merges make that token.
        candidates = [(i, raw) for i, raw in enumerate(map(_token_bytes, vocabulary.tokens))
                      if raw is not None and vocabulary.tokens[i] not in self.special_tokens]
        words, word_ids = [], []
        if candidates:
            with tf.init_scope():  # (eagerly, even where a graph builds the tokenizer)
                pieces = self.merges.encode(tf.constant([w for _, w in candidates]))
            for (i, raw), token_pieces in zip(candidates, pieces.to_list()):
                if token_pieces == [i]:
                    words.append(raw)
                    word_ids.append(i)
        self.single_tokens = tf.lookup.StaticHashTable(
            tf.lookup.KeyValueTensorInitializer(tf.constant(words or [b""]), tf.constant(word_ids or [-1], tf.int64)),
            default_value=-1)
        space = byte_pair.WHITESPACE
        self.special_patterns = [
            (f"{space}*" if t in lstrip_tokens else "") + any_of_pattern([t]) + (f"{space}*" if t in rstrip_tokens
                                                                             else "")
            for t in self.special_tokens]
        self.token_bytes = tf.constant([len(_token_bytes(t) or t.encode()) for t in vocabulary.tokens], tf.int64)
        self.leading_spaces = tf.constant([len(t) - len(t.lstrip(_SPACE)) for t in vocabulary.tokens], tf.int64)
        self.trailing_spaces = tf.constant([len(t) - len(t.rstrip(_SPACE)) for t in vocabulary.tokens], tf.int64)

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)], autograph=False)
    def tokenize(self, texts):
        return self._tokenize(texts, with_spans=False)[0]

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)], autograph=False)
    def tokenize_with_byte_spans(self, texts):
        ids, starts, ends = self._tokenize(texts, with_spans=True)
        if self.trim_offsets:
            starts, ends = self._trim(ids, starts, ends)
        return ids, starts, ends

    def _tokenize(self, texts, with_spans):
        # Special tokens written in the text split it into segments first.
        segments, segment_starts, segment_ends = self._split_special_tokens(texts)
        flat = segments.flat_values
        special_id = tf.fill(tf.shape(flat), tf.constant(-1, tf.int64))
        for token, pattern in zip(self.special_tokens, self.special_patterns):
            special_id = tf.where(tf.strings.regex_full_match(flat, pattern),
                                  tf.constant(self.vocabulary.ids[token], tf.int64), special_id)
        is_special = special_id >= 0
        prefixed = tf.zeros(tf.shape(flat), tf.int64)
        if self.add_prefix_space:
            prefixed = tf.cast(~is_special & (tf.strings.length(flat) > 0)
                               & ~tf.strings.regex_full_match(flat, "(?s) .*"), tf.int64)
            flat = tf.where(prefixed > 0, tf.strings.join([" ", flat]), flat)
        # A special token is one word: "<" stands for it.
        words, starts, ends = byte_pair.pre_tokenize(tf.where(is_special, "<", flat))
        flat_words = words.flat_values
        word_segment = row_ids(words)
        word_special = tf.gather(special_id, word_segment)
        single = tf.where(word_special >= 0, word_special, self.single_tokens.lookup(flat_words))
        pieces = _merge_where_needed(single, lambda rows: self.merges.encode(tf.gather(flat_words, rows)))
        row_splits = tf.gather(tf.gather(pieces.row_splits, words.row_splits), segments.row_splits)
        ids = tf.RaggedTensor.from_row_splits(tf.cast(pieces.flat_values, tf.int32), row_splits, validate=False)
        if not with_spans:
            # (A graph without the spans: tf.data rewrites and instantiates
            # the whole graph again for every iterator, each epoch.)
            return (ids,)

        # Each piece's bytes in its word, then in the text.
        lengths = tf.gather(self.token_bytes, pieces.flat_values)
        before = tf.cumsum(lengths, exclusive=True)
        before -= repeat(tf.gather(tf.concat([before, [0]], 0), pieces.row_starts()), pieces.row_lengths())
        word_of_piece = row_ids(pieces)
        segment_of_piece = tf.gather(word_segment, word_of_piece)
        segment_start = tf.gather(segment_starts.flat_values, segment_of_piece)
        # (The space put before a segment is in no byte of the text.)
        in_segment = tf.gather(starts.flat_values, word_of_piece) + before - tf.gather(prefixed, segment_of_piece)
        piece_starts = segment_start + tf.maximum(in_segment, 0)
        piece_ends = segment_start + tf.maximum(in_segment + lengths, 0)
        # A special token's span is the token, not the whitespace it took.
        lead = tf.cast(tf.strings.length(segments.flat_values) - tf.strings.length(
            tf.strings.regex_replace(segments.flat_values, f"^{byte_pair.WHITESPACE}+", "")), tf.int64)
        lead = tf.gather(lead, segment_of_piece)
        piece_special = tf.gather(word_special, word_of_piece) >= 0
        piece_starts = tf.where(piece_special, segment_start + lead, piece_starts)
        piece_ends = tf.where(piece_special, segment_start + lead + lengths, piece_ends)

        return (ids, *(ids.with_flat_values(values) for values in (piece_starts, piece_ends)))

    def _split_special_tokens(self, texts):
        if not self.special_tokens:
            zeros = tf.zeros(tf.shape(texts), tf.int64)
            ends = tf.cast(tf.strings.length(texts), tf.int64)
            return tuple(tf.RaggedTensor.from_tensor(t[:, None]) for t in (texts, zeros, ends))
        segments, starts, ends = byte_pair.regex_split(texts, "|".join(f"(?:{p})" for p in self.special_patterns))
        return byte_pair.as_written(texts, segments, starts, ends), starts, ends

    def _trim(self, ids, starts, ends):
        """Hugging Face's `trim_offsets`: a piece's span leaves out the spaces
        it starts or ends with (but, with `add_prefix_space`, not the one added
        before the text's first piece)."""
        flat_ids = tf.cast(ids.flat_values, tf.int64)
        lead = tf.gather(self.leading_spaces, flat_ids)
        trail = tf.gather(self.trailing_spaces, flat_ids)
        start, end = starts.flat_values, ends.flat_values
        if self.add_prefix_space:
            first = tf.equal(position_in_row(ids), 0) | tf.equal(start, 0)
            lead = tf.where(first & tf.equal(lead, 1), tf.zeros_like(lead), lead)
        start = tf.where(lead > 0, tf.minimum(start + lead, end), start)
        end = tf.where((trail > 0) & (end >= trail), tf.maximum(end - trail, start), end)
        return starts.with_flat_values(start), ends.with_flat_values(end)


def _merge_where_needed(single, encode):
    """Pieces of each word: `[single[i]]` where that is a token id, else
    `encode(rows)` of the words without one, in order."""
    needs = single < 0
    if_single = tf.RaggedTensor.from_row_splits(single, tf.range(tf.size(single, tf.int64) + 1), validate=False)

    def merge():
        rows = tf.where(needs)[:, 0]
        merged = encode(rows)
        others = tf.where(~needs)[:, 0]
        both = tf.concat([merged, tf.gather(if_single, others)], 0)
        return tf.gather(both, tf.math.invert_permutation(tf.concat([rows, others], 0)))

    return tf.cond(tf.reduce_any(needs), merge, lambda: if_single)


class BytePairTokenizer(Tokenizer):
    """RoBERTa's byte-level BPE tokenizer, as TensorFlow ops.

    Gives the same ids as Hugging Face's `RobertaTokenizerFast` with
    `add_special_tokens=False`. It is a `tf.Module`: call it inside
    `tf.data.Dataset.map` or a `tf.function`, and track it from a module you
    export as a SavedModel.

    Args:
        vocabulary: the tokens, a list (the index is the id) or a
            `vocab.json` path (token -> id).
        merges: the merges, lowest rank first: `"a b"` strings, `[a, b]`
            pairs, or a `merges.txt` path.
        add_prefix_space: whether a space is put before the text, so that its
            first word is tokenized as any other (RoBERTa: `False`).
        trim_offsets: whether a piece's byte span leaves out its spaces.
        lstrip_tokens: special tokens that take the whitespace before them
            (RoBERTa: `<mask>`).
        rstrip_tokens: special tokens that take the whitespace after them.

    Example:
    >>> tokenizer = BytePairTokenizer(["<s>", "<pad>", "</s>", "<unk>", "<mask>", "a", "b", "Ġ", "ab", "Ġab"],
    ...                               ["a b", "Ġ ab"])
    >>> tokenizer(["ab ab", "a <mask>"]).to_list()
    [[8, 9], [5, 4]]
    >>> tokenizer.detokenize([8, 9]).numpy().decode()
    'ab ab'
    """

    PAD, UNK, CLS, SEP, MASK = PAD, UNK, CLS, SEP, MASK
    # How the preprocessor packs a pair: `<s> A </s></s> B </s>` (`kbert.text.packing`).
    pair_layout = "two_separators"

    def __init__(self, vocabulary, merges, add_prefix_space=False, trim_offsets=True, lstrip_tokens=(MASK,),
                 rstrip_tokens=()):
        super().__init__(name="byte_pair_tokenizer")
        vocabulary = read_vocabulary(vocabulary) if isinstance(vocabulary, (str, os.PathLike)) else list(vocabulary)
        if isinstance(merges, (str, os.PathLike)):
            merges = read_merges(merges)
        merges = [parse_merge(m, "merges") for m in merges]
        self.add_prefix_space = bool(add_prefix_space)
        self.trim_offsets = bool(trim_offsets)
        self.lstrip_tokens = tuple(lstrip_tokens)
        self.rstrip_tokens = tuple(rstrip_tokens)
        self._share_tokenization(_Tokenization, (tuple(vocabulary), tuple(merges), self.add_prefix_space,
                                                 self.trim_offsets, self.lstrip_tokens, self.rstrip_tokens))
        # The hash tables are resources: a SavedModel holds those its modules track.
        self._tables = [self._tokenization.single_tokens, self._tokenization.merges.pair_table]

    @classmethod
    def from_preset(cls, preset, **kwargs):
        """Builds the tokenizer of a preset from its `tokenizer.json` (or
        `vocab.json` and `merges.txt`) and `tokenizer_config.json`.

        Args:
            preset: a registered name, `hf://owner/name`, or a local folder.
            **kwargs: override the settings read from the files.
        """
        folder = os.fspath(preset)
        if not os.path.isdir(folder):
            folder = files.get_preset_dir(preset)
        return cls(**{**read_preset(folder), **kwargs})

    def save_to_preset(self, folder, model_max_length=None):
        """Writes `vocab.json`, `merges.txt`, `tokenizer.json`,
        `tokenizer_config.json` and `special_tokens_map.json` (Hugging Face's
        formats) to `folder`, which `AutoTokenizer` reads into the same ids.
        Keys of an existing `tokenizer_config.json` that the tokenizer does
        not own are kept."""
        write_preset(folder, self.vocabulary, self._vocabulary.merges, add_prefix_space=self.add_prefix_space,
                     trim_offsets=self.trim_offsets, lstrip_tokens=self.lstrip_tokens,
                     rstrip_tokens=self.rstrip_tokens, model_max_length=model_max_length)

    def get_config(self):
        return {"vocabulary": self.vocabulary, "merges": [f"{a} {b}" for a, b in self._vocabulary.merges],
                "add_prefix_space": self.add_prefix_space, "trim_offsets": self.trim_offsets,
                "lstrip_tokens": list(self.lstrip_tokens), "rstrip_tokens": list(self.rstrip_tokens)}

    def tokenize_words(self, words):
        """Each word's ids as a word of a text: after a space ("Ġ" pieces), as
        transformers' RoBERTa tokenizers take words (`is_split_into_words`,
        which needs `add_prefix_space=True`)."""
        if self.add_prefix_space:
            return self(words)
        return self(words.with_flat_values(tf.strings.join([" ", words.flat_values])))

    def tokenize_with_byte_spans(self, texts):
        """BPE ids of each text with each piece's byte span in the text.

        Args:
            texts: a 1-D string tensor.

        Returns:
            `(ids, starts, ends)`: ragged `[texts, (pieces)]` tensors, ids
            int32, starts and ends int64. Bytes `starts[i][k]:ends[i][k]` of
            `texts[i]` are piece `k`'s. They equal Hugging Face's
            `offset_mapping` in bytes, except for a piece that holds part of a
            character (its span is its own bytes, Hugging Face's the whole
            character) and, with `add_prefix_space`, a piece of only the
            added space after a special token (here empty where it was added).
        """
        return self._tokenization.tokenize_with_byte_spans(tf.convert_to_tensor(texts, tf.string))

    def _join_tokens(self, tokens):
        """The bytes the tokens stand for, as Hugging Face's `decode` gives
        them (bytes that are not UTF-8 become U+FFFD)."""
        chars = tf.strings.unicode_decode(tf.strings.reduce_join(tokens, axis=-1), "UTF-8")
        raw = tf.ragged.map_flat_values(_char_bytes, chars)
        return tf.strings.unicode_transcode(tf.strings.reduce_join(raw, axis=-1), "UTF-8", "UTF-8",
                                            errors="replace", replacement_char=0xFFFD)

    def _continues_word(self, token):
        return not token.startswith(_SPACE)


# Each character of a byte-level token back to its byte; a character past
# them (only in an added token) to its UTF-8.
_BYTE_OF_CHAR = [bytes([_CHAR_BYTES[chr(c)]]) if chr(c) in _CHAR_BYTES else chr(c).encode()
                 for c in range(max(map(ord, _CHAR_BYTES)) + 1)]


def _char_bytes(codepoints):
    last = len(_BYTE_OF_CHAR) - 1
    return tf.where(codepoints <= last, tf.gather(tf.constant(_BYTE_OF_CHAR), tf.minimum(codepoints, last)),
                    tf.strings.unicode_encode(codepoints[:, None], "UTF-8", errors="replace"))
