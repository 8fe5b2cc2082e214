"""Task metrics as their reference scorers compute them: SQuAD's exact match
and F1 (the official evaluation script), and entity-level F1 (conlleval)."""

import re
import string
from collections import Counter

import tensorflow as tf

from kbert.text.token_classification import bio_entities

_ASCII_PUNCTUATION = set(string.punctuation)


def normalize_answer(text):
    """The official SQuAD v1.1 normalisation: lowercase, no punctuation, no
    articles (a, an, the), single spaces."""
    text = "".join(c for c in text.lower() if c not in _ASCII_PUNCTUATION)
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


def _f1(prediction, reference):
    predicted, expected = normalize_answer(prediction).split(), normalize_answer(reference).split()
    common = sum((Counter(predicted) & Counter(expected)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(predicted), common / len(expected)
    return 2 * precision * recall / (precision + recall)


def squad_metrics(predictions, references):
    """SQuAD v1.1's exact match and F1, in percent, as its official script.

    Each prediction is scored against the best-matching of its references.

    Args:
        predictions: a list of answer strings.
        references: a list, per prediction, of the gold answer strings (or
            one str).

    Returns:
        `{"exact_match": ..., "f1": ...}`.

    Example:
    >>> squad_metrics(["the Eiffel Tower", "Paris"], [["Eiffel Tower"], ["in Paris, France"]])
    {'exact_match': 50.0, 'f1': 75.0}
    """
    if len(predictions) != len(references):
        raise ValueError(f"Got {len(predictions)} predictions for {len(references)} references; pass one each.")
    if not predictions:
        return {"exact_match": 0.0, "f1": 0.0}
    exact = f1 = 0.0
    for prediction, golds in zip(predictions, references):
        golds = [golds] if isinstance(golds, str) else golds
        exact += max(float(normalize_answer(prediction) == normalize_answer(g)) for g in golds)
        f1 += max(_f1(prediction, g) for g in golds)
    return {"exact_match": 100 * exact / len(predictions), "f1": 100 * f1 / len(predictions)}


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
    true, predicted = _entity_set(true_tags), _entity_set(predicted_tags)
    correct = len(true & predicted)
    precision = correct / len(predicted) if predicted else 0.0
    recall = correct / len(true) if true else 0.0
    f1 = 2 * precision * recall / (precision + recall) if correct else 0.0
    return {"precision": precision, "recall": recall, "f1": f1}


def _entity_set(tags):
    """{(sentence, first word, last word, type)} of BIO tag lists, grouped by
    the same `bio_entities` that the models' entities come from."""
    labels = tf.ragged.constant([[t or "" for t in sentence] for sentence in tags], tf.string, ragged_rank=1)
    entities = bio_entities(labels, tf.ones_like(labels, tf.float32))
    rows = entities["label"].value_rowids().numpy()
    columns = [entities[k].flat_values.numpy() for k in ("first_word", "last_word", "label")]
    return {(int(r), int(a), int(b), k.decode()) for r, a, b, k in zip(rows, *columns)}
