import numpy as np
import pytest
import transformers

import kbert
from kbert.models import task_inputs
from tests.helpers import random_inputs, to_numpy, transformers_outputs
from tests.presets.test_huggingface_import import save_random_checkpoint


def gather(logits, positions):
    return np.take_along_axis(logits, positions[:, :, None], axis=1)


@pytest.mark.parametrize("hidden_act", ["gelu", "gelu_new"])
def test_masked_lm_logits_match_transformers(tmp_path, hidden_act):
    hf_model = save_random_checkpoint(tmp_path, transformers.BertForMaskedLM, hidden_act=hidden_act)
    model = kbert.BertMaskedLM.from_preset(str(tmp_path))
    inputs = random_inputs(2, 10, 120)
    positions = np.array([[1, 4, 0], [2, 3, 1]], "int32")
    logits = to_numpy(model({**inputs, "mask_positions": positions})["mlm_logits"])
    expected = gather(transformers_outputs(hf_model, inputs).logits.numpy(), positions)
    np.testing.assert_allclose(logits, expected, atol=1e-4)


def test_pretrainer_logits_match_transformers(tmp_path):
    hf_model = save_random_checkpoint(tmp_path, transformers.BertForPreTraining)
    model = kbert.BertPretrainer.from_preset(str(tmp_path))
    inputs = random_inputs(3, 12, 120)
    positions = np.array([[1, 5], [2, 2], [0, 7]], "int32")
    outputs = model({**inputs, "mask_positions": positions})
    reference = transformers_outputs(hf_model, inputs)
    np.testing.assert_allclose(
        to_numpy(outputs["mlm_logits"]), gather(reference.prediction_logits.numpy(), positions), atol=1e-4
    )
    np.testing.assert_allclose(to_numpy(outputs["nsp_logits"]), reference.seq_relationship_logits.numpy(), atol=1e-4)


def test_output_projection_is_the_token_embedding(tmp_path):
    save_random_checkpoint(tmp_path, transformers.BertForMaskedLM)
    model = kbert.BertMaskedLM.from_preset(str(tmp_path))
    vocabulary_matrices = [w for w in model.weights if tuple(w.shape) == (120, 32)]
    assert vocabulary_matrices == [model.backbone.token_embedding.embeddings]


@pytest.fixture(scope="module")
def minilm_mlm(minilm_dir):
    return kbert.BertMaskedLM.from_preset(minilm_dir)


def test_fill_mask_on_real_minilm_returns_ranked_words(minilm_mlm):
    model = minilm_mlm
    [[answers]] = model.fill_mask(["i went to the [MASK] to deposit my paycheck."], top_k=3)
    assert len(answers) == 3
    probabilities = [p for _, p in answers]
    assert probabilities == sorted(probabilities, reverse=True) and 0 < sum(probabilities) <= 1


def test_fill_mask_without_a_mask_says_how_to_write_one(minilm_mlm):
    model = minilm_mlm
    with pytest.raises(ValueError, match=r"write \[MASK\]"):
        model.fill_mask(["a [MASK] here", "no blank here"])
    with pytest.raises(ValueError, match=r"list of texts"):
        model.fill_mask("one [MASK] text")


def tiny(cls, minilm_dir):
    backbone = kbert.BertBackbone(vocabulary_size=30522, num_layers=2, num_heads=2, hidden_dim=32,
                                  intermediate_dim=64, max_sequence_length=64, dropout=0.0)
    model = cls(backbone, kbert.BertPreprocessor.from_preset(minilm_dir, sequence_length=32), max_predictions=5)
    model.compile(learning_rate=1e-3)  # random weights: learn visibly in a few steps
    return model


AUSTEN = [
    "It is a truth universally acknowledged, that a single man in possession of a good fortune, "
    "must be in want of a wife.",
    "Emma Woodhouse, handsome, clever, and rich, with a comfortable home and happy disposition.",
    "The family of Dashwood had long been settled in Sussex.",
    "Sir Walter Elliot, of Kellynch Hall, in Somersetshire, was a man who never took up any book.",
] * 4


def test_masked_lm_fits_raw_strings_with_fresh_masks_each_epoch(minilm_dir):
    model = tiny(kbert.BertMaskedLM, minilm_dir)
    history = model.fit(AUSTEN, batch_size=8, epochs=3, verbose=0)
    losses = history.history["loss"]
    assert np.isfinite(losses).all() and losses[-1] < losses[0]


