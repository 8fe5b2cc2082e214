"""A masked LM's answers: `fill_mask`'s tokens as transformers' fill-mask
pipeline writes them, for each kind of tokenizer, and `predict` on raw
texts, the same at every call."""

import pickle

import numpy as np
import pytest
import transformers

import kbert
from kbert.models import task_inputs
from kbert.text.masking import top_k_guesses
from tests.families.test_families import CONFIGS, SIZES
from tests.families.test_family_text import nudged, roberta_folder, xlmr_folder  # noqa: F401 (fixtures)
from tests.helpers import to_numpy

MASKED = {
    "bert": ["the film was [MASK] and long.", "a [MASK] of the sea, [MASK] told."],
    "roberta": ["the film was <mask> and long.", "a <mask> of the sea,<mask> told."],
    "xlm-roberta": ["Ein wunderbares <mask> über das Meer", "Un livre<mask> sur Paris."],
}


@pytest.fixture(scope="module")
def masked_lm_folder(request, tmp_path_factory):
    """A tiny `<family>ForMaskedLM` on a real tokenizer: MiniLM's WordPiece,
    or the byte-level BPE and unigram trained in `test_family_text`."""
    def folder(family):
        source = {"bert": lambda: request.getfixturevalue("minilm_dir"),
                  "roberta": lambda: request.getfixturevalue("roberta_folder"),
                  "xlm-roberta": lambda: request.getfixturevalue("xlmr_folder")}[family]()
        path = tmp_path_factory.mktemp(family)
        tokenizer = transformers.AutoTokenizer.from_pretrained(source)
        tokenizer.save_pretrained(path)
        config_class, sizes = CONFIGS.get(family, (transformers.BertConfig, SIZES))
        model_class = transformers.AutoModelForMaskedLM.from_config
        nudged(model_class(config_class(**{**sizes, "vocab_size": len(tokenizer)}))).save_pretrained(path)
        return str(path)
    return folder


@pytest.mark.parametrize("family", ["bert", "roberta", "xlm-roberta"])
def test_fill_mask_gives_the_pipelines_token_strings_ids_and_scores(masked_lm_folder, family):
    folder = masked_lm_folder(family)
    model = kbert.MaskedLM.from_preset(folder, sequence_length=32)
    fill = transformers.pipeline("fill-mask", model=folder, top_k=8)
    for text, guesses in zip(MASKED[family], model.fill_mask(MASKED[family], top_k=8)):
        expected = fill(text)
        expected = [expected] if isinstance(expected[0], dict) else expected  # one [MASK], or a list per mask
        assert len(guesses) == len(expected)
        for ours, theirs in zip(guesses, expected):
            assert [g.token_id for g in ours] == [t["token"] for t in theirs]
            assert [token for token, _ in ours] == [t["token_str"] for t in theirs]
            np.testing.assert_allclose([p for _, p in ours], [t["score"] for t in theirs], atol=1e-5)


@pytest.mark.parametrize("family", ["bert", "roberta", "xlm-roberta"])
def test_every_token_reads_as_transformers_decodes_it_alone(masked_lm_folder, family):
    # Each id top-1 at one slot: the whole vocabulary through the answers'
    # decoding, byte-level pieces of part of a character ("ĠâĢ") included.
    folder = masked_lm_folder(family)
    tokenizer = kbert.MaskedLM.from_preset(folder, sequence_length=32).preprocessor.tokenizer
    size = min(tokenizer.vocabulary_size, 2000)
    logits = np.eye(size, tokenizer.vocabulary_size, dtype="float32")[:, None, :]
    tokens = top_k_guesses(logits, np.ones((size, 1), bool), tokenizer, 1)["tokens"].numpy()[:, 0, 0]
    hf = transformers.AutoTokenizer.from_pretrained(folder)
    assert [t.decode() for t in tokens] == [hf.decode([i]) for i in range(size)]
    if family == "roberta":
        assert any(t.startswith(b" ") for t in tokens) and any("\ufffd" in t.decode() for t in tokens)


def test_a_guess_unpacks_as_a_pair_and_keeps_its_id(minilm_dir):
    model = kbert.MaskedLM.from_preset(minilm_dir, sequence_length=16)
    [[[guess, *_]]] = model.fill_mask(["the [MASK] is blue."], top_k=2)
    token, probability = guess
    assert (guess.token, guess.probability) == (token, probability) == guess
    assert model.preprocessor.tokenizer.id_to_token(guess.token_id) == token
    assert pickle.loads(pickle.dumps(guess)).token_id == guess.token_id


TEXTS = ["the family of dashwood had long been settled in sussex.", "she was [MASK] to see [MASK].",
         "emma woodhouse, handsome, clever, and rich.", "it rained."]


@pytest.fixture(scope="module")
def tiny_masked_lm(minilm_dir):
    backbone = kbert.BertBackbone(vocabulary_size=30522, num_layers=1, num_heads=2, hidden_dim=16,
                                  intermediate_dim=32, max_sequence_length=32)
    return kbert.MaskedLM(backbone, kbert.BertPreprocessor.from_preset(minilm_dir, sequence_length=32),
                          max_predictions=4)


def test_predict_on_texts_gives_the_same_logits_at_every_call(tiny_masked_lm):
    model = tiny_masked_lm
    first, second = (model.predict(TEXTS, batch_size=2, verbose=0)["mlm_logits"] for _ in range(2))
    np.testing.assert_array_equal(first, second)
    np.testing.assert_array_equal(to_numpy(model.predict_on_batch(TEXTS[:2])["mlm_logits"]),
                                  to_numpy(model.predict_on_batch(TEXTS[:2])["mlm_logits"]))


def test_predict_reads_the_written_masks_of_a_text_that_has_some(tiny_masked_lm):
    model = tiny_masked_lm
    [features] = task_inputs.dataset(model, TEXTS[:2], batch_size=2).take(1)
    features = features[0]
    token_ids = np.asarray(features["token_ids"][1])
    written = np.asarray(model.preprocessor(TEXTS[1:2])["token_ids"][0])[:len(token_ids)]
    mask_at = np.flatnonzero(written == model.preprocessor.tokenizer.mask_id)
    np.testing.assert_array_equal(token_ids, written)  # kept as written
    np.testing.assert_array_equal(features["mask_positions"][1][:2], mask_at)
    [[first, second]] = model.fill_mask(TEXTS[1:2], top_k=1)
    logits = model.predict(TEXTS[1:2], verbose=0)["mlm_logits"][0]
    assert [g.token_id for g in first + second] == list(logits[:2].argmax(-1))
    # A text without [MASK] is masked as in training: 15% of its tokens, at least one.
    assert 1 <= np.count_nonzero(features["mask_positions"][0]) <= 4


def test_fit_still_masks_anew_at_every_pass(tiny_masked_lm):
    batches = [next(iter(task_inputs.dataset(tiny_masked_lm, TEXTS * 4, batch_size=16, labeled=True)))
               for _ in range(2)]
    assert not np.array_equal(batches[0][0]["mask_positions"], batches[1][0]["mask_positions"])
