"""Packed rows (Krell et al. 2021) give each sequence what it gets alone:
block-diagonal attention, positions restarting, a [CLS] and next-sentence
label per sequence, masked-LM predictions per token."""

import keras
import numpy as np
import pytest
import transformers

import kbert
from kbert.text.sequence_packing import pack_sequences, packed_row, sequence_ids_from_starts
from tests.helpers import to_numpy, transformers_outputs
from tests.presets.test_huggingface_import import save_random_checkpoint

CLS, SEP, VOCABULARY_SIZE, ROW_LENGTH = 2, 3, 120, 24


def random_sequences(lengths, seed=0):
    """Next-sentence pairs `[CLS] A [SEP] B [SEP]` of the given lengths, with
    two masked-LM predictions each (at word tokens)."""
    rng = np.random.default_rng(seed)
    sequences = []
    for n in lengths:
        a = int(rng.integers(1, n - 3))
        token_ids = [CLS, *rng.integers(5, VOCABULARY_SIZE, a), SEP, *rng.integers(5, VOCABULARY_SIZE, n - a - 3), SEP]
        segment_ids = [0] * (a + 2) + [1] * (n - a - 2)
        words = [i for i, t in enumerate(token_ids) if t not in (CLS, SEP)]
        positions = sorted(rng.choice(words, 2, replace=False).tolist())
        sequences.append({
            "token_ids": [int(t) for t in token_ids], "segment_ids": segment_ids, "mask_positions": positions,
            "mask_ids": [int(rng.integers(5, VOCABULARY_SIZE)) for _ in positions],
            "next_sentence_label": int(rng.integers(0, 2)),
        })
    return sequences


def transformers_alone(hf_model, sequence):
    """transformers' outputs on one sequence, a batch of one."""
    return transformers_outputs(hf_model, {key: [sequence[key]] for key in ("token_ids", "segment_ids")})


def padded(values, length, dtype="int32"):
    return np.array([list(v) + [0] * (length - len(v)) for v in values], dtype)


def packed_batch(sequences, rows, max_sequences, max_predictions):
    """Model inputs, labels and weights of packed rows (as the shard reader gives them)."""
    packed = [packed_row([sequences[i] for i in row]) for row in rows]
    lengths = [len(r["token_ids"]) for r in packed]
    x = {
        "token_ids": padded([r["token_ids"] for r in packed], ROW_LENGTH),
        "segment_ids": padded([r["segment_ids"] for r in packed], ROW_LENGTH),
        "padding_mask": padded([[1] * n for n in lengths], ROW_LENGTH),
        "sequence_ids": np.stack([sequence_ids_from_starts(r["cls_positions"], n, ROW_LENGTH)
                                  for r, n in zip(packed, lengths)]),
        "cls_positions": padded([r["cls_positions"] for r in packed], max_sequences),
        "mask_positions": padded([r["mask_positions"] for r in packed], max_predictions),
    }
    y = {"mlm_logits": padded([r["mask_ids"] for r in packed], max_predictions),
         "nsp_logits": padded([r["next_sentence_labels"] for r in packed], max_sequences)}
    w = {"mlm_logits": padded([[1] * len(r["mask_ids"]) for r in packed], max_predictions, "float32"),
         "nsp_logits": padded([[1] * len(r["cls_positions"]) for r in packed], max_sequences, "float32")}
    return x, y, w


def unpacked_batch(sequences):
    length = max(len(s["token_ids"]) for s in sequences)
    x = {
        "token_ids": padded([s["token_ids"] for s in sequences], length),
        "segment_ids": padded([s["segment_ids"] for s in sequences], length),
        "padding_mask": padded([[1] * len(s["token_ids"]) for s in sequences], length),
        "mask_positions": padded([s["mask_positions"] for s in sequences], 2),
    }
    y = {"mlm_logits": padded([s["mask_ids"] for s in sequences], 2),
         "nsp_logits": np.array([s["next_sentence_label"] for s in sequences], "int32")}
    w = {"mlm_logits": np.ones((len(sequences), 2), "float32"), "nsp_logits": np.ones(len(sequences), "float32")}
    return x, y, w


def cross_entropy(logits, labels):
    logits = logits - logits.max(axis=-1, keepdims=True)
    log_probabilities = logits - np.log(np.exp(logits).sum(axis=-1, keepdims=True))
    return -np.take_along_axis(log_probabilities, np.asarray(labels)[..., None], axis=-1)[..., 0]


@pytest.fixture(scope="module")
def pretrainers(tmp_path_factory):
    """transformers' BertForPreTraining, and kbert's pretrainer on its weights, unpacked and packed."""
    folder = str(tmp_path_factory.mktemp("hf"))
    hf_model = save_random_checkpoint(folder, transformers.BertForPreTraining)
    unpacked = kbert.BertPretrainer.from_preset(folder, preprocessor=None)
    packed = kbert.BertPretrainer.from_preset(folder, packing=True, preprocessor=None)
    return hf_model, unpacked, packed


