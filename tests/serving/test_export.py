"""Exports loaded as TF Serving would: a fresh process with only TensorFlow
and tensorflow-text, calling `serving_default` on raw strings."""

import json
import os
import re
import subprocess
import sys

import keras
import numpy as np
import pytest

import kbert
from kbert.cli import main

HOSTILE = [
    "",
    "   \t\n ",
    "word " * 20000,  # 100,000 characters: truncated as in training
    "\x00\x01\x1b[31m control \x7f characters",
    "zero\u200bwidth\ufeff joiners\u200d",
]
INVALID_UTF8 = b"caf\xc3 \xff\xfe broken \xe2\x82 bytes"
TEXTS = ["a wonderful, moving film", "dull and far too long", "Ein Film — café, 東京 🙂"]
QUESTIONS = ["When did Austen write it?", "Where is the café?", "Who?"]
CONTEXTS = [
    "Jane Austen (16 December 1775 – 18 July 1817) was an English novelist. Pride and Prejudice, "
    "written in 1796-97 as First Impressions, was published in 1813; its heroine, Elizabeth Bennet, "
    "is among the best-loved characters of English fiction.",
    "The Café Müller stands in Zoë's street, next to 東京タワー, unbelievably close to the İstanbul "
    "bakery (cafe\u0301s and croissants).",
    "Nobody.",
]
MASKED = ["the film was [MASK] good.", "[MASK] and [MASK] again", "no mask here"]
# One corpus for every task, fed both to the Python helpers and to the served models.
CORPUS = TEXTS + HOSTILE + [
    "Punctuation!!! ...and more?! (yes) [brackets] {braces} «quotes» — dashes – here; ok: 1,000.5%",
    "Literal special tokens: [CLS] [SEP] [PAD] [UNK] [MASK] in the text",
    "Mixed scripts: Ελληνικά, русский, العربية, हिन्दी, 日本語のテキスト, 한국어",
]

SERVE = r"""
import json, sys
import tensorflow as tf
import tensorflow_text  # noqa: F401  (registers the ops the graph uses)
decode = lambda v: [decode(x) for x in v] if isinstance(v, list) else v.decode("utf-8", "replace")  # noqa: E731
requests = json.loads(sys.stdin.read())
answers = {}
for name, (path, inputs) in requests.items():
    signature = tf.saved_model.load(path).signatures["serving_default"]
    tensors = {k: tf.constant([t.encode("latin-1") for t in v], tf.string) for k, v in inputs.items()}
    outputs = signature(**tensors)
    answers[name] = {k: v.numpy().tolist() for k, v in outputs.items() if v.dtype != tf.string}
    answers[name]["strings"] = {k: decode(v.numpy().tolist()) for k, v in outputs.items() if v.dtype == tf.string}
    # The string outputs holding bytes that are not UTF-8 (which a client cannot decode).
    answers[name]["not_utf8"] = sorted(k for k, v in outputs.items() if v.dtype == tf.string and not bool(
        tf.reduce_all(tf.strings.unicode_transcode(v, "UTF-8", "UTF-8", errors="replace") == v)))
answers["kbert_imported"] = "kbert" in sys.modules
print(json.dumps(answers))
"""


