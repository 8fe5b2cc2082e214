"""The embedding losses against a direct numpy computation (and
sentence-transformers' own), duplicate-free batches, and BertTextEmbedder.fit
on pairs, triplets and scored pairs."""

import keras
import numpy as np
import pytest

import kbert
from kbert.training.contrastive import (
    CoSENTLoss,
    CosineSimilarityLoss,
    MultipleNegativesRankingLoss,
    batches_without_duplicates,
)
from tests.helpers import to_numpy


def unit(x):
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def cross_entropy(logits, labels):
    logits = logits - logits.max(axis=1, keepdims=True)
    log_probabilities = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
    return -log_probabilities[np.arange(len(labels)), labels]


def mnrl_numpy(embeddings, scale=20.0, symmetric=False):
    """sentence-transformers' MultipleNegativesRankingLoss written out: anchor
    i against [all positives, all negatives], the right answer at i."""
    e = unit(embeddings.astype("float64"))
    batch = len(e)
    candidates = np.concatenate([e[:, c] for c in range(1, e.shape[1])])
    scores = scale * e[:, 0] @ candidates.T
    loss = cross_entropy(scores, np.arange(batch))
    if symmetric:
        loss = (loss + cross_entropy(scores[:, :batch].T, np.arange(batch))) / 2
    return loss.mean()


def cosent_numpy(embeddings, labels, scale=20.0):
    e = unit(embeddings.astype("float64"))
    cosine = scale * (e[:, 0] * e[:, 1]).sum(-1)
    terms = [cosine[i] - cosine[j] for i in range(len(labels)) for j in range(len(labels)) if labels[i] < labels[j]]
    return np.log(1 + np.exp(terms).sum())


EMBEDDINGS = np.random.default_rng(0).normal(size=(6, 3, 8)).astype("float32")
SCORES = np.array([0.0, 0.2, 0.2, 0.5, 0.9, 1.0], "float32")


@pytest.mark.parametrize("columns", [2, 3])
@pytest.mark.parametrize("symmetric", [False, True])
def test_multiple_negatives_ranking_loss_equals_numpy(columns, symmetric):
    loss = MultipleNegativesRankingLoss(symmetric=symmetric)(np.zeros(6), EMBEDDINGS[:, :columns])
    np.testing.assert_allclose(float(to_numpy(loss)), mnrl_numpy(EMBEDDINGS[:, :columns], symmetric=symmetric),
                               rtol=1e-5)


def test_losses_equal_sentence_transformers():
    import torch
    from sentence_transformers.sentence_transformer import losses

    columns = [torch.tensor(EMBEDDINGS[:, c]) for c in range(3)]
    mnrl = losses.MultipleNegativesRankingLoss(model=None)
    symmetric = losses.MultipleNegativesRankingLoss(model=None, directions=("query_to_doc", "doc_to_query"),
                                                    partition_mode="per_direction")
    expected = {
        "mnrl": float(mnrl.compute_loss_from_embeddings(columns, None)),
        "symmetric": float(symmetric.compute_loss_from_embeddings(columns[:2], None)),
        "cosent": float(losses.CoSENTLoss(model=None).compute_loss_from_embeddings(columns[:2],
                                                                                   torch.tensor(SCORES))),
    }
    got = {
        "mnrl": MultipleNegativesRankingLoss()(SCORES, EMBEDDINGS),
        "symmetric": MultipleNegativesRankingLoss(symmetric=True)(SCORES, EMBEDDINGS[:, :2]),
        "cosent": CoSENTLoss()(SCORES, EMBEDDINGS[:, :2]),
    }
    for name in expected:
        np.testing.assert_allclose(float(to_numpy(got[name])), expected[name], rtol=1e-5, err_msg=name)


def test_cosent_and_cosine_similarity_losses_equal_numpy():
    np.testing.assert_allclose(float(to_numpy(CoSENTLoss()(SCORES, EMBEDDINGS[:, :2]))),
                               cosent_numpy(EMBEDDINGS[:, :2], SCORES), rtol=1e-5)
    e = unit(EMBEDDINGS[:, :2].astype("float64"))
    expected = (((e[:, 0] * e[:, 1]).sum(-1) - SCORES) ** 2).mean()
    np.testing.assert_allclose(float(to_numpy(CosineSimilarityLoss()(SCORES, EMBEDDINGS[:, :2]))), expected, rtol=1e-5)


