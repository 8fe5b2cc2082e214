"""Extractive question answering as TensorFlow ops, for the served model.

`BertQuestionAnswerer.predict` aligns WordPieces to characters, cuts long
contexts into windows and decodes the best span in numpy; a SavedModel has to
do all of it in its graph. These functions are that graph, step for step the
same algorithm as the numpy code in `kbert/models/bert_question_answerer.py`
(and tested to give the same answers):

1. the ORIGINAL context is split into words where BERT's pre-tokenizer splits
   (whitespace; each punctuation character and CJK ideograph a word), with
   their byte offsets;
2. each word is tokenized on its own, and each of its characters normalized
   on its own; the pieces are walked along the normalized bytes to find the
   original characters each piece came from (a word whose pieces do not spell
   its normalized text gives every piece the whole word);
3. windows of `sequence_length` tokens, `stride` apart, each packed as
   `[CLS] question [SEP] window [SEP]`;
4. per window, the `num_candidates` best starts (only where the window gives
   the token most context) and ends are paired; the best span of all windows
   is the answer, cut from the original bytes.

Offsets here are bytes of the UTF-8 context; the served `start`/`end` are
converted to characters, as `predict` gives them.
"""

import tensorflow as tf

from kbert.text._tf_text import tf_text
from kbert.text.tokenizer import _CJK, _PUNCTUATION, _WHITESPACE, normalize

# Words are split at whitespace and around punctuation and CJK ideographs.
_OWN_WORD = f"{_PUNCTUATION}|{_CJK}"
_WORD_DELIMITER = f"{_WHITESPACE}|{_OWN_WORD}"


def _position_in_row(ragged):
    """Each value's index within its row of `ragged`."""
    return tf.range(tf.size(ragged.flat_values, out_type=tf.int64)) - tf.repeat(
        ragged.row_starts(), ragged.row_lengths()
    )


def _sum_before_in_row(ragged):
    """Within each row of a ragged int64 tensor, the sum of the values before each."""
    totals = tf.cumsum(ragged.flat_values, exclusive=True)
    row_base = tf.gather(tf.concat([totals, [0]], 0), ragged.row_starts())
    return totals - tf.repeat(row_base, ragged.row_lengths())


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
    # regex_split ends a string at U+0000; U+0001 has the same length and,
    # like U+0000, is dropped by the normalizer.
    split_texts = tf.strings.regex_replace(texts, r"\x00", "\x01")
    words, word_starts, word_ends = tf_text.regex_split_with_offsets(
        split_texts, _WORD_DELIMITER, keep_delim_regex_pattern=_OWN_WORD
    )
    flat_words = words.flat_values
    pieces = tokenizer(flat_words)  # [words, (pieces)]
    word_of_piece = pieces.value_rowids()

    # Each word's characters, their byte spans in the word, and each
    # character normalized on its own.
    codepoints, char_starts = tf.strings.unicode_decode_with_offsets(
        flat_words, "UTF-8", errors="replace", replacement_char=0xFFFD
    )
    word_of_char = char_starts.value_rowids()
    row_lengths = tf.repeat(char_starts.row_lengths(), char_starts.row_lengths())
    is_last_char = tf.equal(_position_in_row(char_starts), row_lengths - 1)
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
    owner = tf.repeat(tf.range(tf.size(chars, out_type=tf.int64)), normalized_lengths)
    word_normalized_start = _gather_or_zero(
        tf.cumsum(normalized_lengths, exclusive=True), char_starts.row_starts()
    )

    # Each piece's text (without "##" after a word's first piece), and where
    # it starts in its word's normalized bytes.
    piece_texts = tf.gather(tf.constant(tokenizer.vocabulary), pieces.flat_values)
    continues = tf.not_equal(_position_in_row(pieces), 0) & tf.strings.regex_full_match(piece_texts, "##.+")
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
    # before them, as in `piece_spans`: a run of them joins that letter's group.
    joins = tf.equal(normalized_lengths, 0) & tf.strings.regex_full_match(chars, r"\p{Mn}")
    group = tf.cumsum(tf.cast(~joins | tf.equal(_position_in_row(char_starts), 0), tf.int64)) - 1
    group_ends = tf.gather(tf.math.unsorted_segment_max(char_ends, group, tf.size(chars, out_type=tf.int64)), group)

    word_start = tf.gather(word_starts.flat_values, word_of_piece)
    piece_starts = tf.where(aligned, word_start + _gather_or_zero(char_starts.flat_values, first_char), word_start)
    piece_ends = tf.where(
        aligned, word_start + _gather_or_zero(group_ends, last_char), tf.gather(word_ends.flat_values, word_of_piece)
    )

    row_splits = tf.gather(pieces.row_splits, words.row_splits)
    return tuple(
        tf.RaggedTensor.from_row_splits(values, row_splits)
        for values in (pieces.flat_values, piece_starts, piece_ends)
    )


