"""BytePairTokenizer with BERT's special tokens, as ModernBERT's (and Ettin's)
`tokenizer.json` has them: a byte-level BPE whose specials, pair layout,
added tokens, normalizer and pre-tokenizer come from the file, id for id with
`AutoTokenizer`."""

import gzip
import itertools
import json
import unicodedata
from pathlib import Path

import pytest
import tensorflow as tf
import transformers
from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

from kbert.text import BertPreprocessor, BytePairTokenizer
from kbert.text.byte_pair import bytes_to_unicode
from kbert.text.token_classification import pack_text

DATA = Path(__file__).resolve().parents[2] / "examples" / "data"
CHAR_BYTES = {c: b for b, c in bytes_to_unicode().items()}
LENGTH = 48
EDGE_TEXTS = [
    "", " ", "a  b", "x          y", "  leading", "trailing   ", "tab\there\n\nnew\r\nline\t",
    "a   [MASK]  b", "a[MASK]b [MASK]", "[CLS] x [SEP][PAD][UNK]", "[unused0][unused1] [CLS",
    "<|endoftext|><|padding|>",
    "mail |||EMAIL_ADDRESS||| or |||IP_ADDRESS|||", "emoji 😀👍🏽 👨‍👩‍👧‍👦 x🏻y", "北京欢迎你 漢字テスト",
    "e\u0301 a\u0308 naïve résumé Å", "Ｆｕｌｌ　ｗｉｄｔｈ！ ﬁ ½ ²", "nbsp\u00a0x\u2002y\u3000z\u2028t\x85u",
    "ctrl\x00a\x01b\x7fc", "don't 's I'm we'll", "\U00020000 \ue000 \ufffd \u0378 𝔘𝔫𝔦",
]


def sample():
    """Real multilingual lines: German, French and Dutch reviews, Chinese
    STS-B pairs (examples/data/README.md), Austen's English."""
    reviews = [line.split("\t") for line in (DATA / "multilingual_polarity/subset.tsv").read_text().split("\n")[1:]]
    chinese = [line.split("\t")[:2] for line in (DATA / "stsb_zh/test.tsv").read_text().split("\n")[1:] if line]
    english = gzip.open(DATA / "austen.txt.gz", "rt", encoding="utf-8").read().split("\n")[:2000]
    return [r[0] for r in reviews if r[0]], chinese, [line for line in english if line]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """A tokenizer laid out as ModernBERT's `tokenizer.json`: a byte-level BPE
    (here 900 tokens, 640 merges on the sample) with GPT-NeoX's NFC normalizer
    and runs of spaces as added tokens, OLMo's PII tokens, BERT's special
    tokens past the BPE's ids (`[MASK]` taking the whitespace before it), and
    a `TemplateProcessing` of `[CLS] A [SEP] B [SEP]`, all in segment 0 (as
    code that reads ModernBERT's file shows it), read by transformers'
    generic class."""
    reviews, chinese, english = sample()
    tokenizer = Tokenizer(models.BPE())
    tokenizer.normalizer = normalizers.NFC()
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.train_from_iterator(reviews + [t for pair in chinese for t in pair] + english, trainers.BpeTrainer(
        vocab_size=900, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False,
        special_tokens=[AddedToken("|||IP_ADDRESS|||", normalized=True, special=False),
                        AddedToken("<|padding|>", normalized=False, special=True)]))
    tokenizer.add_tokens([AddedToken(" " * n, normalized=True, special=False) for n in range(8, 1, -1)]
                         + [AddedToken("|||EMAIL_ADDRESS|||", normalized=True, special=False)])
    tokenizer.add_special_tokens([AddedToken(t, normalized=False, special=True, lstrip=t == "[MASK]")
                                  for t in ("<|endoftext|>", "[UNK]", "[CLS]", "[SEP]", "[PAD]", "[MASK]")])
    tokenizer.add_tokens([AddedToken(f"[unused{i}]", normalized=True, special=False) for i in range(2)])
    ids = tokenizer.get_vocab()
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS]:0 $A:0 [SEP]:0", pair="[CLS]:0 $A:0 [SEP]:0 $B:0 [SEP]:0",
        special_tokens=[("[CLS]", ids["[CLS]"]), ("[SEP]", ids["[SEP]"])])
    folder = tmp_path_factory.mktemp("modernbert")
    transformers.PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, cls_token="[CLS]", sep_token="[SEP]", pad_token="[PAD]", unk_token="[UNK]",
        mask_token="[MASK]", model_input_names=["input_ids", "attention_mask"], model_max_length=8192,
    ).save_pretrained(str(folder))
    config = json.loads((folder / "tokenizer_config.json").read_text())
    (folder / "tokenizer_config.json").write_text(json.dumps({**config, "tokenizer_class": "PreTrainedTokenizerFast"}))
    return folder