def serve(requests):
    """Runs TF Serving's side in a fresh process: {name: (path, inputs)} in,
    {name: outputs} back. Strings travel as latin-1 so any bytes survive."""
    encoded = {
        name: (path, {k: [t.decode("latin-1") if isinstance(t, bytes) else t.encode().decode("latin-1")
                          for t in v] for k, v in inputs.items()})
        for name, (path, inputs) in requests.items()
    }
    result = subprocess.run([sys.executable, "-c", SERVE], input=json.dumps(encoded), capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def tiny_backbone():
    return kbert.BertBackbone(vocabulary_size=30522, num_layers=2, num_heads=2, hidden_dim=32,
                              intermediate_dim=64, max_sequence_length=64, dropout=0.0)


# On the JAX and PyTorch backends an export goes through a TensorFlow process
# (the model saved as a preset, exported there): one test checks that path
# for four tasks. The served graph is TensorFlow's whatever the backend, so
# the other tests run in the tensorflow pass only.
once = pytest.mark.skipif(
    keras.backend.backend() != "tensorflow",
    reason="runs once, in the tensorflow pass: the served graph is TensorFlow's whatever the backend "
           "(test_served_models_answer_like_predict_without_keras_or_kbert exports through TensorFlow here)",
)


class Exports(dict):
    """Each task's export path, written on first use: a test pays only for the
    exports it serves."""

    def __init__(self, models, root):
        super().__init__()
        self.models, self.root = models, root

    def __missing__(self, name):
        model, folder = self.models[name], str(self.root / EXPORTS[name])
        if name in ("pairs", "regression", "pretrainer"):
            self[name] = kbert.serving.export(model, folder, pairs=True)
        elif name == "masked_lm":
            self[name] = model.export(folder, top_k=3)
        else:
            self[name] = model.export(folder)
        return self[name]


EXPORTS = {"classifier": "sentiment", "pairs": "pairs", "regression": "similarity", "multi_label": "emotions", "embedder": "embedder/7", "tagger": "tagger", "qa": "qa",
           "masked_lm": "masked_lm", "pretrainer": "pretrainer"}


@pytest.fixture(scope="module")
def exports(minilm_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("saved_models")
    preprocessor = kbert.BertPreprocessor.from_preset(minilm_dir, sequence_length=32)
    models = {
        "classifier": kbert.BertClassifier(tiny_backbone(), 2, preprocessor, class_names=["negative", "positive"]),
        "pairs": kbert.BertClassifier(tiny_backbone(), 3, preprocessor),
        "regression": kbert.BertClassifier(tiny_backbone(), 1, preprocessor),
        "multi_label": kbert.BertClassifier(tiny_backbone(), 3, preprocessor, class_names=["joy", "anger", "fear"],
                                            problem_type="multi_label_classification", threshold=0.45),
        "embedder": kbert.BertTextEmbedder(tiny_backbone(), preprocessor),
        "tagger": kbert.BertTokenClassifier(tiny_backbone(), 3, preprocessor, class_names=["O", "B-LOC", "I-LOC"]),
        # Windows of 32 tokens, 8 apart: the long contexts take several.
        "qa": kbert.BertQuestionAnswerer(tiny_backbone(), preprocessor, stride=8, max_question_length=12,
                                         max_answer_length=6),
        "masked_lm": kbert.BertMaskedLM(tiny_backbone(), preprocessor),
        "pretrainer": kbert.BertPretrainer(tiny_backbone(), preprocessor),
    }
    # Trained with the default compile() first: what users export is a fitted model.
    models["classifier"].fit(TEXTS, [1, 0, 1], epochs=1, verbose=0)
    return models, Exports(models, root), root


def test_served_models_answer_like_predict_without_keras_or_kbert(exports):
    models, paths, _ = exports
    pair_b = ["it moved me", "i was bored", "ein Film"]
    answers = serve({
        "classifier": (paths["classifier"], {"text": TEXTS}),
        "pairs": (paths["pairs"], {"text": TEXTS, "text_pair": pair_b}),
        "embedder": (paths["embedder"], {"text": TEXTS}),
        "tagger": (paths["tagger"], {"text": TEXTS}),
    })
    # The serving side imports no kbert (TensorFlow itself loads keras).
    assert answers["kbert_imported"] is False
    logits = models["classifier"].predict(TEXTS, verbose=0)
    np.testing.assert_allclose(answers["classifier"]["logits"], logits, atol=1e-4)
    assert answers["classifier"]["label_id"] == logits.argmax(-1).tolist()
    assert answers["classifier"]["strings"]["label"] == [["negative", "positive"][i] for i in logits.argmax(-1)]
    np.testing.assert_allclose(np.sum(answers["classifier"]["probabilities"], -1), 1.0, atol=1e-5)
    np.testing.assert_allclose(
        answers["pairs"]["logits"], models["pairs"].predict((TEXTS, pair_b), verbose=0), atol=1e-4
    )
    np.testing.assert_allclose(
        answers["embedder"]["embedding"], models["embedder"].predict(TEXTS, verbose=0), atol=1e-4
    )
    tags = models["tagger"].tags(TEXTS)
    for row, sentence in enumerate(tags):
        assert answers["tagger"]["strings"]["words"][row][: len(sentence)] == [w for w, _, _ in sentence]
        assert answers["tagger"]["strings"]["label"][row][: len(sentence)] == [t or "" for _, t, _ in sentence]
        np.testing.assert_allclose(answers["tagger"]["score"][row][: len(sentence)], [s for _, _, s in sentence],
                                   atol=1e-4)
    for row, entities in enumerate(models["tagger"].entities(TEXTS)):
        served = answers["tagger"]
        assert served["strings"]["entity"][row][: len(entities)] == [e["text"] for e in entities]
        assert served["entity_start"][row][: len(entities)] == [e["start"] for e in entities]
        assert served["entity_end"][row][: len(entities)] == [e["end"] for e in entities]
        assert served["strings"]["entity_label"][row][: len(entities)] == [e["label"] for e in entities]
        assert all(TEXTS[row][e["start"]:e["end"]] == e["text"] for e in entities)


@once
def test_one_hostile_corpus_answers_alike_served_and_in_python(exports):
    models, paths, _ = exports
    masked = [f"[MASK] {t}" for t in CORPUS]  # at the start: long texts are truncated
    contexts = CORPUS + CONTEXTS
    questions = (QUESTIONS * len(contexts))[: len(contexts)]
    served = serve({
        "classifier": (paths["classifier"], {"text": CORPUS}),
        "tagger": (paths["tagger"], {"text": CORPUS}),
        "qa": (paths["qa"], {"question": questions, "context": contexts}),
        "masked_lm": (paths["masked_lm"], {"text": masked}),
    })
    logits = models["classifier"].predict(CORPUS, verbose=0)
    probabilities = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
    np.testing.assert_allclose(served["classifier"]["probabilities"], probabilities, atol=1e-5)
    tagger = served["tagger"]
    for row, entities in enumerate(models["tagger"].entities(CORPUS)):
        got = list(zip(tagger["strings"]["entity"][row], tagger["strings"]["entity_label"][row],
                       tagger["entity_start"][row], tagger["entity_end"][row]))[: len(entities)]
        assert got == [(e["text"], e["label"], e["start"], e["end"]) for e in entities]
        assert set(tagger["strings"]["entity_label"][row][len(entities):]) <= {""}  # padding only
    answers = models["qa"].answer(questions, contexts)
    assert served["qa"]["strings"]["answer"] == [a["answer"] for a in answers]
    assert list(zip(served["qa"]["start"], served["qa"]["end"])) == [(a["start"], a["end"]) for a in answers]
    guesses = models["masked_lm"].fill_mask(masked, top_k=3)
    for row, text_guesses in enumerate(guesses):
        served_tokens = served["masked_lm"]["strings"]["tokens"][row][: len(text_guesses)]
        assert served_tokens == [[token for token, _ in g] for g in text_guesses]


@once
def test_an_uneven_request_is_answered_in_its_own_order_like_predict(exports):
    models, paths, _ = exports
    # Short and long texts shuffled: served sorted by length, in several
    # slices, and given back in the request's order.
    rng = np.random.default_rng(0)
    texts = [f"{TEXTS[i % 3]} {i}" + " more" * int(rng.choice([0, 2, 6, 40])) for i in range(150)]
    contexts = [CONTEXTS[i % 3] * int(rng.choice([1, 3])) + f" {i}" for i in range(40)]
    questions = [QUESTIONS[i % 3] for i in range(40)]
    served = serve({"classifier": (paths["classifier"], {"text": texts}),
                    "tagger": (paths["tagger"], {"text": texts}),
                    "qa": (paths["qa"], {"question": questions, "context": contexts})})
    np.testing.assert_allclose(served["classifier"]["logits"], models["classifier"].predict(texts, verbose=0),
                               atol=1e-5)
    entities = models["tagger"].entities(texts)
    assert [row[: len(e)] for row, e in zip(served["tagger"]["strings"]["entity"], entities)] == \
        [[x["text"] for x in e] for e in entities]
    answers = models["qa"].answer(questions, contexts)
    assert served["qa"]["strings"]["answer"] == [a["answer"] for a in answers]
    assert list(zip(served["qa"]["start"], served["qa"]["end"])) == [(a["start"], a["end"]) for a in answers]


@once
def test_requests_of_no_text_and_of_one_text_are_answered(exports):
    models, paths, _ = exports
    served = serve({"empty": (paths["classifier"], {"text": []}), "one": (paths["classifier"], {"text": TEXTS[1:2]}),
                    "no_words": (paths["tagger"], {"text": []}), "no_context": (paths["qa"], {"question": [],
                                                                                            "context": []})})
    assert served["empty"]["logits"] == [] and served["empty"]["strings"]["label"] == []
    assert served["no_words"]["score"] == [] and served["no_context"]["strings"]["answer"] == []
    np.testing.assert_allclose(served["one"]["logits"], models["classifier"].predict(TEXTS[1:2], verbose=0), atol=1e-5)


LARGE_REQUEST = r"""
import json, resource, sys
import tensorflow as tf
import tensorflow_text  # noqa: F401
signature = tf.saved_model.load(sys.argv[1]).signatures["serving_default"]
texts = [f"text {i} " + "many words here " * 12 for i in range(10000)]  # each cut at 32 tokens
signature(text=tf.constant(texts[:100]))
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
logits = signature(text=tf.constant(texts))["logits"]
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"rows": int(logits.shape[0]), "growth_mb": (after - before) / 1024}))
"""


@once
def test_a_request_of_10000_texts_takes_the_memory_of_a_few_slices(exports):
    _, paths, _ = exports
    result = subprocess.run([sys.executable, "-c", LARGE_REQUEST, paths["classifier"]], capture_output=True,
                            text=True)
    assert result.returncode == 0, result.stderr[-3000:]
    served = json.loads(result.stdout.strip().splitlines()[-1])
    assert served["rows"] == 10000
    # Its peak over a request of 100 texts. The same request run as one slice
    # (no token budget) grew by about 250 MB: its attention alone holds
    # 10,000 x 2 heads x 32 x 32 floats per layer.
    assert served["growth_mb"] < 40


@once
def test_a_request_is_sliced_by_tokens_in_length_order():
    import tensorflow as tf

    from kbert.serving.slices import in_length_order

    # Each "text" is its token count; each row answers what its slice held.
    def serve(texts):
        counts = tf.strings.to_number(texts, tf.int32)
        rows = tf.shape(counts)[0]
        longest = tf.reduce_max(tf.concat([counts, [0]], 0))
        return {"count": counts, "slice_tokens": tf.fill([rows], rows * longest), "slice_rows": tf.fill([rows], rows)}

    specs = {k: tf.TensorSpec([None], tf.int32) for k in ("count", "slice_tokens", "slice_rows")}
    run = tf.function(in_length_order(serve, specs, 8, 128, lambda texts: tf.strings.to_number(texts, tf.int32)))
    counts = np.random.default_rng(0).choice([1, 2, 3, 5, 30, 64, 200], size=300)
    served = {k: v.numpy() for k, v in run(tf.constant(counts.astype(str))).items()}
    assert served["count"].tolist() == counts.tolist()  # the request's order
    short = counts <= 128
    assert served["slice_tokens"][short].max() <= 128  # the budget
    assert (served["slice_rows"][~short] == 1).all()  # a text past the budget runs alone
    assert served["slice_rows"][counts == 1].min() >= 64  # short texts run many at once
    # Sorted, a slice holds texts of about one length: the padding is a
    # fraction of what slices of 8 rows in the request's order would carry.
    padded = served["slice_tokens"] / served["slice_rows"]
    in_order = np.repeat([part.max() for part in np.array_split(counts, range(8, 300, 8))], 8)[:300]
    assert (padded - counts).sum() < 0.1 * (in_order - counts).sum()


@once
def test_served_question_answerer_reads_windows_like_predict(exports):
    models, paths, _ = exports
    served = serve({"qa": (paths["qa"], {"question": QUESTIONS, "context": CONTEXTS})})["qa"]
    windows = models["qa"].predict((QUESTIONS, CONTEXTS), verbose=0)["start_logits"]
    assert len(windows) > 6  # several windows per context
    predicted = models["qa"].answer(QUESTIONS, CONTEXTS)
    assert served["strings"]["answer"] == [p["answer"] for p in predicted]
    assert list(zip(served["start"], served["end"])) == [(p["start"], p["end"]) for p in predicted]
    np.testing.assert_allclose(served["score"], [p["score"] for p in predicted], atol=1e-4)
    for context, start, end, text in zip(CONTEXTS, served["start"], served["end"], served["strings"]["answer"]):
        assert context[start:end] == text != ""


@once
def test_served_question_answerer_with_a_null_score_margin_answers_nothing_like_answer(exports, tmp_path):
    models, _, _ = exports
    spans = models["qa"].answer(QUESTIONS, CONTEXTS)
    # A margin that leaves some questions unanswered and answers the others.
    differences = sorted(s["null_score"] - s["score"] for s in spans)
    margin = float(differences[0] + differences[1]) / 2
    strict = kbert.BertQuestionAnswerer(models["qa"].backbone, models["qa"].preprocessor, stride=8,
                                        max_question_length=12, max_answer_length=6, null_score_margin=margin)
    strict.get_layer("span_logits").set_weights(models["qa"].get_layer("span_logits").get_weights())
    predicted = strict.answer(QUESTIONS, CONTEXTS)
    assert "" in [p["answer"] for p in predicted] and {p["answer"] for p in predicted} != {""}
    served = serve({"qa": (strict.export(str(tmp_path / "qa")), {"question": QUESTIONS, "context": CONTEXTS})})["qa"]
    assert served["strings"]["answer"] == [p["answer"] for p in predicted]
    assert list(zip(served["start"], served["end"])) == [(p["start"], p["end"]) for p in predicted]
    np.testing.assert_allclose(served["score"], [p["score"] for p in predicted], atol=1e-4)
    np.testing.assert_allclose(served["null_score"], [p["null_score"] for p in predicted], atol=1e-4)


@once
def test_served_regression_and_multi_label_classifiers_answer_like_classify(exports):
    models, paths, _ = exports
    pair_b = TEXTS[::-1]
    served = serve({"regression": (paths["regression"], {"text": TEXTS, "text_pair": pair_b}),
                    "multi_label": (paths["multi_label"], {"text": TEXTS})})
    np.testing.assert_allclose(served["regression"]["score"], models["regression"].scores((TEXTS, pair_b)), atol=1e-5)
    answers = models["multi_label"].classify(TEXTS)
    assert [[label for label in row if label] for row in served["multi_label"]["strings"]["labels"]] == [
        a["labels"] for a in answers]
    assert any(a["labels"] for a in answers)
    np.testing.assert_allclose(served["multi_label"]["probabilities"], [a["probabilities"] for a in answers],
                               atol=1e-5)


@once
def test_a_served_embedder_with_truncate_dim_answers_encodes_cut(exports, tmp_path):
    models, _, _ = exports
    embedder = models["embedder"]
    cut = kbert.BertTextEmbedder(embedder.backbone, embedder.preprocessor, truncate_dim=8)
    served = serve({"cut": (cut.export(str(tmp_path / "cut")), {"text": TEXTS})})["cut"]
    assert np.asarray(served["embedding"]).shape == (len(TEXTS), 8)
    np.testing.assert_allclose(served["embedding"], cut.encode(TEXTS), atol=1e-5)


@once
def test_served_masked_lm_fills_every_mask_like_fill_mask(exports):
    models, paths, _ = exports
    answers = serve({
        "masked_lm": (paths["masked_lm"], {"text": MASKED}),
        "pretrainer": (paths["pretrainer"], {"text": MASKED[:2], "text_pair": ["it was.", "and so on"]}),
    })
    served = answers["masked_lm"]
    assert np.array(served["probabilities"]).shape == (3, 2, 3)  # 3 texts, at most 2 masks, top 3
    expected = models["masked_lm"].fill_mask(MASKED[:2], top_k=3)
    expected = [*expected[0], *expected[1]]  # one [MASK], then two
    got = [served["strings"]["tokens"][0][0], *served["strings"]["tokens"][1]]
    assert got == [[token for token, _ in guesses] for guesses in expected]
    got_probabilities = [served["probabilities"][0][0], *served["probabilities"][1]]
    np.testing.assert_allclose(got_probabilities, [[p for _, p in guesses] for guesses in expected], atol=1e-5)
    # Past a row's masks: "" / -1 / 0.
    assert served["strings"]["tokens"][0][1] == served["strings"]["tokens"][2][0] == ["", "", ""]
    assert served["token_ids"][2] == [[-1, -1, -1]] * 2
    features = models["pretrainer"].preprocessor((MASKED[:2], ["it was.", "and so on"]))
    features["mask_positions"] = np.zeros((2, 1), "int32")
    nsp = keras.ops.convert_to_numpy(models["pretrainer"].predict(features, verbose=0)["nsp_logits"])
    is_next = np.exp(nsp[:, 0]) / np.exp(nsp).sum(-1)
    np.testing.assert_allclose(answers["pretrainer"]["next_sentence_probability"], is_next, atol=1e-5)


@once
def test_serve_check_and_the_cli_decode_the_string_outputs_of_every_rank(exports, capsys):
    models, paths, _ = exports
    # A tagger's words are [texts, words]; a masked LM's tokens [texts, masks, top_k].
    assert main(["serve-check", paths["tagger"], "--text", TEXTS[0], "--text", TEXTS[1]]) == 0
    tagged = json.loads(capsys.readouterr().out)
    for row, sentence in enumerate(models["tagger"].tags(TEXTS[:2])):
        assert tagged["words"][row][: len(sentence)] == [w for w, _, _ in sentence]
        assert tagged["label"][row][: len(sentence)] == [t or "" for _, t, _ in sentence]
    filled = kbert.serving.serve_check(paths["masked_lm"], text=MASKED[:2])
    expected = models["masked_lm"].fill_mask(MASKED[:2], top_k=3)
    assert [filled["tokens"][0][0], *filled["tokens"][1]] == [[t for t, _ in g] for g in [*expected[0], *expected[1]]]


@once
def test_hostile_inputs_get_finite_answers_of_the_right_shape(exports):
    _, paths, _ = exports
    texts = HOSTILE + [INVALID_UTF8]
    answers = serve({
        "classifier": (paths["classifier"], {"text": texts}),
        "embedder": (paths["embedder"], {"text": texts}),
        "tagger": (paths["tagger"], {"text": texts}),
        "qa": (paths["qa"], {"question": texts, "context": texts[::-1]}),
        "masked_lm": (paths["masked_lm"], {"text": texts}),
    })
    assert np.array(answers["classifier"]["probabilities"]).shape == (len(texts), 2)
    assert np.isfinite(answers["classifier"]["logits"]).all()
    assert np.array(answers["embedder"]["embedding"]).shape == (len(texts), 32)
    assert np.isfinite(answers["embedder"]["embedding"]).all()
    assert len(answers["tagger"]["label_id"]) == len(texts)
    assert np.isfinite(np.array(answers["tagger"]["score"], dtype=float)).all()
    assert len(answers["qa"]["strings"]["answer"]) == len(answers["qa"]["start"]) == len(texts)
    assert np.isfinite(answers["qa"]["score"]).all()
    assert np.array(answers["masked_lm"]["probabilities"]).shape == (len(texts), 1, 3)


class MarginClassifier(kbert.BertClassifier):
    """Serves each text's margin between its two logits beside the answers."""

    def serving_function(self, pairs=False, top_k=5, head=None):
        serve, signature, fills = super().serving_function(pairs=pairs, top_k=top_k, head=head)

        def with_margin(*inputs):
            answers = serve(*inputs)
            return {**answers, "margin": answers["logits"][:, 1] - answers["logits"][:, 0]}

        return with_margin, signature, fills


@once
def test_an_overridden_serving_function_changes_what_the_export_serves(exports, tmp_path):
    models, paths, _ = exports
    classifier = models["classifier"]
    subclass = MarginClassifier(classifier.backbone, 2, classifier.preprocessor, class_names=classifier.class_names)
    subclass.get_layer("logits").set_weights(classifier.get_layer("logits").get_weights())
    served = serve({"subclass": (subclass.export(str(tmp_path / "margin")), {"text": TEXTS}),
                    "classifier": (paths["classifier"], {"text": TEXTS})})
    logits = np.array(served["classifier"]["logits"])
    np.testing.assert_allclose(served["subclass"]["margin"], logits[:, 1] - logits[:, 0], atol=1e-5)
    # Beside the margin, the answers of the class it overrides; which serves none.
    assert "margin" not in served["classifier"]
    np.testing.assert_allclose(served["subclass"]["logits"], logits, atol=1e-5)
    assert served["subclass"]["strings"] == served["classifier"]["strings"]


@pytest.mark.skipif(keras.backend.backend() == "tensorflow",
                    reason="on TensorFlow the model exports in this process, its serving_function included")
def test_a_subclass_defined_outside_kbert_is_refused_an_export_through_tensorflow_saying_how(minilm_dir, tmp_path):
    model = MarginClassifier(tiny_backbone(), 2, kbert.BertPreprocessor.from_preset(minilm_dir, sequence_length=32))
    with pytest.raises(ValueError, match=r"knows kbert's classes only.*KERAS_BACKEND=tensorflow, "
                                         r"MarginClassifier\.from_preset\(folder\)\.export\(path\)"):
        model.export(str(tmp_path / "margin"))
    assert not (tmp_path / "margin").exists()


def test_exports_use_tf_serving_version_folders(exports):
    models, paths, root = exports
    assert paths["classifier"] == str(root / "sentiment" / "1")
    assert paths["embedder"] == str(root / "embedder" / "7")
    # The next export of a model picks the next version.
    assert models["classifier"].export(str(root / "sentiment")) == str(root / "sentiment" / "2")
    with pytest.raises(FileExistsError, match="not empty"):
        models["embedder"].export(paths["embedder"])


@once
def test_saved_model_cli_lists_string_inputs_and_outputs_of_declared_shapes(exports):
    _, paths, _ = exports
    cli = os.path.join(os.path.dirname(sys.executable), "saved_model_cli")
    shown = subprocess.run([cli, "show", "--dir", paths["pairs"], "--tag_set", "serve", "--signature_def",
                            "serving_default"], capture_output=True, text=True).stdout
    for name in ("inputs['text']", "inputs['text_pair']", "outputs['logits']", "outputs['probabilities']",
                 "outputs['label_id']", "outputs['label']"):
        assert name in shown
    assert "dtype: DT_STRING" in shown
    # Each output's rank, and the dimensions the model fixes (3 classes).
    outputs = dict(re.findall(r"outputs\['(\w+)'\] tensor_info:\s+dtype: \w+\s+shape: (\([^)]*\))", shown))
    assert outputs == {"label": "(-1)", "label_id": "(-1)", "logits": "(-1, 3)", "probabilities": "(-1, 3)"}
    # The other tasks' signatures, read from their SavedModels as the tool reads them.
    code = ("import json, sys, tensorflow as tf, tensorflow_text; print(json.dumps({k: str(v.shape) for k, v in "
            "tf.saved_model.load(sys.argv[1]).signatures['serving_default'].structured_outputs.items()}))")
    shapes = {name: json.loads(subprocess.run([sys.executable, "-c", code, paths[name]], capture_output=True,
                                              text=True).stdout.strip().splitlines()[-1])
              for name in ("tagger", "masked_lm")}
    assert shapes["tagger"]["words"] == shapes["tagger"]["entity_start"] == "(None, None)"
    assert shapes["masked_lm"]["tokens"] == "(None, None, 3)"  # [texts, masks, top_k]


@once
def test_the_documented_saved_model_cli_run_command_answers(exports):
    _, paths, _ = exports
    # docs/serving.md: saved_model_cli with tensorflow-text's ops registered.
    command = [sys.executable, "-c", "import sys, tensorflow_text; from tensorflow.python.tools import saved_model_cli; "
               "sys.argv[0] = 'saved_model_cli'; saved_model_cli.main()",
               "run", "--dir", paths["classifier"], "--tag_set", "serve", "--signature_def", "serving_default",
               "--input_exprs", "text=['a fine film', 'a dull film']"]
    result = subprocess.run(command, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Result for output key probabilities" in result.stdout


def test_invalid_utf8_is_read_as_replacement_characters_served_and_in_python(exports):
    models, paths, _ = exports
    texts = [INVALID_UTF8, b"Bath \xff\xfe Bristol", "café Zürich".encode()]
    served = serve({"tagger": (paths["tagger"], {"text": texts})})["tagger"]
    assert served["not_utf8"] == []  # every word and entity decodes
    decoded = [t.decode("utf-8", "replace") for t in texts]
    for row, sentence in enumerate(models["tagger"].tags(decoded)):
        assert served["strings"]["words"][row][: len(sentence)] == [w for w, _, _ in sentence]
        assert served["strings"]["label"][row][: len(sentence)] == [t or "" for _, t, _ in sentence]
    for row, entities in enumerate(models["tagger"].entities(decoded)):
        got = list(zip(served["strings"]["entity"][row], served["entity_start"][row], served["entity_end"][row]))
        assert got[: len(entities)] == [(e["text"], e["start"], e["end"]) for e in entities]
        assert all(decoded[row][e["start"]:e["end"]] == e["text"] for e in entities)


def test_answers_without_a_preprocessor_say_how_to_get_one():
    model = kbert.BertTokenClassifier(tiny_backbone(), 3, class_names=["O", "B-LOC", "I-LOC"])
    with pytest.raises(ValueError, match=r"has no preprocessor.*TokenClassifierPreprocessor.from_preset"):
        model.entities(["Bath"])


MIXED_SERVE = r"""
import json, sys
import tensorflow as tf
import tensorflow_text  # noqa: F401
loaded = tf.saved_model.load(sys.argv[1])
logits = loaded.signatures["serving_default"](text=tf.constant(json.loads(sys.argv[2])))["logits"]
print(json.dumps({"logits": logits.numpy().tolist(),
                  "cast": sorted({v.dtype.name for v in loaded.cast_weights}), "count": len(loaded.cast_weights),
                  "kernels": sorted(v.dtype.name for v in loaded.model_variables if "kernel" in v.name)}))
"""


@once
def test_a_mixed_precision_export_stores_and_reads_its_dense_weights_cast(minilm_dir, tmp_path, bfloat16):
    keras.utils.set_random_seed(0)
    backbone = kbert.BertBackbone(vocabulary_size=30522, num_layers=2, num_heads=2, hidden_dim=32,
                                  intermediate_dim=64, max_sequence_length=64, dropout=0.0, dtype="mixed_bfloat16")
    model = kbert.BertClassifier(backbone, 2, kbert.BertPreprocessor.from_preset(minilm_dir, sequence_length=32))
    model.fit(TEXTS, [1, 0, 1], epochs=1, verbose=0)
    path = model.export(str(tmp_path / "mixed"))
    result = subprocess.run([sys.executable, "-c", MIXED_SERVE, path, json.dumps(TEXTS)], capture_output=True,
                            text=True)
    assert result.returncode == 0, result.stderr[-3000:]
    served = json.loads(result.stdout.strip().splitlines()[-1])
    # The blocks' 6 dense layers x 2 blocks, kernel and bias, stored in
    # bfloat16; the float32 ones they replace are not stored. What is left
    # in float32: the pooler's and the head's kernels.
    assert served["cast"] == ["bfloat16"] and served["count"] == 24
    assert served["kernels"] == ["float32", "float32"]
    # The same answers (the same bfloat16 weights, cast once instead of per
    # request), to bfloat16's precision (graphs fused apart differ in rounding) ...
    logits = model.predict(TEXTS, verbose=0)
    tolerance = 2e-3 * np.abs(logits).max()
    np.testing.assert_allclose(served["logits"], logits, atol=tolerance)
    # ... and the model itself still reads its float32 weights: changing one
    # changes its answers.
    kernel = model.backbone.transformer_layers[-1].output_dense.kernel
    kernel.assign(np.random.default_rng(0).normal(size=kernel.shape).astype("float32"))  # std 1, not 0.02
    assert np.abs(model.predict(TEXTS, verbose=0) - logits).max() > 20 * tolerance
