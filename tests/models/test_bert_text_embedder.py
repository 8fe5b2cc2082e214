import keras
import numpy as np
import pytest

import kbert
from kbert.metrics import retrieval_metrics, spearman
from kbert.search import semantic_search
from tests.helpers import to_numpy

SENTENCES = [
    "A man is eating food.",
    "A man is riding a white horse on an enclosed ground.",
    "Ein Mann isst Essen — café, naïve, 東京 and emoji 🙂!",
    "short",
    "This sentence is quite a bit longer than the others, so that the batch is padded "
    "and the mean has to skip padding tokens to come out right.",
]


@pytest.fixture(scope="module")
def reference_embeddings(minilm_dir):
    import sentence_transformers

    model = sentence_transformers.SentenceTransformer(minilm_dir, device="cpu")
    return model.encode(SENTENCES, convert_to_numpy=True, normalize_embeddings=False)


@pytest.fixture(scope="module")
def embedder(minilm_dir):
    return kbert.BertTextEmbedder.from_preset(minilm_dir)


def test_embeddings_equal_sentence_transformers_on_real_minilm(embedder, reference_embeddings):
    assert embedder.preprocessor.sequence_length == 256  # from sentence_bert_config.json
    embeddings = np.asarray(embedder.predict(SENTENCES, batch_size=2, verbose=0))
    np.testing.assert_allclose(embeddings, reference_embeddings, atol=1e-4)
    np.testing.assert_allclose(np.linalg.norm(embeddings, axis=-1), 1.0, atol=1e-5)


def test_truncate_dim_cuts_as_sentence_transformers_does(embedder, minilm_dir):
    import sentence_transformers

    theirs = sentence_transformers.SentenceTransformer(minilm_dir, device="cpu", truncate_dim=128).encode(SENTENCES)
    np.testing.assert_allclose(embedder.encode(SENTENCES, truncate_dim=128), theirs, atol=1e-4)  # not renormalized
    cut = kbert.BertTextEmbedder.from_preset(minilm_dir, truncate_dim=64)
    assert cut.get_config()["truncate_dim"] == 64 and cut.encode(SENTENCES[:2]).shape == (2, 64)
    with pytest.raises(ValueError, match="truncate_dim=500: the embedding has 384 values"):
        embedder.encode(SENTENCES, truncate_dim=500)


def test_unnormalized_cls_pooling_is_the_cls_vector(embedder):
    cls_embedder = kbert.BertTextEmbedder(embedder.backbone, embedder.preprocessor, pooling="cls", normalize=False)
    inputs = embedder.preprocessor(SENTENCES[:2])
    cls = to_numpy(embedder.backbone(inputs)["sequence_output"])[:, 0]
    np.testing.assert_allclose(to_numpy(cls_embedder(inputs)), cls, atol=1e-5)


def test_semantic_search_and_retrieval_metrics_equal_sentence_transformers():
    import torch
    from scipy.stats import spearmanr
    from sentence_transformers import util
    from sentence_transformers.sentence_transformer.evaluation import InformationRetrievalEvaluator

    rng = np.random.default_rng(0)
    queries, corpus = rng.normal(size=(30, 16)), rng.normal(size=(200, 16))
    # Small chunks, so that results are merged across corpus and query chunks.
    scores, ids = semantic_search(queries, corpus, top_k=20, corpus_chunk_size=37, query_chunk_size=7)
    hits = util.semantic_search(torch.tensor(queries, dtype=torch.float32), torch.tensor(corpus, dtype=torch.float32),
                                top_k=20)
    np.testing.assert_array_equal(ids, [[h["corpus_id"] for h in q] for q in hits])
    np.testing.assert_allclose(scores, [[h["score"] for h in q] for q in hits], atol=1e-5)

    relevant = [set(rng.choice(200, size=rng.integers(1, 4), replace=False).tolist()) | {int(ids[q, q % 12])}
                for q in range(30)]
    evaluator = InformationRetrievalEvaluator({str(q): "" for q in range(30)}, {str(c): "" for c in range(200)},
                                              {str(q): {str(c) for c in r} for q, r in enumerate(relevant)},
                                              precision_recall_at_k=[1, 10], mrr_at_k=[10], ndcg_at_k=[10])
    expected = evaluator.compute_metrics([[{"corpus_id": str(c), "score": float(s)} for c, s in zip(i, sc)]
                                          for i, sc in zip(ids, scores)])
    got = retrieval_metrics(ids, relevant, recall_at=(1, 10))
    assert got["recall@1"] > 0 and got["ndcg@10"] < 1
    for name, value in (("recall@1", expected["recall@k"][1]), ("recall@10", expected["recall@k"][10]),
                        ("mrr@10", expected["mrr@k"][10]), ("ndcg@10", expected["ndcg@k"][10])):
        assert got[name] == pytest.approx(value, abs=1e-12), name

    predicted, gold = rng.normal(size=50), rng.integers(0, 5, size=50)  # gold scores with ties
    assert spearman(predicted, gold) == pytest.approx(spearmanr(predicted, gold)[0], abs=1e-12)


