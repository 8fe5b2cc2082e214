import gzip
import os

import numpy as np
import pytest
import tensorflow as tf

from kbert.text import BertTokenizer, MaskedLMMaskGenerator, SegmentPacker

AUSTEN = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "data", "austen.txt.gz")
NUM_SEQUENCES, SEQUENCE_LENGTH, MAX_PREDICTIONS = 2000, 128, 24


@pytest.fixture(scope="module")
def tokenizer(minilm_dir):
    return BertTokenizer.from_preset(minilm_dir)


@pytest.fixture(scope="module")
def batch(tokenizer):
    """2,000 packed sequences of Austen's text, of 20 to 126 WordPieces each."""
    with gzip.open(AUSTEN, "rt", encoding="utf-8") as f:
        text = " ".join(line.strip() for _, line in zip(range(30000), f))
    ids = tokenizer(text).numpy()
    lengths = np.random.default_rng(0).integers(20, SEQUENCE_LENGTH - 1, NUM_SEQUENCES)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    assert starts[-1] + lengths[-1] <= len(ids), "not enough text for the sample"
    rows = tf.ragged.constant([ids[s:s + n] for s, n in zip(starts, lengths)], dtype=tf.int32)
    packer = SegmentPacker(tokenizer.cls_id, tokenizer.sep_id, tokenizer.pad_id, sequence_length=SEQUENCE_LENGTH)
    return packer(rows)


def generator(tokenizer, **kwargs):
    kwargs = {"max_predictions": MAX_PREDICTIONS, "seed": 1, **kwargs}
    return MaskedLMMaskGenerator.from_tokenizer(tokenizer, **kwargs)


def selectable(batch, tokenizer):
    ids, mask = batch["token_ids"].numpy(), batch["padding_mask"].numpy() == 1
    return mask & ~np.isin(ids, [tokenizer.cls_id, tokenizer.sep_id, tokenizer.pad_id])


def chosen_tokens(out, batch):
    """(original id, id after masking) of every prediction."""
    weights = out["mask_weights"].numpy() == 1
    positions = out["mask_positions"].numpy()
    after = np.take_along_axis(out["token_ids"].numpy(), positions, axis=1)[weights]
    before = np.take_along_axis(batch["token_ids"].numpy(), positions, axis=1)[weights]
    np.testing.assert_array_equal(out["mask_ids"].numpy()[weights], before)
    return before, after


def test_fifteen_percent_of_selectable_tokens_are_chosen(tokenizer, batch):
    out = generator(tokenizer)(batch)
    n = selectable(batch, tokenizer).sum(1)
    chosen = out["mask_weights"].numpy().sum(1)
    # create_pretraining_data.py: round(15% of n), at least 1, at most max_predictions.
    np.testing.assert_array_equal(chosen, np.minimum(np.maximum(np.round(n * 0.15), 1), MAX_PREDICTIONS))
    assert abs(chosen.sum() / n.sum() - 0.15) < 0.005


def test_chosen_tokens_are_80_percent_mask_10_random_10_kept(tokenizer, batch):
    before, after = chosen_tokens(generator(tokenizer)(batch), batch)
    masked = after == tokenizer.mask_id
    kept = after == before
    random = ~masked & ~kept
    assert abs(masked.mean() - 0.8) < 0.01
    assert abs(random.mean() - 0.1) < 0.01
    assert abs(kept.mean() - 0.1) < 0.01
    assert not np.isin(after[random], [tokenizer.cls_id, tokenizer.sep_id, tokenizer.pad_id]).any()


def test_special_tokens_and_padding_are_never_chosen_or_changed(tokenizer, batch):
    out = generator(tokenizer)(batch)
    ids, masked = batch["token_ids"].numpy(), out["token_ids"].numpy()
    can_change = selectable(batch, tokenizer)
    np.testing.assert_array_equal(masked[~can_change], ids[~can_change])
    weights = out["mask_weights"].numpy() == 1
    assert np.take_along_axis(can_change, out["mask_positions"].numpy(), axis=1)[weights].all()
    # Padded prediction slots point at position 0 with weight 0 and id 0.
    assert (out["mask_positions"].numpy()[~weights] == 0).all() and (out["mask_ids"].numpy()[~weights] == 0).all()


