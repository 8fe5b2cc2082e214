import csv
import os

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_text as tf_text
from transformers import BertTokenizerFast

from kbert.text import BertPreprocessor, SegmentPacker, truncate_segments
from kbert.text.packing import combine_segments

VITAMINC = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "data", "vitaminc", "test.tsv")
CLS, SEP, PAD = 101, 102, 0


def ragged(rows):
    return tf.ragged.constant(rows, dtype=tf.int32)


def lengths(segments):
    return [s.row_lengths().numpy().tolist() for s in segments]


@pytest.fixture(scope="module")
def hf_tokenizer(minilm_dir):
    return BertTokenizerFast.from_pretrained(minilm_dir)


@pytest.fixture(scope="module")
def vitaminc_pairs():
    with open(VITAMINC, encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
    return [r["evidence"] for r in rows], [r["claim"] for r in rows]


def assert_same_as_hf(ours, theirs):
    for our_key, hf_key in (
        ("token_ids", "input_ids"),
        ("segment_ids", "token_type_ids"),
        ("padding_mask", "attention_mask"),
    ):
        np.testing.assert_array_equal(ours[our_key].numpy(), theirs[hf_key], err_msg=our_key)


def test_packer_adds_cls_and_sep_and_segment_ids():
    packer = SegmentPacker(CLS, SEP, PAD, sequence_length=9)
    out = packer((ragged([[7, 8, 9]]), ragged([[5, 6]])))
    assert out["token_ids"].numpy().tolist() == [[CLS, 7, 8, 9, SEP, 5, 6, SEP, PAD]]
    assert out["segment_ids"].numpy().tolist() == [[0, 0, 0, 0, 0, 1, 1, 1, 0]]
    assert out["padding_mask"].numpy().tolist() == [[1, 1, 1, 1, 1, 1, 1, 1, 0]]


@pytest.mark.parametrize("dtype", [tf.int32, tf.int64])
def test_combine_segments_equals_tensorflow_text_on_random_batches(dtype):
    rng = np.random.default_rng(0)
    for _ in range(100):
        rows, count = int(rng.integers(0, 5)), int(rng.integers(1, 3))
        segments = [tf.RaggedTensor.from_row_lengths(tf.constant(rng.integers(1, 99, sum(n)), dtype), n)
                    for n in rng.integers(0, 6, (count, rows)).tolist()]
        ids, segment_ids = combine_segments(segments, CLS, SEP)
        expected_ids, expected_segment_ids = tf_text.combine_segments(segments, CLS, SEP)
        assert ids.to_list() == expected_ids.to_list() and ids.dtype == expected_ids.dtype
        assert segment_ids.to_list() == expected_segment_ids.to_list()
        assert segment_ids.dtype == expected_segment_ids.dtype


def test_packer_truncates_longest_segment_first():
    a, b = ragged([[1] * 10, [1] * 2]), ragged([[2] * 3, [2] * 9])
    assert lengths(truncate_segments([a, b], 6)) == [[3, 2], [3, 4]]


def test_longest_first_keeps_the_shorter_segment_when_it_fits_in_half():
    a, b = ragged([[1] * 10]), ragged([[2] * 2])
    assert lengths(truncate_segments([a, b], 7)) == [[5], [2]]


def test_longest_first_gives_the_odd_token_to_the_second_segment_on_ties():
    a, b = ragged([[1] * 5]), ragged([[2] * 5])
    assert lengths(truncate_segments([a, b], 5)) == [[2], [3]]


def test_longest_first_matches_hugging_face_on_every_length_pair(hf_tokenizer):
    # Texts of n one-token words "a" and "b": HF's kept counts are easy to read back.
    sizes = [(n_a, n_b) for n_a in range(1, 23) for n_b in range(1, 23)]
    a_ids = ragged([[1037] * n for n, _ in sizes])
    b_ids = ragged([[1038] * n for _, n in sizes])
    for sequence_length in range(5, 24):
        theirs = hf_tokenizer(
            [" ".join(["a"] * n) for n, _ in sizes],
            [" ".join(["b"] * n) for _, n in sizes],
            truncation="longest_first",
            max_length=sequence_length,
            padding="max_length",
            return_tensors="np",
        )
        packer = SegmentPacker(CLS, SEP, PAD, sequence_length=sequence_length)
        assert_same_as_hf(packer((a_ids, b_ids)), theirs)


def test_only_first_and_only_second_truncate_one_segment():
    a, b = ragged([[1] * 6]), ragged([[2] * 6])
    assert lengths(truncate_segments([a, b], 8, "only_first")) == [[2], [6]]
    assert lengths(truncate_segments([a, b], 8, "only_second")) == [[6], [2]]


def test_only_first_fails_clearly_when_the_second_segment_alone_is_too_long():
    packer = SegmentPacker(CLS, SEP, PAD, sequence_length=8, truncation="only_first")
    with pytest.raises(tf.errors.InvalidArgumentError, match="second segment alone is longer"):
        packer((ragged([[1, 2]]), ragged([[3] * 6])))


def test_only_second_needs_pairs():
    packer = SegmentPacker(CLS, SEP, PAD, sequence_length=8, truncation="only_second")
    with pytest.raises(ValueError, match="needs pairs"):
        packer(ragged([[1, 2]]))


def test_single_segment_is_truncated_to_leave_room_for_cls_and_sep():
    out = SegmentPacker(CLS, SEP, PAD, sequence_length=5)(ragged([[1, 2, 3, 4, 5]]))
    assert out["token_ids"].numpy().tolist() == [[CLS, 1, 2, 3, SEP]]


def test_pad_to_longest_pads_to_the_longest_row():
    packer = SegmentPacker(CLS, SEP, PAD, sequence_length=64, pad_to="longest")
    out = packer(ragged([[1, 2, 3], [4]]))
    assert out["token_ids"].numpy().tolist() == [[CLS, 1, 2, 3, SEP], [CLS, 4, SEP, PAD, PAD]]
    assert out["padding_mask"].numpy().tolist() == [[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]]


def test_pad_to_multiple_of_rounds_the_padded_length_up():
    packer = SegmentPacker(CLS, SEP, PAD, sequence_length=64, pad_to="longest", pad_to_multiple_of=8)
    assert packer(ragged([[1] * 9, [1]]))["token_ids"].shape == (2, 16)
    assert packer(ragged([[1] * 3]))["token_ids"].shape == (1, 8)


def test_pad_to_sequence_length_gives_a_static_shape_in_a_tf_function():
    packer = SegmentPacker(CLS, SEP, PAD, sequence_length=16)
    spec = tf.RaggedTensorSpec([None, None], tf.int32)
    graph = tf.function(packer.__call__).get_concrete_function((spec, spec))
    assert graph.structured_outputs["token_ids"].shape.as_list() == [None, 16]


def test_one_unbatched_sequence_gives_unbatched_outputs():
    out = SegmentPacker(CLS, SEP, PAD, sequence_length=6)(([7, 8], [9]))
    assert out["token_ids"].numpy().tolist() == [CLS, 7, 8, SEP, 9, SEP]


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(sequence_length=2), "at least 3"),
        (dict(truncation="longest"), 'Unknown truncation "longest"'),
        (dict(pad_to="max_length"), 'Unknown pad_to "max_length"'),
        (dict(sequence_length=10, pad_to_multiple_of=8), "not a multiple"),
    ],
)
def test_packer_rejects_bad_settings_with_a_clear_message(kwargs, message):
    with pytest.raises(ValueError, match=message):
        SegmentPacker(CLS, SEP, PAD, **kwargs)


