"""Token classification (NER) as TensorFlow ops: words or texts in, packed
features and per-token labels for training, per-word tags and BIO entities
out. The same functions run in `BertTokenClassifier.fit`, `predict`, `tags`,
`entities` and the served model."""


from kbert.text.offsets import char_offsets, cut_after_words, split_words_with_offsets
from kbert.text.pre_tokenization import WHITESPACE
from kbert.text.ragged import position_in_row, repeat, row_ids
from kbert.tf_if_present import tf


def pack_words(preprocessor, words):
    """Tokenizes sentences given as words and packs them as `[CLS] pieces [SEP]`.

    Args:
        preprocessor: a `kbert.BertPreprocessor` (its tokenizer and packer).
        words: a string `tf.RaggedTensor` `[batch, (words)]`.

    Returns:
        `(features, first_pieces)`: the model inputs, and an int64
        `tf.RaggedTensor` `[batch, (words)]` with the position of each word's
        first WordPiece, or -1 for a word with no pieces or cut off by the
        truncation at `sequence_length`.

    Example:
    >>> features, first = pack_words(preprocessor, tf.ragged.constant([["Kbert", "rocks"]]))
    >>> first  # [CLS] kb ##ert rocks [SEP]
    <tf.RaggedTensor [[1, 3]]>
    """
    pieces = preprocessor.tokenizer.tokenize_words(words)  # [batch, (words), (pieces)]
    features = preprocessor.packer(pieces)
    # Each word's first piece, counted from its sentence's first piece.
    sentence_starts = tf.gather(pieces.merge_dims(1, 2).row_splits, row_ids(pieces))
    word_starts = pieces.values.row_splits[:-1] - sentence_starts
    room = preprocessor.sequence_length - 2  # [CLS] and [SEP]
    kept = (pieces.values.row_lengths() > 0) & (word_starts < room)
    first_pieces = tf.where(kept, word_starts + 1, -1)
    return features, tf.RaggedTensor.from_row_splits(first_pieces, pieces.row_splits, validate=False)


def text_words(preprocessor, texts):
    """Each text's words where BERT's pre-tokenizer splits it, with their
    byte spans in `texts` (UTF-8: Python's strings, or `as_valid_utf8` of a
    request): `(words, starts, ends)`, ragged `[texts, (words)]`. Text past
    what a sequence holds is cut first (`cut_after_words`), so a text of
    200,000 characters costs what a sequence costs."""
    return split_words_with_offsets(cut_after_words(texts, preprocessor.sequence_length))


def pack_text(preprocessor, texts):
    """Tokenizes texts and packs them as `preprocessor(texts)` does, and
    finds their words, where BERT's pre-tokenizer splits them.

    WordPiece tokenizes each of those words alone (`tokenizes_words_alone`):
    a text is tagged as its words given as words (`text_words`,
    `pack_words`). Byte-level BPE and SentencePiece are run on the whole
    text, as transformers runs them (a text's first word without a leading
    space, tokens that may join words), and the words read off the tokens'
    byte spans: a token starts a word where it starts at one of BERT's word
    starts (the first token there, where a lone SentencePiece "▁" spans the
    character after it), and the tokens up to the next such token are the
    word's. A word of tokens that cross BERT's boundaries ("北京" in one
    piece, ".)" in one byte-level token) is one word.

    Args:
        preprocessor: a `kbert.BertPreprocessor` (its tokenizer and packer).
        texts: a 1-D string tensor of UTF-8 text (`kbert.text.tokenizer_base.as_valid_utf8`).

    Returns:
        `(features, first_pieces, words, starts, ends)`: the model inputs,
        each word's first token as `pack_words` gives it, and the words (as
        written) with their byte spans in `texts`, ragged `[texts, (words)]`.
    """
    if preprocessor.tokenizer.tokenizes_words_alone:
        words, starts, ends = text_words(preprocessor, texts)
        return (*pack_words(preprocessor, words), words, starts, ends)
    # Cut as the preprocessor cuts: the tokens a sequence holds are the same.
    cut = cut_after_words(texts, preprocessor.sequence_length)
    ids, piece_starts, piece_ends = preprocessor.tokenizer.tokenize_with_byte_spans(cut)
    room = preprocessor.sequence_length - preprocessor.packer.special_tokens(1)
    first_pieces, starts, ends = _words_of_pieces(cut, piece_starts, piece_ends, room)
    words = starts.with_flat_values(tf.strings.substr(repeat(texts, starts.row_lengths()), starts.flat_values,
                                                      ends.flat_values - starts.flat_values))
    return preprocessor.packer(ids), first_pieces, words, starts, ends


