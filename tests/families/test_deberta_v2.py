"""DeBERTa-v3 (`model_type` "deberta-v2") against transformers on the same
weights: the backbone (inputs past the log buckets' range) and every task
head, from tiny random checkpoints saved by transformers' own classes
(weights nudged off their initialisation), and back out with
`export_to_transformers`."""

import json

import keras
import numpy as np
import pytest
import torch
import transformers

import kbert
from tests.helpers import (assert_close_on_real_tokens, hf_head_outputs, kbert_head_outputs, nudge_and_save, once_unless,
                           padded_ids, rebuilt_from_config, to_numpy, transformers_outputs)

VOCABULARY = 128
# 8 buckets: distances past +-4 share log buckets up to 16, and 40 tokens read past that.
SIZES = dict(vocab_size=VOCABULARY, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
             relative_attention=True, position_buckets=8, max_relative_positions=16, pos_att_type=["p2c", "c2p"],
             share_att_key=True, norm_rel_ebd="layer_norm", position_biased_input=False, type_vocab_size=0,
             max_position_embeddings=512, pad_token_id=0)
# (kbert task, transformers class suffix)
TASKS = {
    "backbone": (kbert.DebertaV2Backbone, "Model"),
    "classifier": (kbert.TextClassifier, "ForSequenceClassification"),
    "masked_lm": (kbert.MaskedLM, "ForMaskedLM"),
    "token_classifier": (kbert.TokenClassifier, "ForTokenClassification"),
    "question_answerer": (kbert.QuestionAnswerer, "ForQuestionAnswering"),
}


def random_ids(**settings):
    return padded_ids(VOCABULARY, **settings)


def save_checkpoint(folder, suffix, **config):
    """A tiny random DeBERTa-v3 of transformers' class `DebertaV2{suffix}`,
    weights nudged (so that unit LayerNorm scales and zero biases test
    nothing), saved to `folder` as safetensors."""
    num_labels = 2 if suffix == "ForQuestionAnswering" else 3
    hf_config = transformers.DebertaV2Config(**{**SIZES, **config}, num_labels=num_labels)
    torch.manual_seed(0)
    return nudge_and_save(getattr(transformers, "DebertaV2" + suffix)(hf_config).eval(), folder)










CASES = [
    ("backbone", {}),
    # No buckets: distances clamped at +-16; one position term, pos_att_type in its string form.
    ("backbone", {"position_buckets": -1, "pos_att_type": "c2p"}),
    ("classifier", {}),  # (its last block runs for the first token alone: attention of one query)
    ("masked_lm", {"legacy": False}),  # lm_predictions.lm_head, as DeBERTa's own checkpoints
    ("masked_lm", {"legacy": True}),  # transformers' default: cls.predictions
    ("token_classifier", {}),
    ("question_answerer", {}),
]


@pytest.mark.parametrize("case", once_unless(CASES, every_backend=CASES[:4]),
                         ids=[task + "".join(f"-{k}={v}" for k, v in config.items()) for task, config in CASES])
def test_every_task_matches_transformers_and_exports_back(tmp_path, case):
    task, config = case
    cls, suffix = TASKS[task]
    hf_model = save_checkpoint(tmp_path / "hf", suffix, **config)
    model = cls.from_preset(str(tmp_path / "hf"), **({} if task == "backbone" else {"preprocessor": None}))
    inputs = random_ids()
    outputs = kbert_head_outputs(model, inputs)
    assert_close_on_real_tokens(outputs, hf_head_outputs(hf_model, inputs), inputs["padding_mask"])

    model.export_to_transformers(str(tmp_path / "out"))
    exported = transformers.AutoConfig.from_pretrained(str(tmp_path / "out"))
    assert exported.model_type == "deberta-v2" and exported.architectures == [type(hf_model).__name__]
    back = type(hf_model).from_pretrained(str(tmp_path / "out")).eval()
    assert_close_on_real_tokens(outputs, hf_head_outputs(back, inputs), inputs["padding_mask"])


def test_hidden_states_at_512_tokens_match_transformers(tmp_path):
    hf_model = save_checkpoint(tmp_path, "Model")
    backbone = kbert.DebertaV2Backbone.from_preset(str(tmp_path))
    inputs = random_ids(length=512, batch=2)
    got = backbone.with_hidden_states()(inputs)
    expected = transformers_outputs(hf_model, {k: inputs[k] for k in ("token_ids", "padding_mask")},
                                    output_hidden_states=True)
    assert len(got["hidden_states"]) == len(expected.hidden_states) == 3
    for mine, theirs in zip(got["hidden_states"], expected.hidden_states):
        assert_close_on_real_tokens(to_numpy(mine), theirs.numpy(), inputs["padding_mask"])