def windows(model, questions, contexts):
    """Packs each question with overlapping windows over its context, as
    `BertQuestionAnswerer.encode` does.

    Returns:
        `(features, example, is_context, max_context, starts, ends)`: the
        model's inputs, one row per window; the example of each window;
        `[windows, length]` masks of the context tokens and of those whose
        window is the one giving them most context; each token's byte span
        in its context (0 elsewhere).
    """
    preprocessor = model.preprocessor
    question_ids = preprocessor.tokenizer(questions)[:, : model.max_question_length]
    context_ids, context_starts, context_ends = tokenize_with_byte_spans(preprocessor.tokenizer, contexts)
    num_tokens = context_ids.row_lengths()
    offset = question_ids.row_lengths() + 2  # [CLS] question [SEP]
    window_length = preprocessor.sequence_length - offset - 1
    step = tf.minimum(tf.cast(model.stride, tf.int64), window_length)
    # window_starts(): windows `step` apart until one reaches the end.
    num_windows = 1 + (tf.maximum(num_tokens - window_length, 0) + step - 1) // step
    example = tf.repeat(tf.range(tf.size(num_tokens, out_type=tf.int64)), num_windows)
    window_start = tf.ragged.range(num_windows).flat_values * tf.gather(step, example)
    window_size = tf.minimum(tf.gather(window_length, example), tf.gather(num_tokens, example) - window_start)
    # Indices into the flat context tokens of each window's tokens.
    position = tf.ragged.range(window_size)  # in the window
    tokens = position + (tf.gather(context_ids.row_starts(), example) + window_start)[:, None]

    features = preprocessor.packer(
        (tf.gather(question_ids, example), tf.gather(context_ids.flat_values, tokens))
    )

    # _max_context(): a token belongs to the window where min(left, right
    # context) + 0.01 * window size is largest, the first such on a tie.
    size = tf.cast(window_size, tf.int64)[:, None]
    score = tf.minimum(position, size - 1 - position) * 100 + size
    window_in_example = tf.ragged.range(num_windows).flat_values
    key = score * 1_000_000 - window_in_example[:, None]
    best_key = tf.math.unsorted_segment_max(
        key.flat_values, tokens.flat_values, tf.size(context_ids.flat_values, out_type=tf.int64)
    )
    max_context = tokens.with_flat_values(tf.equal(key.flat_values, tf.gather(best_key, tokens.flat_values)))

    # Per-window values moved to the window's positions in the packed sequence.
    shape = tf.shape(features["token_ids"], out_type=tf.int64)
    window_offset = tf.gather(offset, example)

    def to_positions(values, fill):
        prefix = tf.ragged.range(window_offset)
        prefix = prefix.with_flat_values(tf.fill(tf.shape(prefix.flat_values), fill))
        return tf.concat([prefix, values], axis=1).to_tensor(fill, shape=shape)

    is_context = to_positions(tokens.with_flat_values(tf.ones_like(tokens.flat_values, tf.bool)), False)
    max_context = to_positions(max_context, False)
    starts = to_positions(tf.gather(context_starts.flat_values, tokens), tf.constant(0, tf.int64))
    ends = to_positions(tf.gather(context_ends.flat_values, tokens), tf.constant(0, tf.int64))
    return features, example, is_context, max_context, starts, ends