@pytest.mark.parametrize("packing", [False, True])
def test_masked_lm_fit_on_texts_with_nothing_to_mask_is_refused(minilm_dir, packing):
    backbone = kbert.BertBackbone(vocabulary_size=30522, num_layers=1, num_heads=2, hidden_dim=16,
                                  intermediate_dim=32, max_sequence_length=32, packing=packing)
    model = kbert.BertMaskedLM(backbone, kbert.BertPreprocessor.from_preset(minilm_dir, sequence_length=16))
    with pytest.raises(ValueError, match="All 3 texts are empty or whitespace.*none to mask"):
        model.fit(["", "  ", "\t\n"], epochs=1, verbose=0)


def test_masked_lm_from_a_preset_packs_raw_texts_into_rows(minilm_dir):
    model = kbert.BertMaskedLM.from_preset(minilm_dir, sequence_length=64)
    assert model.backbone.packing
    assert not kbert.BertMaskedLM.from_preset(minilm_dir, packing=False).backbone.packing
    assert not kbert.BertMaskedLM.from_preset(minilm_dir, preprocessor=None).backbone.packing  # fed token ids
    texts = AUSTEN[:4]
    [(x, y, w)] = list(task_inputs.dataset(model, texts, batch_size=8, labeled=True))
    alone = model.preprocessor.with_padding("longest")(texts)
    lengths = np.asarray(alone["padding_mask"]).sum(axis=1)
    assert len(x["token_ids"]) == -(-lengths.sum() // 64) < len(texts)  # 4 texts in 2 rows
    # Each text whole in its row, as it is tokenized alone (masks aside).
    ids, sequence_ids = np.asarray(x["token_ids"]), np.asarray(x["sequence_ids"])
    unmasked = ids.copy()
    positions, labels, weights = (np.asarray(v) for v in (x["mask_positions"], y["mlm_logits"], w["mlm_logits"]))
    for row in range(len(ids)):
        real = weights[row] > 0
        unmasked[row, positions[row][real]] = labels[row][real]
    packed = sorted(tuple(unmasked[r][sequence_ids[r] == s]) for r in range(len(ids))
                    for s in range(1, sequence_ids[r].max() + 1))
    assert packed == sorted(tuple(np.asarray(alone["token_ids"])[i, :n]) for i, n in enumerate(lengths))
    history = model.fit(AUSTEN, batch_size=2, epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"]).all()


def test_pretrainer_fits_next_sentence_pairs(minilm_dir):
    documents = [[s, s[::-1]] for s in AUSTEN[:4]] * 3
    pairs = kbert.text.next_sentence_dataset(documents, max_seq_length=32, seed=0)
    model = tiny(kbert.BertPretrainer, minilm_dir)
    history = model.fit(pairs.batch(4), epochs=2, verbose=0)
    assert {"loss", "mlm_logits_loss", "nsp_logits_loss"} <= set(history.history)
    assert np.isfinite(history.history["loss"]).all()


def test_a_pretrainers_preset_gives_a_masked_lm_its_head(minilm_dir, tmp_path):
    # Pre-train, then fill in blanks from the preset: BertMaskedLM takes the
    # pre-trainer's masked-LM head, not a new one.
    pretrainer = tiny(kbert.BertPretrainer, minilm_dir)
    bias = pretrainer.mlm_head.bias
    bias.assign(np.linspace(-3, 3, bias.shape[0]).astype("float32"))  # like no initialisation
    pretrainer.save_to_preset(tmp_path / "pretrainer")
    texts = ["she was [MASK] to see him.", "mr. darcy [MASK] the room."]
    expected = pretrainer.fill_mask(texts, top_k=3)
    masked_lm = kbert.BertMaskedLM.from_preset(tmp_path / "pretrainer")
    guesses = masked_lm.fill_mask(texts, top_k=3)
    assert [[[t for t, _ in m] for m in text] for text in guesses] == \
        [[[t for t, _ in m] for m in text] for text in expected]
    np.testing.assert_allclose([[[p for _, p in m] for m in text] for text in guesses],
                               [[[p for _, p in m] for m in text] for text in expected], rtol=1e-5)
    # The other way, the masked-LM head is kept and the next-sentence head is new.
    masked_lm.save_to_preset(tmp_path / "masked_lm")
    with pytest.warns(UserWarning, match="holds a MaskedLM, which has no BertPretrainer head's "
                                         "cls.seq_relationship.weight, cls.seq_relationship.bias"):
        pretrainer = kbert.BertPretrainer.from_preset(tmp_path / "masked_lm")
    np.testing.assert_allclose(to_numpy(pretrainer.mlm_head.bias), to_numpy(bias))
    with pytest.warns(UserWarning, match="has no TextClassifier head: it starts from its initialisation"):
        kbert.BertClassifier.from_preset(tmp_path / "pretrainer", num_classes=2)
