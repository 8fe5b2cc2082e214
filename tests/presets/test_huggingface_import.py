"""kbert's backbone against `transformers.BertModel` on the same checkpoint."""

import json
import os

import numpy as np
import pytest
import torch
import transformers

import kbert
from tests.helpers import random_inputs, to_numpy, transformers_outputs

SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "A gripping, beautifully acted film that never lets up.",
    "It rains.",
]
PAIRS = (
    ["Who wrote Pride and Prejudice?", "Is the film worth seeing?"],
    ["Jane Austen wrote it in 1813, and it is still read today.", "No."],
)


def run_both(kbert_model, hf_model, inputs):
    return kbert_model(inputs), transformers_outputs(hf_model, inputs)


def assert_matches(outputs, reference, padding_mask, atol=1e-4):
    # Padding positions are not compared: what a model computes there is
    # never used (Hugging Face and kbert mask them differently).
    mask = padding_mask[:, :, None].astype(bool)
    sequence = to_numpy(outputs["sequence_output"])
    np.testing.assert_allclose(
        np.where(mask, sequence, 0), np.where(mask, reference.last_hidden_state.numpy(), 0), atol=atol
    )
    np.testing.assert_allclose(to_numpy(outputs["pooled_output"]), reference.pooler_output.numpy(), atol=atol)


def encode(hf_tokenizer, *texts):
    encoded = hf_tokenizer(*texts, padding=True, return_tensors="np")
    return {
        "token_ids": encoded["input_ids"].astype("int32"),
        "segment_ids": encoded["token_type_ids"].astype("int32"),
        "padding_mask": encoded["attention_mask"].astype("int32"),
    }


@pytest.fixture(scope="module")
def minilm(minilm_dir):
    hf_model = transformers.BertModel.from_pretrained(minilm_dir).eval()
    hf_tokenizer = transformers.BertTokenizerFast.from_pretrained(minilm_dir)
    return kbert.BertBackbone.from_preset(minilm_dir), hf_model, hf_tokenizer


@pytest.mark.parametrize("texts", [SENTENCES, PAIRS], ids=["single", "pairs"])
def test_minilm_matches_transformers_on_padded_batches(minilm, texts):
    backbone, hf_model, hf_tokenizer = minilm
    inputs = encode(hf_tokenizer, *texts) if isinstance(texts, tuple) else encode(hf_tokenizer, texts)
    assert inputs["padding_mask"].min() == 0  # the batch really is padded
    assert_matches(*run_both(backbone, hf_model, inputs), inputs["padding_mask"])


def test_minilm_architecture_read_from_config(minilm):
    backbone = minilm[0]
    assert (backbone.num_layers, backbone.hidden_dim, backbone.num_heads) == (6, 384, 12)
    assert backbone.vocabulary_size == 30522 and backbone.layer_norm_epsilon == 1e-12


def save_random_checkpoint(folder, model_class=transformers.BertModel, safe=True, **config):
    hf_config = transformers.BertConfig(**{
        "vocab_size": 120, "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
        "intermediate_size": 48, "max_position_embeddings": 40, **config,
    })
    torch.manual_seed(0)
    model = model_class(hf_config).eval()
    model.save_pretrained(folder)
    if not safe:
        # The older PyTorch format (transformers 5 no longer writes it).
        os.remove(os.path.join(folder, "model.safetensors"))
        torch.save(model.state_dict(), os.path.join(folder, "pytorch_model.bin"))
    return model


SHAPES = {
    "deep_narrow": dict(num_hidden_layers=3, hidden_size=24, num_attention_heads=3, intermediate_size=40),
    "three_segments_eps": dict(type_vocab_size=3, layer_norm_eps=1e-7, hidden_dropout_prob=0.2),
    "tanh_gelu": dict(hidden_act="gelu_new", num_attention_heads=8),
}


@pytest.mark.parametrize("shape", SHAPES)
def test_random_checkpoints_of_other_shapes_match_transformers(tmp_path, shape):
    hf_model = save_random_checkpoint(tmp_path, **SHAPES[shape])
    backbone = kbert.BertBackbone.from_preset(str(tmp_path))
    inputs = random_inputs(3, 17, 120, num_segments=hf_model.config.type_vocab_size)
    assert_matches(*run_both(backbone, hf_model, inputs), inputs["padding_mask"])


def test_task_checkpoint_loads_its_bert_part(tmp_path):
    classifier = save_random_checkpoint(tmp_path, transformers.BertForSequenceClassification)
    backbone = kbert.BertBackbone.from_preset(str(tmp_path))
    inputs = random_inputs(2, 9, 120)
    assert_matches(*run_both(backbone, classifier.bert, inputs), inputs["padding_mask"])


def test_pytorch_bin_checkpoint_matches_transformers(tmp_path):
    hf_model = save_random_checkpoint(tmp_path, safe=False)
    assert os.path.exists(tmp_path / "pytorch_model.bin")
    backbone = kbert.BertBackbone.from_preset(str(tmp_path))
    inputs = random_inputs(2, 11, 120)
    assert_matches(*run_both(backbone, hf_model, inputs), inputs["padding_mask"])


class _RunsCode:
    def __reduce__(self):
        return (os.system, ("touch pwned",))


def test_pickled_code_in_a_bin_checkpoint_is_never_run(tmp_path, monkeypatch):
    save_random_checkpoint(tmp_path, safe=False)
    torch.save({"embeddings.word_embeddings.weight": _RunsCode()}, tmp_path / "pytorch_model.bin")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match=r"pytorch_model\.bin holds pickled objects other than tensors.*kbert does "
                                         r"not unpickle them\. Use the checkpoint's model\.safetensors"):
        kbert.BertBackbone.from_preset(str(tmp_path))
    assert not os.path.exists(tmp_path / "pwned")


def test_weights_not_matching_config_name_the_tensors(tmp_path):
    save_random_checkpoint(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    config["intermediate_size"] = 64
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match=r"encoder\.layer\.0\.intermediate\.dense\.weight has shape \(48, 32\), expected \(64, 32\)"):
        kbert.BertBackbone.from_preset(str(tmp_path))


def test_checkpoint_deeper_than_its_config_is_refused(tmp_path):
    save_random_checkpoint(tmp_path, num_hidden_layers=3)
    config = json.loads((tmp_path / "config.json").read_text())
    config["num_hidden_layers"] = 2
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match=r"encoder\.layer\.2\."):
        kbert.BertBackbone.from_preset(str(tmp_path))


def test_missing_tensors_are_listed_and_nothing_is_assigned(tmp_path):
    from safetensors.numpy import load_file

    from kbert.presets import huggingface

    save_random_checkpoint(tmp_path)
    tensors = load_file(tmp_path / "model.safetensors")
    del tensors["encoder.layer.1.output.dense.bias"]
    backbone = kbert.BertBackbone(vocabulary_size=120, num_layers=2, num_heads=4, hidden_dim=32,
                                  intermediate_dim=48, max_sequence_length=40)
    before = [to_numpy(w).copy() for w in backbone.weights]
    with pytest.raises(ValueError, match=r"missing tensor encoder\.layer\.1\.output\.dense\.bias"):
        huggingface.assign(huggingface.backbone_table(backbone), tensors)
    for old, new in zip(before, backbone.weights):
        np.testing.assert_array_equal(old, to_numpy(new))
