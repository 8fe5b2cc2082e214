"""Byte-level BPE (GPT-2, RoBERTa) as TensorFlow ops: the byte-to-unicode map,
GPT-2's pre-tokenization and merges by rank.

Hugging Face's `ByteLevel` pre-tokenizer splits text with GPT-2's pattern

    's|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+

RE2 has no lookahead. `\\s+(?!\\S)` matters only in a run of whitespace
followed by more text: the run less its last character is one word, and the
last character starts the next word if it is a space, else is a word alone.
The pattern here matches such a run one character at a time (a run that
ends the text whole), and `_join_spaces` joins the characters back.
Oniguruma's `\\s` (which `tokenizers` uses) is Unicode whitespace; RE2's is
ASCII, so it is spelled out.

The merges run over all words of a batch in one `tf.while_loop`: each round
merges, in every word, each occurrence of the word's lowest-ranked pair
(from the left), as Hugging Face's BPE does one pair at a time, and every
other pair that BPE is bound to merge as it stands (`Merges`); a word with
no pair left leaves the loop. A word costs its length times the rounds it
needs, at most the merges it goes through.
"""

from kbert.text._tf_text import regex_split_with_offsets
from kbert.text.ragged import repeat, row_ids, row_ids_of_splits
from kbert.tf_if_present import tf

WHITESPACE = r"[\t\n\x0B\f\r\x{85}\p{Z}]"
_NOT_SPACE_CLASS = r"[^\t\n\x0B\f\r\x{85}\p{Z}\p{L}\p{N}]"
WORD = (r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?" + _NOT_SPACE_CLASS + "+|"
        + WHITESPACE + r"+\z|" + WHITESPACE)
# Beyond any real vocabulary: a pair's key is left * _KEY_BASE + right; its
# value rank << _RANK_SHIFT | flags << _FLAGS_SHIFT | merged id, so that the
# lowest value is the lowest rank; _NONE for a pair without a merge.
_KEY_BASE = 1 << 21
_FLAGS_SHIFT = 21
_RANK_SHIFT = 25
_ID_MASK = (1 << _FLAGS_SHIFT) - 1
_NONE = (1 << 63) - 1  # (what an empty segment's minimum is)
_NO_RANK = _NONE >> _RANK_SHIFT