def test_a_packed_row_gives_each_sequence_its_outputs_alone(tmp_path):
    # Relative distances are the same within a packed sequence as alone: attention only stays within it.
    save_checkpoint(tmp_path, "Model")
    packed = kbert.DebertaV2Backbone.from_preset(str(tmp_path), packing=True)
    alone = kbert.DebertaV2Backbone.from_preset(str(tmp_path))
    first, second = random_ids(length=20, batch=1)["token_ids"], random_ids(length=20, batch=1, seed=1)["token_ids"]
    row = np.concatenate([first, second], axis=1)
    sequence_ids = np.array([[1] * 20 + [2] * 20], "int32")
    out = to_numpy(packed({"token_ids": row, "segment_ids": np.zeros_like(row), "sequence_ids": sequence_ids,
                           "padding_mask": np.ones_like(row)})["sequence_output"])
    for tokens, span in ((first, slice(0, 20)), (second, slice(20, 40))):
        inputs = {"token_ids": tokens, "segment_ids": np.zeros_like(tokens), "padding_mask": np.ones_like(tokens)}
        np.testing.assert_allclose(out[:, span], to_numpy(alone(inputs)["sequence_output"]), atol=1e-5)
    with pytest.raises(ValueError, match="Cannot change position_buckets"):
        kbert.DebertaV2Backbone.from_preset(str(tmp_path), position_buckets=16)


def test_a_backbone_saves_and_loads_as_keras_file_and_config(tmp_path):
    backbone = kbert.DebertaV2Backbone(vocabulary_size=VOCABULARY, num_layers=2, num_heads=2, hidden_dim=16,
                                       intermediate_dim=24, position_buckets=8, max_relative_positions=16,
                                       position_attention=["p2c"], normalize_relative_embeddings=False)
    inputs = random_ids(length=20)
    expected = to_numpy(backbone(inputs)["sequence_output"])
    for copy in rebuilt_from_config(backbone):
        assert copy.get_config() == backbone.get_config()
    backbone.save(str(tmp_path / "backbone.keras"))
    loaded = keras.saving.load_model(str(tmp_path / "backbone.keras"))
    assert isinstance(loaded, kbert.DebertaV2Backbone)
    np.testing.assert_allclose(to_numpy(loaded(inputs)["sequence_output"]), expected, atol=1e-6)
    backbone.save_to_preset(str(tmp_path / "preset"))
    again = kbert.Backbone.from_preset(str(tmp_path / "preset"))  # the family's class, from any backbone class
    assert isinstance(again, kbert.DebertaV2Backbone)
    np.testing.assert_allclose(to_numpy(again(inputs)["sequence_output"]), expected, atol=1e-6)
    scores = to_numpy(again.attention_scores(inputs, layer_index=-1))
    assert scores.shape == (3, 2, 20, 20) and scores[1, :, :, 12:].max() == 0  # padding is not attended to


@pytest.mark.skipif(keras.backend.backend() != "torch", reason="runs once, in the torch pass: reading config.json")
@pytest.mark.parametrize("setting, message", [
    ({"conv_kernel_size": 3}, "conv_kernel_size=3; kbert builds DeBERTa-v3's encoder, with conv_kernel_size=0"),
    ({"position_biased_input": True}, "position_biased_input=True; .* with position_biased_input=False"),
    ({"type_vocab_size": 2}, "type_vocab_size=2; .* with type_vocab_size=0"),
    ({"share_att_key": False}, "share_att_key=False; .* with share_att_key=True"),
    ({"relative_attention": False}, "relative_attention=False"),
    ({"pooler_hidden_act": "tanh"}, 'pooler_hidden_act="tanh"'),
    ({"pos_att_type": ["p2p"]}, "pos_att_type=\\['p2p'\\]"),
])
def test_configs_kbert_does_not_build_are_refused(tmp_path, setting, message):
    save_checkpoint(tmp_path, "Model")
    config = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, **setting}))
    with pytest.raises(ValueError, match=message):
        kbert.Backbone.from_preset(str(tmp_path))


def test_a_deberta_preset_is_not_a_bert_backbone():
    sizes = dict(vocabulary_size=VOCABULARY, num_layers=1, num_heads=2, hidden_dim=8, intermediate_dim=16)
    with pytest.raises(ValueError, match="A 'deberta-v2' backbone is a kbert.DebertaV2Backbone, not a BertBackbone"):
        kbert.BertBackbone(**sizes, num_segments=0, family="deberta-v2")
    with pytest.raises(ValueError, match="A 'bert' backbone is a kbert.BertBackbone; DebertaV2Backbone builds"):
        kbert.DebertaV2Backbone(**sizes, family="bert")


