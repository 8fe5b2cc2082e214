"""The byte-level BPE tokenizer of RoBERTa (GPT-2's) and ModernBERT (GPT-NeoX's
and OLMo's), written with TensorFlow ops.

It reproduces Hugging Face's fast tokenizers (the `tokenizers` library's
added tokens, normalizer, ByteLevel pre-tokenizer and BPE model) id for id
with `add_special_tokens=False`, and runs anywhere a TensorFlow graph runs.

The steps, in the `tokenizers` library's order: the added tokens written in
the text that it matches as written (the special tokens) are split off,
`<mask>` or `[MASK]` taking the whitespace before it where its `lstrip` says
so; the text between them is normalized (ModernBERT: NFC) and the added
tokens matched in normalized text (ModernBERT's runs of spaces) are split
off; the rest is split into GPT-2's words (`kbert.text.byte_pair`), and each
word's bytes are merged by rank. A word that BPE makes one token (most
words of the language the vocabulary was trained on) is looked up in a hash
table instead: the merge loop then runs over the other words only, and only
as many rounds as the longest of them needs. (SentencePiece's BPE, which
tensorflow-text runs in C++, scores pieces, not pairs: it may merge two
pieces that Hugging Face's merges never join, so it is not used. Where the
time goes: docs/benchmarks.md, Tokenization.)
"""

import os

from kbert.presets import files
from kbert.presets.byte_pair_files import (NORMALIZERS, ROBERTA_SPECIAL_TOKENS, parse_merge, read_merges,
                                           read_preset, read_vocabulary, write_preset)
from kbert.text import byte_pair
from kbert.text._tf_text import tf_text
from kbert.text.packing import PAIR_LAYOUTS, SECOND_SEGMENT_IDS
from kbert.text.pre_tokenization import any_of_pattern
from kbert.text.ragged import position_in_row, repeat, row_ids
from kbert.text.tokenizer_base import ROLES as _ROLES, Tokenizer, as_valid_utf8
from kbert.tf_if_present import tf

CLS, PAD, SEP, UNK, MASK = "<s>", "<pad>", "</s>", "<unk>", "<mask>"
SPECIAL_TOKENS = (CLS, PAD, SEP, UNK, MASK)
_BYTE_CHARS = byte_pair.bytes_to_unicode()
_CHAR_BYTES = {c: b for b, c in _BYTE_CHARS.items()}
_SPACE = _BYTE_CHARS[ord(" ")]
# What trim_offsets trims: "Ġ" and whitespace (Rust's `char::is_whitespace`,
# Python's but U+001C to U+001F).
_TRIMMED = _SPACE + "".join(c for c in map(chr, range(0x3001)) if c.isspace() and not "\x1c" <= c <= "\x1f")


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


class _AddedTokens:
    """The added tokens that one of the `tokenizers` library's two passes
    splits off (those matched as written, or those matched in normalized
    text): a pattern that finds them, the longest first where several start
    at one place (its leftmost-longest match), `lstrip` and `rstrip` taking
    the whitespace around a token; and how each piece it split off is told
    from text: a hash table of the tokens without whitespace to take, a
    pattern per token with (few: `[MASK]`)."""

    def __init__(self, tokens, ids, lstrip_tokens, rstrip_tokens):
        space = byte_pair.WHITESPACE

        def pattern(token):
            return ((f"{space}*" if token in lstrip_tokens else "") + any_of_pattern([token])
                    + (f"{space}*" if token in rstrip_tokens else ""))

        self.pattern = "|".join(f"(?:{pattern(t)})" for t in sorted(tokens, key=lambda t: -len(t.encode())))
        exact = [t for t in tokens if t not in lstrip_tokens and t not in rstrip_tokens]
        self.table = tf.lookup.StaticHashTable(
            tf.lookup.KeyValueTensorInitializer(tf.constant(exact or [""]),
                                                tf.constant([ids[t] for t in exact] or [-1], tf.int64)),
            default_value=-1)
        self.stripping = [(pattern(t), ids[t]) for t in tokens if t not in exact]

    def split(self, texts):
        """The pieces of each text, each added token one: `(pieces, starts,
        ends, token_ids)`, ragged `[texts, (pieces)]` but `token_ids` flat,
        an added token's id or -1 for text."""
        pieces, starts, ends = byte_pair.regex_split(texts, self.pattern)
        pieces = byte_pair.as_written(texts, pieces, starts, ends)
        flat = pieces.flat_values
        token_ids = self.table.lookup(flat)
        for pattern, token_id in self.stripping:
            token_ids = tf.where(tf.strings.regex_full_match(flat, pattern), tf.constant(token_id, tf.int64),
                                 token_ids)
        return pieces, starts, ends, token_ids