def test_losses_refuse_one_column():
    with pytest.raises(ValueError, match=r"at least 2 columns.*\(anchors, positives\)"):
        MultipleNegativesRankingLoss()(np.zeros(6), EMBEDDINGS[:, :1])


def test_batches_without_duplicates_hold_every_example_once_and_no_text_twice():
    rng = np.random.default_rng(1)
    anchors = [f"q{i}" for i in range(200)]
    positives = [f"p{rng.integers(40)}" for _ in range(200)]  # many repeats
    batches = batches_without_duplicates([anchors, positives], batch_size=16, seed=0)
    assert sorted(i for b in batches for i in b) == list(range(200))
    for batch in batches:
        texts = [anchors[i] for i in batch] + [positives[i] for i in batch]
        assert len(texts) == len(set(texts)) and len(batch) <= 16
    assert sum(len(b) == 16 for b in batches) >= 8  # most batches are full
    # All one text: linear time, batches of one.
    assert all(len(b) == 1 for b in batches_without_duplicates([["same"] * 50, ["x"] * 50], 8))


QUESTIONS = ["where is the eiffel tower", "who wrote hamlet", "what is the boiling point of water",
             "how many legs does a spider have", "what colour is the sky", "who painted the mona lisa"]
PASSAGES = ["The Eiffel Tower is in Paris.", "Hamlet is a play by William Shakespeare.",
            "Water boils at 100 degrees Celsius.", "Spiders have eight legs.", "The sky is blue on a clear day.",
            "Leonardo da Vinci painted the Mona Lisa."]


NEGATIVES = ["The Louvre is in Paris.", "Macbeth is a play.", "Ice melts at 0 degrees Celsius.",
             "Ants have six legs.", "Grass is green.", "Van Gogh painted sunflowers."]


@pytest.fixture(scope="module")
def embedder(minilm_dir):
    backbone = kbert.BertBackbone(vocabulary_size=30522, num_layers=2, num_heads=2, hidden_dim=32,
                                  intermediate_dim=64, max_sequence_length=64, dropout=0.0)
    # 16 tokens hold every text: one padded shape, one trace.
    preprocessor = kbert.BertPreprocessor.from_preset(minilm_dir, sequence_length=16)
    return kbert.BertTextEmbedder(backbone, preprocessor)


def test_fit_on_triplets_reports_the_in_batch_loss_and_learns(embedder):
    # One batch of all examples: the first step's loss is the loss of the
    # starting embeddings, whatever the shuffle.
    before = embedder.encode(QUESTIONS + PASSAGES + NEGATIVES).reshape(3, 6, -1).transpose(1, 0, 2)
    embedder.compile(learning_rate=2e-3, warmup=0.0)
    history = embedder.fit((QUESTIONS, PASSAGES, NEGATIVES), epochs=3, batch_size=6, no_duplicates=True, seed=0,
                           verbose=0)
    loss = history.history["loss"]
    np.testing.assert_allclose(loss[0], mnrl_numpy(before), rtol=1e-4)
    assert loss[2] < loss[0]


def test_fit_refuses_single_texts_with_the_default_loss(embedder):
    embedder.compile()
    with pytest.raises(ValueError, match=r"tuple of lists of texts: \(anchors, positives\)"):
        embedder.fit(QUESTIONS, np.zeros((6, 32)))
    with pytest.raises(ValueError, match="6 pairs but 2 scores"):
        embedder.fit((QUESTIONS, PASSAGES), [0.0, 1.0])
    config = keras.saving.serialize_keras_object(MultipleNegativesRankingLoss(symmetric=True))
    assert keras.saving.deserialize_keras_object(config).get_config()["symmetric"] is True


class StopsAfterOneEpoch(keras.callbacks.Callback):
    def on_epoch_end(self, epoch, logs=None):
        self.seen = self.model
        self.model.stop_training = True


def test_callbacks_given_to_fit_see_the_embedder_and_stop_its_fit(embedder):
    embedder.compile()
    callback = StopsAfterOneEpoch()
    history = embedder.fit((QUESTIONS, PASSAGES), epochs=3, batch_size=6, callbacks=[callback], verbose=0)
    assert callback.seen is embedder and embedder.history is history
    assert len(history.history["loss"]) == 1  # stopped after the first of 3 epochs
    # The pooler, no part of an embedding, is left out of what fit trains,
    # as an argument: its layer stays trainable.
    assert embedder.backbone.pooled_dense.trainable


@pytest.fixture(scope="module")
def short_texts(minilm_dir):
    return kbert.BertPreprocessor.from_preset(minilm_dir, sequence_length=16)


