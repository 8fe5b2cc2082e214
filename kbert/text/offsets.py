"""Where each word and WordPiece of a text comes from: byte offsets, as TensorFlow ops.

The tokenizer gives ids, not offsets, so pieces are aligned to the original
text here:

1. the ORIGINAL text is split into words where BERT's pre-tokenizer splits
   (whitespace; each punctuation character and CJK ideograph a word), with
   their byte offsets (`split_words_with_offsets`);
2. each word is tokenized on its own (WordPiece never crosses a word
   boundary), and each of its characters normalized on its own; the pieces
   are walked along the normalized bytes to find the original characters
   each piece came from (a word whose pieces do not spell its normalized
   text, as `[UNK]`, gives every piece the whole word).

The spans equal Hugging Face's `offset_mapping` (BertTokenizerFast), except
that a trailing combining accent stays in the span.
"""

import functools

from kbert.text._tf_text import regex_split_with_offsets
from kbert.text.ragged import position_in_row, repeat, row_ids
from kbert.text.pre_tokenization import CJK, PUNCTUATION, WHITESPACE, normalize
from kbert.tf_if_present import tf

# Words are split at whitespace and around punctuation and CJK ideographs.
_OWN_WORD = f"{PUNCTUATION}|{CJK}"
_WORD_DELIMITER = f"{WHITESPACE}|{_OWN_WORD}"


def _sum_before_in_row(ragged):
    """Within each row of a ragged int64 tensor, the sum of the values before each."""
    totals = tf.cumsum(ragged.flat_values, exclusive=True)
    row_base = tf.gather(tf.concat([totals, [0]], 0), ragged.row_starts())
    return totals - repeat(row_base, ragged.row_lengths())


def _gather_or_zero(values, indices):
    """`values[indices]`, reading 0 where `values` is empty."""
    return tf.gather(tf.concat([values, tf.zeros([1], values.dtype)], 0), indices)


def tokenize_with_byte_spans(tokenizer, texts):
    """WordPiece ids of each text with each piece's byte span in the text.

    Args:
        tokenizer: a `kbert.text.BertTokenizer`.
        texts: a 1-D string tensor.

    Returns:
        `(ids, starts, ends)`: int64 ragged `[texts, (pieces)]` tensors (ids
        int32), the ids the tokenizer's; bytes `starts[i][k]:ends[i][k]` of
        `texts[i]` are the original text of piece `k`.
    """
    words, word_starts, word_ends = _split_words(texts)
    flat_words = words.flat_values
    pieces = tokenizer(flat_words)  # [words, (pieces)]
    word_of_piece = row_ids(pieces)

    # Each word's characters, their byte spans in the word, and each
    # character normalized on its own.
    codepoints, char_starts = tf.strings.unicode_decode_with_offsets(
        flat_words, "UTF-8", errors="replace", replacement_char=0xFFFD
    )
    word_of_char = row_ids(char_starts)
    row_lengths = repeat(char_starts.row_lengths(), char_starts.row_lengths())
    is_last_char = tf.equal(position_in_row(char_starts), row_lengths - 1)
    word_lengths = tf.cast(tf.strings.length(flat_words), tf.int64)
    next_start = tf.concat([char_starts.flat_values[1:], [0]], 0)
    char_ends = tf.where(is_last_char, tf.gather(word_lengths, word_of_char), next_start)
    chars = tf.strings.unicode_encode(codepoints.flat_values[:, None], "UTF-8")
    normalized = tf.strings.regex_replace(
        normalize(
            chars,
            lowercase=tokenizer.lowercase,
            strip_accents=tokenizer.strip_accents,
            tokenize_chinese_chars=tokenizer.tokenize_chinese_chars,
        ),
        " ",
        "",
    )
    normalized_lengths = tf.cast(tf.strings.length(normalized), tf.int64)
    # owner[b]: the character (a flat index) that normalized byte b came from.
    owner = repeat(tf.range(tf.size(chars, out_type=tf.int64)), normalized_lengths)
    word_normalized_start = _gather_or_zero(
        tf.cumsum(normalized_lengths, exclusive=True), char_starts.row_starts()
    )

    # Each piece's text (without "##" after a word's first piece), and where
    # it starts in its word's normalized bytes.
    piece_texts = tf.gather(tf.constant(tokenizer.vocabulary), pieces.flat_values)
    continues = tf.not_equal(position_in_row(pieces), 0) & tf.strings.regex_full_match(piece_texts, "##.+")
    piece_texts = tf.where(continues, tf.strings.regex_replace(piece_texts, "^##", ""), piece_texts)
    piece_lengths = tf.cast(tf.strings.length(piece_texts), tf.int64)
    first_byte = tf.gather(word_normalized_start, word_of_piece) + _sum_before_in_row(
        pieces.with_flat_values(piece_lengths)
    )
    first_char = _gather_or_zero(owner, first_byte)
    last_char = _gather_or_zero(owner, first_byte + piece_lengths - 1)

    # A word is aligned when its pieces spell its normalized text exactly
    # (not so for [UNK]); otherwise each of its pieces gets the whole word.
    spelled = tf.strings.reduce_join(pieces.with_flat_values(piece_texts), axis=1)
    aligned = tf.equal(spelled, tf.strings.reduce_join(char_starts.with_flat_values(normalized), axis=1))
    aligned = tf.gather(aligned, word_of_piece)

    # Combining accents that the normalizer dropped stay with the letter
    # before them (where Hugging Face's offsets leave a trailing one out: see
    # the module's docstring): a run of them joins that letter's group.
    joins = tf.equal(normalized_lengths, 0) & tf.strings.regex_full_match(chars, r"\p{Mn}")
    group = tf.cumsum(tf.cast(~joins | tf.equal(position_in_row(char_starts), 0), tf.int64)) - 1
    group_ends = tf.gather(tf.math.unsorted_segment_max(char_ends, group, tf.size(chars, out_type=tf.int64)), group)

    word_start = tf.gather(word_starts.flat_values, word_of_piece)
    piece_starts = tf.where(aligned, word_start + _gather_or_zero(char_starts.flat_values, first_char), word_start)
    piece_ends = tf.where(
        aligned, word_start + _gather_or_zero(group_ends, last_char), tf.gather(word_ends.flat_values, word_of_piece)
    )

    row_splits = tf.gather(pieces.row_splits, words.row_splits)
    return tuple(
        tf.RaggedTensor.from_row_splits(values, row_splits, validate=False)
        for values in (pieces.flat_values, piece_starts, piece_ends)
    )