def _words_of_pieces(texts, piece_starts, piece_ends, room):
    """`pack_text`'s words of tokens spanning `piece_starts:piece_ends` of
    `texts`: `(first_pieces, starts, ends)`, ragged `[texts, (words)]`, each
    word's first token in the packed sequence (-1 past the `room` for
    tokens) and its byte span. Tokens before a text's first word (leading
    whitespace) are in none."""
    _, word_starts, _ = split_words_with_offsets(texts)
    # A token whose span starts with the whitespace before its word (a "Ġ"
    # token where offsets are not trimmed: ModernBERT's) starts where its
    # word does; a token of whitespace alone starts no word.
    spans = piece_ends.flat_values - piece_starts.flat_values
    text = tf.strings.substr(tf.gather(texts, row_ids(piece_starts)), piece_starts.flat_values, spans)
    lead = spans - tf.cast(tf.strings.length(tf.strings.regex_replace(text, f"^(?:{WHITESPACE})+", "")), tf.int64)
    piece_starts = piece_starts.with_flat_values(piece_starts.flat_values + lead)
    # Byte offsets keyed by their text, so that one sorted search finds them.
    key = lambda offsets: row_ids(offsets) * 2**40 + offsets.flat_values  # noqa: E731
    piece_keys = key(piece_starts)
    boundaries = tf.concat([key(word_starts), [tf.int64.max]], 0)
    at_boundary = tf.equal(tf.gather(boundaries, tf.searchsorted(boundaries, piece_keys, out_type=tf.int64)),
                           piece_keys) & (lead < spans)
    starts_word = at_boundary & tf.concat([[True], tf.not_equal(piece_keys[1:], piece_keys[:-1])], 0)
    word = tf.cumsum(tf.cast(starts_word, tf.int64)) - 1  # each token's word, counted over the batch
    first = tf.where(starts_word)[:, 0]
    piece_row = row_ids(piece_starts)
    word_row = tf.gather(piece_row, first)
    in_word = (word >= 0) & tf.equal(tf.gather(tf.concat([word_row, [-1]], 0), tf.maximum(word, 0)), piece_row)
    position = tf.gather(position_in_row(piece_starts), first)
    start = tf.gather(piece_starts.flat_values, first)
    end = tf.math.unsorted_segment_max(tf.boolean_mask(piece_ends.flat_values, in_word),
                                       tf.boolean_mask(word, in_word), tf.size(first, out_type=tf.int64))
    # A whitespace token inside a word (byte-level BPE's "Ġ" of a run of
    # spaces) leaves its space out of the word.
    text = tf.strings.substr(tf.gather(texts, word_row), start, end - start)
    end = start + tf.cast(tf.strings.length(tf.strings.regex_replace(text, f"(?:{WHITESPACE})+$", "")), tf.int64)
    per_text = lambda values: tf.RaggedTensor.from_value_rowids(values, word_row,  # noqa: E731
                                                               nrows=piece_starts.nrows())
    return per_text(tf.where(position < room, position + 1, -1)), per_text(start), per_text(end)


def token_labels(first_pieces, tags, shape):
    """Puts each word's tag on its first WordPiece; other tokens get weight 0.

    Args:
        first_pieces: `pack_words`' word positions `[batch, (words)]`.
        tags: int tags `[batch, (words)]`, one per word.
        shape: the packed shape `[batch, length]`.

    Returns:
        `(labels, sample_weight)`, int32 and float32 `[batch, length]`: the
        tag at first pieces (1.0), 0 elsewhere (0.0: later pieces, special
        tokens, padding and words cut off by truncation are not in the loss).
    """
    positions = first_pieces.flat_values
    kept = positions >= 0
    indices = tf.boolean_mask(tf.stack([row_ids(first_pieces), positions], axis=1), kept)
    shape = tf.cast(shape, tf.int64)
    labels = tf.scatter_nd(indices, tf.boolean_mask(tf.cast(tags.flat_values, tf.int32), kept), shape)
    weights = tf.scatter_nd(indices, tf.ones(tf.shape(indices)[:1], tf.float32), shape)
    return labels, weights