def tiny_embedder(preprocessor, dropout, jit_compile="auto"):
    keras.utils.set_random_seed(0)
    backbone = kbert.BertBackbone(vocabulary_size=30522, num_layers=2, num_heads=2, hidden_dim=16,
                                  intermediate_dim=32, max_sequence_length=32, dropout=dropout)
    embedder = kbert.BertTextEmbedder(backbone, preprocessor)
    embedder.compile(optimizer=keras.optimizers.SGD(0.5), jit_compile=jit_compile)
    return embedder


def fitted(embedder, epochs=2, **kwargs):
    history = embedder.fit((QUESTIONS, PASSAGES), batch_size=6, epochs=epochs, seed=0, verbose=0, **kwargs)
    return history.history["loss"], embedder.get_weights()


@pytest.mark.parametrize("jit_compile", ["auto", True] if keras.backend.backend() == "tensorflow" else ["auto"])
def test_mini_batches_train_as_the_whole_batch(short_texts, jit_compile):
    # GradCache: the loss of all 6 pairs, the embeddings computed 4 and 2 at a
    # time, then again with their share of the gradient. Under XLA too (on a
    # TensorFlow CPU "auto" is without it), where a loop over mini-batches
    # read the wrong rows and gave a NaN loss.
    whole_loss, whole = fitted(tiny_embedder(short_texts, 0.0, jit_compile))
    cached_loss, cached = fitted(tiny_embedder(short_texts, 0.0, jit_compile), mini_batch_size=4)
    np.testing.assert_allclose(cached_loss, whole_loss, rtol=1e-5)
    assert max(np.abs(a - b).max() for a, b in zip(cached, whole)) < 1e-5
    with pytest.raises(ValueError, match="mini_batch_size=0: give a positive number"):
        tiny_embedder(short_texts, 0.0).fit((QUESTIONS, PASSAGES), mini_batch_size=0)
    with pytest.raises(ValueError, match="mini_batch_size .GradCache. works on a tuple of lists of texts"):
        tiny_embedder(short_texts, 0.0).fit(QUESTIONS, np.zeros((6, 16)), mini_batch_size=2)


def test_mini_batches_replay_their_dropout_masks(short_texts, monkeypatch):
    # The recomputed mini-batches must draw the masks of the first pass: the
    # same run differentiated straight through (no recomputation) is the
    # reference. Masks drawn anew differ by about 4 here.
    embedder = tiny_embedder(short_texts, 0.3)
    initial = embedder.get_weights()
    _, cached = fitted(embedder, epochs=1, mini_batch_size=4)
    monkeypatch.setattr(kbert.backend, "remat_in_turn", lambda run, count: [run(i) for i in range(count)])
    _, straight = fitted(tiny_embedder(short_texts, 0.3), epochs=1, mini_batch_size=4)
    assert max(np.abs(a - b).max() for a, b in zip(cached, initial)) > 1e-3
    assert max(np.abs(a - b).max() for a, b in zip(cached, straight)) < 1e-5


def test_matryoshka_loss_equals_sentence_transformers_on_minilm(minilm_dir):
    import torch
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer import losses

    from kbert.training.contrastive import MatryoshkaLoss

    model = SentenceTransformer(minilm_dir, device="cpu").eval()
    dims, weights = [384, 128, 32], [1.0, 0.5, 2.0]
    # Mismatched pairs: a loss of a few units, not of float32's rounding.
    features = [model.tokenize(QUESTIONS), model.tokenize(PASSAGES[::-1])]
    with torch.no_grad():
        theirs = losses.MatryoshkaLoss(model, losses.MultipleNegativesRankingLoss(model), dims, weights)(features, None)
    embedder = kbert.BertTextEmbedder.from_preset(minilm_dir)
    embeddings = np.stack([embedder.encode(QUESTIONS), embedder.encode(PASSAGES[::-1])], axis=1)
    loss = MatryoshkaLoss(MultipleNegativesRankingLoss(), dims, weights)
    assert float(theirs) > 1
    np.testing.assert_allclose(float(to_numpy(loss(np.zeros(6), embeddings))), float(theirs), rtol=1e-4)
    restored = MatryoshkaLoss.from_config(loss.get_config())  # saved in a compile config
    assert (restored.dims, restored.weights, type(restored.loss)) == (dims, weights, MultipleNegativesRankingLoss)
    with pytest.raises(ValueError, match="go past the embedding's 384"):
        MatryoshkaLoss(CoSENTLoss(), [512, 64])(SCORES[:6], embeddings)