@pytest.fixture(scope="module")
def tokenizer(folder):
    return BytePairTokenizer.from_preset(folder)


@pytest.fixture(scope="module")
def auto(folder):
    return transformers.AutoTokenizer.from_pretrained(str(folder))


def hf_ids(auto, texts):
    return auto(texts, add_special_tokens=False)["input_ids"]


def spans(tokenizer, texts):
    _, starts, ends = tokenizer.tokenize_with_byte_spans(texts)
    return [list(zip(s, e)) for s, e in zip(starts.to_list(), ends.to_list())]


def test_specials_and_pair_layout_come_from_the_template(tokenizer, auto):
    assert (tokenizer.pair_layout, tokenizer.second_segment_id) == ("one_separator", 0)
    assert (tokenizer.cls_id, tokenizer.sep_id, tokenizer.pad_id, tokenizer.unk_id, tokenizer.mask_id) == (
        auto.cls_token_id, auto.sep_token_id, auto.pad_token_id, auto.unk_token_id, auto.mask_token_id)
    assert tokenizer.cls_id >= 900 and tokenizer.normalizer == "NFC" and not tokenizer.add_prefix_space
    assert tokenizer.lstrip_tokens == ("[MASK]",) and not tokenizer.trim_offsets  # a template trims nothing


def test_ids_equal_auto_tokenizer_on_every_line_of_the_sample(tokenizer, auto):
    reviews, chinese, english = sample()
    lines = reviews + [t for pair in chinese for t in pair] + english + EDGE_TEXTS
    ours = tokenizer(lines).to_list()
    differing = [line for line, a, b in zip(lines, ours, hf_ids(auto, lines)) if a != b]
    assert not differing, f"{len(differing)} of {len(lines)} lines differ from AutoTokenizer: {differing[:3]}"


def test_preprocessor_packs_singles_and_pairs_as_auto_tokenizer_pairs_in_tf_data(tokenizer, auto):
    reviews, chinese, _ = sample()
    preprocessor = BertPreprocessor(tokenizer, sequence_length=LENGTH)
    singles = reviews[::7] + [a for a, _ in chinese[:100]]
    # (Hugging Face truncates long pairs slowly: a few reviews, many short Chinese pairs.)
    pairs = [a for a, _ in chinese[:150]] + reviews[:10], [b for _, b in chinese[:150]] + reviews[10:20]
    batches = list(tf.data.Dataset.from_tensor_slices(pairs).batch(128).map(lambda a, b: preprocessor((a, b))))
    for inputs, ours in ((singles, preprocessor(singles)),
                         (pairs, {k: tf.concat([batch[k] for batch in batches], 0) for k in batches[0]})):
        ours = {k: v.numpy().tolist() for k, v in ours.items()}
        theirs = auto(*(inputs if isinstance(inputs, tuple) else (inputs,)), truncation=True, max_length=LENGTH,
                      padding="max_length", return_token_type_ids=True)
        assert ours["token_ids"] == theirs["input_ids"]
        assert ours["padding_mask"] == theirs["attention_mask"]
        # The template's type ids (here all 0).
        assert ours["segment_ids"] == [[t * m for t, m in zip(types, mask)] for types, mask in
                                       zip(theirs["token_type_ids"], theirs["attention_mask"])]


