"""Extractive question answering as TensorFlow ops: the one implementation
that `BertQuestionAnswerer.fit`, `predict`, `answer` and the served model run.

1. each context's WordPieces with their byte spans in the ORIGINAL context
   (the tokenizer's `tokenize_with_byte_spans`);
2. windows of `sequence_length` tokens, `stride` apart, each packed as
   `[CLS] question [SEP] window [SEP]` (`windows`), and for training, each
   window's answer positions (`answer_positions`);
3. per window, the `num_candidates` best starts (only where the window gives
   the token most context) and ends are paired; the best span of all windows
   is the answer, cut from the original bytes (`best_spans`, `answers`).

Offsets are bytes of the UTF-8 context inside; answers give characters.
"""


from kbert.text.offsets import char_offsets, cut_after_words
from kbert.text.ragged import position_in_row, ranges, repeat, row_ids
from kbert.tf_if_present import tf


def windows(preprocessor, questions, contexts, stride, max_question_length):
    """Packs each question with overlapping windows over its context (BERT's
    `doc_stride`): windows `stride` tokens apart until one reaches the end.

    Args:
        preprocessor: a `kbert.BertPreprocessor` (its `sequence_length` is a
            window's length, question included).
        questions, contexts: 1-D string tensors, one of each per example.
        stride: how many tokens each window moves along the context.
        max_question_length: questions are cut to this many tokens.

    Returns:
        A dict: `features`, the model's inputs, one row per window;
        `example`, the example of each window; `is_context` and
        `max_context`, `[windows, length]` masks of the context tokens and of
        those whose window is the one giving them most context; `starts` and
        `ends`, each token's byte span in its context (0 elsewhere); `token`,
        each position's index into the flat context tokens (-1 elsewhere);
        `token_starts`, `token_ends` and `token_example`, the flat context
        tokens' byte spans and examples.
    """
    question_ids = preprocessor.tokenizer(cut_after_words(questions, max_question_length))
    question_ids = question_ids[:, :max_question_length]
    context_ids, context_starts, context_ends = preprocessor.tokenizer.tokenize_with_byte_spans(contexts)
    num_tokens = context_ids.row_lengths()
    # [CLS] question [SEP] (RoBERTa's <s> question </s></s>), then the window and its [SEP].
    offset = question_ids.row_lengths() + preprocessor.packer.special_tokens(2) - 1
    window_length = preprocessor.sequence_length - offset - 1
    step = tf.minimum(tf.cast(stride, tf.int64), window_length)
    # window_starts(): windows `step` apart until one reaches the end.
    num_windows = 1 + (tf.maximum(num_tokens - window_length, 0) + step - 1) // step
    example = repeat(tf.range(tf.size(num_tokens, out_type=tf.int64)), num_windows)
    window_start = ranges(num_windows).flat_values * tf.gather(step, example)
    window_size = tf.minimum(tf.gather(window_length, example), tf.gather(num_tokens, example) - window_start)
    # Indices into the flat context tokens of each window's tokens.
    position = ranges(window_size)  # in the window
    window_of = row_ids(position)  # (per-window values are worked out on the flat values)
    first_token = tf.gather(context_ids.row_starts(), example) + window_start
    tokens = position.with_flat_values(position.flat_values + tf.gather(first_token, window_of))

    features = preprocessor.packer(
        (tf.gather(question_ids, example), tf.gather(context_ids.flat_values, tokens))
    )

    # _max_context(): a token belongs to the window where min(left, right
    # context) + 0.01 * window size is largest, the first such on a tie.
    size = tf.gather(tf.cast(window_size, tf.int64), window_of)
    score = tf.minimum(position.flat_values, size - 1 - position.flat_values) * 100 + size
    window_in_example = ranges(num_windows).flat_values
    key = score * 1_000_000 - tf.gather(window_in_example, window_of)
    num_context_tokens = tf.size(context_ids.flat_values, out_type=tf.int64)
    best_key = tf.math.unsorted_segment_max(key, tokens.flat_values, num_context_tokens)
    max_context = tokens.with_flat_values(tf.equal(key, tf.gather(best_key, tokens.flat_values)))

    # Per-window values moved to the window's positions in the packed sequence.
    shape = tf.shape(features["token_ids"], out_type=tf.int64)
    window_offset = tf.gather(offset, example)

    def to_positions(values, fill):
        # Each row's values after `window_offset` fills, padded with fills.
        rows = row_ids(values)
        places = tf.stack([rows, tf.gather(window_offset, rows) + position_in_row(values)], axis=1)
        return tf.tensor_scatter_nd_update(tf.fill(shape, fill), places, values.flat_values)

    is_context = to_positions(tokens.with_flat_values(tf.ones_like(tokens.flat_values, tf.bool)), False)
    return {
        "features": features,
        "example": example,
        "is_context": is_context,
        "max_context": to_positions(max_context, False),
        "starts": to_positions(tf.gather(context_starts.flat_values, tokens), tf.constant(0, tf.int64)),
        "ends": to_positions(tf.gather(context_ends.flat_values, tokens), tf.constant(0, tf.int64)),
        "token": to_positions(tokens, tf.constant(-1, tf.int64)),
        "token_starts": context_starts.flat_values,
        "token_ends": context_ends.flat_values,
        "token_example": row_ids(context_ids),
    }