def _split_words(texts):
    """`split_words_with_offsets`, with U+0001 standing for U+0000 in the words:
    regex_split ends a string at U+0000, and U+0001 has the same length and,
    like U+0000, is dropped by the normalizer."""
    return regex_split_with_offsets(tf.strings.regex_replace(texts, r"\x00", "\x01"), _WORD_DELIMITER, _OWN_WORD)


def split_words_with_offsets(texts):
    """The words of each text where BERT's pre-tokenizer splits it, with
    their byte spans: `(words, starts, ends)`, ragged `[texts, (words)]`."""
    words, starts, ends = _split_words(texts)
    # The words as written (with U+0000 where the text has it).
    words = words.with_flat_values(tf.strings.substr(repeat(texts, words.row_lengths()), starts.flat_values,
                                                     ends.flat_values - starts.flat_values))
    return words, starts, ends


def char_offsets(texts, byte_offsets):
    """Byte offsets into each text as character offsets (UTF-8 characters;
    an invalid byte counts as one). `byte_offsets`: `[texts, ...]`, dense or
    ragged."""
    if isinstance(byte_offsets, tf.RaggedTensor):
        flat = byte_offsets.flat_values
        return byte_offsets.with_flat_values(_chars_before(repeat(texts, byte_offsets.row_lengths()), flat))
    shape = tf.shape(byte_offsets, out_type=tf.int64)
    flat = tf.reshape(byte_offsets, [shape[0], -1])
    repeated = repeat(texts, tf.fill([shape[0]], tf.shape(flat, out_type=tf.int64)[1]))
    return tf.reshape(_chars_before(repeated, tf.reshape(flat, [-1])), shape)


def _chars_before(strings, byte_offsets):
    """The characters of each string before its byte offset."""
    prefixes = tf.strings.substr(strings, tf.zeros_like(byte_offsets), byte_offsets, unit="BYTE")
    lengths = tf.strings.length(tf.strings.unicode_transcode(prefixes, "UTF-8", "UTF-8", errors="replace",
                                                             replacement_char=0xFFFD), unit="UTF8_CHAR")
    return tf.cast(lengths, byte_offsets.dtype)