def test_byte_spans_equal_auto_tokenizer_offsets(tokenizer, auto):
    reviews, chinese, english = sample()
    texts = reviews[::50] + [a for a, _ in chinese[::100]] + english[::200] + EDGE_TEXTS
    encodings = auto(texts, add_special_tokens=False, return_offsets_mapping=True)
    for text, ids, ours, theirs in zip(texts, encodings["input_ids"], spans(tokenizer, texts),
                                       encodings["offset_mapping"]):
        byte_at = [0, *itertools.accumulate(len(c.encode()) for c in text)]
        for piece, span, (start, end) in zip(ids, ours, theirs):
            # A piece that holds part of a character spans its own bytes; a
            # character NFC composed spans all it was composed of (Hugging
            # Face: the first).
            if whole_characters(tokenizer, piece) and not composed(text, start, end):
                assert span == (byte_at[start], byte_at[end]), (text, tokenizer.id_to_token(piece))


def whole_characters(tokenizer, piece):
    token = tokenizer.id_to_token(piece)
    try:
        return token in tokenizer.added_tokens or bool(bytes(CHAR_BYTES[c] for c in token).decode())
    except UnicodeDecodeError:
        return False


def composed(text, start, end):
    return unicodedata.normalize("NFC", text[start:end + 1]) != text[start:end + 1]


def test_detokenize_gives_the_text_as_auto_tokenizer_decodes(tokenizer, auto):
    texts = sample()[0][:50] + EDGE_TEXTS
    ids = tokenizer(texts)
    assert [t.decode() for t in tokenizer.detokenize(ids).numpy().tolist()] == [auto.decode(row)
                                                                                for row in ids.to_list()]


def test_mask_takes_the_whitespace_before_it_as_the_file_says(folder, tokenizer, auto, tmp_path):
    assert tokenizer("a   [MASK]").numpy().tolist() == [tokenizer.token_to_id("a"), tokenizer.mask_id]
    assert spans(tokenizer, ["a   [MASK]"]) == [[(0, 1), (1, 10)]]  # the whitespace it took, untrimmed
    data = json.loads((folder / "tokenizer.json").read_text())
    for token in data["added_tokens"]:
        token["lstrip"], token["rstrip"] = False, token["content"] == "[MASK]"
    (tmp_path / "tokenizer.json").write_text(json.dumps(data))
    (tmp_path / "tokenizer_config.json").write_bytes((folder / "tokenizer_config.json").read_bytes())
    texts = ["a   [MASK]  b", "[MASK] x", "a [MASK]"]
    rstripping = BytePairTokenizer.from_preset(tmp_path)
    theirs = hf_ids(transformers.AutoTokenizer.from_pretrained(str(tmp_path)), texts)
    assert rstripping(texts).to_list() == theirs != tokenizer(texts).to_list()


def test_saved_preset_reads_back_to_the_same_ids_and_config(folder, tokenizer, tmp_path):
    tokenizer.save_to_preset(tmp_path, model_max_length=512)
    reviews, chinese, _ = sample()
    texts, pairs = reviews[:200] + EDGE_TEXTS, [a for a, _ in chinese[:200]]
    saved = transformers.AutoTokenizer.from_pretrained(str(tmp_path))
    original = transformers.AutoTokenizer.from_pretrained(str(folder))
    assert saved(texts[:200], pairs)["input_ids"] == original(texts[:200], pairs)["input_ids"]
    assert saved(texts)["input_ids"] == original(texts)["input_ids"]
    assert saved.model_max_length == 512
    assert BytePairTokenizer.from_preset(tmp_path).get_config() == tokenizer.get_config()
    rebuilt = BytePairTokenizer.from_config(json.loads(json.dumps(tokenizer.get_config())))
    assert (rebuilt.pair_layout, rebuilt.cls_id, rebuilt.mask_id) == ("one_separator", tokenizer.cls_id,
                                                                        tokenizer.mask_id)
    assert rebuilt(texts).to_list() == tokenizer(texts).to_list()