def answer_positions(windowed, contexts, answer_starts, answer_ends):
    """Each window's answer as the positions of its first and last token,
    for training (BERT §4.2): the first and last context token overlapping
    the answer's characters; 0 (the [CLS] token) for both where the answer
    is not wholly inside the window.

    Args:
        windowed: what `windows` returns.
        contexts: the contexts, `[examples]`.
        answer_starts, answer_ends: the answers' character offsets in their
            contexts, `[examples]`.

    Returns:
        `(start_positions, end_positions)`, int32 `[windows]`.
    """
    def to_bytes(chars):
        prefix = tf.strings.substr(contexts, tf.zeros_like(chars), chars, unit="UTF8_CHAR")
        return tf.cast(tf.strings.length(prefix), tf.int64)

    example = windowed["token_example"]
    start_byte = tf.gather(to_bytes(tf.cast(answer_starts, tf.int32)), example)
    end_byte = tf.gather(to_bytes(tf.cast(answer_ends, tf.int32)), example)
    overlaps = (windowed["token_starts"] < end_byte) & (windowed["token_ends"] > start_byte)
    index = tf.range(tf.size(example, out_type=tf.int64))
    num_examples = tf.size(contexts, out_type=tf.int64)
    first = tf.math.unsorted_segment_min(tf.where(overlaps, index, tf.int64.max), example, num_examples)
    last = tf.math.unsorted_segment_max(tf.where(overlaps, index, -1), example, num_examples)

    def position(token):
        found = tf.equal(windowed["token"], tf.gather(token, windowed["example"])[:, None])
        return tf.where(tf.reduce_any(found, axis=1), tf.argmax(tf.cast(found, tf.int32), axis=1), 0)

    start, end = position(first), position(last)
    inside = (start > 0) & (end > 0)
    return tf.cast(tf.where(inside, start, 0), tf.int32), tf.cast(tf.where(inside, end, 0), tf.int32)


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


def answers(windowed, contexts, start_logits, end_logits, max_answer_length, num_candidates,
            null_score_margin=None):
    """The best answer of each (question, context), from the windows' logits.

    With `null_score_margin` a number (SQuAD 2.0), the answer is "" where
    the null score, [CLS] as start and end (the lowest of the example's
    windows), exceeds the best span's score by more than the margin (BERT's
    `null_score_diff_threshold`, 0.0 in its recipe).

    Returns:
        A dict of `answer` (the context's original text of the span, "" where
        none), `start` and `end` (its character offsets in the context; 0
        for ""), `score` (start + end logit; the lowest float32 where the
        context has no token; the null score where the answer is "no
        answer") and `null_score`.
    """
    start_logits, end_logits = tf.cast(start_logits, tf.float32), tf.cast(end_logits, tf.float32)
    num_examples = tf.size(contexts, out_type=tf.int64)
    found, window, first, last, score = best_spans(
        start_logits,
        end_logits,
        windowed["example"],
        windowed["is_context"],
        windowed["max_context"],
        num_examples,
        max_answer_length,
        num_candidates,
    )
    # run_squad.py: the null score is the lowest [CLS] score of the windows.
    null_score = tf.math.unsorted_segment_min(start_logits[:, 0] + end_logits[:, 0], windowed["example"],
                                              num_examples)
    if null_score_margin is not None:
        no_answer = null_score - score > null_score_margin
        found = found & ~no_answer
        score = tf.where(no_answer, null_score, score)
    at = lambda values, position: tf.where(  # noqa: E731
        found, tf.gather_nd(values, tf.stack([window, tf.cast(position, tf.int64)], 1)), 0)
    start_byte, end_byte = at(windowed["starts"], first), at(windowed["ends"], last)
    return {
        "answer": tf.strings.substr(contexts, start_byte, end_byte - start_byte, unit="BYTE"),
        "start": tf.cast(char_offsets(contexts, start_byte), tf.int32),
        "end": tf.cast(char_offsets(contexts, end_byte), tf.int32),
        "score": score,
        "null_score": null_score,
    }
