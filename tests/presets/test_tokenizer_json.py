"""Tokenizers saved as transformers 5 saves them (tokenizer.json and
tokenizer_config.json, no vocab.txt): kbert reads the ids AutoTokenizer gives."""

import json
import os

import numpy as np
import pytest
import torch
import transformers

import kbert
from kbert.text import BertTokenizer
from tests.text.test_tokenizer import HARD_TEXTS


def save_tokenizer(minilm_dir, folder, lowercase):
    tokenizer = transformers.BertTokenizerFast(vocab=os.path.join(minilm_dir, "vocab.txt"), do_lower_case=lowercase)
    tokenizer.save_pretrained(str(folder))
    assert not os.path.exists(os.path.join(folder, "vocab.txt"))
    return str(folder)


def hf_ids(folder, texts):
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    return [tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]


@pytest.mark.parametrize("lowercase", [True, False], ids=["uncased", "cased"])
def test_tokenizer_json_only_folder_gives_autotokenizer_ids(minilm_dir, tmp_path, lowercase):
    folder = save_tokenizer(minilm_dir, tmp_path, lowercase)
    tokenizer = BertTokenizer.from_preset(folder)
    assert tokenizer.lowercase is lowercase and tokenizer.vocabulary_size == 30522
    assert tokenizer(HARD_TEXTS).to_list() == hf_ids(folder, HARD_TEXTS)


def test_generic_fast_tokenizer_keeps_the_normalizer_of_tokenizer_json(minilm_dir, tmp_path):
    # PreTrainedTokenizerFast takes tokenizer.json as it is: here a cased
    # normalizer that strips accents, whatever tokenizer_config.json's BERT
    # defaults would say.
    folder = save_tokenizer(minilm_dir, tmp_path, lowercase=False)
    with open(os.path.join(folder, "tokenizer.json")) as f:
        spec = json.load(f)
    spec["normalizer"]["strip_accents"] = True
    with open(os.path.join(folder, "tokenizer.json"), "w") as f:
        json.dump(spec, f)
    with open(os.path.join(folder, "tokenizer_config.json")) as f:
        config = json.load(f)
    for key in ("do_lower_case", "strip_accents", "tokenize_chinese_chars"):
        config.pop(key)
    with open(os.path.join(folder, "tokenizer_config.json"), "w") as f:
        json.dump({**config, "tokenizer_class": "PreTrainedTokenizerFast"}, f)
    tokenizer = BertTokenizer.from_preset(folder)
    assert (tokenizer.lowercase, tokenizer.strip_accents) == (False, True)
    assert tokenizer(HARD_TEXTS).to_list() == hf_ids(folder, HARD_TEXTS)


def test_classifier_from_a_transformers_5_folder_takes_text(minilm_dir, tmp_path):
    config = transformers.BertConfig(vocab_size=30522, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                     intermediate_size=32, max_position_embeddings=64, num_labels=2)
    torch.manual_seed(0)
    hf = transformers.BertForSequenceClassification(config).eval()
    hf.save_pretrained(str(tmp_path))
    save_tokenizer(minilm_dir, tmp_path, lowercase=True)
    model = kbert.BertClassifier.from_preset(str(tmp_path), sequence_length=32)
    texts = ["A fine film.", "Café naïve, 東京!"]
    encoded = transformers.AutoTokenizer.from_pretrained(str(tmp_path))(texts, padding=True, return_tensors="pt")
    with torch.no_grad():
        expected = hf(**encoded).logits.numpy()
    np.testing.assert_allclose(model.predict(texts, verbose=0), expected, atol=1e-4)


def test_folder_without_a_tokenizer_says_so(tmp_path):
    transformers.BertModel(transformers.BertConfig(
        vocab_size=30, hidden_size=8, num_hidden_layers=1, num_attention_heads=2, intermediate_size=8,
    )).save_pretrained(str(tmp_path))
    with pytest.warns(UserWarning, match=r"has no tokenizer \(neither vocab\.txt nor tokenizer\.json\).*preprocessor="):
        model = kbert.BertClassifier.from_preset(str(tmp_path), num_classes=2)
    assert model.preprocessor is None
    with pytest.raises(FileNotFoundError, match=r"has no tokenizer: neither vocab\.txt nor tokenizer\.json"):
        BertTokenizer.from_preset(str(tmp_path))
