"""Token classification, e.g. named entities (BERT §4.3, CoNLL-2003 NER)."""

import keras
import numpy as np
import tensorflow as tf

from kbert.models.bert_classifier import BertClassifier
from kbert.models.bert_question_answerer import word_spans
from kbert.models.task import map_batches


def read_conll(path, limit=None):
    """Sentences as `(words, tags)` from a CoNLL-style file: one
    `word<TAB>tag` a line, a blank line between sentences.

    Args:
        path: the file.
        limit: read at most this many sentences.
    """
    sentences, words, tags = [], [], []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                word, tag = line.rstrip("\n").split("\t")
                words.append(word)
                tags.append(tag)
            elif words:
                sentences.append((words, tags))
                words, tags = [], []
                if len(sentences) == limit:
                    return sentences
    if words:
        sentences.append((words, tags))
    return sentences


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
    pieces = preprocessor.tokenizer(words)  # [batch, (words), (pieces)]
    features = preprocessor.packer(pieces)
    # Each word's first piece, counted from its sentence's first piece.
    sentence_starts = tf.gather(pieces.merge_dims(1, 2).row_splits, pieces.value_rowids())
    word_starts = pieces.values.row_splits[:-1] - sentence_starts
    room = preprocessor.sequence_length - 2  # [CLS] and [SEP]
    kept = (pieces.values.row_lengths() > 0) & (word_starts < room)
    first_pieces = tf.where(kept, word_starts + 1, -1)
    return features, tf.RaggedTensor.from_row_splits(first_pieces, pieces.row_splits)


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
    indices = tf.boolean_mask(tf.stack([first_pieces.value_rowids(), positions], axis=1), kept)
    shape = tf.cast(shape, tf.int64)
    labels = tf.scatter_nd(indices, tf.boolean_mask(tf.cast(tags.flat_values, tf.int32), kept), shape)
    weights = tf.scatter_nd(indices, tf.ones(tf.shape(indices)[:1], tf.float32), shape)
    return labels, weights


def bio_entities(tags):
    """Groups a sentence's BIO tags into entities.

    `B-X` starts an X entity, `I-X` continues one; an `I-X` that follows
    `O` or another type starts an entity too (as conlleval and seqeval's
    default mode read it). Any other tag (`O`, `None`) is outside.

    Args:
        tags: a list of tag names, one per word.

    Returns:
        A list of `(start, end, label)`, words `start` to `end - 1`.

    Example:
    >>> bio_entities(["B-PER", "I-PER", "O", "I-LOC", "B-LOC", "I-ORG"])
    [(0, 2, 'PER'), (3, 4, 'LOC'), (4, 5, 'LOC'), (5, 6, 'ORG')]
    """
    entities = []
    for i, tag in enumerate(tags):
        prefix, _, label = (tag or "").partition("-")
        if prefix == "I" and entities and entities[-1][1] == i and entities[-1][2] == label:
            entities[-1][1] = i + 1
        elif prefix in ("B", "I") and label:
            entities.append([i, i + 1, label])
    return [tuple(entity) for entity in entities]


def entity_f1(true_tags, predicted_tags):
    """Entity-level precision, recall and F1 (conlleval / seqeval): an
    entity counts only if its words and type are exactly right.

    Args:
        true_tags, predicted_tags: lists, per sentence, of BIO tag names.

    Returns:
        `{"precision", "recall", "f1"}`, fractions in [0, 1].

    Example:
    >>> entity_f1([["B-PER", "I-PER", "O"]], [["B-PER", "O", "O"]])
    {'precision': 0.0, 'recall': 0.0, 'f1': 0.0}
    """
    if len(true_tags) != len(predicted_tags):
        raise ValueError(f"Got {len(true_tags)} true and {len(predicted_tags)} predicted sentences; pass as many.")
    true = {(i, *e) for i, tags in enumerate(true_tags) for e in bio_entities(tags)}
    predicted = {(i, *e) for i, tags in enumerate(predicted_tags) for e in bio_entities(tags)}
    correct = len(true & predicted)
    precision = correct / len(predicted) if predicted else 0.0
    recall = correct / len(true) if true else 0.0
    f1 = 2 * precision * recall / (precision + recall) if correct else 0.0
    return {"precision": precision, "recall": recall, "f1": f1}


