"""Learning a WordPiece vocabulary from text, for `BertTokenizer`.

Text is normalized and split into words exactly as `BertTokenizer` does
(`kbert.text.pre_tokenization.pre_tokenize`), the words are counted, and
tensorflow-text's WordPiece learner (the bottom-up algorithm used for BERT's
multilingual vocabularies) picks the pieces.
"""

import collections
import os

from tensorflow_text.tools.wordpiece_vocab import wordpiece_tokenizer_learner_lib as learner

from kbert.text.pre_tokenization import pre_tokenize
from kbert.text.tokenizer import SPECIAL_TOKENS, SUFFIX_INDICATOR, write_vocabulary
from kbert.tf_if_present import tf


def train_wordpiece_vocabulary(
    data,
    vocabulary_size,
    lowercase=True,
    strip_accents=None,
    tokenize_chinese_chars=True,
    output=None,
    batch_size=1024,
):
    """Learns a WordPiece vocabulary from text.

    Every character seen in the text is in the vocabulary, alone and as a
    `##` continuation, so any text made of those characters tokenizes without
    [UNK]. The special tokens come first, in BERT's order: [PAD] (id 0), [UNK],
    [CLS], [SEP], [MASK].

    Args:
        data: the text: an iterable of strings, a list of text file paths (one
            text a line; `.gz` files are read compressed), or a
            `tf.data.Dataset` of strings (scalars or batches).
        vocabulary_size: the most tokens the vocabulary may hold.
        lowercase, strip_accents, tokenize_chinese_chars: as in
            `BertTokenizer`; use the same values for the tokenizer.
        output: if given, the path of a `vocab.txt` file to write.
        batch_size: how many texts are normalized at once.

    Returns:
        The vocabulary, a list of tokens (the index is the id).

    Example:
    >>> vocabulary = train_wordpiece_vocabulary(
    ...     ["The quick brown fox.", "The lazy dog!"], vocabulary_size=100)
    >>> tokenizer = kbert.text.BertTokenizer(vocabulary)
    """
    words = (
        _as_dataset(data, batch_size)
        .map(
            lambda texts: pre_tokenize(
                texts,
                lowercase=lowercase,
                strip_accents=strip_accents,
                tokenize_chinese_chars=tokenize_chinese_chars,
            ).flat_values,
            num_parallel_calls=tf.data.AUTOTUNE,
        )
        .map(lambda words: tf.unique_with_counts(words)[::2])
        .prefetch(tf.data.AUTOTUNE)
    )
    word_counts = collections.Counter()
    for unique, counts in words.as_numpy_iterator():
        for word, count in zip(unique, counts):
            word_counts[word.decode("utf-8")] += int(count)
    if not word_counts:
        raise ValueError("The training text is empty: it holds no words to learn a vocabulary from.")

    characters = sorted({c for word in word_counts for c in word})
    smallest = len(SPECIAL_TOKENS) + 2 * len(characters)
    if vocabulary_size < smallest:
        raise ValueError(
            f"vocabulary_size={vocabulary_size} is too small: the text holds "
            f"{len(characters)} distinct characters, and each must be in the vocabulary alone "
            f"and as a {SUFFIX_INDICATOR} continuation, with the {len(SPECIAL_TOKENS)} special "
            f"tokens that makes at least {smallest}. Raise vocabulary_size."
        )
    vocabulary = learner.learn(
        word_counts,
        vocab_size=vocabulary_size,
        reserved_tokens=list(SPECIAL_TOKENS),
        # Keep every character (the learner's default drops rare ones), and
        # learn from rare words too on a small corpus.
        max_unique_chars=len(characters),
        lower_thresh=min(10, max(1, sum(word_counts.values()) // 100_000)),
        joiner=SUFFIX_INDICATOR,
    )
    # The learner's size is a target: where its search for a count threshold
    # runs out (threshold 1, on a small corpus), it returns more tokens than
    # asked. Keep the special tokens and every character alone and as a
    # continuation, then the learned pieces in the learner's order (most
    # frequent first).
    required = {*SPECIAL_TOKENS, *characters, *(SUFFIX_INDICATOR + c for c in characters)}
    learned = [t for t in vocabulary if t not in required]
    kept = set(learned[:vocabulary_size - len(required)])
    vocabulary = [t for t in vocabulary if t in required or t in kept]
    if output is not None:
        write_vocabulary(vocabulary, output)
    return vocabulary


def _as_dataset(data, batch_size):
    """A dataset of 1-D string batches from any of the forms `data` may take."""
    if isinstance(data, tf.data.Dataset):
        if data.element_spec.shape.rank == 0:
            return data.batch(batch_size)
        return data
    if isinstance(data, (str, bytes, os.PathLike)):
        raise TypeError(
            "data is a single string; pass a list of texts, or a list holding the path of "
            "a text file, or a tf.data.Dataset of strings."
        )
    data = list(data)
    if data and all(isinstance(d, (str, os.PathLike)) and os.path.isfile(d) for d in data):
        files = [os.fspath(d) for d in data]
        compressed = [f.endswith(".gz") for f in files]
        if any(compressed) and not all(compressed):
            raise ValueError("Pass either only .gz files or only uncompressed text files, not both.")
        lines = tf.data.TextLineDataset(files, compression_type="GZIP" if compressed[0] else None)
        return lines.batch(batch_size)
    return tf.data.Dataset.from_tensor_slices(tf.constant(data, tf.string)).batch(batch_size)
