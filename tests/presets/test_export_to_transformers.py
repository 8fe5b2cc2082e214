"""kbert -> export_to_transformers -> transformers and sentence-transformers,
and back: every task of a tiny BERT whose weights were all moved off their
initialisation, loaded by `AutoModelFor...` with no missing or unexpected
weight, giving kbert's logits, answering through `pipeline` as kbert's own
helpers do, and read back into kbert bit for bit."""

import json
import os
import warnings

import keras
import ml_dtypes
import numpy as np
import pytest
import torch
import transformers
from safetensors.numpy import load_file

import kbert
from tests.helpers import to_numpy, transformers_outputs

TEXTS = [
    "Jane Austen lived in Bath, and wrote a fine film's story.",
    "Café naïve résumé — 東京 and ünïcödé!",
    "It rains.",
]
TAGS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
SEQUENCE_LENGTH = 48


def nudged(model, seed=0):
    """`model` with every float weight moved by a little noise, so that no
    freshly initialised weight (zero biases, unit LayerNorm scales) passes
    for a loaded one."""
    rng = np.random.default_rng(seed)
    for variable in model.weights:
        if "float" in str(variable.dtype):
            variable.assign(to_numpy(variable) + rng.normal(0, 0.05, variable.shape).astype("float32"))
    return model


def tiny_backbone(**kwargs):
    return kbert.BertBackbone(vocabulary_size=30522, num_layers=2, num_heads=2, hidden_dim=16, intermediate_dim=32,
                              max_sequence_length=64, dropout=0.0, **kwargs)


BUILDERS = {
    "backbone": (lambda b, p: b, transformers.AutoModel),
    "classifier": (lambda b, p: kbert.BertClassifier(b, 3, p, class_names=["neg", "neutral", "pos"]),
                   transformers.AutoModelForSequenceClassification),
    "token_classifier": (lambda b, p: kbert.BertTokenClassifier(b, len(TAGS), p, class_names=TAGS),
                         transformers.AutoModelForTokenClassification),
    "question_answerer": (lambda b, p: kbert.BertQuestionAnswerer(b, p, max_question_length=16, max_answer_length=8),
                          transformers.AutoModelForQuestionAnswering),
    "masked_lm": (lambda b, p: kbert.BertMaskedLM(b, p), transformers.AutoModelForMaskedLM),
    "pretrainer": (lambda b, p: kbert.BertPretrainer(b, p), transformers.AutoModelForPreTraining),
}
ARCHITECTURES = {"backbone": "BertModel", "classifier": "BertForSequenceClassification",
                 "token_classifier": "BertForTokenClassification", "question_answerer": "BertForQuestionAnswering",
                 "masked_lm": "BertForMaskedLM", "pretrainer": "BertForPreTraining"}
WITHOUT_POOLER = ("token_classifier", "question_answerer", "masked_lm")


@pytest.fixture(scope="module")
def preprocessor(minilm_dir):
    return kbert.BertPreprocessor.from_preset(minilm_dir, sequence_length=SEQUENCE_LENGTH)


@pytest.fixture(scope="module")
def exported(preprocessor, tmp_path_factory):
    """task -> (kbert model, exported folder), built on first use."""
    cache = {}

    def get(task):
        if task not in cache:
            keras.utils.set_random_seed(0)
            model = nudged(BUILDERS[task][0](tiny_backbone(), preprocessor))
            folder = str(tmp_path_factory.mktemp(task))
            model.export_to_transformers(folder)
            cache[task] = model, folder
        return cache[task]

    return get


def hf_model(task, folder):
    model, info = BUILDERS[task][1].from_pretrained(folder, output_loading_info=True)
    return model.eval(), info


def kbert_and_hf_outputs(model, hf, preprocessor):
    features = {k: to_numpy(v) for k, v in preprocessor(TEXTS).items()}
    inputs = dict(features)
    length = features["token_ids"].shape[1]
    if "mask_positions" in model.input:
        inputs["mask_positions"] = np.tile(np.arange(length, dtype="int32"), (len(TEXTS), 1))
    ours = model(inputs)
    return ours, transformers_outputs(hf, features), features["padding_mask"].astype(bool)


# kbert output -> transformers output, and whether it is per token.
OUTPUTS = {
    "backbone": [("sequence_output", "last_hidden_state", True), ("pooled_output", "pooler_output", False)],
    "classifier": [(None, "logits", False)],
    "token_classifier": [(None, "logits", True)],
    "question_answerer": [("start_logits", "start_logits", True), ("end_logits", "end_logits", True)],
    "masked_lm": [("mlm_logits", "logits", True)],
    "pretrainer": [("mlm_logits", "prediction_logits", True), ("nsp_logits", "seq_relationship_logits", False)],
}


