"""Packing token ids into BERT's input: `[CLS] A [SEP]` or `[CLS] A [SEP] B [SEP]`.

BERT §3 (Input/Output Representations): every sequence starts with `[CLS]`,
each segment ends with `[SEP]`, and a learned segment embedding tells the
tokens of A (segment 0) from those of B (segment 1). RoBERTa's pairs
(`pair_layout="two_separators"`) are `<s> A </s></s> B </s>`, all in segment 0;
ModernBERT's are BERT's, all in segment 0 (`second_segment_id=0`, as its
tokenizer's template says).
"""


from kbert.text.ragged import position_in_row, row_ids
from kbert.tf_if_present import tf

TRUNCATIONS = ("longest_first", "only_first", "only_second")
PAD_TO = ("sequence_length", "longest", "bucket")
# How a pair is packed, named by its shape: `[CLS] A [SEP] B [SEP]` with B
# in segment 1 (BERT's), or `<s> A </s></s> B </s>` in one segment (RoBERTa's).
PAIR_LAYOUTS = ("one_separator", "two_separators")
# The names of the first releases, by family, still read.
_FAMILY_LAYOUT_NAMES = {"bert": "one_separator", "roberta": "two_separators"}
# The segment id of a pair's second text where the tokenizer does not say, by layout.
SECOND_SEGMENT_IDS = {"one_separator": 1, "two_separators": 0}
# The shortest bucket length of pad_to="bucket" (see bucket_lengths).
MIN_BUCKET = 16


