"""What kbert's tokenizers share: the interface that preprocessors, masking,
offsets and serving use, whatever the algorithm (`BertTokenizer`'s WordPiece,
`BytePairTokenizer`'s byte-level BPE, `SentencePieceTokenizer`'s unigram)."""

from kbert.tf_if_present import tf


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
    """A tokenizer's shared part. A subclass sets `_tokenization` (whose
    `tokenize` takes a 1-D string tensor and gives ragged ids) and
    `_vocabulary` (a `Vocabulary`), and names its special tokens (`PAD`,
    `UNK`, `CLS`, `SEP`, `MASK`) and how pairs are packed (`pair_layout`,
    `kbert.text.packing`)."""

    PAD = UNK = CLS = SEP = MASK = None
    pair_layout = "one_separator"

    @classmethod
    def from_config(cls, config):
        return cls(**config)

    def __call__(self, texts):
        """Tokenizes text into ids, without adding special tokens.

        Args:
            texts: a str, a list of str, or a string tensor (dense of any
                rank, or ragged).

        Returns:
            int32 ids: a 1-D tensor for a single string; otherwise a
            `tf.RaggedTensor` with one more (ragged) dimension than `texts`.
        """
        if isinstance(texts, tf.RaggedTensor):
            return texts.with_flat_values(self._tokenization.tokenize(texts.flat_values))
        texts = tf.convert_to_tensor(texts, dtype=tf.string)
        if texts.shape.rank == 1:
            return self._tokenization.tokenize(texts)
        ids = self._tokenization.tokenize(tf.reshape(texts, [-1]))
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