def test_graded_ndcg_equals_scikit_learns_ndcg_score():
    from sklearn.metrics import ndcg_score

    rng = np.random.default_rng(1)
    rankings = np.array([rng.permutation(50) for _ in range(20)])  # every document ranked
    grades = [{int(c): int(rng.integers(1, 5)) for c in rng.choice(50, size=rng.integers(1, 9), replace=False)}
              for _ in range(20)]
    truth = np.zeros((20, 50))
    scores = np.zeros((20, 50))
    for q, (ranked, graded) in enumerate(zip(rankings, grades)):
        truth[q, list(graded)] = list(graded.values())
        scores[q, ranked] = np.arange(50, 0, -1)  # best first
    for k in (1, 5, 10):
        got = retrieval_metrics(rankings, grades, recall_at=(k,), ndcg_at=k)
        assert got[f"ndcg@{k}"] == pytest.approx(ndcg_score(truth, scores, k=k, ignore_ties=True), abs=1e-12)
    # Recall and MRR count every graded id, whatever its grade.
    binary = retrieval_metrics(rankings, [set(g) for g in grades])
    graded = retrieval_metrics(rankings, grades)
    assert {k: v for k, v in graded.items() if k != "ndcg@10"} == {k: v for k, v in binary.items() if k != "ndcg@10"}
    assert graded["ndcg@10"] != binary["ndcg@10"]
    with pytest.raises(ValueError, match="Grades must be positive"):
        retrieval_metrics([[1]], [{1: 0}])


def test_similarity_and_search_rank_the_meal_first(embedder):
    texts = ["A man is eating food.", "Someone is having a meal.", "A horse is ridden.", "The stock market fell."]
    embeddings = embedder.encode(texts)
    scores, ids = semantic_search(embeddings[:1], embeddings[1:], top_k=2)
    assert ids.tolist() == [[0, 1]]
    np.testing.assert_allclose(scores, embedder.similarity(embeddings[:1], embeddings[1:3]), atol=1e-5)


@pytest.mark.skipif(keras.backend.backend() != "tensorflow", reason="run once: the exported graph is TensorFlow's")
def test_export_puts_the_prompt_before_each_text_in_the_graph(embedder, tmp_path):
    prompted = kbert.BertTextEmbedder(embedder.backbone, embedder.preprocessor, prompts={"query": "query: "})
    path = prompted.export(str(tmp_path / "embedder"), prompt_name="query")
    served = np.asarray(kbert.serving.serve_check(path, text=SENTENCES[:3])["embedding"])
    expected = prompted.encode(["query: " + s for s in SENTENCES[:3]] + SENTENCES[:3], prompt="")
    np.testing.assert_allclose(served, expected[:3], atol=1e-4)
    assert np.abs(served - expected[3:]).max() > 1e-3  # the prompt did change them
    assert prompted.default_prompt_name is None  # export left the model as it was
