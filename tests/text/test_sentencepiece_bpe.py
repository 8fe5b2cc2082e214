"""SentencePieceTokenizer on a SentencePiece BPE with byte fallback (Gemma's
tokenizer, as mmBERT has it): id-for-id parity with `AutoTokenizer` from
`tokenizer.json` alone and from `tokenizer.model`, characters outside the
vocabulary as their `<0xNN>` bytes, pairs, offsets and saved files."""

import gzip
import json
import random
import time

import pytest
import sentencepiece
import tensorflow as tf
from transformers import AutoTokenizer

from kbert.presets.byte_pair_files import read_preset
from kbert.presets.tokenizer_files import tokenizer_class_name
from kbert.text import BertPreprocessor, SentencePieceTokenizer
from tests.text.test_sentencepiece_tokenizer import EDGE_TEXTS, hf_ids, read_corpus, read_tsv_column
from tests.text.test_tokenizer import DATA, HARD_TEXTS
from tests.text.test_tokenizer_base import BROKEN_UTF8, as_python_reads

# Characters the vocabulary lacks (emoji, rare scripts, most Chinese), which fall back to bytes.
BYTE_TEXTS = ["emoji 😀👍🏽 👨‍👩‍👧‍👦 ok", "rare 𝔘𝔫𝔦 ꙮ ᚠᚢᚦ ⅷ", "北京欢迎你", "tab\there\nnew line\r\n",
              "  two  spaces   three ", "<mask> a<mask>b <bos><eos> <pad> <unk>"]
LENGTH = 48


@pytest.fixture(scope="module")
def corpus():
    return read_corpus()


@pytest.fixture(scope="module")
def model_folder(tmp_path_factory):
    """A Gemma-style tokenizer.model: BPE with byte fallback, <pad> <eos>
    <bos> <unk> <mask> first, then the 256 byte pieces, trained here on
    Austen and the German/French/Dutch reviews."""
    folder = tmp_path_factory.mktemp("gemma_model")
    with gzip.open(DATA / "austen.txt.gz", "rt", encoding="utf-8") as f:
        lines = [line.strip() for line in f if line.strip()]
    lines = random.Random(0).sample(lines, 6000) + read_tsv_column(DATA / "multilingual_polarity" / "subset.tsv")
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(lines), model_prefix=str(folder / "tokenizer"), vocab_size=3000, model_type="bpe",
        character_coverage=0.995, shuffle_input_sentence=False, num_threads=1, byte_fallback=True,
        pad_id=0, eos_id=1, bos_id=2, unk_id=3, pad_piece="<pad>", eos_piece="<eos>", bos_piece="<bos>",
        unk_piece="<unk>", control_symbols=["<mask>"], add_dummy_prefix=False, normalization_rule_name="identity",
        remove_extra_whitespaces=False, allow_whitespace_only_pieces=True, split_digits=True,
    )
    (folder / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "GemmaTokenizer"}))
    return folder


@pytest.fixture(scope="module")
def json_folder(tmp_path_factory, model_folder):
    """mmBERT's layout: transformers 5's tokenizer.json of that model (no
    tokenizer.model), its post-processor `<bos> A <eos> B <eos>` in one
    segment as ModernBERT's, run as it is (PreTrainedTokenizerFast)."""
    folder = tmp_path_factory.mktemp("mmbert")
    AutoTokenizer.from_pretrained(model_folder).save_pretrained(folder)
    assert not (folder / "tokenizer.model").exists()
    config = json.loads((folder / "tokenizer.json").read_text())

    def item(kind, name):
        return {kind: {"id": name, "type_id": 0}}

    first = [item("SpecialToken", "<bos>"), item("Sequence", "A"), item("SpecialToken", "<eos>")]
    config["post_processor"] = {
        "type": "TemplateProcessing", "single": first,
        "pair": first + [item("Sequence", "B"), item("SpecialToken", "<eos>")],
        "special_tokens": {t: {"id": t, "ids": [i], "tokens": [t]} for t, i in (("<bos>", 2), ("<eos>", 1))}}
    (folder / "tokenizer.json").write_text(json.dumps(config, ensure_ascii=False))
    (folder / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<bos>", "eos_token": "<eos>",
        "cls_token": "<bos>", "sep_token": "<eos>", "pad_token": "<pad>", "unk_token": "<unk>",
        "mask_token": "<mask>"}))
    return folder


