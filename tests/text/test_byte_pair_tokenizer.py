"""BytePairTokenizer: id-for-id parity with Hugging Face's RoBERTa tokenizers, and running in-graph."""

import gzip
import itertools
import json
import random
import time
from pathlib import Path

import pytest
import tensorflow as tf
import transformers
from tokenizers import ByteLevelBPETokenizer

from kbert.text import BytePairTokenizer
from kbert.text.byte_pair import bytes_to_unicode
from tests.text.test_tokenizer_base import BROKEN_UTF8, as_python_reads

DATA = Path(__file__).resolve().parents[2] / "examples" / "data"
CHAR_BYTES = {c: b for b, c in bytes_to_unicode().items()}
SPECIALS = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
EDGE_TEXTS = [
    "", " ", "    ", "a  b", "a   b  ", "  leading", "trailing  ", "tab\there\n\nnew\r\nline\t",
    "x \n y", "\t\t x", " \t\n", "emoji 😀👍🏽 👨‍👩‍👧‍👦 x🏻y", "e\u0301 a\u0308 naïve résumé", "北京欢迎你 漢字テスト",
    "nbsp\u00a0x\u2002y\u3000z\u2028t\u2029s\x85u\x0bv\x1cw", "ctrl\x00a\x01b\x7fc",
    "don't 's 'sup I'm we'll they're 'S 'T  's x's '''s", "$5+3=8 <tag> ^_^ http://x.y/z?a=1&b=2 ...!!",
    "Hello <mask> world", "a<mask>b  <mask>  <s></s><pad><unk> <mask", "<mask> at start, \t<mask>",
    "12345 3.14 1,000,000 ½ ² Ⅻ", "Ｆｕｌｌ　ｗｉｄｔｈ！", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "ab" * 300,
    "\U00020000 \ue000 \ufffd \u0378", "Ärger über Öl ½ ² ¹ µª º ǅ ɏ ¿¡ «x» ×÷ §\u00a0x\x85y  \u00a0 z 'sÄ",
]


def corpus_lines():
    lines = gzip.open(DATA / "austen.txt.gz", "rt", encoding="utf-8").read().split("\n")
    for path in ("mr/train.tsv", "mr/test.tsv", "multilingual_polarity/subset.tsv", "stsb_zh/test.tsv"):
        lines += (DATA / path).read_text(encoding="utf-8").split("\n")
    return lines


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """A RoBERTa tokenizer folder: byte-level BPE trained on Austen and MR
    (vocabulary 3,000), `<mask>` taking the whitespace before it."""
    folder = tmp_path_factory.mktemp("roberta")
    trainer = ByteLevelBPETokenizer()
    trainer.train_from_iterator([line for line in corpus_lines()[:80000] if line.strip()], vocab_size=3000,
                                special_tokens=SPECIALS, show_progress=False)
    trainer.save_model(str(folder))
    trainer.save(str(folder / "tokenizer.json"))
    tokenizer = json.loads((folder / "tokenizer.json").read_text())
    for token in tokenizer["added_tokens"]:
        token["lstrip"] = token["content"] == "<mask>"
    (folder / "tokenizer.json").write_text(json.dumps(tokenizer))
    transformers.RobertaTokenizerFast.from_pretrained(str(folder)).save_pretrained(str(folder))
    return folder


@pytest.fixture(scope="module")
def tokenizer(folder):
    return BytePairTokenizer.from_preset(folder)


@pytest.fixture(scope="module")
def hf(folder):
    return transformers.RobertaTokenizerFast.from_pretrained(str(folder))


def hf_ids(hf, texts):
    return hf(texts, add_special_tokens=False)["input_ids"]


def ids(tokenizer, texts, batch_size=8192):
    return [row for start in range(0, len(texts), batch_size)
            for row in tokenizer(texts[start:start + batch_size]).to_list()]


def test_ids_equal_hugging_face_on_every_corpus_line(tokenizer, folder):
    lines = corpus_lines()
    ours = ids(tokenizer, lines)
    for hf_class in (transformers.RobertaTokenizerFast, transformers.RobertaTokenizer):
        theirs = hf_ids(hf_class.from_pretrained(str(folder)), lines)
        differing = [line for line, a, b in zip(lines, ours, theirs) if a != b]
        assert not differing, f"{len(differing)} of {len(lines)} lines differ from {hf_class.__name__}: {differing[:3]}"