def test_predictions_never_exceed_max_predictions(tokenizer, batch):
    out = generator(tokenizer, max_predictions=5)(batch)
    assert out["mask_positions"].shape == (NUM_SEQUENCES, 5)
    assert out["mask_weights"].numpy().sum(1).max() == 5


def test_whole_word_masking_never_splits_a_word(tokenizer, batch):
    out = generator(tokenizer, whole_word=True)(batch)
    ids = batch["token_ids"].numpy()
    is_piece = np.array([t.startswith("##") for t in tokenizer.vocabulary])[ids]
    chosen = np.zeros(ids.shape, bool)
    np.put_along_axis(chosen, out["mask_positions"].numpy(), out["mask_weights"].numpy() == 1, axis=1)
    # A ## piece is chosen exactly when the piece before it is (unless that is
    # [CLS]: the sample's rows are cut from running text, some mid-word).
    joined = is_piece[:, 1:] & selectable(batch, tokenizer)[:, :-1]
    np.testing.assert_array_equal(chosen[:, 1:][joined], chosen[:, :-1][joined])
    assert is_piece[chosen].sum() > 500, "the sample should have many chosen multi-piece words"
    rate = chosen.sum() / selectable(batch, tokenizer).sum()
    assert 0.14 < rate <= 0.15 + 0.005


def test_same_seed_gives_same_masks_and_each_call_new_ones(tokenizer, batch):
    first, again = generator(tokenizer, seed=7), generator(tokenizer, seed=7)
    a, b = first(batch), again(batch)
    np.testing.assert_array_equal(a["token_ids"], b["token_ids"])
    np.testing.assert_array_equal(a["mask_positions"], b["mask_positions"])
    assert not np.array_equal(first(batch)["mask_positions"], a["mask_positions"])


def test_dataset_map_masks_each_epoch_anew_and_reproducibly(tokenizer, batch):
    def masked_epochs(seed, epochs=2):
        dataset = tf.data.Dataset.from_tensor_slices(batch).batch(500).map(generator(tokenizer, seed=seed))
        return [np.concatenate([b["mask_positions"].numpy() for b in dataset]) for _ in range(epochs)]

    epoch_1, epoch_2 = masked_epochs(seed=3)
    assert not np.array_equal(epoch_1, epoch_2)
    rebuilt_1, rebuilt_2 = masked_epochs(seed=3)
    np.testing.assert_array_equal(epoch_1, rebuilt_1)
    np.testing.assert_array_equal(epoch_2, rebuilt_2)


def test_ragged_and_unbatched_inputs_keep_their_form(tokenizer):
    masker = generator(tokenizer, max_predictions=4)
    ragged = masker(tf.ragged.constant([[101, 2000, 2001, 102], [101, 2003, 102]]))
    assert isinstance(ragged["token_ids"], tf.RaggedTensor)
    assert ragged["token_ids"].row_lengths().numpy().tolist() == [4, 3]
    assert masker(tf.constant([101, 2000, 2001, 102, 0]))["mask_positions"].shape == (4,)


def test_a_sequence_with_any_selectable_token_gets_a_prediction(tokenizer):
    out = generator(tokenizer)(tf.constant([[101, 2000, 102, 0], [101, 102, 0, 0]]))
    assert out["mask_weights"].numpy()[:, 0].tolist() == [1.0, 0.0]


def test_get_config_rebuilds_the_generator(tokenizer, batch):
    masker = generator(tokenizer, whole_word=True)
    clone = MaskedLMMaskGenerator.from_config(masker.get_config())
    np.testing.assert_array_equal(clone(batch)["token_ids"], masker(batch)["token_ids"])


def test_whole_word_without_continuation_ids_says_how_to_fix(tokenizer):
    with pytest.raises(ValueError, match="from_tokenizer"):
        MaskedLMMaskGenerator(tokenizer.vocabulary_size, tokenizer.mask_id, whole_word=True)


def test_rates_over_one_are_rejected(tokenizer):
    with pytest.raises(ValueError, match="over 1"):
        MaskedLMMaskGenerator(tokenizer.vocabulary_size, tokenizer.mask_id, mask_token_rate=0.9, random_token_rate=0.2)
