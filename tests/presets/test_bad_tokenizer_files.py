"""A damaged tokenizer file (a download cut short, a hand-edited vocabulary)
is refused with a ValueError naming the file and what is wrong in it, never
a bare error from the parser (struct.error, AttributeError, TypeError,
JSONDecodeError) or from the tokenizer built on it."""

import json
import re

import pytest

from kbert.text import BertTokenizer, BytePairTokenizer, SentencePieceTokenizer
from kbert.text.sentencepiece_model import CONTROL, NORMAL, SENTENCEPIECE_FILE, UNKNOWN, model_proto

# A SentencePiece model as the hub's XLM-R files hold one: <unk>, <s>, </s>, then the pieces.
SP_PIECES = [("<unk>", 0.0), ("<s>", 0.0), ("</s>", 0.0), ("\u2581the", -1.5), ("\u2581a", -2.0), ("s", -3.0)]
SP_MODEL = model_proto(SP_PIECES, [UNKNOWN, CONTROL, CONTROL] + [NORMAL] * 3, b"")
BPE_VOCABULARY = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3, "<mask>": 4, "a": 5, "b": 6, "ab": 7}


def named(path):
    return re.escape(str(path))


def test_a_sentencepiece_model_cut_short_anywhere_is_refused_naming_the_file(tmp_path):
    for length in range(len(SP_MODEL)):
        folder = tmp_path / f"first_{length}_bytes"
        folder.mkdir()
        (folder / SENTENCEPIECE_FILE).write_bytes(SP_MODEL[:length])
        why = "The file is empty" if length == 0 else "the file is cut short"
        with pytest.raises(ValueError, match=rf"{named(folder / SENTENCEPIECE_FILE)} cannot be read\. .*{why}[.;] "
                                             ".*Replace it with the file from the checkpoint"):
            SentencePieceTokenizer.from_preset(str(folder))


def test_the_whole_sentencepiece_model_reads(tmp_path):
    (tmp_path / SENTENCEPIECE_FILE).write_bytes(SP_MODEL)
    tokenizer = SentencePieceTokenizer.from_preset(str(tmp_path))
    assert tokenizer("the as").numpy().tolist() == [4, 5, 6]  # fairseq's ids: the pieces moved up by one


def write_byte_pair_folder(folder, vocab_json):
    (folder / "vocab.json").write_text(vocab_json)
    (folder / "merges.txt").write_text("#version: 0.2\na b\n")
    return folder / "vocab.json"


@pytest.mark.parametrize("vocab_json, what", [
    (json.dumps(list(BPE_VOCABULARY)), r"has a vocabulary that is not an object of token -> id"),
    (json.dumps({token: str(i) for token, i in BPE_VOCABULARY.items()}), r"gives the token '<s>' the id '0'; ids are "
                                                                         r"integers, 0 to 7"),
    (json.dumps(BPE_VOCABULARY)[:40], r"is not valid JSON \(.* at line 1, column \d+\)"),
], ids=["a list", "string ids", "cut short"])
def test_a_bad_vocab_json_is_refused_naming_the_file_and_what_is_wrong(tmp_path, vocab_json, what):
    path = write_byte_pair_folder(tmp_path, vocab_json)
    with pytest.raises(ValueError, match=named(path) + " " + what):
        BytePairTokenizer.from_preset(str(tmp_path))
    with pytest.raises(ValueError, match=named(path) + " " + what):
        BytePairTokenizer(str(path), ["a b"])


def write_tokenizer_json(folder, model):
    (folder / "tokenizer.json").write_text(json.dumps({"version": "1.0", "added_tokens": [], "model": model}))
    return folder / "tokenizer.json"


def test_a_tokenizer_json_whose_byte_pair_vocabulary_is_a_list_is_refused(tmp_path):
    path = write_tokenizer_json(tmp_path, {"type": "BPE", "vocab": list(BPE_VOCABULARY), "merges": ["a b"]})
    with pytest.raises(ValueError, match=named(path) + " has a vocabulary that is not an object of token -> id"):
        BytePairTokenizer.from_preset(str(tmp_path))


def test_a_tokenizer_json_whose_wordpiece_vocabulary_is_a_list_is_refused(tmp_path):
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the"]
    path = write_tokenizer_json(tmp_path, {"type": "WordPiece", "unk_token": "[UNK]", "vocab": tokens})
    with pytest.raises(ValueError, match=named(path) + r" has a WordPiece vocabulary \(model.vocab\) that is not an "
                                                       "object of token -> id"):
        BertTokenizer.from_preset(str(tmp_path))
    write_tokenizer_json(tmp_path, {"type": "WordPiece", "unk_token": "[UNK]",
                                    "vocab": {token: str(i) for i, token in enumerate(tokens)}})
    with pytest.raises(ValueError, match=named(path) + r" gives the WordPiece token '\[PAD\]' the id '0'; ids are "
                                                       "integers"):
        BertTokenizer.from_preset(str(tmp_path))


def test_a_tokenizer_json_whose_unigram_vocabulary_is_not_pieces_and_scores_is_refused(tmp_path):
    for vocab in [dict(SP_PIECES), [piece for piece, _ in SP_PIECES], None]:
        path = write_tokenizer_json(tmp_path, {"type": "Unigram", "unk_id": 0, "vocab": vocab})
        with pytest.raises(ValueError, match=named(path) + r" has a Unigram vocabulary \(model.vocab\) that is not a "
                                                           r"list of \[piece, score\]"):
            SentencePieceTokenizer.from_preset(str(tmp_path))
    path.write_text(path.read_text()[:30])
    with pytest.raises(ValueError, match=named(path) + r" is not valid JSON"):
        SentencePieceTokenizer.from_preset(str(tmp_path))
