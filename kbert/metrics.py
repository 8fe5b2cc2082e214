"""Task metrics as their reference scorers compute them: SQuAD's exact match
and F1 (the official evaluation script), entity-level F1 (conlleval), and
retrieval metrics and Spearman as sentence-transformers' evaluators."""

import re
import string
from collections import Counter

import numpy as np

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
    """{(sentence, first word, last word, type)} of BIO tag lists."""
    return {(i, *span) for i, sentence in enumerate(tags) for span in bio_spans(sentence)}


def bio_spans(tags):
    """`[(first word, last word, type)]` of one sentence's BIO tags, by the
    rules of the models' own grouping (`kbert.text.token_classification.
    bio_entities`, in-graph, that `entities` and the served model use): `B-X`
    starts an X entity; `I-X` continues one of type X on the word before,
    else starts one; any other tag (`O`, None, "") is outside. In Python, so
    that metrics need no TensorFlow; a test holds the two equal."""
    spans, previous = [], None  # previous: the type of the entity on the word before
    for index, tag in enumerate(tags):
        prefix, _, kind = (tag or "").partition("-")
        if prefix not in ("B", "I") or not kind:
            previous = None
        elif prefix == "I" and previous == kind:
            spans[-1][1] = index
        else:
            spans.append([index, index, kind])
            previous = kind
    return [tuple(span) for span in spans]


def retrieval_metrics(ranked_ids, relevant_ids, recall_at=(1, 10), mrr_at=10, ndcg_at=10):
    """Recall@k, MRR@k and nDCG@k, averaged over queries: with binary
    relevance as sentence-transformers' `InformationRetrievalEvaluator`
    computes them, with graded relevance as trec_eval's `ndcg_cut` and
    scikit-learn's `ndcg_score` (the grade is the gain, discounted by
    log2(rank + 1)).

    Args:
        ranked_ids: per query, the retrieved ids, best first (e.g. the ids
            of `kbert.search.semantic_search`).
        relevant_ids: per query, its relevant id, a collection of them
            (binary relevance), or a dict `{id: grade}` of positive grades
            (graded relevance: nDCG weighs each hit by its grade; recall and
            MRR count every graded id as relevant).
        recall_at: the k of each recall@k.
        mrr_at, ndcg_at: the k of MRR and nDCG.

    Returns:
        `{"recall@1": ..., "recall@10": ..., "mrr@10": ..., "ndcg@10": ...}`,
        fractions in [0, 1].

    Example:
    >>> retrieval_metrics([[3, 1], [0, 2]], [1, 5], recall_at=(1, 2), mrr_at=2, ndcg_at=2)
    {'recall@1': 0.0, 'recall@2': 0.5, 'mrr@2': 0.25, 'ndcg@2': 0.31546487678572877}
    >>> retrieval_metrics([[3, 1]], [{1: 3, 3: 1}], recall_at=(1,), mrr_at=2, ndcg_at=2)["ndcg@2"]
    0.7967075809905066
    """
    if len(ranked_ids) != len(relevant_ids):
        raise ValueError(f"Got rankings of {len(ranked_ids)} queries but relevant ids of {len(relevant_ids)}; "
                         "pass one of each per query.")
    if not len(ranked_ids):
        raise ValueError("Got no queries: retrieval metrics need at least one.")
    totals = {f"recall@{k}": 0.0 for k in recall_at}
    totals.update({f"mrr@{mrr_at}": 0.0, f"ndcg@{ndcg_at}": 0.0})
    for ranked, relevant in zip(ranked_ids, relevant_ids):
        grades = _grades(relevant)
        hits = [int(i) in grades for i in ranked]
        for k in recall_at:
            totals[f"recall@{k}"] += sum(hits[:k]) / len(grades)
        first = next((rank for rank, hit in enumerate(hits[:mrr_at]) if hit), None)
        totals[f"mrr@{mrr_at}"] += 0.0 if first is None else 1.0 / (first + 1)
        gains = [grades.get(int(i), 0.0) for i in ranked[:ndcg_at]]
        dcg = sum(gain / np.log2(rank + 2) for rank, gain in enumerate(gains))
        best = sorted(grades.values(), reverse=True)[:ndcg_at]
        totals[f"ndcg@{ndcg_at}"] += dcg / sum(gain / np.log2(rank + 2) for rank, gain in enumerate(best))
    return {name: float(total / len(ranked_ids)) for name, total in totals.items()}


def _grades(relevant):
    """A query's relevant ids as `{id: grade}` (grade 1 where not graded)."""
    if isinstance(relevant, (int, np.integer)):
        return {int(relevant): 1.0}
    if isinstance(relevant, dict):
        grades = {int(i): float(g) for i, g in relevant.items()}
        wrong = {i: g for i, g in grades.items() if not g > 0}
        if wrong:
            raise ValueError(f"Grades must be positive (leave unjudged and irrelevant ids out); got {wrong}.")
    else:
        grades = {int(i): 1.0 for i in relevant}
    if not grades:
        raise ValueError("A query has no relevant ids; every query needs at least one.")
    return grades


def spearman(predicted, expected):
    """Spearman's rank correlation (ties get their average rank), as
    `scipy.stats.spearmanr`: how STS scores are compared with gold ones."""
    predicted, expected = np.asarray(predicted, "float64"), np.asarray(expected, "float64")
    if predicted.shape != expected.shape or predicted.ndim != 1 or len(predicted) < 2:
        raise ValueError(f"spearman takes two 1-D lists of the same length (2 or more); got shapes "
                         f"{predicted.shape} and {expected.shape}.")
    a, b = _average_ranks(predicted), _average_ranks(expected)
    a, b = a - a.mean(), b - b.mean()
    return float((a * b).sum() / np.sqrt((a * a).sum() * (b * b).sum()))


def _average_ranks(values):
    order = np.argsort(values, kind="stable")
    ranks = np.empty(len(values))
    ranks[order] = np.arange(1, len(values) + 1)
    # Tied values share the mean of their ranks.
    _, groups, counts = np.unique(values, return_inverse=True, return_counts=True)
    return (np.bincount(groups, weights=ranks) / counts)[groups]
