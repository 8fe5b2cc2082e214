"""SentencePieceTokenizer on DeBERTa-v3's layout (`spm.model`, or
`tokenizer.json` alone as transformers 5 saves it): id-for-id parity with
transformers' `DebertaV2Tokenizer`, its pairs, offsets and saved files."""

import gzip
import json
import random
import unicodedata

import pytest
import sentencepiece
import tensorflow as tf
from transformers import AutoTokenizer

from kbert.presets.tokenizer_files import tokenizer_class_name
from kbert.text import BertPreprocessor, SentencePieceTokenizer
from tests.text.test_sentencepiece_tokenizer import EDGE_TEXTS, hf_ids, read_corpus, read_tsv_column
from tests.text.test_tokenizer import DATA, HARD_TEXTS
from tests.text.test_tokenizer_base import BROKEN_UTF8, as_python_reads

DEBERTA_EDGE_TEXTS = [
    "  leading and trailing  ", "runs   of\t\tspaces\n\nand lines", "x\u3000y\u2028z\x85w\u200bv",
    "a [MASK] b[MASK]c [CLS][SEP] [PAD] [UNK]", "emoji 😀👍🏽 rare 𝔘 ꙮ",
]
LENGTH = 48


@pytest.fixture(scope="module")
def corpus():
    return read_corpus()


@pytest.fixture(scope="module")
def spm_folder(tmp_path_factory):
    """A DeBERTa-v3 folder as the hub has it: spm.model with [PAD], [CLS],
    [SEP], [UNK] first, trained here on Austen and the German/French/Dutch
    reviews (Chinese is rare: unknowns); the same model every run."""
    folder = tmp_path_factory.mktemp("deberta_hub")
    with gzip.open(DATA / "austen.txt.gz", "rt", encoding="utf-8") as f:
        lines = [line.strip() for line in f if line.strip()]
    lines = random.Random(0).sample(lines, 6000) + read_tsv_column(DATA / "multilingual_polarity" / "subset.tsv")
    sentencepiece.set_random_generator_seed(0)
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(lines), model_prefix=str(folder / "spm"), vocab_size=3000, model_type="unigram",
        character_coverage=0.9995, shuffle_input_sentence=False, num_threads=1, pad_id=0, bos_id=1, eos_id=2,
        unk_id=3, pad_piece="[PAD]", bos_piece="[CLS]", eos_piece="[SEP]", unk_piece="[UNK]",
    )
    (folder / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "DebertaV2Tokenizer"}))
    return folder


@pytest.fixture(scope="module")
def auto(spm_folder):
    return AutoTokenizer.from_pretrained(spm_folder)


@pytest.fixture(scope="module")
def json_folder(tmp_path_factory, auto):
    """The same tokenizer as transformers 5 saves it: tokenizer.json only."""
    folder = tmp_path_factory.mktemp("deberta_v5")
    auto.save_pretrained(folder)
    assert not (folder / "spm.model").exists()
    return folder


@pytest.fixture(scope="module")
def tokenizer(json_folder):
    return SentencePieceTokenizer.from_preset(json_folder)


def test_ids_follow_transformers_layout_with_mask_last(tokenizer, auto):
    assert tokenizer.vocabulary[:4] == ["[PAD]", "[CLS]", "[SEP]", "[UNK]"]
    assert (tokenizer.pad_id, tokenizer.cls_id, tokenizer.sep_id, tokenizer.unk_id, tokenizer.mask_id) == (
        auto.pad_token_id, auto.cls_token_id, auto.sep_token_id, auto.unk_token_id, auto.mask_token_id)
    assert tokenizer.mask_id == tokenizer.vocabulary_size - 1 == 3000
    assert (tokenizer.pair_layout, tokenizer.second_segment_id, tokenizer.whitespace_split) == (
        "one_separator", 1, False)


def test_the_spm_model_reads_as_its_tokenizer_json(tokenizer, spm_folder, json_folder):
    assert tokenizer_class_name(spm_folder, "bert") == tokenizer_class_name(json_folder, "bert") == (
        "SentencePieceTokenizer")
    assert SentencePieceTokenizer.from_preset(spm_folder).get_config() == tokenizer.get_config()


def test_ids_match_hugging_face_on_every_corpus_line(tokenizer, auto, corpus):
    texts = corpus + HARD_TEXTS + EDGE_TEXTS + DEBERTA_EDGE_TEXTS
    ours = tokenizer(texts).to_list()
    differing = [t for t, a, b in zip(texts, ours, hf_ids(auto, texts)) if a != b]
    assert not differing, f"{len(differing)} of {len(texts)} lines differ from AutoTokenizer: {differing[:3]}"


def test_preprocessor_packs_singles_and_pairs_as_auto_tokenizer_in_tf_data(tokenizer, auto, corpus):
    preprocessor = BertPreprocessor(tokenizer, sequence_length=LENGTH)
    chinese = read_tsv_column(DATA / "stsb_zh" / "test.tsv", 0)[:100]
    singles = corpus[-2000::20] + DEBERTA_EDGE_TEXTS
    pairs = corpus[-1000:-900] + chinese[:50], corpus[-900:-800] + chinese[50:]
    batches = list(tf.data.Dataset.from_tensor_slices(pairs).batch(64).map(lambda a, b: preprocessor((a, b))))
    for inputs, ours in ((singles, preprocessor(singles)),
                         (pairs, {k: tf.concat([batch[k] for batch in batches], 0) for k in batches[0]})):
        ours = {k: v.numpy().tolist() for k, v in ours.items()}
        theirs = auto(*(inputs if isinstance(inputs, tuple) else (inputs,)), truncation=True, max_length=LENGTH,
                      padding="max_length", return_token_type_ids=True)
        assert ours["token_ids"] == theirs["input_ids"]
        assert ours["padding_mask"] == theirs["attention_mask"]
        # [CLS] A [SEP] in segment 0, B [SEP] in segment 1, as DeBERTa's template sets them.
        assert ours["segment_ids"] == [[t * m for t, m in zip(types, mask)] for types, mask in
                                       zip(theirs["token_type_ids"], theirs["attention_mask"])]


