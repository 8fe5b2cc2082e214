"""BERT's WordPiece tokenizer written with TensorFlow and tensorflow-text ops.

It reproduces Hugging Face's `BertTokenizerFast` (the `tokenizers` library's
BertNormalizer, BertPreTokenizer and WordPiece) id for id, and runs anywhere a
TensorFlow graph runs: eagerly, in `tf.data.Dataset.map`, in a `tf.function`
and in an exported SavedModel.

The steps, in Hugging Face's order:
1. special tokens written in the text (`[MASK]`) are split out untouched;
2. clean text: control and zero-width characters dropped;
3. CJK ideographs surrounded by spaces;
4. accents stripped (NFD, then non-spacing marks dropped) and text lowercased;
5. words split on whitespace (of any kind), each punctuation character made
   its own word;
6. greedy longest-match-first WordPiece with `##` continuations.
"""

import os

import tensorflow as tf
from kbert.presets import tokenizer_files
from kbert.presets.files import get_preset_dir
from kbert.text._tf_text import regex_split_with_offsets, tf_text
from kbert.text.ragged import repeat

PAD, UNK, CLS, SEP, MASK = "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"
SPECIAL_TOKENS = (PAD, UNK, CLS, SEP, MASK)
SUFFIX_INDICATOR = "##"
# Hugging Face's WordPiece `max_input_chars_per_word`: longer words are [UNK].
MAX_CHARS_PER_WORD = 100

# Hugging Face drops U+0000, U+FFFD and the "other" characters (Cc, Cf, Co,
# Cs) except \t \n \r; unassigned code points stay (and become [UNK]).
_DROPPED = r"[^\P{C}\t\n\r]|\x{FFFD}"
# Rust's `char::is_whitespace` once the Cc characters above are gone.
_WHITESPACE = r"[\t\n\r\p{Z}]"
# Rust's `is_ascii_punctuation() || is_punctuation()`: BERT counts ASCII
# symbols such as $ + < = > ^ ` | ~ as punctuation too.
_PUNCTUATION = r"[!-/:-@\[-`{-~\p{P}]"
# BERT's "Chinese character" blocks (CJK Unified Ideographs and extensions,
# CJK Compatibility Ideographs); Hangul and kana are not among them.
_CJK = (
    r"([\x{4E00}-\x{9FFF}\x{3400}-\x{4DBF}\x{20000}-\x{2A6DF}\x{2A700}-\x{2B73F}"
    r"\x{2B740}-\x{2B81F}\x{2B820}-\x{2CEAF}\x{F900}-\x{FAFF}\x{2F800}-\x{2FA1F}])"
)


def read_vocabulary(path):
    """Reads a `vocab.txt` file: one token a line, the line number is its id."""
    with open(path, encoding="utf-8") as f:
        return [line.rstrip("\r\n") for line in f]


def write_vocabulary(vocabulary, path):
    """Writes `vocabulary` (a list of tokens) as a `vocab.txt` file."""
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(token + "\n" for token in vocabulary)


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
            texts = tf.strings.regex_replace(texts, _CJK, r" \1 ")
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
    return regex_split_with_offsets(texts, f"{_WHITESPACE}+|{_PUNCTUATION}", _PUNCTUATION)[0]


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
    special = _any_of(special_tokens)
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
    return _merge_rows(words, pieces.row_splits)


def _any_of(tokens):
    """A regex matching any of `tokens`, longest first (as Hugging Face's leftmost-longest match)."""
    return "|".join(
        "".join(c if c.isalnum() else "\\" + c for c in token)
        for token in sorted(tokens, key=len, reverse=True)
    )


def _merge_rows(ragged, row_splits):
    """Concatenates the rows of `ragged` that `row_splits` groups together
    (valid row splits of valid row splits: nothing to check)."""
    return tf.RaggedTensor.from_row_splits(ragged.values, tf.gather(ragged.row_splits, row_splits), validate=False)


def _map_rows(condition, if_true, if_false):
    """Calls `if_true` with the indices of rows where `condition` holds and
    `if_false` with the others, then puts the rows of their results in order."""
    true_rows = tf.where(condition)[:, 0]
    false_rows = tf.where(~condition)[:, 0]
    results = tf.concat([if_true(true_rows), if_false(false_rows)], axis=0)
    return tf.gather(results, tf.math.invert_permutation(tf.concat([true_rows, false_rows], 0)))


class _Vocabulary:
    """The tokens and their ids, in one object that `tf.Module` does not look
    into. A module's `variables` (which saving a SavedModel reads from every
    module again and again) walks each list and dict it holds: 30,522 tokens
    and their ids, dozens of times per export."""

    def __init__(self, tokens):
        self.tokens = tuple(tokens)
        self.ids = {token: i for i, token in enumerate(self.tokens)}