def _whole(texts):
    """Each text as its one piece (no added token split off): `(pieces,
    starts, ends, token_ids)` as `_AddedTokens.split` gives them."""
    rows = tf.range(tf.size(texts, tf.int64) + 1)
    zeros = tf.zeros(tf.shape(texts), tf.int64)
    return (*(tf.RaggedTensor.from_row_splits(values, rows, validate=False)
              for values in (texts, zeros, tf.cast(tf.strings.length(texts), tf.int64))), zeros - 1)


class _Tokenization:
    """The traced tokenization of one vocabulary and set of settings, shared
    by every tokenizer with them (`kbert.text.tokenizer_base._SHARED`)."""

    def __init__(self, tokens, merges, add_prefix_space, trim_offsets, lstrip_tokens, rstrip_tokens, added_tokens,
                 normalized_tokens, normalizer):
        self.vocabulary = vocabulary = _Vocabulary(tokens, merges)
        self.add_prefix_space, self.trim_offsets, self.normalizer = add_prefix_space, trim_offsets, normalizer
        for left, right in merges:
            for token in (left, right, left + right):
                if token not in vocabulary.ids:
                    raise ValueError(f'The merge "{left} {right}" uses "{token}", which is not in the vocabulary; '
                                     "the vocabulary and merges must come from one trained tokenizer.")
        self.merges = byte_pair.Merges(vocabulary.ids, merges, _BYTE_CHARS)
        # Every added token is split off the text as written; the base class
        # calls them the special tokens (none continues a word).
        self.special_tokens = list(added_tokens)
        # The `tokenizers` library's two passes: first the added tokens it
        # matches as written, then, in the normalized text between them,
        # those it matches there (`normalized`: ModernBERT's runs of spaces).
        passes = ([t for t in added_tokens if t not in normalized_tokens],
                  [t for t in added_tokens if t in normalized_tokens])
        self.as_written, self.in_normalized = (
            _AddedTokens(found, vocabulary.ids, lstrip_tokens, rstrip_tokens) if found else None for found in passes)
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
        self.token_bytes = tf.constant([len(_token_bytes(t) or t.encode()) for t in vocabulary.tokens], tf.int64)
        # Hugging Face's trim_offsets leaves out "Ġ" and whitespace (an added
        # token's) at either end of a piece.
        self.leading_spaces = tf.constant([_spaces(t) for t in vocabulary.tokens], tf.int64)
        self.trailing_spaces = tf.constant([_spaces(t[::-1]) for t in vocabulary.tokens], tf.int64)

    @property
    def tables(self):
        """The hash tables, resources that a SavedModel holds where its modules track them."""
        return [self.single_tokens, self.merges.pair_table,
                *(added.table for added in (self.as_written, self.in_normalized) if added is not None)]

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
        # The added tokens as written split each text into parts first
        # (`written`); the text of the others is normalized.
        written, written_starts, _, written_ids = (self.as_written.split(texts) if self.as_written is not None
                                                   else _whole(texts))
        parts = written.flat_values
        is_text = written_ids < 0
        offsets_map = None
        if self.normalizer:
            if with_spans:
                normalized, offsets_map = tf_text.normalize_utf8_with_offsets_map(parts, self.normalizer)
            else:
                normalized = tf_text.normalize_utf8(parts, self.normalizer)
            parts = tf.where(is_text, normalized, parts)
        # Then the added tokens matched in normalized text split the parts of
        # text into segments; an added token already split off stays one
        # segment ("\x01" holds no added token).
        if self.in_normalized is not None:
            segments, segment_starts, segment_ends, special_id = self.in_normalized.split(
                tf.where(is_text, parts, "\x01"))
            part_of_segment = row_ids(segments)
            special_id = tf.where(tf.gather(is_text, part_of_segment), special_id,
                                  tf.gather(written_ids, part_of_segment))
        else:
            segments, segment_starts, segment_ends, _ = _whole(parts)
            part_of_segment, special_id = tf.range(tf.size(parts, tf.int64)), written_ids
        flat = segments.flat_values
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
        row_splits = pieces.row_splits
        for ragged in (words, segments, written):
            row_splits = tf.gather(row_splits, ragged.row_splits)
        ids = tf.RaggedTensor.from_row_splits(tf.cast(pieces.flat_values, tf.int32), row_splits, validate=False)
        if not with_spans:
            # (A graph without the spans: tf.data rewrites and instantiates
            # the whole graph again for every iterator, each epoch.)
            return (ids,)

        # Each piece's bytes in its word, then in its segment, then in its
        # part (normalized), then in the text.
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
        # An added token's span is what it matched, the whitespace it took
        # included (one split off as written: its part of the text as
        # written); where offsets are trimmed, the token alone.
        part_of_piece = tf.gather(part_of_segment, segment_of_piece)
        in_text = tf.gather(is_text, part_of_segment)
        matched = tf.where(in_text, segments.flat_values, tf.gather(written.flat_values, part_of_segment))
        matched_start = tf.where(in_text, segment_starts.flat_values, tf.zeros_like(segment_starts.flat_values))
        matched_end = tf.where(in_text, segment_ends.flat_values,
                               tf.cast(tf.strings.length(tf.gather(written.flat_values, part_of_segment)), tf.int64))
        special_start = tf.gather(matched_start, segment_of_piece)
        if self.trim_offsets:
            lead = tf.cast(tf.strings.length(matched) - tf.strings.length(
                tf.strings.regex_replace(matched, f"^{byte_pair.WHITESPACE}+", "")), tf.int64)
            lead = tf.where(tf.strings.regex_full_match(matched, f"{byte_pair.WHITESPACE}*"), tf.zeros_like(lead),
                            lead)
            special_start += tf.gather(lead, segment_of_piece)
            special_end = special_start + lengths
        else:
            special_end = tf.gather(matched_end, segment_of_piece)
        piece_special = tf.gather(word_special, word_of_piece) >= 0
        piece_starts = tf.where(piece_special, special_start, piece_starts)
        piece_ends = tf.where(piece_special, special_end, piece_ends)
        if offsets_map is not None:
            # Bytes of the normalized text back to the bytes they came from.
            def as_written(offsets):
                by_part = tf.RaggedTensor.from_value_rowids(offsets, part_of_piece, nrows=tf.size(parts, tf.int64),
                                                            validate=False)
                return tf.where(tf.gather(is_text, part_of_piece),
                                tf_text.find_source_offsets(offsets_map, by_part).flat_values, offsets)

            piece_starts, piece_ends = as_written(piece_starts), as_written(piece_ends)
        part_start = tf.gather(written_starts.flat_values, part_of_piece)
        return (ids, *(ids.with_flat_values(part_start + values) for values in (piece_starts, piece_ends)))

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