def test_byte_spans_equal_hugging_face_offsets_in_bytes(tokenizer, auto, corpus):
    # A word's first piece spans the space before it, as DeBERTa's Metaspace
    # gives it. (Not where the normalizer composes or expands characters.)
    texts = [t for t in corpus[::500] + HARD_TEXTS + DEBERTA_EDGE_TEXTS if unicodedata.normalize("NFKC", t) == t]
    ids, starts, ends = tokenizer.tokenize_with_byte_spans(texts)
    for text, row_ids, row_starts, row_ends in zip(texts, ids.to_list(), starts.to_list(), ends.to_list()):
        encoding = auto(text, add_special_tokens=False, return_offsets_mapping=True)
        in_bytes = [(len(text[:s].encode()), len(text[:e].encode())) for s, e in encoding["offset_mapping"]]
        assert (row_ids, list(zip(row_starts, row_ends))) == (encoding["input_ids"], in_bytes), text


def test_detokenize_gives_hugging_faces_decode(tokenizer, auto, corpus):
    texts = corpus[::2000] + ["a [MASK] b"]
    expected = [auto.decode(ids) for ids in hf_ids(auto, texts)]
    assert [t.decode() for t in tokenizer.detokenize(tokenizer(texts)).numpy().tolist()] == expected


def test_saved_preset_reads_to_the_same_ids_and_pairs(tokenizer, tmp_path, corpus):
    tokenizer.save_to_preset(tmp_path, model_max_length=512)
    texts = corpus[::300] + DEBERTA_EDGE_TEXTS
    saved = AutoTokenizer.from_pretrained(tmp_path)
    assert type(saved).__name__ == "DebertaV2Tokenizer"
    assert hf_ids(saved, texts) == tokenizer(texts).to_list()
    assert saved("a b", "c")["token_type_ids"] == [0, 0, 0, 0, 1, 1]
    assert SentencePieceTokenizer.from_preset(tmp_path).get_config() == tokenizer.get_config()


def test_a_vocabulary_of_mdebertas_size_goes_through_the_same_code(tokenizer, json_folder, tmp_path, corpus):
    # mDeBERTa-v3: 250,000 pieces (here the trained ones and pieces of two
    # CJK characters), [MASK] last.
    config = json.loads((json_folder / "tokenizer.json").read_text())
    size = 250_000 - len(config["model"]["vocab"])
    config["model"]["vocab"] += [[chr(0x4E00 + i // 500) + chr(0x4E00 + i % 500), -20.0] for i in range(size)]
    mask = next(t for t in config["added_tokens"] if t["content"] == "[MASK]")
    mask["id"] = len(config["model"]["vocab"])
    (tmp_path / "tokenizer.json").write_text(json.dumps(config, ensure_ascii=False))
    (tmp_path / "tokenizer_config.json").write_text((json_folder / "tokenizer_config.json").read_text())
    big = SentencePieceTokenizer.from_preset(tmp_path)
    auto = AutoTokenizer.from_pretrained(tmp_path)
    texts = corpus[::400] + [t for t, _ in zip(read_tsv_column(DATA / "stsb_zh" / "test.tsv"), range(100))]
    assert big.vocabulary_size == 250_001 and big.mask_id == auto.mask_token_id == 250_000
    assert big(texts).to_list() == hf_ids(auto, texts)


def test_a_prefix_space_on_the_first_text_only_is_refused(json_folder, tmp_path):
    # (DebertaV2Tokenizer's add_prefix_space=False: Metaspace prepend_scheme="first".)
    config = json.loads((json_folder / "tokenizer.json").read_text())
    config["pre_tokenizer"]["pretokenizers"][0]["prepend_scheme"] = "first"
    (tmp_path / "tokenizer.json").write_text(json.dumps(config, ensure_ascii=False))
    with pytest.raises(ValueError, match="prepend_scheme='first'.*add_prefix_space=True"):
        SentencePieceTokenizer.from_preset(tmp_path)


def test_lowercasing_and_punctuation_splits_are_refused(spm_folder, tmp_path):
    (tmp_path / "spm.model").write_bytes((spm_folder / "spm.model").read_bytes())
    for setting in ("do_lower_case", "split_by_punct"):
        (tmp_path / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "DebertaV2Tokenizer",
                                                                     setting: True}))
        with pytest.raises(ValueError, match=f"sets {setting}=True"):
            SentencePieceTokenizer.from_preset(tmp_path)


def test_bytes_that_are_not_utf8_give_transformers_ids_of_the_text_python_decodes(tokenizer, auto):
    decoded = as_python_reads(BROKEN_UTF8)
    assert tokenizer(tf.constant(BROKEN_UTF8)).to_list() == hf_ids(auto, decoded)
    spans = [t.to_list() for t in tokenizer.tokenize_with_byte_spans(tf.constant(BROKEN_UTF8))]
    assert spans == [t.to_list() for t in tokenizer.tokenize_with_byte_spans(decoded)]