@pytest.mark.parametrize("task", BUILDERS)
def test_transformers_loads_every_weight_and_gives_kbert_logits(exported, preprocessor, task):
    model, folder = exported(task)
    hf, info = hf_model(task, folder)
    assert type(hf).__name__ == ARCHITECTURES[task]
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    ours, theirs, mask = kbert_and_hf_outputs(model, hf, preprocessor)
    for our_name, their_name, per_token in OUTPUTS[task]:
        a = to_numpy(ours if our_name is None else ours[our_name])
        b = getattr(theirs, their_name).numpy()
        if per_token:  # what either computes at padding is never used
            a, b = a[mask], b[mask]
        np.testing.assert_allclose(a, b, atol=1e-4, err_msg=f"{task} {their_name}")


@pytest.mark.parametrize("task", BUILDERS)
def test_exported_folder_loads_back_into_kbert_bit_for_bit(exported, task):
    model, folder = exported(task)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        # (transformers' config has no place for the windows of kbert's answerer.)
        restored = type(model).from_preset(folder, **model.task_config() if task == "question_answerer" else {})
    # transformers' token-level models have no pooler: none is written, and
    # kbert says that the pooler it gets back is fresh.
    assert any("no pooler weights" in str(w.message) for w in caught) == (task in WITHOUT_POOLER)
    ours = {v.path: to_numpy(v) for v in model.weights}
    back = {v.path: to_numpy(v) for v in restored.weights}
    assert ours.keys() == back.keys()
    compared = [p for p in ours if not (task in WITHOUT_POOLER and "pooled_dense" in p)]
    assert len(compared) > 30
    for path in compared:
        np.testing.assert_array_equal(back[path], ours[path], err_msg=path)
    if task != "backbone":
        assert restored.preprocessor.tokenizer.get_config() == model.preprocessor.tokenizer.get_config()
        assert restored.preprocessor.sequence_length == SEQUENCE_LENGTH


def test_config_names_the_labels_and_the_dtype(exported):
    _, folder = exported("classifier")
    with open(os.path.join(folder, "config.json")) as f:
        config = json.load(f)
    assert config["architectures"] == ["BertForSequenceClassification"]
    assert config["id2label"] == {"0": "neg", "1": "neutral", "2": "pos"}
    assert config["label2id"] == {"neg": 0, "neutral": 1, "pos": 2}
    assert config["dtype"] == config["torch_dtype"] == "float32"
    assert sorted(os.listdir(folder)) == ["config.json", "model.safetensors", "special_tokens_map.json",
                                          "tokenizer.json", "tokenizer_config.json", "vocab.txt"]


def test_autotokenizer_of_the_folder_gives_kbert_ids(exported, preprocessor):
    from tests.text.test_tokenizer import HARD_TEXTS

    _, folder = exported("classifier")
    hf_tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    theirs = [hf_tokenizer(t, add_special_tokens=False)["input_ids"] for t in HARD_TEXTS]
    assert preprocessor.tokenizer(HARD_TEXTS).to_list() == theirs
    assert hf_tokenizer.model_max_length == SEQUENCE_LENGTH


def test_text_classification_pipeline_agrees_with_predict(exported):
    model, folder = exported("classifier")
    classify = transformers.pipeline("text-classification", model=folder, top_k=None)
    logits = model.predict(TEXTS, verbose=0)
    probabilities = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
    for row, answers in zip(probabilities, classify(TEXTS)):
        scores = {a["label"]: a["score"] for a in answers}
        np.testing.assert_allclose([scores[n] for n in model.class_names], row, atol=1e-5)
        assert answers[0]["label"] == model.class_names[int(row.argmax())]


def test_token_classification_pipeline_agrees_with_entities(exported):
    model, folder = exported("token_classifier")
    tag = transformers.pipeline("token-classification", model=folder, aggregation_strategy="first")
    ours = model.entities(TEXTS)
    theirs = tag(TEXTS)
    assert sum(map(len, ours)) > 0
    for mine, hf in zip(ours, theirs):
        assert [(e["label"], e["start"], e["end"]) for e in mine] == [
            (e["entity_group"], e["start"], e["end"]) for e in hf]
        np.testing.assert_allclose([e["score"] for e in mine], [e["score"] for e in hf], atol=1e-5)


