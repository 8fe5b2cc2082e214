"""What kbert's tokenizers share: the interface that preprocessors, masking,
offsets and serving use, whatever the algorithm (`BertTokenizer`'s WordPiece,
`BytePairTokenizer`'s byte-level BPE, `SentencePieceTokenizer`'s unigram
and byte-fallback BPE), and how each reads its input (`as_valid_utf8`)."""

import weakref

from kbert.tf_if_present import tf

# Tokenizers of one class, vocabulary and settings share their tokenization
# (its traced functions, and the WordPiece or SentencePiece model or BPE
# tables it holds), alive while one of them is: a notebook that builds
# several models from one preset traces it once. TensorFlow counts the traces
# of every copy of a `tf.function` together, so one per tokenizer warned of
# "retracing" from the fifth on.
_SHARED = weakref.WeakValueDictionary()
# The roles of the special tokens, by Hugging Face's names, and the
# attribute of `Tokenizer` that names each (for tokenizers whose files name
# them: `BytePairTokenizer`, `SentencePieceTokenizer`).
ROLES = {"cls_token": "CLS", "sep_token": "SEP", "pad_token": "PAD", "unk_token": "UNK", "mask_token": "MASK"}
# Text that is UTF-8 as Python decodes it: any code point but the
# surrogates. (RE2's `.` also takes the bytes of a surrogate, of an overlong
# form and of code points past U+10FFFF, which Python does not decode.)
VALID_UTF8 = r"[\x00-\x{D7FF}\x{E000}-\x{10FFFF}]*"


def as_valid_utf8(texts):
    """A 1-D string tensor with each text that is not UTF-8 read as Python's
    `bytes.decode("utf-8", errors="replace")` reads it: each invalid byte
    sequence one U+FFFD (valid text is left as it is, at the cost of one
    regex pass). Every kbert tokenizer reads its input so, and so gives
    transformers' ids of the decoded text: a served request may carry any
    bytes, a Python str cannot."""
    return tf.cond(tf.reduce_all(tf.strings.regex_full_match(texts, VALID_UTF8)), lambda: texts,
                   lambda: tf.strings.unicode_transcode(texts, "UTF-8", "UTF-8", errors="replace",
                                                        replacement_char=0xFFFD))


class Vocabulary:
    """The tokens and their ids, in one object that `tf.Module` does not look
    into. A module's `variables` (which saving a SavedModel reads from every
    module again and again) walks each list and dict it holds: 30,522 tokens
    and their ids, dozens of times per export. (The other tokenizers' own
    vocabularies hold merges or scores beside these.)"""

    def __init__(self, tokens):
        self.tokens = tuple(tokens)
        self.ids = {token: i for i, token in enumerate(self.tokens)}


