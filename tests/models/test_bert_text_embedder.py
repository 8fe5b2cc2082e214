import numpy as np
import pytest

import kbert
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


def test_unnormalized_cls_pooling_is_the_cls_vector(embedder):
    cls_embedder = kbert.BertTextEmbedder(embedder.backbone, embedder.preprocessor, pooling="cls", normalize=False)
    inputs = embedder.preprocessor(SENTENCES[:2])
    cls = to_numpy(embedder.backbone(inputs)["sequence_output"])[:, 0]
    np.testing.assert_allclose(to_numpy(cls_embedder(inputs)), cls, atol=1e-5)