def best_spans(start_logits, end_logits, example, is_context, max_context, num_examples, max_answer_length,
               num_candidates):
    """`decode_answers()` in the graph: the best span of each example.

    Returns:
        `(found, window, start, end, score)` per example: whether any span
        was possible, the window and the positions in it of the best span's
        first and last token, its score (the lowest float32 where none).
    """
    negative = tf.fill(tf.shape(start_logits), float("-inf"))
    k = tf.minimum(num_candidates, tf.shape(start_logits)[1])
    start_values, start_index = tf.math.top_k(tf.where(is_context & max_context, start_logits, negative), k)
    end_values, end_index = tf.math.top_k(tf.where(is_context, end_logits, negative), k)
    score = start_values[:, :, None] + end_values[:, None, :]
    valid = (
        (end_index[:, None, :] >= start_index[:, :, None])
        & (end_index[:, None, :] < start_index[:, :, None] + max_answer_length)
        & tf.math.is_finite(score)
    )
    score = tf.reshape(tf.where(valid, score, float("-inf")), [tf.shape(score)[0], -1])
    # The first best pair in (start, end) order, as decode_answers' loops.
    window_best = tf.reduce_max(score, axis=1, keepdims=True)
    pair_order = tf.range(tf.shape(score, out_type=tf.int64)[1])
    pair = tf.reduce_min(tf.where(tf.equal(score, window_best), pair_order, tf.int64.max), axis=1)
    pair = tf.where(tf.math.is_finite(window_best[:, 0]), pair, 0)
    window_start = tf.gather(start_index, pair // tf.cast(k, tf.int64), batch_dims=1)
    window_end = tf.gather(end_index, pair % tf.cast(k, tf.int64), batch_dims=1)

    # No possible span scores the lowest float32, which is also what
    # unsorted_segment_max gives for "no value", so the two cannot differ.
    window_best = tf.maximum(window_best[:, 0], tf.float32.min)
    example_best = tf.math.unsorted_segment_max(window_best, example, num_examples)
    found = example_best > tf.float32.min
    # The first window holding the example's best span.
    window = tf.math.unsorted_segment_min(
        tf.where(tf.equal(window_best, tf.gather(example_best, example)), tf.range(tf.size(example, out_type=tf.int64)),
                 tf.int64.max),
        example,
        num_examples,
    )
    window = tf.where(found, window, 0)
    return (
        found,
        window,
        tf.where(found, tf.gather(window_start, window), 0),
        tf.where(found, tf.gather(window_end, window), 0),
        example_best,
    )


def answer(model, questions, contexts):
    """The served question answerer: best answer of each (question, context).

    Returns:
        A dict of `answer` (the context's original text of the span, "" where
        none), `start` and `end` (its character offsets in the context) and
        `score` (start + end logit; the lowest float32 where the context has
        no token).
    """
    features, example, is_context, max_context, starts, ends = windows(model, questions, contexts)
    logits = model(features, training=False)
    num_examples = tf.size(contexts, out_type=tf.int64)
    found, window, first, last, score = best_spans(
        tf.cast(logits["start_logits"], tf.float32),
        tf.cast(logits["end_logits"], tf.float32),
        example,
        is_context,
        max_context,
        num_examples,
        model.max_answer_length,
        model.num_candidates,
    )
    start_byte = tf.where(found, tf.gather_nd(starts, tf.stack([window, tf.cast(first, tf.int64)], 1)), 0)
    end_byte = tf.where(found, tf.gather_nd(ends, tf.stack([window, tf.cast(last, tf.int64)], 1)), 0)
    characters = lambda byte: tf.strings.length(  # noqa: E731
        tf.strings.substr(contexts, tf.zeros_like(byte), byte, unit="BYTE"), unit="UTF8_CHAR"
    )
    return {
        "answer": tf.strings.substr(contexts, start_byte, end_byte - start_byte, unit="BYTE"),
        "start": characters(start_byte),
        "end": characters(end_byte),
        "score": score,
    }