def test_whole_words_and_word_starts_leave_out_the_added_tokens(tokenizer, folder):
    continuing = set(tokenizer.continuation_token_ids)
    added = {tokenizer.token_to_id(t) for t in tokenizer.added_tokens}
    assert not continuing & added and tokenizer.token_to_id("er") in continuing
    # Word starts read off spans that start with the space before a word
    # ("Ġwie" spans " wie" untrimmed) are those of the trimmed spans.
    texts = tf.constant(["Hallo Welt, wie geht's?", "a  [MASK] b  c", "北京 欢迎你", "  zwei  Leerzeichen "])
    words = [pack_text(BertPreprocessor(t, sequence_length=LENGTH), texts)[1:]
             for t in (tokenizer, BytePairTokenizer.from_preset(folder, trim_offsets=True))]
    for ours, trimmed in zip(*words):
        assert ours.to_list() == trimmed.to_list()
    assert [w.decode() for w in words[0][1][0].numpy().tolist()] == ["Hallo", "Welt", ",", "wie", "geht", "'s",
                                                                     "?"]


def test_the_templates_segment_of_the_second_text_is_read(folder, tokenizer, tmp_path):
    data = json.loads((folder / "tokenizer.json").read_text())
    for item in data["post_processor"]["pair"][3:]:
        next(iter(item.values()))["type_id"] = 1
    (tmp_path / "tokenizer.json").write_text(json.dumps(data))
    (tmp_path / "tokenizer_config.json").write_bytes((folder / "tokenizer_config.json").read_bytes())
    bert_like = BytePairTokenizer.from_preset(tmp_path)
    assert (bert_like.pair_layout, bert_like.second_segment_id) == ("one_separator", 1)
    theirs = transformers.AutoTokenizer.from_pretrained(str(tmp_path))("Hallo", "Welt", return_token_type_ids=True)
    ours = BertPreprocessor(bert_like, sequence_length=8, pad_to="longest")(("Hallo", "Welt"))
    assert ours["segment_ids"].numpy().tolist() == theirs["token_type_ids"]
    bert_like.save_to_preset(tmp_path / "saved")
    assert BytePairTokenizer.from_preset(tmp_path / "saved").second_segment_id == 1


def test_a_template_kbert_cannot_pack_is_refused_naming_it(folder, tmp_path):
    data = json.loads((folder / "tokenizer.json").read_text())
    data["post_processor"]["pair"][4]["SpecialToken"]["type_id"] = 1
    (tmp_path / "tokenizer.json").write_text(json.dumps(data))
    with pytest.raises(ValueError, match=r"packs a text as \[CLS\]:0 \$A:0 \[SEP\]:0 and a pair as .*\$B:0 \[SEP\]:1"):
        BytePairTokenizer.from_preset(tmp_path)


@pytest.mark.parametrize("kind, layout", [("BertProcessing", "one_separator"), ("RobertaProcessing", "two_separators")])
def test_bert_and_roberta_post_processors_give_their_pair_layouts(folder, tokenizer, tmp_path, kind, layout):
    data = json.loads((folder / "tokenizer.json").read_text())
    data["post_processor"] = {"type": kind, "cls": ["[CLS]", tokenizer.cls_id], "sep": ["[SEP]", tokenizer.sep_id],
                              **({"trim_offsets": True, "add_prefix_space": False} if kind == "RobertaProcessing"
                                 else {})}
    (tmp_path / "tokenizer.json").write_text(json.dumps(data))
    (tmp_path / "tokenizer_config.json").write_bytes((folder / "tokenizer_config.json").read_bytes())
    ours = BytePairTokenizer.from_preset(tmp_path)
    assert (ours.pair_layout, ours.trim_offsets) == (layout, kind == "RobertaProcessing")
    pairs = ["Hallo Welt", "北京欢迎你", "a [MASK] b"], ["Bonjour", "x  y", ""]
    auto = transformers.AutoTokenizer.from_pretrained(str(tmp_path))
    theirs = auto(*pairs, truncation=True, padding="max_length", max_length=16)["input_ids"]
    assert BertPreprocessor(ours, sequence_length=16)(pairs)["token_ids"].numpy().tolist() == theirs