def test_pack_sequences_fills_rows_best_fit_decreasing():
    rows = pack_sequences([14, 12, 11, 9, 8, 6, 5], sequence_length=24)
    assert rows == [[0, 3], [1, 2], [4, 5, 6]]
    assert pack_sequences([5, 5, 5], 24, max_sequences_per_row=2) == [[0, 1], [2]]
    with pytest.raises(ValueError, match="Sequence 1 has 30 tokens"):
        pack_sequences([5, 30], 24)


def test_packed_rows_give_each_sequence_what_it_gets_alone(pretrainers):
    hf_model, unpacked, packed = pretrainers
    sequences = random_sequences([9, 14, 6, 11, 8, 5, 12])
    rows = pack_sequences([len(s["token_ids"]) for s in sequences], ROW_LENGTH)
    assert max(len(r) for r in rows) == 3 and len(rows) == 3
    x, _, _ = packed_batch(sequences, rows, max_sequences=3, max_predictions=6)
    outputs = packed.predict_on_batch(x)
    mlm_logits, nsp_logits = to_numpy(outputs["mlm_logits"]), to_numpy(outputs["nsp_logits"])
    # One sequence per (padded) row through kbert, in one call.
    alone = unpacked.predict_on_batch(unpacked_batch(sequences)[0])
    alone_mlm, alone_nsp = to_numpy(alone["mlm_logits"]), to_numpy(alone["nsp_logits"])
    for r, row in enumerate(rows):
        for slot, i in enumerate(row):
            s = sequences[i]
            # The same sequence alone through kbert (1e-5) and through transformers.
            np.testing.assert_allclose(mlm_logits[r, 2 * slot:2 * slot + 2], alone_mlm[i], atol=1e-5)
            np.testing.assert_allclose(nsp_logits[r, slot], alone_nsp[i], atol=1e-5)
            reference = transformers_alone(hf_model, s)
            np.testing.assert_allclose(mlm_logits[r, 2 * slot:2 * slot + 2],
                                       reference.prediction_logits.numpy()[0, s["mask_positions"]], atol=1e-4)
            np.testing.assert_allclose(nsp_logits[r, slot], reference.seq_relationship_logits.numpy()[0], atol=1e-4)


def test_packed_batch_has_the_losses_of_the_unpacked_batch(pretrainers):
    hf_model, unpacked, packed = pretrainers
    sequences = random_sequences([9, 14, 6, 11, 8, 5, 12], seed=1)
    rows = pack_sequences([len(s["token_ids"]) for s in sequences], ROW_LENGTH)
    for model in (unpacked, packed):
        model.compile()
    x, y, w = unpacked_batch(sequences)
    expected = unpacked.evaluate(x, y, sample_weight=w, batch_size=len(sequences), verbose=0, return_dict=True)
    # Extra unused slots (max_sequences=4, max_predictions=8) carry weight 0.
    x, y, w = packed_batch(sequences, rows, max_sequences=4, max_predictions=8)
    losses = packed.evaluate(x, y, sample_weight=w, batch_size=len(rows), verbose=0, return_dict=True)
    for name in ("loss", "mlm_logits_loss", "nsp_logits_loss"):
        np.testing.assert_allclose(losses[name], expected[name], atol=1e-5, err_msg=name)
    # And transformers' logits give the same losses.
    mlm, nsp = [], []
    for s in sequences:
        reference = transformers_alone(hf_model, s)
        mlm.extend(cross_entropy(reference.prediction_logits.numpy()[0, s["mask_positions"]], s["mask_ids"]))
        nsp.append(cross_entropy(reference.seq_relationship_logits.numpy()[0], s["next_sentence_label"]))
    np.testing.assert_allclose(losses["mlm_logits_loss"], np.mean(mlm), atol=1e-4)
    np.testing.assert_allclose(losses["nsp_logits_loss"], np.mean(nsp), atol=1e-4)


@pytest.mark.skipif(keras.backend.backend() != "tensorflow",
                    reason="runs once, in the tensorflow pass: the equality tests cover every backend")
def test_positions_restart_and_attention_stays_within_each_sequence(pretrainers):
    _, _, packed = pretrainers
    backbone = packed.backbone
    ids = np.array([[1, 1, 1, 2, 2, 3, 0, 0], [1, 1, 1, 1, 1, 1, 1, 1]], "int32")
    positions = to_numpy(kbert.layers.position_embedding.restarting_positions(ids))
    np.testing.assert_array_equal(positions, [[0, 1, 2, 0, 1, 0, 0, 1], list(range(8))])
    inputs = {"token_ids": np.full((2, 8), 7, "int32"), "segment_ids": np.zeros((2, 8), "int32"),
              "padding_mask": (ids > 0).astype("int32"), "sequence_ids": ids}
    scores = to_numpy(backbone.attention_scores(inputs, 0))
    same_sequence = ids[0][:, None] == ids[0][None, :]
    # Each token attends within its sequence only (padding within padding).
    np.testing.assert_array_equal(scores[0] > 1e-6, np.broadcast_to(same_sequence, scores[0].shape))
    assert scores[1].min() > 0
