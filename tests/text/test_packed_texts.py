"""Raw texts packed into rows for masked-LM training give each text what it gets alone."""

import numpy as np
import pytest
import tensorflow as tf

import kbert
from kbert.text.packed_texts import pack_texts

# The opening sentences of Jane Austen's "Pride and Prejudice" (1813, public
# domain), of uneven lengths.
TEXTS = [
    "It is a truth universally acknowledged, that a single man in possession of a good fortune, must be in "
    "want of a wife.",
    "However little known the feelings or views of such a man may be on his first entering a neighbourhood,",
    "this truth is so well fixed in the minds of the surrounding families,",
    "that he is considered the rightful property of some one or other of their daughters.",
    "My dear Mr. Bennet,",
    "said his lady to him one day,",
    "have you heard that Netherfield Park is let at last?",
    "Mr. Bennet replied that he had not.",
    "But it is,",
    "returned she;",
]
SEQUENCE_LENGTH = 32


@pytest.fixture(scope="module")
def preprocessor(minilm_dir):
    return kbert.BertPreprocessor.from_preset(minilm_dir, sequence_length=SEQUENCE_LENGTH)


def texts_of(rows):
    """Each packed text's (row, start, end), in row order."""
    spans = []
    for r, ids in enumerate(rows["sequence_ids"]):
        for sequence_id in range(1, ids.max() + 1):
            (where,) = np.nonzero(ids == sequence_id)
            spans.append((r, int(where[0]), int(where[-1]) + 1))
    return spans


def test_packed_rows_hold_each_text_as_tokenized_alone_in_fewer_rows(preprocessor):
    rows = pack_texts(preprocessor, TEXTS)
    alone = preprocessor.with_padding("longest")(TEXTS)
    lengths = np.asarray(alone["padding_mask"]).sum(axis=1)
    packed = {tuple(rows["token_ids"][r, start:end]) for r, start, end in texts_of(rows)}
    assert packed == {tuple(np.asarray(alone["token_ids"])[i, :n]) for i, n in enumerate(lengths)}
    assert len(texts_of(rows)) == len(TEXTS)
    assert len(rows["token_ids"]) == -(-lengths.sum() // SEQUENCE_LENGTH) < len(TEXTS)
    np.testing.assert_array_equal(rows["padding_mask"], rows["sequence_ids"] > 0)
    assert rows["token_ids"].shape == (len(rows["token_ids"]), SEQUENCE_LENGTH)


@pytest.mark.every_backend
def test_packed_and_unpacked_masked_lm_losses_are_equal(preprocessor):
    rows = pack_texts(preprocessor, TEXTS)
    masker = kbert.text.MaskedLMMaskGenerator.from_tokenizer(preprocessor.tokenizer, max_predictions=8)
    masked = {k: np.asarray(v) for k, v in masker(dict(rows), seed=tf.constant([3, 4])).items()}
    packed_x = {k: masked[k] for k in ("token_ids", "segment_ids", "padding_mask", "sequence_ids", "mask_positions")}
    # The same masked texts, one per row, each with its own predictions.
    texts, predictions = [], []
    for r, start, end in texts_of(rows):
        slots = [s for s in range(8) if masked["mask_weights"][r, s] and start <= masked["mask_positions"][r, s] < end]
        texts.append((masked["token_ids"][r, start:end], masked["segment_ids"][r, start:end]))
        predictions.append([(masked["mask_positions"][r, s] - start, masked["mask_ids"][r, s]) for s in slots])
    assert sum(map(len, predictions)) == masked["mask_weights"].sum() > 0

    def padded(values, width):
        return np.array([list(v) + [0] * (width - len(v)) for v in values], "int32")

    alone_x = {"token_ids": padded([ids for ids, _ in texts], SEQUENCE_LENGTH),
               "segment_ids": padded([segments for _, segments in texts], SEQUENCE_LENGTH),
               "padding_mask": padded([[1] * len(ids) for ids, _ in texts], SEQUENCE_LENGTH),
               "mask_positions": padded([[p for p, _ in slots] for slots in predictions], 8)}
    alone_y = padded([[i for _, i in slots] for slots in predictions], 8)
    alone_w = padded([[1] * len(slots) for slots in predictions], 8).astype("float32")

    losses = []
    config = dict(vocabulary_size=preprocessor.tokenizer.vocabulary_size, num_layers=2, num_heads=2, hidden_dim=16,
                  intermediate_dim=32, max_sequence_length=SEQUENCE_LENGTH, dropout=0.0)
    unpacked = kbert.BertMaskedLM(kbert.BertBackbone(**config))
    packed = kbert.BertMaskedLM(kbert.BertBackbone(**config, packing=True))
    packed.set_weights(unpacked.get_weights())
    for model, x, y, w in ((unpacked, alone_x, alone_y, alone_w),
                           (packed, packed_x, masked["mask_ids"], masked["mask_weights"])):
        model.compile()
        losses.append(model.evaluate(x, {"mlm_logits": y}, sample_weight={"mlm_logits": w}, batch_size=len(y),
                                     verbose=0, return_dict=True)["loss"])
    np.testing.assert_allclose(losses[1], losses[0], rtol=1e-5)
    # (Without block-diagonal attention the texts of a row would see each other.)
    unmarked = {k: v for k, v in packed_x.items() if k != "sequence_ids"}
    crossed = unpacked.evaluate(unmarked, {"mlm_logits": masked["mask_ids"]},
                                sample_weight={"mlm_logits": masked["mask_weights"]}, verbose=0, return_dict=True)
    assert abs(crossed["loss"] - losses[0]) > 1e-4
