"""kbert.search against sentence-transformers' `util`."""

import numpy as np
import pytest

from kbert.search import semantic_search, similarity


def test_similarity_equals_sentence_transformers_cos_sim():
    import torch
    from sentence_transformers import util

    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(5, 8)), rng.normal(size=(7, 8))
    expected = util.cos_sim(torch.tensor(a, dtype=torch.float32), torch.tensor(b, dtype=torch.float32)).numpy()
    got = similarity(a, b)
    assert got.dtype == np.float32 and got.shape == (5, 7)
    np.testing.assert_allclose(got, expected, atol=1e-6)


def test_semantic_search_gives_the_whole_corpus_when_top_k_exceeds_it():
    import torch
    from sentence_transformers import util

    rng = np.random.default_rng(1)
    queries, corpus = rng.normal(size=(3, 8)), rng.normal(size=(4, 8))
    scores, ids = semantic_search(queries, corpus, top_k=10, corpus_chunk_size=3)
    hits = util.semantic_search(torch.tensor(queries, dtype=torch.float32), torch.tensor(corpus, dtype=torch.float32),
                                top_k=10)
    assert ids.shape == (3, 4)
    np.testing.assert_array_equal(ids, [[h["corpus_id"] for h in q] for q in hits])
    np.testing.assert_allclose(scores, [[h["score"] for h in q] for q in hits], atol=1e-6)


def test_semantic_search_refuses_embeddings_of_different_widths():
    with pytest.raises(ValueError, match=r"\[queries, dim\] and \[corpus, dim\].*\(2, 8\) and \(3, 4\)"):
        semantic_search(np.zeros((2, 8)), np.zeros((3, 4)))


QUERIES = ["where is the eiffel tower", "who wrote hamlet", "what is the boiling point of water",
           "how many legs does a spider have", "what colour is the sky", "who painted the mona lisa",
           "who wrote hamlet"]
ANSWERS = ["The Eiffel Tower is in Paris.", "Hamlet is a play by William Shakespeare.",
           "Water boils at 100 degrees Celsius.", "Spiders have eight legs.", "The sky is blue on a clear day.",
           "Leonardo da Vinci painted the Mona Lisa.", "Shakespeare wrote Hamlet around 1600."]
CORPUS = ["The Louvre is in Paris.", "Macbeth is a play.", "Ice melts at 0 degrees Celsius.", "Ants have six legs.",
          "Grass is green.", "Van Gogh painted sunflowers.", "Paris is the capital of France.",
          "Shakespeare was born in Stratford.", "Steam is hot water.", "The sea is blue too."]


@pytest.mark.parametrize("options", [
    {},
    {"range_min": 1, "relative_margin": 0.05, "num_negatives": 2},
    {"absolute_margin": 0.1, "max_score": 0.6, "min_score": 0.05},
    {"num_negatives": 2, "output_format": "n-tuple"},
])
def test_mine_hard_negatives_picks_what_sentence_transformers_picks(minilm_dir, options):
    import datasets
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.util import mine_hard_negatives as theirs

    import kbert
    from kbert.search import mine_hard_negatives

    mined = theirs(datasets.Dataset.from_dict({"query": QUERIES, "answer": ANSWERS}),
                   SentenceTransformer(minilm_dir, device="cpu"), corpus=CORPUS, verbose=False, **options)
    ours = mine_hard_negatives(kbert.BertTextEmbedder.from_preset(minilm_dir), QUERIES, ANSWERS, corpus=CORPUS,
                               **options)
    assert len(ours) == len(mined.column_names) and len(ours[0]) > 0
    assert [list(column) for column in ours] == [mined[name] for name in mined.column_names]


def test_mine_hard_negatives_refuses_a_window_too_small_for_the_negatives():
    from kbert.search import mine_hard_negatives

    with pytest.raises(ValueError, match="room for num_negatives=3"):
        mine_hard_negatives(None, ["q"], ["p"], range_min=2, range_max=4)