def test_ids_equal_hugging_face_where_many_merges_meet_in_long_words(tmp_path):
    # Words of three letters: each pair's neighbours have merges of their
    # own at nearby ranks, the case where merging a pair early must wait.
    rng = random.Random(0)
    words = ["".join(rng.choice("abc") for _ in range(rng.randint(1, 60))) for _ in range(3000)]
    trainer = ByteLevelBPETokenizer()
    trainer.train_from_iterator([" ".join(words[i:i + 10]) for i in range(0, 2000, 10)], vocab_size=600,
                                special_tokens=SPECIALS, show_progress=False)
    trainer.save_model(str(tmp_path))
    texts = [" ".join(words[i:i + 5]) for i in range(2000, 3000, 5)] + ["".join(words[2000:2100])]
    ours = BytePairTokenizer(tmp_path / "vocab.json", tmp_path / "merges.txt")
    assert ours(texts).to_list() == [e.ids for e in trainer.encode_batch(texts)]


def test_ids_equal_hugging_face_on_edge_cases(tokenizer, hf):
    assert tokenizer(EDGE_TEXTS).to_list() == hf_ids(hf, EDGE_TEXTS)


def test_bytes_that_are_not_utf8_give_transformers_ids_of_the_text_python_decodes(tokenizer, hf):
    # (Not the raw bytes' own byte tokens: one rule for every tokenizer.)
    decoded = as_python_reads(BROKEN_UTF8)
    assert tokenizer(tf.constant(BROKEN_UTF8)).to_list() == hf_ids(hf, decoded)
    spans = [t.to_list() for t in tokenizer.tokenize_with_byte_spans(tf.constant(BROKEN_UTF8))]
    assert spans == [t.to_list() for t in tokenizer.tokenize_with_byte_spans(decoded)]


def test_mask_takes_the_whitespace_before_it(tokenizer, hf):
    assert tokenizer("a <mask>").numpy().tolist() == [tokenizer.token_to_id("a"), tokenizer.mask_id]
    assert tokenizer("a <mask>").numpy().tolist() == hf_ids(hf, "a <mask>")


