"""Token classification, e.g. named entities (BERT §4.3, CoNLL-2003 NER)."""

import keras

from kbert.aliases import also_named
from kbert import text
from kbert.families import tables
from kbert.models import task_answers, task_inputs
from kbert.models.bert_classifier import check_classes, classifier_logits, hf_labels, prediction_head_table
from kbert.models.task import Task
from kbert.text import token_classification as tc
from kbert.text.classifier_labels import class_names
from kbert.tf_if_present import tf

# BertClassifier's settings of whole texts' answers (several labels, scores),
# which a token classifier has none of: each word gets the most likely tag.
TEXT_CLASSIFIER_ARGUMENTS = ("problem_type", "threshold", "score_activation")


@keras.saving.register_keras_serializable(package="kbert")
class TokenClassifier(Task):
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
    splits them, as the exported model does. On texts, byte-level BPE and
    SentencePiece tokenize the whole text, as transformers does, and each
    word's tokens are found by their offsets (`kbert.text.
    token_classification.pack_text`): `predict(texts)` gives the logits of
    `preprocessor(texts)`.

    Args:
        backbone: a `kbert.BertBackbone`.
        num_classes: number of tags.
        preprocessor: a `kbert.BertTokenClassifierPreprocessor` (or a
            `kbert.BertPreprocessor`, read as one), or `None` for a model fed
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

    head_keys = ("class_names",)
    preprocessor_cls = text.ByName("BertTokenClassifierPreprocessor")
    reads_pooler = False  # as transformers' BertForTokenClassification, which has none

    def __init__(self, backbone, num_classes, preprocessor=None, dropout=None, class_names=None,
                 length_groups=0, **kwargs):
        given = [k for k in TEXT_CLASSIFIER_ARGUMENTS if k in kwargs]
        if given:
            raise TypeError(
                f"BertTokenClassifier got {', '.join(f'{k}={kwargs[k]!r}' for k in given)}: a token classifier "
                "gives each word one tag, the most likely of num_classes, and has no problem_type, threshold or "
                f"score_activation (BertClassifier's settings for whole texts). Leave out {', '.join(given)}."
            )
        num_classes, class_names = check_classes(num_classes, class_names)
        inputs = self.backbone_inputs(backbone)
        # The sentence classifier's head on every token (no family's own dense
        # layer: transformers' token classifiers have none).
        logits = classifier_logits(backbone, backbone(inputs)["sequence_output"], num_classes, dropout)
        # Its own input pipeline (tagged words): no sorting by length.
        super().__init__(inputs=inputs, outputs=logits, backbone=backbone, preprocessor=preprocessor,
                         length_groups=length_groups, **kwargs)
        self.num_classes = num_classes
        self.dropout = dropout
        self.class_names = class_names

    def task_config(self):
        return {"num_classes": self.num_classes, "dropout": self.dropout, "class_names": self.class_names}

    @classmethod
    def from_config(cls, config):
        # kbert of 2026-12-06 (commits eca07f2 to 4ab4bb9) saved
        # BertClassifier's settings in a token classifier's config too; they
        # never changed its tags.
        return super().from_config({k: v for k, v in config.items() if k not in TEXT_CLASSIFIER_ARGUMENTS})

    # transformers' BertForTokenClassification (RobertaFor..., ...: the same names).
    def hf_head_table(self):
        return [*prediction_head_table(self), *tables.dense(self.get_layer("logits"), "classifier")]

    @classmethod
    def hf_head_config(cls, preset, tensors):
        return hf_labels(preset, tensors, "classifier")

    def default_loss(self):
        # The mean over tagged words: tokens of weight 0 do not count.
        return keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="mean_with_sample_weight")

    def default_weighted_metrics(self):
        # Accuracy over tagged words (weight 1), not other pieces or padding.
        return [keras.metrics.SparseCategoricalAccuracy(name="accuracy")]

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
        task_inputs.check_batch_size(batch_size)
        if all(isinstance(t, str) for t in texts):
            rows = task_answers.answers_in_slices(self, (list(texts),), batch_size=batch_size)
            # Padding words are "": no real word is empty.
            return [[(w, t or None, float(s)) for w, t, s in zip(r["words"], r["label"], r["score"]) if w]
                    for r in rows]
        if self.preprocessor is None:
            raise ValueError(task_inputs.no_preprocessor(self))
        preprocessor = self.preprocessor.with_padding(self.input_padding)
        preprocessors = text.task_preprocessors  # (read here: it needs TensorFlow)
        results = []
        for i in range(0, len(texts), batch_size):
            words = tf.ragged.constant(preprocessors.as_word_lists(texts[i:i + batch_size]), tf.string, ragged_rank=1)
            features, first_pieces = tc.pack_words(preprocessor, words)
            logits = tf.convert_to_tensor(keras.ops.convert_to_numpy(task_inputs.predict_batch(self, features)))
            tags = tc.word_tags(logits, first_pieces, class_names(self.head_settings()))
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
        rows = task_answers.answers_in_slices(self, (_as_texts(texts),), batch_size=batch_size)
        return [[{"text": e, "label": k, "start": int(a), "end": int(b), "score": float(s)}
                 for e, k, a, b, s in zip(r["entity"], r["entity_label"], r["entity_start"], r["entity_end"],
                                          r["entity_score"]) if k]
                for r in rows]


# The name of the first releases (kbert.aliases).
BertTokenClassifier = also_named(TokenClassifier, "BertTokenClassifier")


def _as_texts(texts):
    if isinstance(texts, (str, bytes)) or not all(isinstance(t, str) for t in texts):
        raise ValueError("entities takes a list of texts: [text, ...]; for word lists, call tags.")
    return list(texts)
