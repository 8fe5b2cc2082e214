import inspect
import time

import keras
import numpy as np
import pytest
import tensorflow as tf

from kbert.text import BertClassifierPreprocessor, BertPreprocessor, BertTokenizer
from tests.helpers import dataset_ops, rebuilt_from_config

TEXTS = ["The cat sat on the mat.", "It was tired.", "A dog barked at the postman all afternoon."]


@pytest.fixture(scope="module")
def preprocessor(minilm_dir):
    return BertPreprocessor.from_preset(minilm_dir, sequence_length=16)


def test_preprocessor_returns_int32_token_segment_and_padding_tensors(preprocessor):
    out = preprocessor(TEXTS)
    assert sorted(out) == ["padding_mask", "segment_ids", "token_ids"]
    for value in out.values():
        assert value.dtype == tf.int32 and value.shape == (3, 16)


def test_one_string_gives_one_unbatched_sequence(preprocessor):
    out = preprocessor("The cat sat.")
    assert out["token_ids"].shape == (16,)
    np.testing.assert_array_equal(out["token_ids"], preprocessor(["The cat sat."])["token_ids"][0])


def test_a_tuple_is_a_pair_of_segments(preprocessor):
    out = preprocessor((TEXTS[:2], TEXTS[1:]))
    assert out["segment_ids"].numpy().max() == 1
    single = preprocessor(TEXTS[:2])
    assert single["segment_ids"].numpy().max() == 0


def test_map_passes_labels_and_sample_weights_through(preprocessor):
    labels, weights = tf.constant([0, 1, 1]), tf.constant([1.0, 0.5, 2.0])
    x, y = next(iter(tf.data.Dataset.from_tensor_slices((TEXTS, labels)).batch(3).map(preprocessor)))
    assert x["token_ids"].shape == (3, 16) and y.numpy().tolist() == [0, 1, 1]
    x, y, w = next(iter(tf.data.Dataset.from_tensor_slices((TEXTS, labels, weights)).batch(3).map(preprocessor)))
    assert w.numpy().tolist() == [1.0, 0.5, 2.0]


def test_map_on_unbatched_pairs_then_batch(preprocessor):
    dataset = tf.data.Dataset.from_tensor_slices((TEXTS, TEXTS[::-1], [0, 1, 0]))
    dataset = dataset.map(lambda a, b, y: preprocessor((a, b), y)).batch(3)
    x, y = next(iter(dataset))
    np.testing.assert_array_equal(x["token_ids"], preprocessor((TEXTS, TEXTS[::-1]))["token_ids"])


def test_a_tf_data_pipeline_of_pairs_holds_no_checks_of_ragged_row_splits(preprocessor):
    # Each check is a branch that tf.data instantiates again with every
    # iterator; a pair classifier's pipeline once held 84 of them (190
    # functions), which cost seconds at the start of every fit and predict.
    pairs = (tf.constant(["The cat sat.", "Hi"]), tf.constant(["It was tired.", "[MASK] there"]))
    dataset = tf.data.Dataset.from_tensors(pairs).map(lambda a, b: preprocessor((a, b)))
    assert dataset_ops(dataset).count("Assert") == 0


def test_pad_to_longest_shrinks_batches(minilm_dir):
    preprocessor = BertPreprocessor.from_preset(minilm_dir, sequence_length=64, pad_to="longest", pad_to_multiple_of=8)
    assert preprocessor(TEXTS)["token_ids"].shape == (3, 16)


def test_preprocessor_rejects_token_ids_with_a_pointer_to_the_packer(preprocessor):
    with pytest.raises(TypeError, match="SegmentPacker"):
        preprocessor(tf.constant([[1, 2, 3]]))


