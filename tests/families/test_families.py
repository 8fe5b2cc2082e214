"""The families past BERT (RoBERTa, XLM-RoBERTa, DistilBERT, ELECTRA)
against transformers on the same weights: the backbone and every task head,
from tiny random checkpoints saved by transformers' own classes (weights
nudged off their initialisation), and back out with `export_to_transformers`."""

import dataclasses
import json

import numpy as np
import pytest
import torch
import transformers

import kbert
from tests.helpers import nudge_and_save, once_unless, to_numpy, transformers_outputs

VOCABULARY = 90
# (kbert task, its arguments, transformers class suffix, output of kbert, of transformers)
TASKS = {
    "backbone": (kbert.BertBackbone, {}, "Model"),
    "classifier": (kbert.BertClassifier, {}, "ForSequenceClassification"),
    "token_classifier": (kbert.BertTokenClassifier, {}, "ForTokenClassification"),
    "question_answerer": (kbert.BertQuestionAnswerer, {}, "ForQuestionAnswering"),
    "masked_lm": (kbert.BertMaskedLM, {}, "ForMaskedLM"),
}
SIZES = dict(vocab_size=VOCABULARY, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
             intermediate_size=24, max_position_embeddings=34)
CONFIGS = {
    "roberta": (transformers.RobertaConfig, SIZES),
    "xlm-roberta": (transformers.XLMRobertaConfig, SIZES),
    "camembert": (transformers.CamembertConfig, SIZES),
    "distilbert": (transformers.DistilBertConfig, dict(vocab_size=VOCABULARY, dim=16, n_layers=2, n_heads=2,
                                                       hidden_dim=24, max_position_embeddings=34)),
    # A narrower embedding than the hidden size, as ELECTRA-small's.
    "electra": (transformers.ElectraConfig, dict(SIZES, embedding_size=8)),
}


def save_checkpoint(folder, family, suffix, **config):
    """A tiny random transformers model of `family`, weights nudged (so that
    zero biases and unit LayerNorm scales test nothing), saved to `folder`."""
    config_class, sizes = CONFIGS[family]
    hf_config = config_class(**sizes, num_labels=2 if suffix == "ForQuestionAnswering" else 3, **config)
    torch.manual_seed(0)
    return nudge_and_save(getattr(transformers, config_class.__name__.replace("Config", suffix))(hf_config).eval(),
                          folder)


def random_ids(batch=3, length=11, seed=0):
    """Right-padded rows of ids that are not RoBERTa's specials (0-3)."""
    rng = np.random.default_rng(seed)
    lengths = np.array([length, 6, 3][:batch])
    padding_mask = (np.arange(length)[None, :] < lengths[:, None]).astype("int32")
    token_ids = np.where(padding_mask > 0, rng.integers(4, VOCABULARY, size=(batch, length)), 1).astype("int32")
    return {"token_ids": token_ids, "segment_ids": np.zeros_like(token_ids), "padding_mask": padding_mask}


def hf_outputs(model, inputs, suffix):
    out = transformers_outputs(model, {k: inputs[k] for k in ("token_ids", "padding_mask")})
    if suffix == "Model":
        return {"sequence_output": out.last_hidden_state.numpy()}
    if suffix == "ForQuestionAnswering":
        return {"start_logits": out.start_logits.numpy(), "end_logits": out.end_logits.numpy()}
    return {"logits": out.logits.numpy()}


def kbert_outputs(model, inputs, suffix):
    if suffix == "ForMaskedLM":
        # kbert's masked LM scores chosen positions: every position here.
        length = inputs["token_ids"].shape[1]
        positions = np.tile(np.arange(length, dtype="int32"), (len(inputs["token_ids"]), 1))
        return {"logits": to_numpy(model({**inputs, "mask_positions": positions})["mlm_logits"])}
    out = model(inputs)
    if suffix == "Model":
        return {"sequence_output": to_numpy(out["sequence_output"])}
    if suffix == "ForQuestionAnswering":
        return {"start_logits": to_numpy(out["start_logits"]), "end_logits": to_numpy(out["end_logits"])}
    return {"logits": to_numpy(out)}


def assert_close(kbert_out, hf_out, padding_mask, suffix):
    for key, expected in hf_out.items():
        got = kbert_out[key]
        if suffix != "ForSequenceClassification":  # per position: padding positions differ
            real = padding_mask.astype(bool)
            got, expected = got[real], expected[real]
        np.testing.assert_allclose(got, expected, atol=1e-4, err_msg=key)


@pytest.mark.parametrize("family", CONFIGS)
@pytest.mark.parametrize("task", once_unless(TASKS, every_backend=("backbone", "masked_lm")))
def test_every_task_matches_transformers_and_exports_back(tmp_path, family, task):
    cls, kwargs, suffix = TASKS[task]
    hf_model = save_checkpoint(tmp_path / "hf", family, suffix)
    model = cls.from_preset(str(tmp_path / "hf"), **kwargs)
    assert model.get_config().get("family", getattr(model, "backbone", model).family) == family
    inputs = random_ids()
    outputs = kbert_outputs(model, inputs, suffix)
    assert_close(outputs, hf_outputs(hf_model, inputs, suffix), inputs["padding_mask"], suffix)

    model.export_to_transformers(str(tmp_path / "out"))
    exported = transformers.AutoConfig.from_pretrained(str(tmp_path / "out"))
    assert exported.model_type == family and exported.architectures == [type(hf_model).__name__]
    back = type(hf_model).from_pretrained(str(tmp_path / "out")).eval()
    assert_close(outputs, hf_outputs(back, inputs, suffix), inputs["padding_mask"], suffix)