@keras.saving.register_keras_serializable(package="kbert")
class BertTokenClassifier(BertClassifier):
    """Token classification such as named entity recognition (BERT §4.3):
    each token's `sequence_output`, dropout, and one dense layer giving
    `num_classes` logits, `[batch, length, num_classes]`.

    As in BERT's NER setup, a word's tag is predicted at its first
    WordPiece; the other pieces, `[CLS]`, `[SEP]` and padding are not in the
    loss (sample weight 0), which is the mean over tagged words.

    With a preprocessor, `fit` and `evaluate` take sentences as lists of
    words (CoNLL style) with one tag per word: an id, or a name of
    `class_names`; or a batched `tf.data.Dataset` of string and int ragged
    tensors `(words, tag_ids)`. `predict` takes such word lists or plain texts (split into
    words where BERT's pre-tokenizer splits them) and returns entities;
    `predict_tags` returns each word's tag.

    Args:
        backbone: a `kbert.BertBackbone`.
        num_classes: number of tags.
        preprocessor: a `kbert.BertPreprocessor`, or `None` for a model fed
            token ids. Words past its `sequence_length` get no tag.
        dropout: dropout rate before the output layer.
        class_names: the tags' names in id order, BIO style (`"O"`,
            `"B-PER"`, `"I-PER"`, ...); needed to return entities.

    Example:
    >>> tags = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
    >>> model = kbert.BertTokenClassifier.from_preset("base", num_classes=5, class_names=tags)
    >>> model.fit([["Jane", "Austen", "lived", "in", "Bath"]], [["B-PER", "I-PER", "O", "O", "B-LOC"]])
    >>> model.predict(["Jane Austen lived in Bath."])
    [[{'words': (0, 2), 'chars': (0, 11), 'text': 'Jane Austen', 'label': 'PER', 'score': 0.98}, ...]]
    """

    # Its own input pipeline (tagged words): no sorting by length, and
    # sequences padded to sequence_length.
    length_groups = 0
    input_padding = "sequence_length"

    classified_output = "sequence_output"

    def default_loss(self):
        # The mean over tagged words: tokens of weight 0 do not count.
        return keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="mean_with_sample_weight")

    def default_metrics(self):
        return None  # accuracy is a weighted metric here

    def default_weighted_metrics(self):
        # Accuracy over tagged words (weight 1), not other pieces or padding.
        return [keras.metrics.SparseCategoricalAccuracy(name="accuracy")]

    # === Words in ===

    def _is_raw(self, x):
        if isinstance(x, tf.data.Dataset):
            # A batched dataset of words: (words, tag ids[, sample weights]).
            spec = x.element_spec[0] if isinstance(x.element_spec, tuple) else x.element_spec
            return self.preprocessor is not None and isinstance(spec, tf.RaggedTensorSpec) and spec.dtype == tf.string
        return super()._is_raw(x)

    def _dataset(self, x, y=None, sample_weight=None, batch_size=None, shuffle=False):
        if isinstance(x, tf.data.Dataset):
            return map_batches(x, self._preprocess)
        words = _as_word_lists(x)
        parts = (tf.ragged.constant(words, dtype=tf.string, ragged_rank=1),)
        if y is not None:
            parts += (tf.ragged.constant(self._tag_ids(y, words), dtype=tf.int32, ragged_rank=1),)
        if sample_weight is not None:
            parts += (tf.constant(sample_weight, tf.float32),)
        dataset = tf.data.Dataset.from_tensor_slices(parts)
        if shuffle:
            dataset = dataset.shuffle(int(dataset.cardinality()), reshuffle_each_iteration=True)
        dataset = dataset.batch(batch_size or 32)
        return map_batches(dataset, self._preprocess)

    def _preprocess(self, words, tags=None, sample_weight=None):
        features, first_pieces = pack_words(self.preprocessor, words)
        if tags is None:
            return (features,)
        labels, weights = token_labels(first_pieces, tags, tf.shape(features["token_ids"]))
        if sample_weight is not None:
            weights *= sample_weight[:, None]
        return features, labels, weights

    def _tag_ids(self, tags, words):
        ids = []
        index = {name: i for i, name in enumerate(self.class_names or [])}
        for i, (sentence_tags, sentence_words) in enumerate(zip(tags, words)):
            if len(sentence_tags) != len(sentence_words):
                raise ValueError(
                    f"Sentence {i} has {len(sentence_words)} words but {len(sentence_tags)} tags; "
                    "give one tag per word."
                )
            for tag in sentence_tags:
                if isinstance(tag, str) and tag not in index:
                    raise ValueError(
                        f'Unknown tag "{tag}" in sentence {i}. '
                        + (f"Known tags (class_names): {', '.join(self.class_names)}."
                           if self.class_names else "Build the model with class_names to give tags by name.")
                    )
            ids.append([index[t] if isinstance(t, str) else int(t) for t in sentence_tags])
        if len(ids) != len(words):
            raise ValueError(f"Got {len(words)} sentences but {len(ids)} tag lists; give one per sentence.")
        return ids

    def predict_tags(self, x, batch_size=None, **kwargs):
        """Each word's tag and its probability.

        Args:
            x: a list of sentences, each a list of words or a text.

        Returns:
            A list, per sentence, of `(word, tag, score)`: the tag's name (its
            id without `class_names`) and probability, read at the word's
            first WordPiece; `(word, None, 0.0)` for a word past the
            preprocessor's `sequence_length` (or with no WordPiece).
        """
        words = [w for w, _ in self._words_and_spans(x)]
        tags = self._tag_words(words, batch_size, **kwargs)
        return [list(zip(sentence, names, scores)) for sentence, (names, scores) in zip(words, tags)]

    def predict(self, x, batch_size=None, **kwargs):
        """Finds entities: with raw input (a list of texts or of word lists),
        a list per sentence of `{"words": (start_word, end_word), "text",
        "label", "score"}` (words `start_word` to `end_word - 1`; the score
        is the mean of their tags' probabilities), plus `"chars":
        (start_char, end_char)` into a text; with token ids, the logits."""
        if not self._is_raw(x):
            return super().predict(x, batch_size=batch_size, **kwargs)
        if self.class_names is None:
            raise ValueError(
                "predict groups BIO tags into entities and needs their names; build the model "
                "with class_names=[...], or call predict_tags for the tag ids."
            )
        sentences = self._words_and_spans(x)
        tags = self._tag_words([w for w, _ in sentences], batch_size, **kwargs)
        results = []
        for (words, spans), (names, scores), raw in zip(sentences, tags, x):
            entities = []
            for start, end, label in bio_entities(names):
                entity = {"words": (start, end), "text": " ".join(words[start:end]), "label": label,
                          "score": float(np.mean(scores[start:end]))}
                if spans is not None:
                    entity["chars"] = (spans[start][0], spans[end - 1][1])
                    entity["text"] = raw[slice(*entity["chars"])]
                entities.append(entity)
            results.append(entities)
        return results

    def _words_and_spans(self, x):
        """(words, character spans or None) of each sentence, a text or words."""
        if self.preprocessor is None:
            raise ValueError("Reading words needs a preprocessor; build the model with one.")
        if isinstance(x, (str, bytes)):
            raise ValueError("Got a single text where a batch was expected; pass a list of texts: [text].")
        if isinstance(x, tf.data.Dataset):
            raise ValueError("predict takes a list of texts or of word lists, not a dataset.")
        sentences = []
        for sentence in x:
            if isinstance(sentence, str):
                spans = word_spans(sentence)
                sentences.append(([sentence[a:b] for a, b in spans], spans))
            else:
                sentences.append((list(sentence), None))
        return sentences

    def _tag_words(self, words, batch_size=None, **kwargs):
        """(tags, scores) of each sentence's words, read at their first pieces."""
        features, first_pieces = pack_words(self.preprocessor, tf.ragged.constant(words, tf.string, ragged_rank=1))
        features = {k: np.asarray(v) for k, v in features.items()}
        logits = super().predict(features, batch_size=batch_size, **kwargs)
        probabilities = np.exp(logits - logits.max(-1, keepdims=True))
        probabilities /= probabilities.sum(-1, keepdims=True)
        results = []
        for row, positions in enumerate(first_pieces.to_list()):
            ids = [int(probabilities[row, p].argmax()) if p >= 0 else None for p in positions]
            names = [i if i is None or self.class_names is None else self.class_names[i] for i in ids]
            scores = [float(probabilities[row, p, i]) if i is not None else 0.0 for p, i in zip(positions, ids)]
            results.append((names, scores))
        return results


def _as_word_lists(x):
    if isinstance(x, (str, bytes)) or any(isinstance(sentence, (str, bytes)) for sentence in x):
        raise ValueError(
            "fit and evaluate take sentences as lists of words, with one tag per word "
            '(CoNLL style: [["Jane", "Austen"], ...]); got text. Split texts into words first.'
        )
    return [list(sentence) for sentence in x]
