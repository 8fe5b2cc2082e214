"""Listwise cross-encoder losses against sentence-transformers' on the same
model and lists (of different lengths), and a reranker trained on
`query_lists` through Keras' fit."""

import numpy as np
import pytest
import torch
from sentence_transformers import CrossEncoder
from sentence_transformers.cross_encoder import losses

import kbert
from kbert.training.listwise import PADDED, LambdaLoss, ListNetLoss, query_lists
from tests.helpers import to_numpy
from tests.models.test_cross_encoder import cross_encoder_folder

QUERIES = ["who wrote emma?", "what is lift?", "boundary layer transition"]
DOCUMENTS = [["Emma is a novel by Jane Austen.", "Paris is in France.", "Austen wrote six novels."],
             ["Lift is the force that holds a wing up."],
             ["Transition from laminar to turbulent flow.", "A cat.", "Skin friction rises after transition.",
              "Heat transfer in hypersonic flow.", "Emma."]]
LABELS = [[1.0, 0.0, 0.5], [2.0], [3.0, 0.0, 1.0, 0.25, 0.0]]


def padded(logits, slots=5):
    """Flat per-pair logits and ragged labels as query_lists lays them out:
    `[queries * slots, 1]` logits (padding's are junk, to be ignored) and
    `[queries, slots]` labels."""
    rows, labels, start = [], [], 0
    for scores in LABELS:
        n = len(scores)
        rows.append(np.concatenate([logits[start:start + n], np.full(slots - n, 123.0, "float32")]))
        labels.append(scores + [PADDED] * (slots - n))
        start += n
    return np.array(labels, "float32"), np.concatenate(rows)[:, None]


@pytest.fixture(scope="module")
def encoder_and_logits(tmp_path_factory, minilm_dir):
    path = cross_encoder_folder(str(tmp_path_factory.mktemp("listwise")), minilm_dir, "st6")
    pairs = ([q for q, docs in zip(QUERIES, DOCUMENTS) for _ in docs], [d for docs in DOCUMENTS for d in docs])
    logits = kbert.BertClassifier.from_preset(path).predict(pairs, verbose=0)[:, 0]
    encoder = CrossEncoder(path)
    encoder.eval()
    return encoder, logits


def theirs(loss):
    with torch.no_grad():
        return float(loss([QUERIES, DOCUMENTS], [torch.tensor(s) for s in LABELS]))


def test_list_net_loss_equals_sentence_transformers_on_lists_of_different_lengths(encoder_and_logits):
    encoder, logits = encoder_and_logits
    ours = float(to_numpy(ListNetLoss()(*padded(logits))))
    assert ours == pytest.approx(theirs(losses.ListNetLoss(encoder)), abs=1e-5)


@pytest.mark.parametrize("scheme, st_scheme, k", [
    ("ndcg_loss2++", losses.NDCGLoss2PPScheme(), None),
    ("ndcg_loss2", losses.NDCGLoss2Scheme(), 2),
    ("lambdarank", losses.LambdaRankScheme(), None),
    ("ndcg_loss1", losses.NDCGLoss1Scheme(), None),
    ("none", None, 3),
])
def test_lambda_loss_equals_sentence_transformers(encoder_and_logits, scheme, st_scheme, k):
    encoder, logits = encoder_and_logits
    ours = float(to_numpy(LambdaLoss(scheme, k=k)(*padded(logits))))
    assert ours == pytest.approx(theirs(losses.LambdaLoss(encoder, weighting_scheme=st_scheme, k=k)), abs=1e-5)


@pytest.mark.parametrize("loss", [ListNetLoss(), LambdaLoss()])
def test_a_reranker_fits_on_query_lists_and_its_loss_falls(minilm_dir, loss):
    backbone = kbert.BertBackbone(vocabulary_size=30522, num_layers=2, num_heads=2, hidden_dim=32,
                                  intermediate_dim=64, max_sequence_length=64, dropout=0.0)
    preprocessor = kbert.BertPreprocessor.from_preset(minilm_dir, sequence_length=32)
    model = kbert.BertClassifier(backbone, 1, preprocessor, score_activation="sigmoid")
    model.compile(loss=loss, learning_rate=1e-2, warmup=0.0, schedule="constant")
    # Every query in one batch: each epoch's loss is then the same batch's.
    data = query_lists(model.preprocessor, QUERIES, DOCUMENTS, LABELS, queries_per_batch=3, seed=0)
    features, labels = next(iter(data))
    assert features["token_ids"].shape[0] == 3 * 5 and labels.shape == (3, 5)
    history = model.fit(data, epochs=8, verbose=0).history["loss"]
    assert history[-1] < history[0]


def test_query_lists_refuse_empty_lists_and_labels_not_matching_documents():
    preprocessor = None  # refused before it is used
    with pytest.raises(ValueError, match=r"Query 1 \('what is lift\?'\) has no documents"):
        query_lists(preprocessor, QUERIES, [DOCUMENTS[0], [], DOCUMENTS[2]], LABELS)
    with pytest.raises(ValueError, match="Query 0 .* has 3 documents but 2 labels"):
        query_lists(preprocessor, QUERIES, DOCUMENTS, [[1.0, 0.0]] + LABELS[1:])
    with pytest.raises(ValueError, match="documents_per_query=4: raise it"):
        query_lists(preprocessor, QUERIES, DOCUMENTS, LABELS, documents_per_query=4)
    with pytest.raises(ValueError, match=r"takes labels of shape \[queries, documents_per_query\]"):
        ListNetLoss()(np.zeros(4, "float32"), np.zeros((4, 1), "float32"))