@pytest.fixture(scope="module")
def auto(json_folder):
    return AutoTokenizer.from_pretrained(json_folder)


@pytest.fixture(scope="module")
def tokenizer(json_folder):
    return SentencePieceTokenizer.from_preset(json_folder)


def test_specials_and_pair_layout_come_from_the_template(tokenizer, auto):
    assert (tokenizer.cls_id, tokenizer.sep_id, tokenizer.pad_id, tokenizer.unk_id, tokenizer.mask_id) == (
        auto.cls_token_id, auto.sep_token_id, auto.pad_token_id, auto.unk_token_id, auto.mask_token_id) == (
        2, 1, 0, 3, 4)
    assert (tokenizer.pair_layout, tokenizer.second_segment_id) == ("one_separator", 0)
    assert tokenizer.vocabulary[5:7] == ["<0x00>", "<0x01>"] and tokenizer.merges is not None


def test_the_file_is_read_by_sentencepiece_not_the_byte_level_reader(json_folder, model_folder):
    assert tokenizer_class_name(json_folder, "modernbert") == "SentencePieceTokenizer"
    assert tokenizer_class_name(model_folder, "modernbert") == "SentencePieceTokenizer"
    with pytest.raises(ValueError, match="byte_fallback .*SentencePieceTokenizer.from_preset"):
        read_preset(json_folder)


def test_ids_match_hugging_face_on_every_corpus_line_and_bytes(tokenizer, auto, corpus):
    texts = corpus + HARD_TEXTS + EDGE_TEXTS + BYTE_TEXTS
    ours = tokenizer(texts).to_list()
    differing = [t for t, a, b in zip(texts, ours, hf_ids(auto, texts)) if a != b]
    assert not differing, f"{len(differing)} of {len(texts)} lines differ from AutoTokenizer: {differing[:3]}"
    byte_ids = {tokenizer.token_to_id(f"<0x{b:02X}>") for b in range(256)}
    assert {i for ids in tokenizer(BYTE_TEXTS[:3]).to_list() for i in ids} & byte_ids


def test_the_tokenizer_model_reads_as_its_tokenizer_json(model_folder, corpus):
    # Gemma's tokenizer.model: transformers writes its merges; the ids are the model's own.
    from_model = SentencePieceTokenizer.from_preset(model_folder)
    texts = corpus[::50] + BYTE_TEXTS
    assert from_model(texts).to_list() == hf_ids(AutoTokenizer.from_pretrained(model_folder), texts)


def test_a_vocabulary_whose_tab_took_the_place_of_its_byte_piece_reads(json_folder, tmp_path):
    # Gemma's converter put "\t" in <0x09>'s place where a model lacked it;
    # SentencePiece needs all 256 byte pieces: the missing one follows the vocabulary, unused.
    config = json.loads((json_folder / "tokenizer.json").read_text())
    config["model"]["vocab"]["\t"] = config["model"]["vocab"].pop("<0x09>")
    (tmp_path / "tokenizer.json").write_text(json.dumps(config, ensure_ascii=False))
    (tmp_path / "tokenizer_config.json").write_text((json_folder / "tokenizer_config.json").read_text())
    texts = ["tab\there \t\t x\t", *BYTE_TEXTS]
    tokenizer = SentencePieceTokenizer.from_preset(tmp_path)
    assert tokenizer(texts).to_list() == hf_ids(AutoTokenizer.from_pretrained(tmp_path), texts)
    assert tokenizer.vocabulary_size == len(config["model"]["vocab"]) and "<0x09>" not in tokenizer.vocabulary


