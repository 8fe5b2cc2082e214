"""BERT's WordPiece tokenizer written with TensorFlow and tensorflow-text ops.

It reproduces Hugging Face's `BertTokenizerFast` (the `tokenizers` library's
BertNormalizer, BertPreTokenizer and WordPiece) id for id, and runs anywhere a
TensorFlow graph runs: eagerly, in `tf.data.Dataset.map`, in a `tf.function`
and in an exported SavedModel.

The steps, in Hugging Face's order: the text normalized and split into words
(`kbert.text.pre_tokenization`: special tokens, clean text, CJK, accents,
lowercase, whitespace and punctuation), then greedy longest-match-first
WordPiece with `##` continuations. This module also reads and writes the
vocabulary (`vocab.txt`) and the tokenizer's preset files.
"""

import os

from kbert.presets import tokenizer_files
from kbert.presets.files import get_preset_dir
from kbert.text import offsets
from kbert.text._tf_text import tf_text
from kbert.text.pre_tokenization import any_of_pattern, normalize, pre_tokenize
from kbert.text.ragged import merge_rows, repeat
from kbert.text.tokenizer_base import Tokenizer, Vocabulary
from kbert.tf_if_present import tf

PAD, UNK, CLS, SEP, MASK = "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"
SPECIAL_TOKENS = (PAD, UNK, CLS, SEP, MASK)
SUFFIX_INDICATOR = "##"
# Hugging Face's WordPiece `max_input_chars_per_word`: longer words are [UNK].
MAX_CHARS_PER_WORD = 100


def read_vocabulary(path):
    """Reads a `vocab.txt` file: one token a line, the line number is its id."""
    with open(path, encoding="utf-8") as f:
        return [line.rstrip("\r\n") for line in f]


def write_vocabulary(vocabulary, path):
    """Writes `vocabulary` (a list of tokens) as a `vocab.txt` file."""
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(token + "\n" for token in vocabulary)


def _once_each(tokens):
    """The vocabulary as the WordPiece kernel takes it, each token once.

    A vocab.txt may repeat a line. transformers' BertTokenizer and
    BertTokenizerFast read it as a map from token to line number, so the
    token gets its last line's id and no text gets the earlier ones. Each
    earlier line becomes a stand-in holding a space, which no word holds
    (words are split at spaces), so ids stay line numbers."""
    last = {token: i for i, token in enumerate(tokens)}
    taken = set(tokens)
    once = []
    for i, token in enumerate(tokens):
        if last[token] != i:
            token = f" {token} (line {i + 1}, repeated)"
            while token in taken:
                token += " "
            taken.add(token)
        once.append(token)
    return once


def _map_rows(condition, if_true, if_false):
    """Calls `if_true` with the indices of rows where `condition` holds and
    `if_false` with the others, then puts the rows of their results in order."""
    true_rows = tf.where(condition)[:, 0]
    false_rows = tf.where(~condition)[:, 0]
    results = tf.concat([if_true(true_rows), if_false(false_rows)], axis=0)
    return tf.gather(results, tf.math.invert_permutation(tf.concat([true_rows, false_rows], 0)))


class _Tokenization:
    """The traced tokenization of one vocabulary and set of `BertTokenizer`
    settings, shared by every tokenizer with them."""

    def __init__(self, vocabulary, lowercase, strip_accents, tokenize_chinese_chars, split_special_tokens):
        self.vocabulary = Vocabulary(vocabulary)
        self.lowercase = lowercase
        self.strip_accents = strip_accents
        self.tokenize_chinese_chars = tokenize_chinese_chars
        self.split_special_tokens = split_special_tokens
        self.unk_id = self.vocabulary.ids[UNK]
        self.special_tokens = tuple(t for t in SPECIAL_TOKENS if t in self.vocabulary.ids)
        # Normalized text that may hold a special token (lowercased with the
        # rest, still seen here) or a word of more than 100 characters. Only
        # ASCII separators end a word here: a Unicode class repeated 101 times
        # overflows RE2's DFA, and a false alarm merely takes the exact path.
        word_end = r"\t\n\r !-/:-@\[-`{-~"
        maybe = [f"[^{word_end}]{{{MAX_CHARS_PER_WORD + 1},}}"]
        if self.special_tokens and not split_special_tokens:
            maybe += [any_of_pattern([t.lower() if lowercase else t for t in self.special_tokens])]
        self.needs_words = f"(?s).*(?:{'|'.join(maybe)}).*"
        self.wordpiece = tf_text.FastWordpieceTokenizer(
            vocab=_once_each(vocabulary),
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

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)], autograph=False)
    def tokenize(self, texts):
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
        needs_words = tf.strings.regex_full_match(normalized, self.needs_words)
        return tf.cond(
            tf.reduce_any(needs_words),
            lambda: _map_rows(
                needs_words,
                lambda rows: self._tokenize_words(tf.gather(texts, rows)),
                lambda rows: self.wordpiece.tokenize(tf.gather(normalized, rows)),
            ),
            lambda: self.wordpiece.tokenize(normalized),
        )

    def _tokenize_words(self, texts):
        special_tokens = () if self.split_special_tokens else self.special_tokens
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
            ids = tf.where(is_token, self.vocabulary.ids[token], ids)
            fixed |= is_token
        pieces = self.wordpiece.tokenize(tf.where(fixed, "x", flat_words))
        fixed = repeat(fixed, pieces.row_lengths())
        ids = repeat(ids, pieces.row_lengths())
        pieces = pieces.with_flat_values(tf.where(fixed, ids, pieces.flat_values))
        return merge_rows(pieces, words.row_splits)


class WordPieceTokenizer(Tokenizer):
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

    PAD, UNK, CLS, SEP, MASK = PAD, UNK, CLS, SEP, MASK
    tokenizes_words_alone = True  # WordPiece never crosses BERT's word boundaries

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
        self.lowercase = lowercase
        self.strip_accents = strip_accents
        self.tokenize_chinese_chars = tokenize_chinese_chars
        self.split_special_tokens = split_special_tokens
        self._share_tokenization(
            _Tokenization, (tuple(vocabulary), lowercase, strip_accents, tokenize_chinese_chars, split_special_tokens)
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

    def tokenize_with_byte_spans(self, texts):
        """The ids of each text of a 1-D string tensor, with each piece's
        byte span in the text (`kbert.text.offsets.tokenize_with_byte_spans`)."""
        return offsets.tokenize_with_byte_spans(self, texts)

    def _join_tokens(self, tokens):
        """Tokens joined by spaces, `##` pieces merged."""
        text = tf.strings.reduce_join(tokens, axis=-1, separator=" ")
        return tf.strings.regex_replace(text, " " + SUFFIX_INDICATOR, "")

    def _continues_word(self, token):
        return token.startswith(SUFFIX_INDICATOR)


# The name of the first releases (kbert.aliases).
BertTokenizer = WordPieceTokenizer