class BertTokenizer(tf.Module):
    """BERT's WordPiece tokenizer, as TensorFlow ops.

    Gives the same ids as Hugging Face's `BertTokenizerFast` with
    `add_special_tokens=False`. It is a `tf.Module`: call it inside
    `tf.data.Dataset.map` or a `tf.function`, and track it from a module you
    export as a SavedModel.

    Args:
        vocabulary: a `vocab.txt` path, or a list of tokens (the index is the id).
        lowercase: whether to lowercase the text (Hugging Face's `do_lower_case`).
        strip_accents: whether to drop accents; `None` means the same as
            `lowercase`.
        tokenize_chinese_chars: whether each CJK ideograph is a word of its own.
        split_special_tokens: if `True`, a special token written in the text
            (`"[MASK]"`) is plain text; if `False`, it is that token.

    Example:
    >>> tokenizer = BertTokenizer(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]",
    ...                            "the", "qu", "##ick", "fox", "."])
    >>> tokenizer(["The quick fox.", "the [MASK]"])
    <tf.RaggedTensor [[5, 6, 7, 8, 9], [5, 4]]>
    >>> tokenizer.detokenize([5, 6, 7, 8]).numpy().decode()
    'the quick fox'
    """

    def __init__(
        self,
        vocabulary,
        lowercase=True,
        strip_accents=None,
        tokenize_chinese_chars=True,
        split_special_tokens=False,
    ):
        super().__init__(name="bert_tokenizer")
        if isinstance(vocabulary, (str, os.PathLike)):
            vocabulary = read_vocabulary(vocabulary)
        vocabulary = list(vocabulary)
        if UNK not in vocabulary:
            raise ValueError(
                f"The vocabulary has no {UNK} token. BERT vocabularies hold "
                f"{', '.join(SPECIAL_TOKENS)}; add {UNK} to it, or build one with "
                "kbert.text.train_wordpiece_vocabulary."
            )
        self._vocabulary = _Vocabulary(vocabulary)
        self.lowercase = lowercase
        self.strip_accents = strip_accents
        self.tokenize_chinese_chars = tokenize_chinese_chars
        self.split_special_tokens = split_special_tokens
        self._special_tokens = tuple(t for t in SPECIAL_TOKENS if t in self._vocabulary.ids)
        self._tokens = tf.constant(vocabulary)
        # Normalized text that may hold a special token (lowercased with the
        # rest, still seen here) or a word of more than 100 characters. Only
        # ASCII separators end a word here: a Unicode class repeated 101 times
        # overflows RE2's DFA, and a false alarm merely takes the exact path.
        word_end = r"\t\n\r !-/:-@\[-`{-~"
        maybe = [f"[^{word_end}]{{{MAX_CHARS_PER_WORD + 1},}}"]
        if self._special_tokens and not split_special_tokens:
            maybe += [_any_of([t.lower() if lowercase else t for t in self._special_tokens])]
        self._needs_words = f"(?s).*(?:{'|'.join(maybe)}).*"
        self._wordpiece = tf_text.FastWordpieceTokenizer(
            vocab=vocabulary,
            suffix_indicator=SUFFIX_INDICATOR,
            # Words of more than MAX_CHARS_PER_WORD characters never reach it
            # (they are [UNK] already), so the byte limit must never bite.
            max_bytes_per_word=4 * MAX_CHARS_PER_WORD,
            token_out_type=tf.int32,
            unknown_token=UNK,
            # Splitting on whitespace and punctuation inside the WordPiece
            # kernel is BERT's pre-tokenization, with CJK ideographs split too.
            no_pretokenization=not tokenize_chinese_chars,
        )

    @classmethod
    def from_preset(cls, preset, **kwargs):
        """Builds the tokenizer of a preset from its `vocab.txt` (or
        `tokenizer.json`) and `tokenizer_config.json`, read as `AutoTokenizer`
        reads them (`kbert.presets.tokenizer_files`).

        Args:
            preset: a registered name, `hf://owner/name`, or a local folder.
            **kwargs: override the settings read from the files.

        Example:
        >>> tokenizer = BertTokenizer.from_preset("hf://google-bert/bert-base-uncased")
        """
        folder = os.fspath(preset)
        if not tokenizer_files.has_tokenizer(folder):
            folder = get_preset_dir(preset)
        return cls(**{**tokenizer_files.tokenizer_settings(folder), **kwargs})

    def save_to_preset(self, folder, model_max_length=None):
        """Writes `vocab.txt`, `tokenizer_config.json`, `tokenizer.json` and
        `special_tokens_map.json` (Hugging Face's formats) to `folder`, which
        `AutoTokenizer` reads into the same ids.

        Keys of an existing `tokenizer_config.json` that the tokenizer does not
        own are kept.
        """
        tokenizer_files.write_tokenizer(
            folder, self._vocabulary.tokens, lowercase=self.lowercase, strip_accents=self.strip_accents,
            tokenize_chinese_chars=self.tokenize_chinese_chars, split_special_tokens=self.split_special_tokens,
            model_max_length=model_max_length,
        )

    def get_config(self):
        return {
            "vocabulary": self.vocabulary,
            "lowercase": self.lowercase,
            "strip_accents": self.strip_accents,
            "tokenize_chinese_chars": self.tokenize_chinese_chars,
            "split_special_tokens": self.split_special_tokens,
        }

    @classmethod
    def from_config(cls, config):
        return cls(**config)

    def __call__(self, texts):
        """Tokenizes text into WordPiece ids, without adding special tokens.

        Args:
            texts: a str, a list of str, or a string tensor (dense of any
                rank, or ragged).

        Returns:
            int32 ids: a 1-D tensor for a single string; otherwise a
            `tf.RaggedTensor` with one more (ragged) dimension than `texts`.
        """
        if isinstance(texts, tf.RaggedTensor):
            return texts.with_flat_values(self._tokenize_batch(texts.flat_values))
        texts = tf.convert_to_tensor(texts, dtype=tf.string)
        if texts.shape.rank == 1:
            return self._tokenize_batch(texts)
        ids = self._tokenize_batch(tf.reshape(texts, [-1]))
        if texts.shape.rank == 0:
            return ids.values
        for size in reversed(texts.shape[1:]):
            ids = tf.RaggedTensor.from_uniform_row_length(ids, size)
        return ids

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)], autograph=False)
    def _tokenize_batch(self, texts):
        if not self.tokenize_chinese_chars:
            return self._tokenize_words(texts)
        # The fast path: normalize, then split and WordPiece in one kernel.
        # Rows with a special token or a long word take the word-by-word path.
        normalized = normalize(
            texts,
            lowercase=self.lowercase,
            strip_accents=self.strip_accents,
            tokenize_chinese_chars=self.tokenize_chinese_chars,
        )
        needs_words = tf.strings.regex_full_match(normalized, self._needs_words)
        return tf.cond(
            tf.reduce_any(needs_words),
            lambda: _map_rows(
                needs_words,
                lambda rows: self._tokenize_words(tf.gather(texts, rows)),
                lambda rows: self._wordpiece.tokenize(tf.gather(normalized, rows)),
            ),
            lambda: self._wordpiece.tokenize(normalized),
        )

    def _tokenize_words(self, texts):
        special_tokens = () if self.split_special_tokens else self._special_tokens
        words = pre_tokenize(
            texts,
            lowercase=self.lowercase,
            strip_accents=self.strip_accents,
            tokenize_chinese_chars=self.tokenize_chinese_chars,
            special_tokens=special_tokens,
        )
        flat_words = words.flat_values
        # Hugging Face's WordPiece makes a word of more than 100 characters
        # one [UNK]. Such words and special tokens go through WordPiece as a
        # one-character stand-in, which gives exactly one id to overwrite.
        ids = tf.fill(tf.shape(flat_words), self.unk_id)
        fixed = tf.strings.length(flat_words, unit="UTF8_CHAR") > MAX_CHARS_PER_WORD
        for token in special_tokens:
            is_token = tf.equal(flat_words, token)
            ids = tf.where(is_token, self.token_to_id(token), ids)
            fixed |= is_token
        pieces = self._wordpiece.tokenize(tf.where(fixed, "x", flat_words))
        fixed = repeat(fixed, pieces.row_lengths())
        ids = repeat(ids, pieces.row_lengths())
        pieces = pieces.with_flat_values(tf.where(fixed, ids, pieces.flat_values))
        return _merge_rows(pieces, words.row_splits)

    def detokenize(self, ids):
        """Turns ids back into text: tokens joined by spaces, `##` pieces merged.

        Args:
            ids: int ids, 1-D for one text or ragged/dense 2-D for a batch.

        Returns:
            A string tensor with one dimension fewer than `ids`.
        """
        if not isinstance(ids, tf.RaggedTensor):
            ids = tf.convert_to_tensor(ids)
        tokens = tf.gather(self._tokens, ids)
        text = tf.strings.reduce_join(tokens, axis=-1, separator=" ")
        return tf.strings.regex_replace(text, " " + SUFFIX_INDICATOR, "")

    @property
    def vocabulary(self):
        return list(self._vocabulary.tokens)

    @property
    def vocabulary_size(self):
        return len(self._vocabulary.tokens)

    def id_to_token(self, id):
        """The token string of `id`."""
        if not 0 <= id < self.vocabulary_size:
            raise ValueError(
                f"Token id {id} is outside the vocabulary: ids go from 0 to "
                f"{self.vocabulary_size - 1}."
            )
        return self._vocabulary.tokens[id]

    def token_to_id(self, token):
        """The id of `token`, which must be in the vocabulary."""
        if token not in self._vocabulary.ids:
            raise ValueError(
                f'Token "{token}" is not in the vocabulary ({self.vocabulary_size} tokens). '
                "Tokenize text with tokenizer(text) to get ids of any text."
            )
        return self._vocabulary.ids[token]

    @property
    def pad_id(self):
        return self.token_to_id(PAD)

    @property
    def unk_id(self):
        return self.token_to_id(UNK)

    @property
    def cls_id(self):
        return self.token_to_id(CLS)

    @property
    def sep_id(self):
        return self.token_to_id(SEP)

    @property
    def mask_id(self):
        return self.token_to_id(MASK)