def test_pairs_need_room_for_a_token_of_each_segment():
    with pytest.raises(ValueError, match="at least 5"):
        SegmentPacker(CLS, SEP, PAD, sequence_length=4)((ragged([[1]]), ragged([[2]])))


@pytest.mark.parametrize("sequence_length", [64, 32])
def test_preprocessor_packs_pairs_like_hugging_face(minilm_dir, hf_tokenizer, vitaminc_pairs, sequence_length):
    evidence, claims = vitaminc_pairs
    preprocessor = BertPreprocessor.from_preset(minilm_dir, sequence_length=sequence_length)
    theirs = hf_tokenizer(
        evidence, claims, truncation="longest_first", max_length=sequence_length,
        padding="max_length", return_tensors="np",
    )
    # The comparison means something only if many pairs were truncated.
    assert (theirs["attention_mask"].sum(1) == sequence_length).mean() > 0.3
    assert_same_as_hf(preprocessor((evidence, claims)), theirs)


def test_preprocessor_packs_single_texts_like_hugging_face(minilm_dir, hf_tokenizer, vitaminc_pairs):
    evidence, _ = vitaminc_pairs
    preprocessor = BertPreprocessor.from_preset(minilm_dir, sequence_length=64)
    theirs = hf_tokenizer(evidence, truncation=True, max_length=64, padding="max_length", return_tensors="np")
    assert_same_as_hf(preprocessor(evidence), theirs)


@pytest.mark.parametrize("truncation", ["only_first", "only_second"])
def test_preprocessor_truncates_one_segment_like_hugging_face(minilm_dir, hf_tokenizer, vitaminc_pairs, truncation):
    evidence, claims = vitaminc_pairs
    # The short claim goes on the side that is kept whole, so every pair fits.
    pair = (evidence, claims) if truncation == "only_first" else (claims, evidence)
    preprocessor = BertPreprocessor.from_preset(minilm_dir, sequence_length=64, truncation=truncation)
    theirs = hf_tokenizer(*pair, truncation=truncation, max_length=64, padding="max_length", return_tensors="np")
    assert_same_as_hf(preprocessor(pair), theirs)


def test_pad_to_bucket_pads_to_the_shortest_bucket_holding_the_longest():
    from kbert.text.packing import bucket_lengths

    assert bucket_lengths(128) == [16, 24, 32, 48, 64, 96, 128]
    assert bucket_lengths(100) == [16, 24, 32, 48, 64, 96, 100]
    assert bucket_lengths(20) == [16, 20]
    assert bucket_lengths(8) == [8]
    packer = SegmentPacker(CLS, SEP, PAD, sequence_length=100, pad_to="bucket")
    assert packer(ragged([[1] * 14]))["token_ids"].shape == (1, 16)
    assert packer(ragged([[1] * 15, [2]]))["token_ids"].shape == (2, 24)
    assert packer(ragged([[1] * 23]))["token_ids"].shape == (1, 32)
    assert packer(ragged([[1] * 70]))["token_ids"].shape == (1, 96)  # 72 with [CLS] and [SEP]
    assert packer(ragged([[1] * 95]))["token_ids"].shape == (1, 100)
    assert packer(ragged([[1] * 500]))["token_ids"].shape == (1, 100)  # truncated first


def test_pad_to_longest_works_inside_tf_data():
    packer = SegmentPacker(CLS, SEP, PAD, sequence_length=64, pad_to="longest", pad_to_multiple_of=8)
    rows = tf.data.Dataset.from_tensor_slices(ragged([[1, 2, 3], [4], [5] * 9])).ragged_batch(3)
    batch = next(iter(rows.map(packer)))
    assert batch["token_ids"].shape == (3, 16)
    assert batch["padding_mask"].numpy().sum(1).tolist() == [5, 3, 11]