def bytes_to_unicode():
    """GPT-2's map from each byte to a printable character: printable Latin-1
    bytes stand for themselves, the others for characters from U+0100 on."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars = {b: chr(b) for b in printable}
    for b in range(256):
        if b not in chars:
            chars[b] = chr(256 + len(chars) - len(printable))
    return chars


def pre_tokenize(texts):
    """GPT-2's words of each text, with their byte spans: `(words, starts,
    ends)`, ragged `[texts, (words)]`."""
    words, starts, ends = _split(texts)
    # Only a run of two or more whitespace characters has characters to join.
    runs = tf.strings.regex_full_match(texts, f"(?s).*{WHITESPACE}{WHITESPACE}.*")
    words, starts, ends = tf.cond(tf.reduce_any(runs), lambda: _join_spaces(words, starts, ends),
                                  lambda: (words, starts, ends))
    return as_written(texts, words, starts, ends), starts, ends


def regex_split(texts, pattern):
    """`regex_split_with_offsets` keeping every piece, with U+0001 standing
    for U+0000 in the pieces (the kernel ends a string at U+0000; U+0001 is
    of its class): `(pieces, starts, ends)`, ragged `[texts, (pieces)]`."""
    return regex_split_with_offsets(tf.strings.regex_replace(texts, r"\x00", "\x01"), pattern, "(?s).+")


def as_written(texts, pieces, starts, ends):
    """`pieces` (of `regex_split`) as `texts` has them: with U+0000 again.
    Only a batch with U+0000 in it cuts them out of the texts again, which
    copies each text once per piece."""
    has_nul = tf.reduce_any(tf.strings.regex_full_match(texts, r"(?s).*\x00.*"))
    flat = tf.cond(has_nul, lambda: tf.strings.substr(repeat(texts, starts.row_lengths()), starts.flat_values,
                                                        ends.flat_values - starts.flat_values),
                   lambda: pieces.flat_values)
    return pieces.with_flat_values(flat)


def _split(texts):
    """The words of GPT-2's pattern with one word for each whitespace
    character not at the end: `(words, starts, ends)`, ragged `[texts, (words)]`.

    Every character of valid UTF-8 is in a word, so RE2 marks where each
    word starts (U+0000, which the texts here do not hold) and the marked
    texts are split at the marks. RE2 finds a match's bounds with its DFAs
    alone; a split keeping each match as a capture group, as
    `regex_split_with_offsets` does, runs its slower NFA over every match, at
    a cost that grows with the size of the pattern's Unicode classes. A batch
    with bytes that are not UTF-8 (which no pattern matches) is split so.
    """
    texts = tf.strings.regex_replace(texts, r"\x00", "\x01")

    def split_at_marks():
        pieces = tf.strings.split(tf.strings.regex_replace(texts, WORD, "\x00\\0"), "\x00")
        # Each text's first piece is the empty one before its first mark.
        lengths = tf.cast(tf.strings.length(pieces.flat_values), tf.int64)
        kept = tf.where(lengths > 0)[:, 0]
        row_splits = pieces.row_splits - tf.range(tf.size(pieces.row_splits, tf.int64))
        lengths = tf.gather(lengths, kept)
        before = tf.cumsum(lengths, exclusive=True)
        starts = before - repeat(tf.gather(tf.concat([before, [0]], 0), row_splits[:-1]),
                                 row_splits[1:] - row_splits[:-1])
        return tuple(tf.RaggedTensor.from_row_splits(values, row_splits, validate=False)
                     for values in (tf.gather(pieces.flat_values, kept), starts, starts + lengths))

    return tf.cond(tf.reduce_all(tf.strings.regex_full_match(texts, "(?s).*")), split_at_marks,
                   lambda: regex_split_with_offsets(texts, WORD, "(?s).+"))


def _join_spaces(words, starts, ends):
    """Joins the one-character words of a whitespace run that `\\s+(?!\\S)`
    matches as one: all but the run's last character when that character
    stands alone (it is not a space, which starts the next word)."""
    flat_words = words.flat_values
    single = tf.strings.regex_full_match(flat_words, WHITESPACE)
    starts_with_space = tf.strings.regex_full_match(flat_words, f"(?s){WHITESPACE}.*")
    rows = row_ids(starts)
    same_row_as_next = tf.concat([tf.equal(rows[1:], rows[:-1]), [False]], 0)
    # Before a word that starts with no whitespace, a lone character stands alone.
    alone = single & same_row_as_next & ~tf.concat([starts_with_space[1:], [True]], 0)
    joins = tf.concat([[False], single[:-1] & ~alone[:-1] & same_row_as_next[:-1]], 0) & single & ~alone
    group = tf.cumsum(tf.cast(~joins, tf.int64)) - 1
    groups = tf.reduce_sum(tf.cast(~joins, tf.int64))
    row_splits = tf.concat([[0], tf.cumsum(tf.math.unsorted_segment_sum(
        tf.cast(~joins, tf.int64), rows, starts.nrows()))], 0)
    return tuple(tf.RaggedTensor.from_row_splits(values, row_splits, validate=False) for values in (
        tf.strings.unsorted_segment_join(flat_words, group, groups),
        tf.math.unsorted_segment_min(starts.flat_values, group, groups),
        tf.math.unsorted_segment_max(ends.flat_values, group, groups)))


class Merges:
    """The merges as a hash table (each pair of ids to its rank and the id it
    merges into) and each byte's one-byte token id.

    A round of the merge loop merges, in each word, every occurrence of its
    lowest-ranked pair, as Hugging Face's BPE does one pair at a time (the
    merges of a trained BPE rank each token's own merge before every merge
    that uses it). Beside those, a round merges every pair that Hugging Face
    is bound to merge as it stands whenever it gets to its rank: nothing can
    take either of its symbols first, and the token it makes pairs with its
    neighbours only at higher ranks. So "the pair is merged" moves earlier
    and nothing else changes. Its left symbol cannot be taken first when the
    word starts there, or when no merge of lower rank takes that token as
    its right part (a static fact of the merges), or when the pair to its
    left ranks higher and the symbol before it cannot change before (it
    starts the word, or no merge of lower rank takes it as a right part);
    the right symbol likewise. Words of many merges, a Chinese sentence or
    a long German compound, then need far fewer rounds (docs/benchmarks.md,
    Tokenization).
    """

    def __init__(self, token_ids, merges, byte_chars):
        self.byte_ids = tf.constant([token_ids.get(byte_chars[b], -1) for b in range(256)], tf.int64)
        size = max(token_ids.values(), default=0) + 1
        # The lowest rank of a merge that takes each token as its right part (first_as_right)
        # or as its left part (first_as_left); `len(merges)` for none.
        first_as_right, first_as_left = [len(merges)] * size, [len(merges)] * size
        pairs = [(token_ids[left], token_ids[right], token_ids[left + right]) for left, right in merges]
        for rank, (left, right, _) in reversed(list(enumerate(pairs))):
            first_as_left[left], first_as_right[right] = rank, rank
        keys, values = [], []
        for rank, (left, right, merged) in enumerate(pairs):
            # Which of the checks above the merges settle once and for all:
            # the merged token's neighbours pair with it only at higher ranks
            # (bits 0, 1), and no merge of lower rank takes the pair's left
            # symbol as a right part, or its right symbol as a left part (2, 3).
            flags = ((first_as_right[merged] > rank) | (first_as_left[merged] > rank) << 1
                     | (first_as_right[left] > rank) << 2 | (first_as_left[right] > rank) << 3)
            keys.append(left * _KEY_BASE + right)
            values.append((rank << _RANK_SHIFT) | (flags << _FLAGS_SHIFT) | merged)
        self.pair_table = tf.lookup.StaticHashTable(
            tf.lookup.KeyValueTensorInitializer(tf.constant(keys or [-1], tf.int64),
                                                tf.constant(values or [-1], tf.int64)),
            default_value=_NONE)
        self.first_as_right = tf.constant(first_as_right, tf.int64)
        self.first_as_left = tf.constant(first_as_left, tf.int64)

    def encode(self, words):
        """The BPE ids of each word (a 1-D string tensor of raw bytes):
        ragged `[words, (pieces)]`, int64. Bytes without a token are dropped,
        as Hugging Face's BPE drops them where there is no unknown token."""
        lengths = tf.strings.length(words)
        ids = tf.gather(self.byte_ids, tf.cast(tf.io.decode_raw(tf.strings.reduce_join(words), tf.uint8), tf.int32))
        row_splits = tf.concat([[0], tf.cumsum(tf.cast(lengths, tf.int64))], 0)
        known = ids >= 0
        row_splits, ids = tf.cond(tf.reduce_all(known), lambda: (row_splits, ids), lambda: (
            tf.concat([[0], tf.cumsum(tf.math.unsorted_segment_sum(
                tf.cast(known, tf.int64), row_ids_of_splits(row_splits), tf.size(lengths, tf.int64)))], 0),
            tf.boolean_mask(ids, known)))
        words = tf.size(row_splits, tf.int64) - 1
        arrays = [tf.TensorArray(tf.int64, size=0, dynamic_size=True, infer_shape=False) for _ in range(2)]
        *_, done_ids, done_words = tf.while_loop(
            lambda round, ids, word, index, *_: tf.size(index) > 0, self._merge,
            (0, ids, row_ids_of_splits(row_splits), tf.range(words), *arrays),
            shape_invariants=(tf.TensorShape([]), *[tf.TensorShape([None])] * 3, *[tf.TensorShape(None)] * 2))
        done_words = done_words.concat()
        order = tf.argsort(done_words, stable=True)
        return tf.RaggedTensor.from_value_rowids(tf.gather(done_ids.concat(), order), tf.gather(done_words, order),
                                                 nrows=words, validate=False)

    def _merge(self, round, ids, word, index, done_ids, done_words):
        """One round over the symbols of the words left (`word`: each symbol's
        word among them; `index`: each such word's row in the batch)."""
        same_word = tf.equal(word[1:], word[:-1])
        starts = tf.concat([[True], ~same_word], 0)  # each symbol: the first of its word?
        ends = tf.concat([~same_word, [True]], 0)
        values = tf.where(same_word, self.pair_table.lookup(ids[:-1] * _KEY_BASE + ids[1:]), _NONE)
        rank = tf.bitwise.right_shift(values, _RANK_SHIFT)
        flags = tf.bitwise.right_shift(values, _FLAGS_SHIFT)
        # Hugging Face merges the pair of lowest rank first, each of its
        # occurrences from the left. (`word` is sorted; a word of one symbol,
        # or of none, has no pair: its lowest is _NONE.)
        lowest = tf.math.segment_min(values, word[:-1])
        lowest = tf.concat([lowest, tf.fill([tf.size(index) - tf.size(lowest)], _NONE)], 0)
        lowest_of_symbol = tf.gather(lowest, word)
        chosen = tf.equal(values, lowest_of_symbol[:-1]) & (values < _NONE)
        chosen = tf.cond(tf.reduce_any(chosen[1:] & chosen[:-1]), lambda: _every_other_of_runs(chosen),
                         lambda: chosen)
        # And every pair bound to be merged as it stands (the class docstring).
        before = tf.concat([tf.constant([_NO_RANK], tf.int64), rank[:-1]], 0)
        after = tf.concat([rank[1:], tf.constant([_NO_RANK], tf.int64)], 0)
        steady_before = tf.concat([[True], starts[:-2] | (tf.gather(self.first_as_right, ids[:-2]) > rank[1:])], 0)
        steady_after = tf.concat([ends[2:] | (tf.gather(self.first_as_left, ids[2:]) > rank[:-1]), [True]], 0)
        left = starts[:-1] | (_bit(flags, 0) & (_bit(flags, 2) | ((before > rank) & steady_before)))
        right = ends[1:] | (_bit(flags, 1) & (_bit(flags, 3) | ((after > rank) & steady_after)))
        chosen |= left & right & (values < _NONE)
        merged = tf.concat([tf.where(chosen, tf.bitwise.bitwise_and(values, _ID_MASK), ids[:-1]), ids[-1:]], 0)
        # A word without a pair to merge is done: it leaves the loop, so
        # that the rounds a long word needs cost its own length only.
        done = tf.equal(lowest, _NONE)
        done_symbol = tf.equal(lowest_of_symbol, _NONE)
        leaving = tf.where(done_symbol)[:, 0]
        done_ids = done_ids.write(round, tf.gather(ids, leaving))
        done_words = done_words.write(round, tf.gather(index, tf.gather(word, leaving)))
        kept = tf.where(~tf.concat([[False], chosen], 0) & ~done_symbol)[:, 0]
        word = tf.gather(tf.cumsum(tf.cast(~done, tf.int64), exclusive=True), tf.gather(word, kept))
        return (round + 1, tf.gather(merged, kept), word, tf.boolean_mask(index, ~done), done_ids, done_words)


def _bit(flags, bit):
    return tf.not_equal(tf.bitwise.bitwise_and(flags, 1 << bit), 0)


def _every_other_of_runs(chosen):
    """Of each run of consecutive chosen pairs (a a a: the same pair twice,
    overlapping), the first, third, ...: the occurrences merged from the left."""
    position = tf.range(tf.size(chosen, tf.int64))
    run = tf.cumsum(tf.cast(~chosen, tf.int64))  # constant along a run
    run_start = tf.math.unsorted_segment_min(tf.where(chosen, position, tf.int64.max), run,
                                             tf.size(chosen, tf.int64) + 1)
    return chosen & tf.equal((position - tf.gather(run_start, run)) % 2, 0)