def test_add_prefix_space_tokenizes_the_first_word_as_any_other(folder):
    ours = BytePairTokenizer.from_preset(folder, add_prefix_space=True)
    theirs = transformers.RobertaTokenizerFast.from_pretrained(str(folder), add_prefix_space=True)
    texts = ["Hello world", " Hello", "a <mask> b", "", "\nx"]
    assert ours(texts).to_list() == hf_ids(theirs, texts)
    assert ours("Hello").numpy().tolist() == ours(" Hello").numpy().tolist()
    # The added space is in no byte of the text.
    texts = ["Hello world", " Hello", "\nx", "  two"]
    _, starts, ends = ours.tokenize_with_byte_spans(texts)
    offsets = theirs(texts, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
    assert [list(zip(s, e)) for s, e in zip(starts.to_list(), ends.to_list())] == [list(o) for o in offsets]


def test_byte_spans_equal_hugging_face_offsets(tokenizer, hf):
    texts = corpus_lines()[::97] + EDGE_TEXTS
    ids, starts, ends = tokenizer.tokenize_with_byte_spans(texts)
    encodings = hf(texts, add_special_tokens=False, return_offsets_mapping=True)
    for i, text in enumerate(texts):
        byte_at = [0, *itertools.accumulate(len(c.encode()) for c in text)]
        spans = list(zip(starts[i].numpy().tolist(), ends[i].numpy().tolist()))
        for piece, span, (start, end) in zip(ids[i].numpy().tolist(), spans, encodings["offset_mapping"][i]):
            # A piece that holds part of a character spans its own bytes (see the docstring).
            if whole_characters(tokenizer.id_to_token(piece)):
                assert span == (byte_at[start], byte_at[end]), (text, piece)


def whole_characters(token):
    try:
        bytes(CHAR_BYTES[c] for c in token).decode()
        return True
    except (KeyError, UnicodeDecodeError):
        return token in SPECIALS


def test_long_text_finishes_in_bounded_time(tokenizer, hf):
    english = " ".join(corpus_lines()[:3000])[:200_000]
    chinese = "\n".join((DATA / "stsb_zh/test.tsv").read_text(encoding="utf-8").split("\n") * 3)[:200_000]
    one_word = "abcdefghijklmnopqrstuvwxyz" * 7693
    start = time.perf_counter()
    ours = tokenizer([english, chinese, one_word]).to_list()
    assert time.perf_counter() - start < 20
    assert ours == hf_ids(hf, [english, chinese, one_word])


def test_runs_in_dataset_map_and_a_saved_model(tokenizer, hf, tmp_path):
    texts = EDGE_TEXTS[:12]
    dataset = tf.data.Dataset.from_tensor_slices(texts).batch(4).map(tokenizer)
    assert [row for batch in dataset for row in batch.to_list()] == hf_ids(hf, texts)

    module = tf.Module()
    module.tokenizer = tokenizer
    module.serve = tf.function(lambda t: tokenizer(t).to_tensor(-1), input_signature=[tf.TensorSpec([None], tf.string)])
    tf.saved_model.save(module, str(tmp_path / "saved"))
    loaded = tf.saved_model.load(str(tmp_path / "saved"))
    expected = tf.ragged.constant(hf_ids(hf, texts)).to_tensor(-1).numpy()
    assert (loaded.serve(tf.constant(texts)).numpy() == expected).all()


def test_saved_preset_reads_back_to_the_same_ids(tokenizer, tmp_path):
    tokenizer.save_to_preset(tmp_path, model_max_length=512)
    texts = EDGE_TEXTS + corpus_lines()[:300]
    auto = transformers.AutoTokenizer.from_pretrained(str(tmp_path))
    assert tokenizer(texts).to_list() == hf_ids(auto, texts)
    assert auto.model_max_length == 512
    assert BytePairTokenizer.from_preset(tmp_path)(texts).to_list() == tokenizer(texts).to_list()


def test_reads_merges_as_strings_or_pairs_and_vocab_json(folder, tokenizer, tmp_path):
    data = json.loads((folder / "tokenizer.json").read_text())
    data["model"]["merges"] = [" ".join(m) if isinstance(m, list) else m for m in data["model"]["merges"]]
    (tmp_path / "tokenizer.json").write_text(json.dumps(data))
    texts = EDGE_TEXTS
    assert BytePairTokenizer.from_preset(tmp_path)(texts).to_list() == tokenizer(texts).to_list()
    from_files = BytePairTokenizer(folder / "vocab.json", folder / "merges.txt")
    assert from_files(texts).to_list() == tokenizer(texts).to_list()


def test_folder_of_vocab_json_and_merges_txt_reads_as_transformers_reads_it(folder, tmp_path):
    for name in ("vocab.json", "merges.txt"):
        (tmp_path / name).write_bytes((folder / name).read_bytes())
    texts = EDGE_TEXTS
    theirs = transformers.RobertaTokenizerFast.from_pretrained(str(tmp_path))
    assert BytePairTokenizer.from_preset(tmp_path)(texts).to_list() == hf_ids(theirs, texts)


def test_config_round_trip_gives_the_same_ids(tokenizer):
    rebuilt = BytePairTokenizer.from_config(json.loads(json.dumps(tokenizer.get_config())))
    assert rebuilt(EDGE_TEXTS).to_list() == tokenizer(EDGE_TEXTS).to_list()


def test_detokenize_gives_the_text_back_as_hugging_face_decodes(tokenizer, hf):
    texts = EDGE_TEXTS + corpus_lines()[-50:]
    assert [t.decode() for t in tokenizer.detokenize(tokenizer(texts)).numpy().tolist()] == [
        hf.decode(row) for row in hf_ids(hf, texts)]


def test_call_keeps_the_rank_rules(tokenizer):
    assert tokenizer("a b").shape.rank == 1
    assert tokenizer([["a", "b c"], ["d", ""]]).shape.as_list()[:2] == [2, 2]
    ragged = tokenizer(tf.ragged.constant([["a"], ["b", "c d"]]))
    assert ragged.to_list() == [[tokenizer("a").numpy().tolist()],
                                [tokenizer("b").numpy().tolist(), tokenizer("c d").numpy().tolist()]]


def test_special_and_continuation_ids(tokenizer):
    ids = [tokenizer.cls_id, tokenizer.pad_id, tokenizer.sep_id, tokenizer.unk_id, tokenizer.mask_id]
    assert ids == [0, 1, 2, 3, 4]
    assert tokenizer.special_tokens == tuple(SPECIALS)
    continuing = set(tokenizer.continuation_token_ids)
    assert tokenizer.token_to_id("Ġthe") not in continuing and tokenizer.token_to_id("e") in continuing
    assert not continuing & set(range(5))


def test_folder_without_files_says_which_files_are_read(tmp_path):
    with pytest.raises(FileNotFoundError, match="tokenizer.json, or vocab.json and merges.txt"):
        BytePairTokenizer.from_preset(tmp_path)