class Tokenizer(tf.Module):
    """A tokenizer's shared part. A subclass's constructor calls
    `_share_tokenization` with its tokenization class, an object built from
    the vocabulary and settings that holds `tokenize` (a 1-D string tensor to
    ragged ids), `vocabulary` (a `Vocabulary`, or one like it) and
    `special_tokens` (the vocabulary's special tokens, in a tuple). The
    subclass names its special tokens (`PAD`, `UNK`, `CLS`, `SEP`, `MASK`)
    and how pairs are packed (`pair_layout` and `second_segment_id`,
    `kbert.text.packing`), as class
    attributes or, where its files say (`BytePairTokenizer`,
    `SentencePieceTokenizer`), per tokenizer,
    and says
    how tokens join into text (`_join_tokens`) and which continue a word
    (`_continues_word`)."""

    PAD = UNK = CLS = SEP = MASK = None
    pair_layout = "one_separator"
    # The segment id of a pair's second text (None: the layout's, 1 or 0).
    second_segment_id = None
    # Whether a text's tokens are its words' (where BERT's pre-tokenizer
    # splits it) each tokenized alone, as `tokenize_words` tokenizes them:
    # so for WordPiece, not for byte-level BPE or SentencePiece, which give a
    # text's first word no leading space and may join words into one token.
    # A token classifier tags a text's words as given words where it is so,
    # else it tokenizes the whole text (`kbert.text.token_classification`).
    tokenizes_words_alone = False

    def _share_tokenization(self, tokenization_class, settings):
        """Uses the `tokenization_class(*settings)` of every tokenizer with
        these settings, built here if none is alive."""
        key = (tokenization_class, settings)
        tokenization = _SHARED.get(key)
        if tokenization is None:
            tokenization = _SHARED[key] = tokenization_class(*settings)
        self._tokenization = tokenization
        self._vocabulary = tokenization.vocabulary
        # Each id's token, for `detokenize`.
        self._tokens = tf.constant(self._vocabulary.tokens)

    @classmethod
    def from_config(cls, config):
        return cls(**config)

    def __call__(self, texts):
        """Tokenizes text into ids, without adding special tokens.

        Args:
            texts: a str, a list of str, or a string tensor (dense of any
                rank, or ragged). Bytes that are not UTF-8 are read as
                U+FFFD, as Python's `bytes.decode(errors="replace")` reads
                them (`as_valid_utf8`).

        Returns:
            int32 ids: a 1-D tensor for a single string; otherwise a
            `tf.RaggedTensor` with one more (ragged) dimension than `texts`.
        """
        if isinstance(texts, tf.RaggedTensor):
            return texts.with_flat_values(self._tokenization.tokenize(as_valid_utf8(texts.flat_values)))
        texts = tf.convert_to_tensor(texts, dtype=tf.string)
        if texts.shape.rank == 1:
            return self._tokenization.tokenize(as_valid_utf8(texts))
        ids = self._tokenization.tokenize(as_valid_utf8(tf.reshape(texts, [-1])))
        if texts.shape.rank == 0:
            return ids.values
        for size in reversed(texts.shape[1:]):
            ids = tf.RaggedTensor.from_uniform_row_length(ids, size)
        return ids

    def tokenize_words(self, words):
        """The ids of each word of a ragged `[batch, (words)]` string tensor,
        each word tokenized as the start of a word (`[batch, (words),
        (ids)]`): as Hugging Face's tokenizers take `is_split_into_words`."""
        return self(words)

    def detokenize(self, ids):
        """Turns ids back into text, the ids' tokens joined as the
        tokenizer's decoder joins them (WordPiece: by spaces, `##` pieces
        merged; SentencePiece: each "▁" a space, the first dropped;
        byte-level BPE: as bytes, those that are not UTF-8 U+FFFD).

        Args:
            ids: int ids, 1-D for one text or ragged/dense 2-D for a batch.

        Returns:
            A string tensor with one dimension fewer than `ids`.
        """
        if not isinstance(ids, tf.RaggedTensor):
            ids = tf.convert_to_tensor(ids)
        return self._join_tokens(tf.gather(self._tokens, ids))

    def _join_tokens(self, tokens):
        """The text of each row of token strings (`[..., (tokens)]`, the
        last axis joined)."""
        raise NotImplementedError

    @property
    def special_tokens(self):
        """The vocabulary's special tokens (`"[CLS]"`, `"<mask>"` ...), which
        a text may hold as written."""
        return tuple(self._tokenization.special_tokens)

    @property
    def continuation_token_ids(self):
        """Ids of the pieces that continue a word (WordPiece's `##` pieces;
        byte-level BPE's without a leading "Ġ", SentencePiece's without "▁"),
        special tokens left out: for whole-word masking and word starts."""
        specials = set(self.special_tokens)
        return [i for i, token in enumerate(self._vocabulary.tokens)
                if token not in specials and self._continues_word(token)]

    def _continues_word(self, token):
        """Whether `token` (not a special token) continues a word."""
        raise NotImplementedError

    @property
    def vocabulary(self):
        return list(self._vocabulary.tokens)

    @property
    def vocabulary_size(self):
        return len(self._vocabulary.tokens)

    def id_to_token(self, id):
        """The token string of `id`."""
        if not 0 <= id < self.vocabulary_size:
            raise ValueError(f"Token id {id} is outside the vocabulary: ids go from 0 to {self.vocabulary_size - 1}.")
        return self._vocabulary.tokens[id]

    def token_to_id(self, token):
        """The id of `token`, which must be in the vocabulary."""
        if token not in self._vocabulary.ids:
            raise ValueError(f'Token "{token}" is not in the vocabulary ({self.vocabulary_size} tokens). '
                             "Tokenize text with tokenizer(text) to get ids of any text.")
        return self._vocabulary.ids[token]

    @property
    def pad_id(self):
        return self.token_to_id(self.PAD)

    @property
    def unk_id(self):
        return self.token_to_id(self.UNK)

    @property
    def cls_id(self):
        return self.token_to_id(self.CLS)

    @property
    def sep_id(self):
        return self.token_to_id(self.SEP)

    @property
    def mask_id(self):
        return self.token_to_id(self.MASK)