@pytest.mark.skipif(keras.backend.backend() != "torch", reason="runs once, in the torch pass: reading config.json")
def test_deberta_v3_bases_config_reads_as_its_architecture():
    from kbert import families

    # microsoft/deberta-v3-base's config.json: pos_att_type as a string, the range left to max_position_embeddings.
    v3_base = {"model_type": "deberta-v2", "attention_probs_dropout_prob": 0.1, "hidden_act": "gelu",
               "hidden_dropout_prob": 0.1, "hidden_size": 768, "initializer_range": 0.02, "intermediate_size": 3072,
               "max_position_embeddings": 512, "relative_attention": True, "position_buckets": 256,
               "norm_rel_ebd": "layer_norm", "share_att_key": True, "pos_att_type": "p2c|c2p", "layer_norm_eps": 1e-7,
               "max_relative_positions": -1, "position_biased_input": False, "num_attention_heads": 12,
               "num_hidden_layers": 12, "type_vocab_size": 0, "vocab_size": 128100}
    config = families.backbone_config(v3_base)
    assert config == {"vocabulary_size": 128100, "num_layers": 12, "num_heads": 12, "hidden_dim": 768,
                      "intermediate_dim": 3072, "dropout": 0.1, "max_sequence_length": 512, "layer_norm_epsilon": 1e-7,
                      "position_buckets": 256, "max_relative_positions": 512, "position_attention": ["c2p", "p2c"],
                      "normalize_relative_embeddings": True, "activation": "gelu", "family": "deberta-v2"}
    written = families.hf_config(config)
    assert {k: written[k] for k in v3_base if k != "max_relative_positions"} == {
        **{k: v for k, v in v3_base.items() if k != "max_relative_positions"}, "pos_att_type": ["c2p", "p2c"]}


@pytest.mark.skipif(keras.backend.backend() != "torch", reason="runs once, in the torch pass: reading weight names")
def test_tensors_transformers_leaves_unread_are_left_unread(tmp_path):
    # DeBERTa's own checkpoints may hold a position table (unread where position_biased_input is false, as
    # transformers ignores it) and the replaced-token detector's mask_predictions; a layer the config lacks is refused.
    from safetensors.numpy import load_file, save_file

    save_checkpoint(tmp_path, "ForMaskedLM", legacy=False)
    path = str(tmp_path / "model.safetensors")
    tensors = load_file(path)
    extra = {"deberta.embeddings.position_embeddings.weight": np.zeros((512, 32), "float32"),
             "mask_predictions.dense.weight": np.zeros((32, 32), "float32")}
    save_file({**tensors, **extra}, path, metadata={"format": "pt"})
    kbert.MaskedLM.from_preset(str(tmp_path), preprocessor=None)
    layer = {"deberta.encoder.layer.2.output.dense.weight": np.zeros((32, 64), "float32")}
    save_file({**tensors, **layer}, path, metadata={"format": "pt"})
    with pytest.raises(ValueError, match=r"does not account for 1 tensors, e\.g\. deberta\.encoder\.layer\.2\."):
        kbert.MaskedLM.from_preset(str(tmp_path), preprocessor=None)


def classifier_with_spm_model(folder):
    """A tiny DeBERTa-v3 classifier in `folder` with a unigram `spm.model`
    trained here on Austen: (transformers' model, its AutoTokenizer)."""
    # DeBERTa-v3's spm.model: [PAD], [CLS], [SEP], [UNK] first, [MASK] after.
    import gzip
    import random

    import sentencepiece

    from tests.text.test_tokenizer import DATA

    with gzip.open(DATA / "austen.txt.gz", "rt", encoding="utf-8") as f:
        lines = random.Random(0).sample([line.strip() for line in f if line.strip()], 3000)
    sentencepiece.set_random_generator_seed(0)
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(lines), model_prefix=str(folder / "spm"), vocab_size=1000, model_type="unigram",
        num_threads=1, pad_id=0, bos_id=1, eos_id=2, unk_id=3, pad_piece="[PAD]", bos_piece="[CLS]",
        eos_piece="[SEP]", unk_piece="[UNK]",
    )
    (folder / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "DebertaV2Tokenizer"}))
    auto = transformers.AutoTokenizer.from_pretrained(folder)
    hf_model = save_checkpoint(folder, "ForSequenceClassification", vocab_size=len(auto))
    return hf_model, auto


@pytest.mark.skipif(keras.backend.backend() != "torch", reason="runs once, in the torch pass: raw text end to end")
def test_a_classifier_on_raw_texts_and_pairs_gives_transformers_logits(tmp_path):
    hf_model, auto = classifier_with_spm_model(tmp_path)
    model = kbert.TextClassifier.from_preset(str(tmp_path))
    firsts = ["It is a truth universally acknowledged.", "She was not handsome."]
    seconds = ["A single man.", "Emma Woodhouse, handsome, clever and rich, with a comfortable home."]
    for texts in ((firsts,), (firsts, seconds)):
        with torch.no_grad():
            expected = hf_model(**auto(*texts, padding=True, return_tensors="pt")).logits.numpy()
        np.testing.assert_allclose(model.predict(texts if len(texts) == 2 else firsts, verbose=0), expected, atol=1e-4)