def test_positions_start_after_the_padding_index(tmp_path):
    # A longer row than 32 positions would read past the table: RoBERTa's
    # 34 rows hold 32 positions after rows 0 and 1.
    save_checkpoint(tmp_path, "roberta", "Model")
    backbone = kbert.BertBackbone.from_preset(str(tmp_path))
    assert backbone.max_sequence_length == 32 and backbone.position_offset == 2
    assert tuple(backbone.position_embedding.position_embeddings.shape) == (34, 16)


def test_a_distilbert_preset_saved_by_kbert_loads_back(tmp_path):
    # No token types: num_segments=0 is a size a saved config may hold.
    save_checkpoint(tmp_path / "hf", "distilbert", "ForSequenceClassification")
    model = kbert.BertClassifier.from_preset(str(tmp_path / "hf"))
    model.save_to_preset(str(tmp_path / "kbert"))
    again = kbert.BertClassifier.from_preset(str(tmp_path / "kbert"))
    inputs = random_ids()
    np.testing.assert_allclose(to_numpy(again(inputs)), to_numpy(model(inputs)), atol=1e-6)


def test_settings_a_family_cannot_have_are_refused():
    sizes = dict(vocabulary_size=VOCABULARY, num_layers=1, num_heads=2, hidden_dim=8, intermediate_dim=16)
    with pytest.raises(ValueError, match="it has token types, so num_segments >= 1"):
        kbert.BertBackbone(**sizes, num_segments=0)
    with pytest.raises(ValueError, match="it has no token type embeddings: num_segments=0"):
        kbert.BertBackbone(**sizes, family="distilbert")
    with pytest.raises(ValueError, match="positions start after the padding index"):
        kbert.BertBackbone(**sizes, family="roberta")
    with pytest.raises(ValueError, match="Unknown model family 'gpt2'"):
        kbert.BertBackbone(**sizes, family="gpt2")
    roberta = kbert.BertBackbone(**sizes, family="roberta", position_offset=2)
    modernbert = kbert.ModernBertBackbone(**sizes, local_attention=4, global_attention_every=2)
    deberta = kbert.DebertaV2Backbone(**sizes)
    for backbone in (roberta, modernbert, deberta):  # pre-trained without next-sentence prediction
        with pytest.raises(ValueError, match="BertPretrainer adds BERT's next-sentence head.*kbert.BertMaskedLM"):
            kbert.BertPretrainer(backbone)


def test_an_absurd_distilbert_config_is_refused_before_it_is_built(tmp_path):
    # Its own key names (n_layers, dim) go through the same memory check as BERT's.
    save_checkpoint(tmp_path, "distilbert", "Model")
    config = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, "n_layers": 100_000, "dim": 4096}))
    with pytest.raises(ValueError, match=r"describes a model of [\d,]+ parameters"):
        kbert.BertBackbone.from_preset(str(tmp_path))


@pytest.mark.parametrize("family, config", [("distilbert", {"n_layers": 1}), ("electra", {"num_hidden_layers": 1})])
def test_a_checkpoint_deeper_than_its_config_is_refused_in_every_family(tmp_path, family, config):
    # DistilBERT's layers are `transformer.layer.N`, not BERT's `encoder.layer.N`.
    save_checkpoint(tmp_path, family, "ForSequenceClassification")
    saved = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**saved, **config}))
    with pytest.raises(ValueError, match=r"the config does not account for \d+ tensors, e\.g\. \w+\.(transformer|encoder)\.layer\.1\."):
        kbert.BertClassifier.from_preset(str(tmp_path))


def test_every_family_keeps_the_family_contract():
    from kbert import families
    from kbert.families.family import Family

    for family in families.FAMILIES:
        assert isinstance(family, Family) and family.problems() == [], family.name
    broken = dataclasses.replace(families.get("bert"), model_types=("bert", "bert-2"), prefix="bert")
    assert broken.problems() == ["class_prefix lacks bert-2", "tokenizers lacks bert-2", "tokenizer_files lacks bert-2",
                                 'prefix "bert" must end with "."']
    with pytest.raises(TypeError, match='The BERT family breaks the family contract .*: class_prefix lacks bert-2'):
        families._check((broken,))
    with pytest.raises(TypeError, match='model_type "bert" is claimed by both BERT and BERT'):
        families._check((families.get("bert"), families.get("bert")))


def test_weights_of_another_family_under_a_bert_config_are_refused(tmp_path):
    save_checkpoint(tmp_path, "roberta", "ForSequenceClassification")
    config = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, "model_type": "bert"}))
    with pytest.raises(ValueError, match=r'config\.json describes a BERT model \(model_type "bert"\), whose weights '
                                         r"start with bert\.embeddings\. or .*but these start with classifier\., "
                                         r"roberta\."):
        kbert.TextClassifier.from_preset(str(tmp_path))