def test_preprocessor_packs_singles_and_pairs_as_auto_tokenizer_in_tf_data(tokenizer, auto, corpus):
    preprocessor = BertPreprocessor(tokenizer, sequence_length=LENGTH)
    chinese = read_tsv_column(DATA / "stsb_zh" / "test.tsv", 0)[:100]
    singles = corpus[-2000::20] + BYTE_TEXTS
    pairs = corpus[-1000:-900] + chinese[:50], corpus[-900:-800] + chinese[50:]
    batches = list(tf.data.Dataset.from_tensor_slices(pairs).batch(64).map(lambda a, b: preprocessor((a, b))))
    for inputs, ours in ((singles, preprocessor(singles)),
                         (pairs, {k: tf.concat([batch[k] for batch in batches], 0) for k in batches[0]})):
        ours = {k: v.numpy().tolist() for k, v in ours.items()}
        theirs = auto(*(inputs if isinstance(inputs, tuple) else (inputs,)), truncation=True, max_length=LENGTH,
                      padding="max_length", return_token_type_ids=True)
        assert ours["token_ids"] == theirs["input_ids"]
        assert ours["padding_mask"] == theirs["attention_mask"]
        assert ours["segment_ids"] == theirs["token_type_ids"]  # (all 0, as the template sets them)


def test_byte_spans_equal_hugging_face_offsets_in_bytes(tokenizer, auto, corpus):
    # A character's byte pieces each span the whole character, as in tokenizers.
    texts = corpus[::700] + HARD_TEXTS + BYTE_TEXTS
    ids, starts, ends = tokenizer.tokenize_with_byte_spans(texts)
    for text, row_ids, row_starts, row_ends in zip(texts, ids.to_list(), starts.to_list(), ends.to_list()):
        encoding = auto(text, add_special_tokens=False, return_offsets_mapping=True)
        in_bytes = [(len(text[:s].encode()), len(text[:e].encode())) for s, e in encoding["offset_mapping"]]
        assert (row_ids, list(zip(row_starts, row_ends))) == (encoding["input_ids"], in_bytes), text


def test_detokenize_gives_hugging_faces_decode(tokenizer, auto, corpus):
    texts = corpus[::2000] + BYTE_TEXTS
    expected = [auto.decode(ids) for ids in hf_ids(auto, texts)]
    assert [t.decode() for t in tokenizer.detokenize(tokenizer(texts)).numpy().tolist()] == expected


def test_saved_preset_reads_to_the_same_ids_and_config(tokenizer, tmp_path, corpus):
    tokenizer.save_to_preset(tmp_path, model_max_length=8192)
    texts = corpus[::300] + BYTE_TEXTS
    saved = AutoTokenizer.from_pretrained(tmp_path)
    assert hf_ids(saved, texts) == tokenizer(texts).to_list()
    assert saved("a", "b")["input_ids"] == [2, *saved("a", add_special_tokens=False)["input_ids"], 1,
                                            *saved("b", add_special_tokens=False)["input_ids"], 1]
    assert SentencePieceTokenizer.from_preset(tmp_path).get_config() == tokenizer.get_config()


def test_merges_that_sentencepiece_would_run_otherwise_are_refused(json_folder, tmp_path):
    config = json.loads((json_folder / "tokenizer.json").read_text())
    merges = config["model"]["merges"]
    made = [a + b for a, b in merges]
    # A split of a piece that another merge makes left out: SentencePiece would still make it there.
    del merges[next(i for i, piece in enumerate(made) if made.count(piece) > 1)]
    (tmp_path / "tokenizer.json").write_text(json.dumps(config, ensure_ascii=False))
    with pytest.raises(ValueError, match="do not list every split of a piece"):
        SentencePieceTokenizer.from_preset(tmp_path)


def test_bytes_that_are_not_utf8_give_transformers_ids_of_the_text_python_decodes(tokenizer, auto):
    decoded = as_python_reads(BROKEN_UTF8)
    assert tokenizer(tf.constant(BROKEN_UTF8)).to_list() == hf_ids(auto, decoded)
    spans = [t.to_list() for t in tokenizer.tokenize_with_byte_spans(tf.constant(BROKEN_UTF8))]
    assert spans == [t.to_list() for t in tokenizer.tokenize_with_byte_spans(decoded)]


@pytest.mark.parametrize("text", ["Emma Woodhouse, handsome, clever, and rich. " * 4545, "北京欢迎你" * 40_000],
                         ids=["sentences", "bytes"])
def test_a_200000_character_text_finishes_quickly_with_hugging_faces_ids(tokenizer, auto, text):
    # The BPE runs on the whole text, as tokenizers runs it (SentencePiece's merges: n log n).
    tokenizer("warm up")
    start = time.perf_counter()
    ids = tokenizer(text).numpy().tolist()
    assert time.perf_counter() - start < 3
    assert ids == hf_ids(auto, text)