def test_preprocessor_rejects_too_short_sequence_length():
    tokenizer = BertTokenizer(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a"])
    with pytest.raises(ValueError, match="at least 3"):
        BertPreprocessor(tokenizer, sequence_length=2)


def test_preprocessor_runs_in_a_saved_model(preprocessor, tmp_path):
    module = tf.Module()
    module.preprocessor = preprocessor
    module.serve = tf.function(preprocessor.__call__, input_signature=[tf.TensorSpec([None], tf.string)])
    tf.saved_model.save(module, str(tmp_path))
    reloaded = tf.saved_model.load(str(tmp_path))
    np.testing.assert_array_equal(reloaded.serve(tf.constant(TEXTS))["token_ids"], preprocessor(TEXTS)["token_ids"])


@pytest.mark.every_backend
def test_dataset_map_feeds_model_fit_on_the_current_backend(preprocessor):
    texts = TEXTS * 8
    labels = np.arange(len(texts)) % 2
    dataset = tf.data.Dataset.from_tensor_slices((texts, labels)).batch(8).map(preprocessor)
    inputs = {
        "token_ids": keras.Input((None,), dtype="int32", name="token_ids"),
        "segment_ids": keras.Input((None,), dtype="int32", name="segment_ids"),
        "padding_mask": keras.Input((None,), dtype="int32", name="padding_mask"),
    }
    embedded = keras.layers.Embedding(preprocessor.tokenizer.vocabulary_size, 8)(inputs["token_ids"])
    embedded = embedded + keras.layers.Embedding(2, 8)(inputs["segment_ids"])
    pooled = keras.layers.GlobalAveragePooling1D()(embedded, mask=inputs["padding_mask"])
    model = keras.Model(inputs, keras.layers.Dense(2)(pooled))
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    history = model.fit(dataset, epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"][0])


# Every setting off its default, and texts on which each changes the features:
# short texts (padding), pairs past sequence_length (truncation), and words
# that the tokenizer's settings split differently (as in test_tokenizer.py).
TOKENIZER_SETTINGS = {
    "lowercase": False, "strip_accents": True, "tokenize_chinese_chars": False, "split_special_tokens": True,
}
PACKING = {"sequence_length": 16, "truncation": "only_first", "pad_to": "longest", "pad_to_multiple_of": 4}
SHORT_TEXTS = ["Café [MASK] café", "北京 a dog"]
LONG_PAIRS = (
    ["the cat sat on the mat all day long in the sun", "a dog barked at the postman all afternoon"],
    ["the dog sat on the mat too", "it was very tired of that"],
)


def features(preprocessor):
    return [{k: v.numpy().tolist() for k, v in preprocessor(x).items()} for x in (SHORT_TEXTS, LONG_PAIRS)]


@pytest.mark.parametrize("cls", [BertPreprocessor, BertClassifierPreprocessor])
def test_a_preprocessor_rebuilt_from_its_config_gives_the_same_features(cls, minilm_dir):
    tokenizer = BertTokenizer.from_preset(minilm_dir, **TOKENIZER_SETTINGS)
    preprocessor = cls(tokenizer, **PACKING, name="pairs")
    expected = features(preprocessor)
    for copy in rebuilt_from_config(preprocessor):
        assert type(copy) is cls and copy.name == "pairs"
        assert features(copy) == expected
    for key in PACKING:  # so a copy that lost a setting from the config fails above
        default = inspect.signature(BertPreprocessor).parameters[key].default
        assert features(cls(tokenizer, **{**PACKING, key: default})) != expected, key


# Texts that probe the cut before WordPiece: runs of whitespace and of
# characters that the normalizer drops, combining marks, special tokens,
# CJK, punctuation runs, and text far past any sequence.
CUT_PROBES = [
    "",
    "short text",
    " \t\n " * 50 + "late words " * 30,
    "\x00\x01\u200b\ufeff " * 40 + "after invisible characters " * 5,
    "e\u0301 \u0301\u0301 " * 30 + "combining marks",
    "[MASK] [CLS][SEP] [MASK]" * 10,
    "日本語のテキストです。" * 20,
    "!!!???...,,," * 20,
    "unbelievably " * 40,
    "word " * 40_000,  # 200,000 characters
    # Cuts past the first bytes that cutting reads first (offsets._BYTES_PER_WORD):
    " " * 5_000 + "late words " * 100,
    "\u0301" * 3_000 + " after marks" * 100,
    "x" * 3_000 + " y" * 1_000,
]


def packed_without_cut(preprocessor, x):
    tokenize = preprocessor.tokenizer
    segments = tuple(tokenize(tf.constant(t)) for t in x) if isinstance(x, tuple) else tokenize(tf.constant(x))
    return preprocessor.packer(segments)


@pytest.mark.parametrize("length", [8, 16, 64])
def test_cutting_long_text_before_wordpiece_changes_no_id(minilm_dir, length):
    preprocessor = BertPreprocessor.from_preset(minilm_dir, sequence_length=length)
    for x in (CUT_PROBES, (CUT_PROBES, CUT_PROBES[::-1]), ((CUT_PROBES[:3] * len(CUT_PROBES))[:len(CUT_PROBES)], CUT_PROBES)):
        cut, whole = preprocessor(x), packed_without_cut(preprocessor, x)
        for key in cut:
            np.testing.assert_array_equal(cut[key], whole[key])


def test_wordpiece_reads_a_bounded_prefix_of_a_huge_text():
    from kbert.text.offsets import cut_after_words

    [cut] = cut_after_words(tf.constant(["word " * 40_000]), 16).numpy()
    assert cut == b"word " * 16  # the 17th word and everything after it are never tokenized
    assert cut_after_words(tf.constant(["a b c"]), 16).numpy()[0] == b"a b c"  # a text that fits is whole


def test_counting_a_huge_text_costs_what_a_sequence_of_it_costs(minilm_dir):
    # Counting cuts first, so a text of 10,000,000 characters costs about
    # what its first sequence's worth costs (tokenized whole, about 1,000
    # times as much).
    preprocessor = BertPreprocessor.from_preset(minilm_dir, sequence_length=128)
    huge, short = "word " * 2_000_000, "word " * 200

    def seconds(text):
        preprocessor.lengths(([text],))
        return min(timed(lambda: preprocessor.lengths(([text],))) for _ in range(3))

    assert preprocessor.lengths(([huge, short, "a b"],)).tolist() == [128, 128, 4]
    assert seconds(huge) < 20 * seconds(short)


def timed(function):
    start = time.perf_counter()
    function()
    return time.perf_counter() - start