def word_tags(logits, first_pieces, class_names):
    """Each word's tag, read at its first WordPiece.

    Returns:
        A dict of ragged `[batch, (words)]` tensors: `label_id` (-1 for a
        word cut off or with no piece), `label` ("" there) and `score`, the
        tag's probability (0 there).
    """
    probabilities = tf.nn.softmax(tf.cast(logits, tf.float32), axis=-1)
    positions = first_pieces.flat_values
    kept = positions >= 0
    rows = row_ids(first_pieces)
    word_probabilities = tf.gather_nd(probabilities, tf.stack([rows, tf.maximum(positions, 0)], axis=1))
    label_id = tf.where(kept, tf.argmax(word_probabilities, axis=-1, output_type=tf.int32), -1)
    label = tf.where(kept, tf.gather(tf.constant(class_names), tf.maximum(label_id, 0)), "")
    score = tf.where(kept, tf.reduce_max(word_probabilities, axis=-1), 0.0)
    return {k: first_pieces.with_flat_values(v) for k, v in
            {"label_id": label_id, "label": label, "score": score}.items()}


def bio_entities(labels, scores):
    """Groups each sentence's BIO tags into entities.

    `B-X` starts an X entity, `I-X` continues one; an `I-X` that follows
    `O` or another type starts an entity too (as conlleval and seqeval's
    default mode read it). Any other tag (`O`, "") is outside.

    Args:
        labels: tag names, ragged `[batch, (words)]`.
        scores: their probabilities, the same shape.

    Returns:
        A dict of ragged `[batch, (entities)]` tensors: `first_word` and
        `last_word` (int64), `label` (the type: "PER" for B-PER/I-PER) and
        `score` (the mean of its words' scores).
    """
    parts = tf.strings.split(labels.flat_values, "-", maxsplit=1).to_tensor("", shape=[None, 2])
    prefix, kind = parts[:, 0], parts[:, 1]
    inside = (tf.equal(prefix, "B") | tf.equal(prefix, "I")) & tf.not_equal(kind, "")
    first_in_row = tf.equal(position_in_row(labels), 0)
    previous_inside = tf.concat([[False], inside[:-1]], 0) & ~first_in_row
    previous_kind = tf.concat([[""], kind[:-1]], 0)
    continues = tf.equal(prefix, "I") & previous_inside & tf.equal(previous_kind, kind)
    starts = inside & ~continues
    entity = tf.cumsum(tf.cast(starts, tf.int64)) - 1  # the entity of each inside word
    num_entities = tf.reduce_sum(tf.cast(starts, tf.int64))
    words = tf.where(inside)[:, 0]
    of_word = tf.gather(entity, words)
    index = tf.range(tf.size(prefix, out_type=tf.int64))
    first = tf.math.unsorted_segment_min(tf.gather(index, words), of_word, num_entities)
    last = tf.math.unsorted_segment_max(tf.gather(index, words), of_word, num_entities)
    score = tf.math.unsorted_segment_mean(tf.gather(scores.flat_values, words), of_word, num_entities)
    row = tf.gather(row_ids(labels), first)
    row_start = tf.gather(labels.row_starts(), row)
    per_row = lambda values: tf.RaggedTensor.from_value_rowids(values, row, nrows=labels.nrows())  # noqa: E731
    return {
        "first_word": per_row(first - row_start),
        "last_word": per_row(last - row_start),
        "label": per_row(tf.gather(kind, first)),
        "score": per_row(score),
    }


def text_entities(texts, entities, word_starts, word_ends):
    """Entities located in their texts: `text` (as written), `start` and
    `end` character offsets, from `bio_entities` and the words' byte spans
    in `texts` (`text_words`')."""
    at = lambda spans, word: tf.gather(spans, word, batch_dims=1)  # noqa: E731
    start_byte = at(word_starts, entities["first_word"])
    end_byte = at(word_ends, entities["last_word"])
    text = tf.strings.substr(repeat(texts, start_byte.row_lengths()), start_byte.flat_values,
                             end_byte.flat_values - start_byte.flat_values)
    return {
        "entity": start_byte.with_flat_values(text),
        "entity_start": tf.cast(char_offsets(texts, start_byte), tf.int32),
        "entity_end": tf.cast(char_offsets(texts, end_byte), tf.int32),
        "entity_label": entities["label"],
        "entity_score": entities["score"],
    }