def test_question_answering_model_agrees_with_answer(exported):
    # transformers 5 has no question-answering pipeline: its answer, as the
    # pipeline of transformers 4 found it, is the best-scoring span of context
    # tokens (start <= end, at most max_answer_len long), mapped to characters.
    model, folder = exported("question_answerer")
    questions = ["Where did Jane Austen live?", "What rains?"]
    contexts = ["Jane Austen lived in Bath and in Chawton, in Hampshire.", "It rains on the plain in Spain."]
    hf, _ = hf_model("question_answerer", folder)
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    for ours, question, context in zip(model.answer(questions, contexts), questions, contexts):
        encoded = tokenizer(question, context, return_offsets_mapping=True, return_tensors="pt")
        offsets = encoded.pop("offset_mapping")[0].tolist()
        with torch.no_grad():
            outputs = hf(**encoded)
        start, end = outputs.start_logits[0].numpy(), outputs.end_logits[0].numpy()
        in_context = np.array(encoded.sequence_ids(0)) == 1
        spans = [(start[i] + end[j], i, j) for i in np.flatnonzero(in_context) for j in np.flatnonzero(in_context)
                 if i <= j < i + model.max_answer_length]
        score, i, j = max(spans)
        assert (ours["start"], ours["end"]) == (offsets[i][0], offsets[j][1])
        assert ours["answer"] == context[offsets[i][0]:offsets[j][1]]
        np.testing.assert_allclose(ours["score"], score, atol=1e-4)


def test_fill_mask_pipeline_agrees_with_fill_mask(exported):
    model, folder = exported("masked_lm")
    texts = ["Jane Austen lived in [MASK].", "It [MASK] on the plain."]
    fill = transformers.pipeline("fill-mask", model=folder, top_k=5)
    vocabulary = model.preprocessor.tokenizer.vocabulary
    for guesses, hf in zip(model.fill_mask(texts, top_k=5), fill(texts)):
        (guesses,) = guesses  # one [MASK] per text
        assert [t for t, _ in guesses] == [vocabulary[g["token"]] for g in hf]
        np.testing.assert_allclose([p for _, p in guesses], [g["score"] for g in hf], atol=1e-5)


@pytest.mark.parametrize("include_prompt", [True, False])
def test_sentence_transformer_encodes_as_encode(preprocessor, tmp_path, include_prompt):
    from sentence_transformers import SentenceTransformer

    keras.utils.set_random_seed(0)
    embedder = nudged(kbert.BertTextEmbedder(
        tiny_backbone(), preprocessor, pooling=["mean", "cls"] if include_prompt else "max",
        dense=[{"units": 12, "activation": "tanh"}, {"units": 8, "use_bias": False}],
        prompts={"query": "query: ", "passage": "passage: "}, default_prompt_name="query",
        include_prompt=include_prompt,
    ))
    embedder.export_to_transformers(str(tmp_path))
    reference = SentenceTransformer(str(tmp_path), device="cpu")
    for prompt_name in ("query", "passage"):
        np.testing.assert_allclose(reference.encode(TEXTS, prompt_name=prompt_name),
                                   embedder.encode(TEXTS, prompt_name=prompt_name), atol=1e-5)
    np.testing.assert_allclose(reference.encode(TEXTS), embedder.encode(TEXTS), atol=1e-5)
    restored = kbert.BertTextEmbedder.from_preset(str(tmp_path))
    assert restored.task_config() == embedder.task_config()
    for mine, back in zip(embedder.weights, restored.weights):
        np.testing.assert_array_equal(to_numpy(back), to_numpy(mine), err_msg=mine.path)


def test_mixed_precision_model_exports_float32_weights_unless_told(preprocessor, tmp_path):
    model = kbert.BertClassifier(tiny_backbone(dtype="mixed_bfloat16"), 2, preprocessor)
    model.export_to_transformers(str(tmp_path / "float32"))
    model.export_to_transformers(str(tmp_path / "bfloat16"), dtype="bfloat16")
    assert {str(t.dtype) for t in load_file(str(tmp_path / "float32" / "model.safetensors")).values()} == {"float32"}
    hf = transformers.AutoModelForSequenceClassification.from_pretrained(str(tmp_path / "bfloat16"))
    assert hf.dtype == torch.bfloat16
    np.testing.assert_array_equal(
        hf.classifier.weight.detach().float().numpy().T,
        to_numpy(model.get_layer("logits").kernel).astype(ml_dtypes.bfloat16).astype("float32"),
    )


def test_export_into_a_folder_with_files_is_refused(preprocessor, tmp_path):
    (tmp_path / "kbert_config.json").write_text("{}")
    with pytest.raises(FileExistsError, match="is not empty"):
        tiny_backbone().export_to_transformers(str(tmp_path))


def test_cli_export_format_transformers_writes_a_folder_the_pipeline_reads(exported, tmp_path, capsys):
    from kbert.cli import main

    model, _ = exported("classifier")
    model.save_to_preset(str(tmp_path / "run"))  # as `kbert train` leaves it
    assert main(["export", "--model", str(tmp_path / "run"), "--output", str(tmp_path / "hf"),
                 "--format", "transformers"]) == 0
    assert capsys.readouterr().out.strip() == f"Exported to {tmp_path / 'hf'}"
    classify = transformers.pipeline("text-classification", model=str(tmp_path / "hf"))
    logits = model.predict(TEXTS, verbose=0)
    assert [a["label"] for a in classify(TEXTS)] == [model.class_names[i] for i in logits.argmax(-1)]