# A whitespace-separated chunk with one character that no normalization drops
# (control and format characters, U+FFFD, and combining marks, which accent
# stripping drops) gives at least one WordPiece.
_GIVES_A_PIECE = r"(?s).*[^\p{C}\p{Mn}\x{FFFD}].*"


def cut_after_words(texts, max_words):
    """Each text cut before its `max_words + 1`-th whitespace-separated chunk
    that gives a WordPiece, so that WordPiece never reads far past what a
    sequence keeps. `max_words`: one number, or one per text.

    Every such chunk gives at least one piece, and pieces never cross
    whitespace, so a cut text still gives the first `max_words` or more pieces
    of the whole text, exactly: a text of at most `max_words` pieces is never
    cut, and one that is cut keeps all the pieces a packed sequence of
    `max_words` tokens can hold. The cost is a regex split of the text's
    first `_BYTES_PER_WORD * (max_words + 1)` bytes, where the cut lies in
    all but odd texts (long runs of spaces or of pieceless characters),
    which are split whole; nothing for a batch of texts too short to be cut.
    """
    if isinstance(texts, tf.RaggedTensor):
        return texts.with_flat_values(cut_after_words(texts.flat_values, max_words))
    texts = tf.convert_to_tensor(texts, tf.string)
    if texts.shape.rank == 0:
        return cut_after_words(texts[None], max_words)[0]
    limit = tf.cast(max_words, tf.int64)
    # Chunks are separated by at least one byte: a text of at most
    # 2 * max_words bytes has at most max_words of them, and is never cut.
    short = tf.cast(tf.strings.length(texts), tf.int64) // 2 <= limit
    cut = _traced_cut(bool(limit.shape.rank))
    return tf.cond(tf.reduce_all(short), lambda: texts, lambda: cut(texts, limit))


# Natural text gives a WordPiece every few bytes; a window this many bytes
# per word holds the cut of nearly every text, so that cutting a text of
# 200,000 characters reads a sequence's worth of it, not all of it.
_BYTES_PER_WORD = 32


def _cut_after_words(texts, limit):
    # The cut found in a text's first bytes is the whole text's: the chunks
    # before it are the same, and the chunk it starts at gives a piece there,
    # so in the whole text too. A text whose window holds no cut and that
    # goes on past it is split whole.
    window = _BYTES_PER_WORD * (limit + 1) + tf.zeros(tf.shape(texts), tf.int64)
    head = tf.strings.substr(texts, tf.zeros_like(window), window)
    cut_head = _cut_in(head, limit)
    done = (tf.strings.length(cut_head) < tf.strings.length(head)) | (tf.strings.length(head) == tf.strings.length(texts))
    return tf.cond(tf.reduce_all(done), lambda: cut_head, lambda: tf.where(done, cut_head, _cut_in(texts, limit)))


def _cut_in(texts, limit):
    split_texts = tf.strings.regex_replace(texts, r"\x00", "\x01")
    chunks, starts, _ = regex_split_with_offsets(split_texts, f"(?:{WHITESPACE})+")
    gives_piece = tf.cast(tf.strings.regex_full_match(chunks.flat_values, _GIVES_A_PIECE), tf.int64)
    count = _sum_before_in_row(chunks.with_flat_values(gives_piece)) + gives_piece
    if limit.shape.rank:  # one budget per text
        limit = tf.gather(limit, row_ids(starts))
    # The first chunk past the budget starts the cut; no such chunk: no cut.
    over = tf.where(count > limit, starts.flat_values, tf.int64.max)
    first_over = tf.math.unsorted_segment_min(over, row_ids(starts), starts.nrows())
    cut = tf.where(first_over < tf.int64.max, first_over, tf.cast(tf.strings.length(texts), tf.int64))
    return tf.strings.substr(texts, tf.zeros_like(cut), cut)


@functools.cache
def _traced_cut(one_limit_per_text):
    """`_cut_after_words` traced once per process for each kind of `limit`
    (one for all texts, or one per text), then called from every graph that
    cuts text: each fit, evaluate and predict on raw text would otherwise
    trace it again, twice per segment of a pair. (Made at first use, not at
    import: the model path imports this module without TensorFlow.)"""
    shape = [None] if one_limit_per_text else []
    return tf.function(_cut_after_words, autograph=False,
                       input_signature=[tf.TensorSpec([None], tf.string), tf.TensorSpec(shape, tf.int64)])