def bucket_lengths(sequence_length):
    """The lengths `pad_to="bucket"` pads to: 16, 24, 32, 48, 64, 96, ...
    (powers of two and halfway between them) below `sequence_length`, then
    `sequence_length` itself. A batch wastes at most a third of its tokens
    on padding past 16, and compiled steps see a handful of shapes.

    Example:
    >>> bucket_lengths(128)
    [16, 24, 32, 48, 64, 96, 128]
    """
    lengths, power = [], MIN_BUCKET
    while power < sequence_length:
        lengths += [length for length in (power, power * 3 // 2) if length < sequence_length]
        power *= 2
    return lengths + [int(sequence_length)]


def _as_ragged_batch(ids):
    """Returns `ids` as int32 ragged [batch, (tokens)], and whether they were one unbatched sequence."""
    if isinstance(ids, (list, tuple)):
        ids = tf.ragged.constant(ids, dtype=tf.int32)
    if not isinstance(ids, tf.RaggedTensor):
        ids = tf.convert_to_tensor(ids)
        if ids.shape.rank == 1:
            return tf.RaggedTensor.from_tensor(tf.cast(ids, tf.int32)[None]), True
        ids = tf.RaggedTensor.from_tensor(ids)
    if ids.ragged_rank > 1:
        # A tokenizer that keeps words as a ragged dimension: flatten them.
        ids = ids.merge_dims(1, -1)
    return tf.cast(ids, tf.int32), False


def _keep_first(segment, lengths):
    """Keeps the first `lengths[i]` tokens of row `i` of a ragged batch.

    Built from the flat values: `tf.ragged.boolean_mask` adds checks of its
    own row splits, and tf.data instantiates them again with every iterator.
    """
    segment = segment.with_row_splits_dtype(tf.int64)
    lengths = tf.clip_by_value(tf.cast(lengths, tf.int64), 0, segment.row_lengths())
    values = tf.boolean_mask(segment.values, position_in_row(segment) < tf.gather(lengths, row_ids(segment)))
    return tf.RaggedTensor.from_row_lengths(values, lengths, validate=False)


def combine_segments(segments, cls_id, sep_id, pair_layout="one_separator", second_segment_id=None):
    """`[CLS] A [SEP] (B [SEP])` in each row, with each token's segment id (0
    up to the first [SEP], then 1), as `tf_text.combine_segments` gives them;
    `pair_layout="two_separators"`: `<s> A </s> (</s> B </s>)`, all in segment 0.
    `second_segment_id`: the segment id of what follows the first [SEP]
    (default: the layout's, 1 or 0).

    Every token is written straight to its place in the flat values: the
    ragged concatenation that tensorflow-text uses traces slowly and adds
    checks of its row splits, which tf.data instantiates again with every
    iterator.

    Example:
    >>> ids, segments = combine_segments([tf.ragged.constant([[5, 6]]), tf.ragged.constant([[7]])], 101, 102)
    >>> ids, segments
    (<tf.RaggedTensor [[101, 5, 6, 102, 7, 102]]>, <tf.RaggedTensor [[0, 0, 0, 0, 1, 1]]>)
    """
    segments = [segment.with_row_splits_dtype(tf.int64) for segment in segments]
    nrows, dtype = segments[0].nrows(), segments[0].dtype

    def special(token):  # one token in every row
        return tf.RaggedTensor.from_row_lengths(tf.fill([nrows], tf.cast(token, dtype)), tf.ones([nrows], tf.int64),
                                                validate=False)

    # The pieces of every row, in order, with their segment ids: [CLS], A, [SEP], B, [SEP].
    second = SECOND_SEGMENT_IDS[pair_layout] if second_segment_id is None else second_segment_id
    pieces = [(special(cls_id), 0)]
    for i, segment in enumerate(segments):
        segment_id = second if i else 0
        if pair_layout == "two_separators" and i:
            pieces += [(special(sep_id), segment_id)]
        pieces += [(segment, segment_id), (special(sep_id), segment_id)]
    piece_lengths = tf.stack([piece.row_lengths() for piece, _ in pieces], axis=1)
    row_lengths = tf.reduce_sum(piece_lengths, axis=1)
    piece_starts = tf.cumsum(piece_lengths, axis=1, exclusive=True) + tf.cumsum(row_lengths, exclusive=True)[:, None]
    positions = tf.concat([tf.gather(piece_starts[:, k], row_ids(piece)) + position_in_row(piece)
                           for k, (piece, _) in enumerate(pieces)], axis=0)[:, None]
    size = tf.reduce_sum(row_lengths)[None]

    def in_rows(flat_pieces):
        flat = tf.scatter_nd(positions, tf.concat(flat_pieces, axis=0), size)
        return tf.RaggedTensor.from_row_lengths(flat, row_lengths, validate=False)

    return (in_rows([piece.values for piece, _ in pieces]),
            in_rows([tf.fill(tf.shape(piece.values), tf.cast(segment_id, dtype)) for piece, segment_id in pieces]))


def truncate_segments(segments, max_tokens, truncation="longest_first"):
    """Truncates one or two segments so that each row holds at most `max_tokens` ids.

    `"longest_first"` matches Hugging Face's `truncation="longest_first"`
    (the `tokenizers` library) exactly: when a pair is too long, the shorter
    segment keeps `min(its length, max_tokens // 2)` tokens and the longer
    one fills the rest; on a tie the second segment counts as the longer one,
    so it keeps the odd token out (5 + 5 tokens into 5 keeps 2 + 3).
    tensorflow-text's `ShrinkLongestTrimmer` and `RoundRobinTrimmer` keep other
    lengths for about one length pair in seven, so the lengths are computed here.

    Args:
        segments: a list of one or two int `tf.RaggedTensor`s [batch, (tokens)].
        max_tokens: the room left for the segments (special tokens excluded).
        truncation: `"longest_first"`, `"only_first"` or `"only_second"`.

    Returns:
        The list of truncated segments.

    Example:
    >>> a = tf.ragged.constant([[1, 2, 3, 4, 5]])
    >>> b = tf.ragged.constant([[6, 7]])
    >>> truncate_segments([a, b], 4)
    [<tf.RaggedTensor [[1, 2]]>, <tf.RaggedTensor [[6, 7]]>]
    """
    _check_truncation(truncation, len(segments))
    if len(segments) == 1:
        return [_keep_first(segments[0], tf.minimum(segments[0].row_lengths(), max_tokens))]
    a, b = segments
    n_a, n_b = a.row_lengths(), b.row_lengths()
    max_tokens = tf.cast(max_tokens, tf.int64)
    excess = tf.maximum(n_a + n_b - max_tokens, 0)
    if truncation == "longest_first":
        a_longer = n_a > n_b
        longer = tf.where(a_longer, n_a, n_b)
        shorter = tf.where(a_longer, n_b, n_a)
        keep_shorter = tf.where(excess > 0, tf.minimum(shorter, max_tokens // 2), shorter)
        keep_longer = tf.minimum(longer, max_tokens - keep_shorter)
        keep_a = tf.where(a_longer, keep_longer, keep_shorter)
        keep_b = tf.where(a_longer, keep_shorter, keep_longer)
        return [_keep_first(a, keep_a), _keep_first(b, keep_b)]
    target, other = (n_a, n_b) if truncation == "only_first" else (n_b, n_a)
    keep = target - excess
    kept = "second" if truncation == "only_first" else "first"
    check = tf.debugging.Assert(
        tf.reduce_all(keep >= 0),
        [
            f'truncation="{truncation}" cannot fit the pair: the {kept} segment alone is '
            "longer than the room for tokens (sequence_length minus the special tokens). "
            'Use truncation="longest_first" or a longer sequence_length. Room, and the '
            f"{kept} segment's lengths:",
            max_tokens,
            other,
        ],
    )
    with tf.control_dependencies([check]):
        keep = tf.identity(keep)
    if truncation == "only_first":
        return [_keep_first(a, keep), b]
    return [a, _keep_first(b, keep)]


def _check_truncation(truncation, num_segments):
    if truncation not in TRUNCATIONS:
        raise ValueError(f'Unknown truncation "{truncation}". Use one of: {", ".join(TRUNCATIONS)}.')
    if num_segments not in (1, 2):
        raise ValueError(f"BERT packs one or two segments; got {num_segments}.")
    if truncation == "only_second" and num_segments == 1:
        raise ValueError(
            'truncation="only_second" needs pairs of segments, but got a single segment. '
            'Pass (texts_a, texts_b), or use truncation="longest_first" or "only_first".'
        )


class SegmentPacker(tf.Module):
    """Packs one or two batches of token ids into `[CLS] A [SEP] (B [SEP])`, truncated and padded.

    Args:
        cls_id, sep_id, pad_id: the ids of `[CLS]`, `[SEP]` and `[PAD]`.
        sequence_length: the most tokens in a packed sequence, special tokens included.
        truncation: how a too long input loses tokens: `"longest_first"`
            (as Hugging Face's, the default), `"only_first"` or `"only_second"`.
        pad_to: `"sequence_length"` pads every batch to `sequence_length`;
            `"longest"` pads only to the longest sequence of the batch;
            `"bucket"` to the shortest of a few lengths (16, 24, 32, 48, 64,
            ..., `sequence_length`) that holds the batch's longest, so that
            short batches waste little and compiled steps see few shapes.
        pad_to_multiple_of: if set, the padded length is rounded up to a
            multiple of it (8 suits tensor cores); `sequence_length` must then be
            a multiple of it too.
        pair_layout: `"one_separator"` (`[CLS] A [SEP] B [SEP]`, B in
            segment 1) or `"two_separators"` (`<s> A </s></s> B </s>`, one
            segment): the tokenizer's `pair_layout`.
        second_segment_id: the segment id of B and the separators after A's
            (None: the layout's, 1 or 0; ModernBERT's template: 0): the
            tokenizer's `second_segment_id`.

    Call it on one ragged batch of ids or a tuple `(ids_a, ids_b)`; it returns
    a dict of int32 tensors [batch, length]: `token_ids`, `segment_ids` (0 for
    `[CLS]`, A and its `[SEP]`, `second_segment_id` for B and its `[SEP]`)
    and `padding_mask` (1 on real tokens, 0 on padding). A 1-D input (one unbatched sequence)
    gives 1-D outputs.

    Example:
    >>> packer = SegmentPacker(cls_id=101, sep_id=102, pad_id=0, sequence_length=8)
    >>> packer((tf.ragged.constant([[7, 8, 9]]), tf.ragged.constant([[5, 6]])))["token_ids"]
    <tf.Tensor: shape=(1, 8), dtype=int32, numpy=array([[101, 7, 8, 9, 102, 5, 6, 102]], dtype=int32)>
    """

    def __init__(
        self,
        cls_id,
        sep_id,
        pad_id,
        sequence_length=512,
        truncation="longest_first",
        pad_to="sequence_length",
        pad_to_multiple_of=None,
        pair_layout="one_separator",
        second_segment_id=None,
    ):
        super().__init__(name="segment_packer")
        pair_layout = _FAMILY_LAYOUT_NAMES.get(pair_layout, pair_layout)
        if pair_layout not in PAIR_LAYOUTS:
            raise ValueError(f'Unknown pair_layout "{pair_layout}". Use one of: {", ".join(PAIR_LAYOUTS)}.')
        if truncation not in TRUNCATIONS:
            raise ValueError(f'Unknown truncation "{truncation}". Use one of: {", ".join(TRUNCATIONS)}.')
        if pad_to not in PAD_TO:
            raise ValueError(f'Unknown pad_to "{pad_to}". Use "sequence_length", "longest" or "bucket".')
        if int(sequence_length) < 3:
            raise ValueError(
                f"sequence_length={sequence_length} is too short: [CLS] and [SEP] take 2 "
                "tokens, so it must be at least 3 to hold any text."
            )
        if pad_to_multiple_of is not None and (
            int(pad_to_multiple_of) < 1 or sequence_length % pad_to_multiple_of
        ):
            raise ValueError(
                f"sequence_length={sequence_length} is not a multiple of "
                f"pad_to_multiple_of={pad_to_multiple_of}; padding would exceed the "
                "truncation length. Pick a sequence_length that is a multiple of it."
            )
        self.cls_id = int(cls_id)
        self.sep_id = int(sep_id)
        self.pad_id = int(pad_id)
        self.sequence_length = int(sequence_length)
        self.truncation = truncation
        self.pad_to = pad_to
        self.pad_to_multiple_of = pad_to_multiple_of
        self.pair_layout = pair_layout
        self.second_segment_id = int(SECOND_SEGMENT_IDS[pair_layout] if second_segment_id is None
                                     else second_segment_id)

    def get_config(self):
        return {
            "cls_id": self.cls_id,
            "sep_id": self.sep_id,
            "pad_id": self.pad_id,
            "sequence_length": self.sequence_length,
            "truncation": self.truncation,
            "pad_to": self.pad_to,
            "pad_to_multiple_of": self.pad_to_multiple_of,
            "pair_layout": self.pair_layout,
            "second_segment_id": self.second_segment_id,
        }

    @classmethod
    def from_config(cls, config):
        return cls(**config)

    def __call__(self, segments):
        segments = list(segments) if isinstance(segments, tuple) else [segments]
        _check_truncation(self.truncation, len(segments))
        specials = self.special_tokens(len(segments))
        if len(segments) == 2 and self.sequence_length < specials + 2:
            raise ValueError(
                f"sequence_length={self.sequence_length} is too short for pairs: the special tokens take "
                f"{specials}, so it must be at least {specials + 2} to keep a token of each segment."
            )
        segments, unbatched = zip(*[_as_ragged_batch(s) for s in segments])
        segments, unbatched = list(segments), unbatched[0]
        # BERT §3: one [CLS] in front, one [SEP] after each segment (RoBERTa: two between).
        segments = truncate_segments(segments, self.sequence_length - specials, self.truncation)
        token_ids, segment_ids = combine_segments(segments, self.cls_id, self.sep_id, self.pair_layout,
                                                  self.second_segment_id)
        shape = [None, self._padded_length(token_ids)]
        if tf.is_tensor(shape[1]):  # in a graph a shape with a tensor must be one
            shape = tf.stack([token_ids.nrows(), shape[1]])
        outputs = {
            "token_ids": token_ids.to_tensor(self.pad_id, shape=shape),
            "segment_ids": tf.cast(segment_ids, tf.int32).to_tensor(0, shape=shape),
            "padding_mask": tf.ones_like(token_ids).to_tensor(0, shape=shape),
        }
        if unbatched:
            outputs = {k: v[0] for k, v in outputs.items()}
        return outputs

    def special_tokens(self, num_segments):
        """How many special tokens a sequence of `num_segments` segments
        holds: `[CLS] A [SEP]` 2; `[CLS] A [SEP] B [SEP]` 3; `<s> A </s></s> B </s>` 4."""
        return 1 + num_segments + (num_segments == 2 and self.pair_layout == "two_separators")

    def _padded_length(self, token_ids):
        if self.pad_to == "sequence_length":
            return self.sequence_length
        length = tf.reduce_max(tf.concat([token_ids.row_lengths(), [0]], 0))
        if self.pad_to == "bucket":
            buckets = tf.constant(bucket_lengths(self.sequence_length), tf.int64)
            return tf.reduce_min(tf.boolean_mask(buckets, buckets >= length))
        multiple = self.pad_to_multiple_of
        if multiple:
            length = (length + multiple - 1) // multiple * multiple
        return tf.cast(length, tf.int64)
