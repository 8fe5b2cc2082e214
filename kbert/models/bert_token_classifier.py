"""Token classification, e.g. named entities (BERT §4.3, CoNLL-2003 NER)."""

import keras
import tensorflow as tf

from kbert.models.bert_classifier import BertClassifier
from kbert.models.task_answers import serving_text
from kbert.text import token_classification as tc
from kbert.text.pipeline import map_batches, without_autotune


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
    tensors `(words, tag_ids)`. `tags` gives each word's tag, and `entities`
    the entities of texts, split into words where BERT's pre-tokenizer
    splits them, as the exported model does.

    Args:
        backbone: a `kbert.BertBackbone`.
        num_classes: number of tags.
        preprocessor: a `kbert.BertPreprocessor`, or `None` for a model fed
            token ids. Words past its `sequence_length` get no tag.
        dropout: dropout rate before the output layer; `None`: the
            backbone's rate.
        class_names: the tags' names in id order, BIO style (`"O"`,
            `"B-PER"`, `"I-PER"`, ...); needed to return entities.

    Example:
    >>> tags = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
    >>> model = kbert.BertTokenClassifier.from_preset("base", num_classes=5, class_names=tags)
    >>> model.fit([["Jane", "Austen", "lived", "in", "Bath"]], [["B-PER", "I-PER", "O", "O", "B-LOC"]])
    >>> model.entities(["Jane Austen lived in Bath."])
    [[{'text': 'Jane Austen', 'label': 'PER', 'start': 0, 'end': 11, 'score': 0.98}, ...]]
    """

    classified_output = "sequence_output"
    takes_pairs = False

    def __init__(self, backbone, num_classes, preprocessor=None, dropout=None, class_names=None,
                 length_groups=0, **kwargs):
        # Its own input pipeline (tagged words): no sorting by length.
        super().__init__(backbone, num_classes, preprocessor=preprocessor, dropout=dropout,
                         class_names=class_names, length_groups=length_groups, **kwargs)

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
            return map_batches(x, self._traced_preprocess())
        dataset = tf.data.Dataset.from_tensor_slices(self._raw_slices(x, y, sample_weight))
        if shuffle:
            dataset = dataset.shuffle(int(dataset.cardinality()), reshuffle_each_iteration=True)
        dataset = dataset.batch(batch_size or 32)
        return without_autotune(map_batches(dataset, self._traced_preprocess()))

    def _raw_slices(self, x, y=None, sample_weight=None):
        """`(words[, tag ids][, sample weights])`: words a ragged
        `[sentences, (words)]` tensor."""
        if all(isinstance(sentence, (str, bytes)) for sentence in x):
            words = tc.text_words(self.preprocessor, tf.constant(list(x)))[0]
        else:
            words = tf.ragged.constant(_as_word_lists(x), dtype=tf.string, ragged_rank=1)
        parts = (words,)
        if y is not None:
            tag_ids = self._tag_ids(y, words.row_lengths().numpy())
            parts += (tf.ragged.constant(tag_ids, dtype=tf.int32, ragged_rank=1),)
        if sample_weight is not None:
            parts += (tf.constant(sample_weight, tf.float32),)
        return parts

    def _preprocess(self, words, tags=None, sample_weight=None):
        features, first_pieces = tc.pack_words(self._batch_preprocessor(), words)
        if tags is None:
            return (features,)
        labels, weights = tc.token_labels(first_pieces, tags, tf.shape(features["token_ids"]))
        if sample_weight is not None:
            weights *= sample_weight[:, None]
        return features, labels, weights

    def _tag_ids(self, tags, word_counts):
        ids = []
        index = {name: i for i, name in enumerate(self.class_names or [])}
        if len(tags) != len(word_counts):
            raise ValueError(f"Got {len(word_counts)} sentences but {len(tags)} tag lists; give one per sentence.")
        for i, (sentence_tags, count) in enumerate(zip(tags, word_counts)):
            if len(sentence_tags) != count:
                raise ValueError(
                    f"Sentence {i} has {count} words but {len(sentence_tags)} tags; "
                    "give one tag per word."
                )
            for tag in sentence_tags:
                if isinstance(tag, str) and tag not in index:
                    raise ValueError(
                        f'Unknown tag "{tag}" in sentence {i}. '
                        + (f"Known tags (class_names): {', '.join(self.class_names)}."
                           if self.class_names else "Build the model with class_names to give tags by name.")
                    )
            sentence_ids = [index[t] if isinstance(t, str) else int(t) for t in sentence_tags]
            if any(not 0 <= t < self.num_classes for t in sentence_ids):
                raise ValueError(f"Sentence {i} has tag ids {sentence_ids}; ids must be in [0, {self.num_classes}).")
            ids.append(sentence_ids)
        return ids

    # === Answers: the exported model's preprocessing and postprocessing ===

    def _answering(self, pairs=False, top_k=5):
        preprocessor = self._batch_preprocessor()

        def preprocess(text):
            words, starts, ends = tc.text_words(preprocessor, text)
            features, first_pieces = tc.pack_words(preprocessor, words)
            return features, (text, words, starts, ends, first_pieces)

        def postprocess(logits, context):
            text, words, starts, ends, first_pieces = context
            tags = tc.word_tags(logits, first_pieces, self._class_names())
            entities = tc.text_entities(text, tc.bio_entities(tags["label"], tags["score"]), starts, ends)
            outputs = {"words": words, **tags, **entities}
            return {k: v.to_tensor(_FILLS.get(k, "" if v.dtype == tf.string else 0)) for k, v in outputs.items()}

        return preprocess, postprocess, [serving_text()], _FILLS

    def tags(self, texts, batch_size=32):
        """Each word's tag and its probability.

        Args:
            texts: a list of texts (split into words where BERT's
                pre-tokenizer splits them) or of sentences given as word lists.

        Returns:
            A list, per sentence, of `(word, tag, score)`: the tag's name (its
            id as a str without `class_names`) and probability, read at the
            word's first WordPiece; `(word, None, 0.0)` for a word past the
            preprocessor's `sequence_length` (or with no WordPiece).
        """
        if all(isinstance(t, str) for t in texts):
            rows = self._answers_in_slices((list(texts),), batch_size=batch_size)
            # Padding words are "": no real word is empty.
            return [[(w, t or None, float(s)) for w, t, s in zip(r["words"], r["label"], r["score"]) if w]
                    for r in rows]
        preprocessor = self._batch_preprocessor()
        results = []
        for i in range(0, len(texts), batch_size):
            words = tf.ragged.constant(_as_word_lists(texts[i:i + batch_size]), tf.string, ragged_rank=1)
            features, first_pieces = tc.pack_words(preprocessor, words)
            logits = tf.convert_to_tensor(keras.ops.convert_to_numpy(self._predict_batch(features)))
            tags = tc.word_tags(logits, first_pieces, self._class_names())
            for sentence, labels, scores in zip(words.to_list(), tags["label"].to_list(), tags["score"].to_list()):
                results.append([(w.decode(), t.decode() or None, float(s))
                                for w, t, s in zip(sentence, labels, scores)])
        return results

    def entities(self, texts, batch_size=32):
        """The entities in each text, as the exported model finds them.

        Returns:
            A list, per text, of `{"text", "label", "start", "end", "score"}`:
            the entity as written (`text[start:end]`, character offsets),
            its type ("PER" for B-PER/I-PER tags) and the mean probability
            of its words' tags.
        """
        if self.class_names is None:
            raise ValueError(
                "entities groups BIO tags into entities and needs their names; build the model "
                "with class_names=[...], or call tags for the tag ids."
            )
        rows = self._answers_in_slices((_as_texts(texts),), batch_size=batch_size)
        return [[{"text": e, "label": k, "start": int(a), "end": int(b), "score": float(s)}
                 for e, k, a, b, s in zip(r["entity"], r["entity_label"], r["entity_start"], r["entity_end"],
                                          r["entity_score"]) if k]
                for r in rows]


# Padding of the served outputs, per sentence: words and entities past its own.
_FILLS = {"label_id": -1, "entity_start": -1, "entity_end": -1}


def _as_texts(texts):
    if isinstance(texts, (str, bytes)) or not all(isinstance(t, str) for t in texts):
        raise ValueError("entities takes a list of texts: [text, ...]; for word lists, call tags.")
    return list(texts)


def _as_word_lists(x):
    if isinstance(x, (str, bytes)) or any(isinstance(sentence, (str, bytes)) for sentence in x):
        raise ValueError(
            "fit and evaluate take sentences as lists of words, with one tag per word "
            '(CoNLL style: [["Jane", "Austen"], ...]); got text. Split texts into words first.'
        )
    return [list(sentence) for sentence in x]
