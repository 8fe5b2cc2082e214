"""BERT's text normalization and pre-tokenization, as TensorFlow ops:
Hugging Face's BertNormalizer and BertPreTokenizer (the `tokenizers`
library's), which turn text into the words that WordPiece then splits
(`kbert.text.tokenizer`).

The steps, in Hugging Face's order:
1. special tokens written in the text (`[MASK]`) are split out untouched;
2. clean text: control and zero-width characters dropped;
3. CJK ideographs surrounded by spaces;
4. accents stripped (NFD, then non-spacing marks dropped) and text lowercased;
5. words split on whitespace (of any kind), each punctuation character made
   its own word.
"""


from kbert.text._tf_text import regex_split_with_offsets, tf_text
from kbert.text.ragged import merge_rows, repeat
from kbert.tf_if_present import tf

# Hugging Face drops U+0000, U+FFFD and the "other" characters (Cc, Cf, Co,
# Cs) except \t \n \r; unassigned code points stay (and become [UNK]).
_DROPPED = r"[^\P{C}\t\n\r]|\x{FFFD}"
# Rust's `char::is_whitespace` once the Cc characters above are gone.
WHITESPACE = r"[\t\n\r\p{Z}]"
# Rust's `is_ascii_punctuation() || is_punctuation()`: BERT counts ASCII
# symbols such as $ + < = > ^ ` | ~ as punctuation too.
PUNCTUATION = r"[!-/:-@\[-`{-~\p{P}]"
# BERT's "Chinese character" blocks (CJK Unified Ideographs and extensions,
# CJK Compatibility Ideographs); Hangul and kana are not among them.
CJK = (
    r"([\x{4E00}-\x{9FFF}\x{3400}-\x{4DBF}\x{20000}-\x{2A6DF}\x{2A700}-\x{2B73F}"
    r"\x{2B740}-\x{2B81F}\x{2B820}-\x{2CEAF}\x{F900}-\x{FAFF}\x{2F800}-\x{2FA1F}])"
)


def normalize(texts, lowercase=True, strip_accents=None, tokenize_chinese_chars=True):
    """Applies Hugging Face's BertNormalizer to a 1-D string tensor.

    Whitespace is left as it is (`split_words` treats every kind alike), and
    invalid UTF-8 bytes become U+FFFD, which is then dropped like any other.

    Args:
        texts: a 1-D string tensor.
        lowercase: whether to lowercase.
        strip_accents: whether to drop accents (NFD, then drop non-spacing
            marks); `None` means the same as `lowercase`.
        tokenize_chinese_chars: whether to put spaces around CJK ideographs.

    Example:
    >>> normalize(tf.constant(["Héllo\u200b Wörld"])).numpy()[0].decode()
    'hello world'
    """
    if strip_accents is None:
        strip_accents = lowercase

    def normalize_plain(texts):
        return tf.strings.lower(texts) if lowercase else texts

    def normalize_unicode(texts):
        texts = tf.strings.unicode_transcode(
            texts, "UTF-8", "UTF-8", errors="replace", replacement_char=0xFFFD
        )
        texts = tf.strings.regex_replace(texts, _DROPPED, "")
        if tokenize_chinese_chars:
            texts = tf.strings.regex_replace(texts, CJK, r" \1 ")
        if strip_accents:
            texts = tf_text.normalize_utf8(texts, "NFD")
            texts = tf.strings.regex_replace(texts, r"\p{Mn}", "")
        if lowercase:
            # ICU lowercases a word-final Σ to ς; Rust (and so Hugging Face)
            # lowercases one character at a time, always to σ.
            texts = tf.strings.regex_replace(texts, "Σ", "σ")
            texts = tf.strings.lower(texts, encoding="utf-8")
        return texts

    # Most text is printable ASCII, which only lowercasing can change: that
    # cheap step runs on every row, then the other rows are redone.
    other_rows = tf.where(~tf.strings.regex_full_match(texts, r"[\t\n\r\x20-\x7e]*"))
    return tf.tensor_scatter_nd_update(
        normalize_plain(texts), other_rows, normalize_unicode(tf.gather_nd(texts, other_rows))
    )


def split_words(texts):
    """Hugging Face's BertPreTokenizer: splits normalized text into words.

    Words are separated by whitespace, and every punctuation character is a
    word of its own.

    Args:
        texts: a 1-D string tensor.

    Returns:
        A `tf.RaggedTensor` of strings, shape `[len(texts), (words)]`.
    """
    return regex_split_with_offsets(texts, f"{WHITESPACE}+|{PUNCTUATION}", PUNCTUATION)[0]


def pre_tokenize(
    texts,
    lowercase=True,
    strip_accents=None,
    tokenize_chinese_chars=True,
    special_tokens=(),
):
    """Turns a 1-D string tensor into normalized words, as BERT sees them.

    Args:
        texts: a 1-D string tensor.
        lowercase, strip_accents, tokenize_chinese_chars: as in `normalize`.
        special_tokens: tokens recognised as themselves when written in the
            text (not normalized, not split), as Hugging Face does.

    Returns:
        A `tf.RaggedTensor` of strings, shape `[len(texts), (words)]`.

    Example:
    >>> pre_tokenize(tf.constant(["Hello, [MASK]!"]), special_tokens=["[MASK]"])
    <tf.RaggedTensor [[b'hello', b',', b'[MASK]', b'!']]>
    """
    options = dict(
        lowercase=lowercase,
        strip_accents=strip_accents,
        tokenize_chinese_chars=tokenize_chinese_chars,
    )
    if not special_tokens:
        return split_words(normalize(texts, **options))

    # tf_text.regex_split ends a string at U+0000; U+0001 is dropped by clean
    # text just the same, and like U+0000 it keeps "[MA\0SK]" from matching.
    texts = tf.strings.regex_replace(texts, r"\x00", "\x01")
    # Split the raw text around special tokens, which are never normalized.
    special = any_of_pattern(special_tokens)
    pieces = regex_split_with_offsets(texts, special, special)[0]
    flat_pieces = pieces.flat_values
    is_special = tf.reduce_any(
        tf.equal(flat_pieces[:, None], tf.constant(list(special_tokens))[None, :]), axis=-1
    )
    # A special piece stands in as one plain word, then gets its text back.
    words = split_words(tf.where(is_special, "x", normalize(flat_pieces, **options)))
    in_special = repeat(is_special, words.row_lengths())
    raw = repeat(flat_pieces, words.row_lengths())
    words = words.with_flat_values(tf.where(in_special, raw, words.flat_values))
    return merge_rows(words, pieces.row_splits)


def any_of_pattern(tokens):
    """A regex matching any of `tokens`, longest first (as Hugging Face's leftmost-longest match)."""
    return "|".join(
        "".join(c if c.isalnum() else "\\" + c for c in token)
        for token in sorted(tokens, key=len, reverse=True)
    )