def _spaces(token):
    """How many characters `token` starts with that are "Ġ" or whitespace."""
    return len(token) - len(token.lstrip(_TRIMMED))


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
    """A byte-level BPE tokenizer (RoBERTa's, ModernBERT's), as TensorFlow ops.

    Gives the same ids as Hugging Face's fast tokenizer of the same files
    (`RobertaTokenizerFast`, or the `PreTrainedTokenizerFast` of ModernBERT)
    with `add_special_tokens=False`. It is a `tf.Module`: call it inside
    `tf.data.Dataset.map` or a `tf.function`, and track it from a module you
    export as a SavedModel. `from_preset` reads all its settings from the
    tokenizer's files; the defaults are RoBERTa's.

    Args:
        vocabulary: the tokens, a list (the index is the id) or a
            `vocab.json` path (token -> id).
        merges: the merges, lowest rank first: `"a b"` strings, `[a, b]`
            pairs, or a `merges.txt` path.
        add_prefix_space: whether a space is put before the text, so that its
            first word is tokenized as any other (RoBERTa, ModernBERT: `False`).
        trim_offsets: whether a piece's byte span leaves out its spaces
            (RoBERTa: `True`; ModernBERT's template trims nothing: `False`).
        lstrip_tokens: added tokens that take the whitespace before them
            (RoBERTa: `<mask>`; ModernBERT: `[MASK]`).
        rstrip_tokens: added tokens that take the whitespace after them.
        added_tokens: the tokens split off the text as they are written
            (Hugging Face's added tokens: the special tokens, and
            ModernBERT's runs of spaces); None: RoBERTa's special tokens
            that the vocabulary holds.
        normalized_tokens: those of `added_tokens` matched in the normalized
            text, after the others (Hugging Face's `normalized`).
        normalizer: the Unicode normalization of the text between the added
            tokens: None (RoBERTa), `"NFC"` (ModernBERT), `"NFKC"`, `"NFD"`
            or `"NFKD"`.
        special_tokens_map: the token of each role, by Hugging Face's names
            (`cls_token`, `sep_token`, `pad_token`, `unk_token`,
            `mask_token`); None: RoBERTa's (`<s>`, `</s>`, `<pad>`, `<unk>`,
            `<mask>`).
        pair_layout: how the preprocessor packs a pair (`kbert.text.packing`):
            `"two_separators"` (`<s> A </s></s> B </s>`, RoBERTa) or
            `"one_separator"` (`[CLS] A [SEP] B [SEP]`: ModernBERT).
        second_segment_id: the segment id of B and the separators after A's,
            as the template sets it (None: the layout's, 0 for
            `"two_separators"` and 1 for `"one_separator"`; ModernBERT: 0).

    Example:
    >>> tokenizer = BytePairTokenizer(["<s>", "<pad>", "</s>", "<unk>", "<mask>", "a", "b", "Ġ", "ab", "Ġab"],
    ...                               ["a b", "Ġ ab"])
    >>> tokenizer(["ab ab", "a <mask>"]).to_list()
    [[8, 9], [5, 4]]
    >>> tokenizer.detokenize([8, 9]).numpy().decode()
    'ab ab'
    """

    def __init__(self, vocabulary, merges, add_prefix_space=False, trim_offsets=True, lstrip_tokens=(MASK,),
                 rstrip_tokens=(), added_tokens=None, normalized_tokens=(), normalizer=None, special_tokens_map=None,
                 pair_layout="two_separators", second_segment_id=None):
        super().__init__(name="byte_pair_tokenizer")
        vocabulary = read_vocabulary(vocabulary) if isinstance(vocabulary, (str, os.PathLike)) else list(vocabulary)
        if isinstance(merges, (str, os.PathLike)):
            merges = read_merges(merges)
        merges = [parse_merge(m, "merges") for m in merges]
        known = set(vocabulary)
        if added_tokens is None:
            added_tokens = [t for t in SPECIAL_TOKENS if t in known]
        missing = [t for t in added_tokens if t not in known]
        if missing:
            raise ValueError(f"The added tokens {missing[:5]} are not in the vocabulary ({len(vocabulary)} tokens); "
                             "an added token must have an id. Read the tokenizer with BytePairTokenizer.from_preset.")
        special_tokens_map = dict(ROBERTA_SPECIAL_TOKENS if special_tokens_map is None else special_tokens_map)
        unknown = sorted(set(special_tokens_map) - set(_ROLES))
        if unknown:
            raise ValueError(f"special_tokens_map names {', '.join(unknown)}; the roles are {', '.join(_ROLES)}.")
        if pair_layout not in PAIR_LAYOUTS:
            raise ValueError(f'Unknown pair_layout "{pair_layout}". Use one of: {", ".join(PAIR_LAYOUTS)}.')
        if normalizer is not None and normalizer not in NORMALIZERS:
            raise ValueError(f'Unknown normalizer "{normalizer}". Use None or one of: {", ".join(NORMALIZERS)}.')
        self.add_prefix_space = bool(add_prefix_space)
        self.trim_offsets = bool(trim_offsets)
        self.lstrip_tokens = tuple(lstrip_tokens)
        self.rstrip_tokens = tuple(rstrip_tokens)
        self.added_tokens = tuple(added_tokens)
        self.normalized_tokens = tuple(t for t in normalized_tokens if t in self.added_tokens)
        self.normalizer = normalizer
        self.special_tokens_map = {role: special_tokens_map.get(role) for role in _ROLES}
        # What `Tokenizer` reads the special ids by (`cls_id` ...): the files' tokens.
        for role, attribute in _ROLES.items():
            setattr(self, attribute, self.special_tokens_map[role])
        # How the preprocessor packs a pair (`kbert.text.packing`).
        self.pair_layout = pair_layout
        self.second_segment_id = int(SECOND_SEGMENT_IDS[pair_layout] if second_segment_id is None
                                     else second_segment_id)
        self._share_tokenization(_Tokenization, (tuple(vocabulary), tuple(merges), self.add_prefix_space,
                                                 self.trim_offsets, self.lstrip_tokens, self.rstrip_tokens,
                                                 self.added_tokens, self.normalized_tokens, self.normalizer))
        # The hash tables are resources: a SavedModel holds those its modules track.
        self._tables = self._tokenization.tables

    @classmethod
    def from_preset(cls, preset, **kwargs):
        """Builds the tokenizer of a preset from its `tokenizer.json` (or
        `vocab.json` and `merges.txt`) and `tokenizer_config.json`: the
        special tokens and the pair layout as its post-processor adds them,
        the added tokens, normalizer and pre-tokenizer as the files say.

        Args:
            preset: a registered name, `hf://owner/name`, or a local folder.
            **kwargs: override the settings read from the files.
        """
        folder = os.fspath(preset)
        if not os.path.isdir(folder):
            folder = files.get_preset_dir(preset)
        return cls(**{**read_preset(folder), **kwargs})

    def save_to_preset(self, folder, model_max_length=None):
        """Writes the tokenizer in Hugging Face's formats to `folder`, which
        `AutoTokenizer` reads into the same ids: RoBERTa's `vocab.json`,
        `merges.txt`, `tokenizer.json`, `tokenizer_config.json` and
        `special_tokens_map.json`; for other special tokens, layouts, added
        tokens or a normalizer (ModernBERT's), `tokenizer.json` with its
        post-processor's template, `tokenizer_config.json` and
        `special_tokens_map.json`. Keys of an existing
        `tokenizer_config.json` that the tokenizer does not own are kept."""
        write_preset(folder, self.vocabulary, self._vocabulary.merges, model_max_length=model_max_length,
                     **{k: v for k, v in self.get_config().items() if k not in ("vocabulary", "merges")})

    def get_config(self):
        return {"vocabulary": self.vocabulary, "merges": [f"{a} {b}" for a, b in self._vocabulary.merges],
                "add_prefix_space": self.add_prefix_space, "trim_offsets": self.trim_offsets,
                "lstrip_tokens": list(self.lstrip_tokens), "rstrip_tokens": list(self.rstrip_tokens),
                "added_tokens": list(self.added_tokens), "normalized_tokens": list(self.normalized_tokens),
                "normalizer": self.normalizer, "special_tokens_map": dict(self.special_tokens_map),
                "pair_layout": self.pair_layout, "second_segment_id": self.second_segment_id}

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
            `offset_mapping` in bytes (untrimmed, as ModernBERT's template
            leaves them: "Ġworld" spans " world"), except for a piece that
            holds part of a character (its span is its own bytes, Hugging
            Face's the whole character), a character that the normalizer
            composed of several ("e" and U+0301: its span is all of them,
            Hugging Face's the first) and, with `add_prefix_space`, a piece
            of only the added space after a special token (here empty where
            it was added). (In a text that is not UTF-8, bytes of the text
            as read: `kbert.text.tokenizer_base.as_valid_utf8`.)
        """
        return self._tokenization.tokenize_with_byte_spans(as_valid_utf8(tf.convert_to_tensor(texts, tf.string)))

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
