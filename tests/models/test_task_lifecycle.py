"""Every task model inside Keras' own model lifecycle, on raw text: saved and
loaded in a fresh process it predicts the same and trains on from its saved
optimizer state; cloned it trains; sample weights after a first fit;
validation_split; a failed fit leaves it usable."""

import json
import os
import subprocess
import sys
import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf

import kbert
from tests.helpers import once_unless, to_numpy

TEXTS = ["a wonderful, moving film", "dull and far too long", "great acting and a clever plot",
         "i walked out after an hour", "a joy from start to finish", "the worst script of the year"]
WORDS = [["Jane", "Austen", "lived", "in", "Bath"], ["Paris", "is", "big"], ["I", "met", "Tom"]] * 2
TAGS = [["B-PER", "I-PER", "O", "O", "B-LOC"], ["B-LOC", "O", "O"], ["O", "O", "B-PER"]] * 2
CONTEXT = "Jane Austen wrote Pride and Prejudice in 1813 while living in Hampshire."
QUESTIONS = (["Who wrote it?", "When was it written?", "Where did she live?"] * 2, [CONTEXT] * 6)
ANSWERS = [{"text": "Jane Austen", "answer_start": 0}, {"text": "1813", "answer_start": 41},
           {"text": "Hampshire", "answer_start": 62}] * 2

# Each task: how to build it, its raw training data (x, y) and what `predict` is compared on.
TASKS = {
    "classifier": (lambda b, p: kbert.BertClassifier(b, 2, preprocessor=p, class_names=["neg", "pos"]),
                   lambda: (TEXTS, ["pos", "neg", "pos", "neg", "pos", "neg"])),
    "pair_classifier": (lambda b, p: kbert.BertClassifier(b, 3, preprocessor=p),
                        lambda: ((TEXTS, TEXTS[::-1]), [0, 1, 2, 0, 1, 2])),
    "token_classifier": (lambda b, p: kbert.BertTokenClassifier(b, 5, preprocessor=p,
                                                                class_names=["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]),
                         lambda: (WORDS, TAGS)),
    "question_answerer": (lambda b, p: kbert.BertQuestionAnswerer(b, preprocessor=p, stride=8, max_question_length=8),
                          lambda: (QUESTIONS, ANSWERS)),
    "masked_lm": (lambda b, p: kbert.BertMaskedLM(b, preprocessor=p, max_predictions=4),
                  lambda: (TEXTS, None)),
}


def pairs_dataset():
    return tf.data.Dataset.from_tensor_slices({
        "segment_a": TEXTS, "segment_b": TEXTS[::-1], "next_sentence_label": [0, 1, 0, 1, 0, 1]}).batch(3)


# The pre-trainer reads batched next-sentence pairs, the embedder (anchors,
# positives) with in-batch negatives: saved and loaded as the others.
MORE_TASKS = {
    "pretrainer": (lambda b, p: kbert.BertPretrainer(b, preprocessor=p, max_predictions=4),
                   lambda: (pairs_dataset(), None)),
    "embedder": (lambda b, p: kbert.BertTextEmbedder(b, preprocessor=p),
                 lambda: ((TEXTS, TEXTS[::-1]), None)),
}
ALL_TASKS = {**TASKS, **MORE_TASKS}


def build(name, minilm_dir):
    keras.utils.set_random_seed(0)
    backbone = kbert.BertBackbone(vocabulary_size=30522, num_layers=1, num_heads=2, hidden_dim=16,
                                  intermediate_dim=32, max_sequence_length=64, dropout=0.0)
    preprocessor = kbert.BertPreprocessor.from_preset(minilm_dir, sequence_length=24)
    model = ALL_TASKS[name][0](backbone, preprocessor)
    model.compile(learning_rate=1e-3)
    return model


def predicted(name, model, x):
    """The model's outputs on raw input, flat: `predict`'s, the masked LMs'
    guesses at a [MASK] written in each text (`predict` on text masks anew),
    or the embedder's embeddings of the texts."""
    if name in ("masked_lm", "pretrainer"):
        return np.array([p for guesses in model.fill_mask([t + " [MASK]" for t in TEXTS]) for _, p in guesses[0]])
    if name == "embedder":
        return model.encode(TEXTS).ravel()
    return flat(model.predict(x, verbose=0))


def flat(outputs):
    return np.concatenate([np.ravel(to_numpy(v)) for v in keras.tree.flatten(outputs)])


_RESUME = """
import json, sys
import keras, numpy as np
import kbert  # registers kbert's classes
from tests.models.test_task_lifecycle import ALL_TASKS, predicted
name, path = sys.argv[1:]
model = keras.models.load_model(path)
x, y = ALL_TASKS[name][1]()
np.save(path + ".loaded.npy", predicted(name, model, x))
optimizer = model.optimizer
before = int(optimizer.iterations)
moments = [np.asarray(v).copy() for v in optimizer.variables if "momentum" in v.path][:1]
np.save(path + ".moment.npy", moments[0])
model.fit(x, y, batch_size=6, epochs=1, verbose=0)
print(json.dumps({"iterations": before, "after": int(optimizer.iterations), "recipe": model.recipe}))
"""


@pytest.mark.parametrize("name", once_unless(ALL_TASKS, every_backend=("classifier", "masked_lm")))
def test_saved_and_loaded_in_a_fresh_process_predicts_the_same_and_trains_on(name, minilm_dir, tmp_path):
    model = build(name, minilm_dir)
    x, y = ALL_TASKS[name][1]()
    model.fit(x, y, batch_size=3, epochs=1, verbose=0)
    path = str(tmp_path / "m.keras")
    model.save(path)
    expected = predicted(name, model, x)
    moment = [to_numpy(v) for v in model.optimizer.variables if "momentum" in v.path][0]
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    result = subprocess.run([sys.executable, "-c", _RESUME, name, path], capture_output=True, text=True,
                            cwd=root, env={**os.environ, "PYTHONPATH": root})
    assert result.returncode == 0, result.stderr[-3000:]
    resumed = json.loads(result.stdout.strip().splitlines()[-1])
    np.testing.assert_allclose(np.load(path + ".loaded.npy"), expected, atol=1e-5)
    # The optimizer's state came back: its step count and its moments.
    np.testing.assert_array_equal(np.load(path + ".moment.npy"), moment)
    assert resumed["iterations"] == int(model.optimizer.iterations) > 0
    assert resumed["after"] > resumed["iterations"]
    assert resumed["recipe"] == model.recipe and resumed["recipe"]["learning_rate"] == 1e-3


@pytest.mark.parametrize("name", ["token_classifier", "question_answerer"])
def test_tasks_that_read_no_pooler_leave_it_out_of_training_without_a_warning(name, minilm_dir):
    # As in transformers' BertForTokenClassification and BertForQuestionAnswering.
    model = build(name, minilm_dir)
    pooler = model.backbone.pooled_dense.weights
    before = [to_numpy(v) for v in pooler]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model.fit(*ALL_TASKS[name][1](), epochs=1, batch_size=3, verbose=0)
    assert [str(w.message) for w in caught if "Gradients do not exist" in str(w.message)] == []
    # Not trained (nor decayed), and counted as non-trainable.
    assert all(np.array_equal(b, to_numpy(v)) for b, v in zip(before, pooler))
    assert not {id(v) for v in pooler} & {id(v) for v in model.trainable_weights + model.trainable_variables}
    assert {id(v) for v in pooler} <= {id(v) for v in model.non_trainable_weights}
    assert {id(v) for v in pooler} <= {id(v) for v in model.non_trainable_variables}


@pytest.mark.parametrize("name", once_unless(TASKS, every_backend=("classifier",)))
def test_a_clone_trains_apart_from_the_original(name, minilm_dir):
    model = build(name, minilm_dir)
    x, y = TASKS[name][1]()
    model.fit(x, y, batch_size=3, epochs=1, verbose=0)
    clone = keras.models.clone_model(model)
    # As Keras clones any subclass of a functional model: the same graph and
    # compile settings, fresh weights, fed features.
    assert clone.optimizer is not model.optimizer and clone.optimizer.recipe == model.recipe
    weights = [to_numpy(w).copy() for w in model.weights]
    dataset = kbert.models.task_inputs.dataset(model, x, y, batch_size=3)
    history = clone.fit(dataset, epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"]).all() and int(clone.optimizer.iterations) == 2
    assert all(np.array_equal(w, to_numpy(v)) for w, v in zip(weights, model.weights))
    # A clone of the same class, fed raw text, is one config away.
    same = type(model).from_config(model.get_config())
    same.compile_from_config(model.get_compile_config())
    assert np.isfinite(same.fit(x, y, batch_size=3, epochs=1, verbose=0).history["loss"]).all()


@pytest.mark.parametrize("name", once_unless(TASKS, every_backend=("classifier", "token_classifier")))
def test_sample_weights_after_a_fit_without_them(name, minilm_dir):
    model = build(name, minilm_dir)
    x, y = TASKS[name][1]()
    weights = np.array([1.0, 0.0, 1.0, 0.5, 1.0, 1.0])
    model.fit(x, y, batch_size=3, epochs=1, verbose=0)
    history = model.fit(x, y, sample_weight=weights, batch_size=3, epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"]).all()
    weighted = model.evaluate(x, y, sample_weight=weights, verbose=0, return_dict=True)
    plain = model.evaluate(x, y, verbose=0, return_dict=True)
    assert np.isfinite(weighted["loss"])
    if name != "masked_lm":  # (its masks, and so its loss, are drawn anew at each call)
        assert weighted["loss"] != pytest.approx(plain["loss"], abs=1e-7)


@pytest.mark.parametrize("name", once_unless(TASKS, every_backend=("classifier",)))
def test_validation_split_holds_out_the_last_examples(name, minilm_dir):
    model = build(name, minilm_dir)
    x, y = TASKS[name][1]()
    history = model.fit(x, y, validation_split=0.5, batch_size=3, epochs=1, verbose=0)
    assert np.isfinite(history.history["val_loss"]).all()
    assert int(model.optimizer.iterations) == 1  # 3 of the 6 examples trained


def test_a_failed_fit_leaves_the_model_usable(minilm_dir):
    model = build("classifier", minilm_dir)
    # Labels of another shape from a dataset fail inside the traced train step:
    # kbert does not check a dataset's labels of rank 3, so the loss refuses
    # them, in each backend's words (TensorFlow, JAX, PyTorch).
    wrong = tf.data.Dataset.from_tensor_slices((TEXTS, np.zeros((6, 3, 4), "int32"))).batch(3)
    with pytest.raises((ValueError, RuntimeError),
                       match=r"must have rank|Incompatible shapes for broadcasting|size of tensor a"):
        model.fit(wrong, epochs=1, verbose=0)
    history = model.fit(TEXTS, ["pos", "neg"] * 3, batch_size=3, epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"]).all()


def test_a_dataset_of_texts_and_label_names_trains(minilm_dir):
    model = build("classifier", minilm_dir)
    names = tf.data.Dataset.from_tensor_slices((TEXTS, ["pos", "neg"] * 3)).batch(3)
    ids = tf.data.Dataset.from_tensor_slices((TEXTS, [1, 0] * 3)).batch(3)
    assert model.evaluate(names, verbose=0) == model.evaluate(ids, verbose=0)
    assert np.isfinite(model.fit(names, epochs=1, verbose=0).history["loss"]).all()
    unknown = tf.data.Dataset.from_tensor_slices((TEXTS, ["pos", "meh"] * 3)).batch(3)
    with pytest.raises(tf.errors.InvalidArgumentError, match="Labels not among class_names"):
        model.evaluate(unknown, verbose=0)


def test_bad_labels_in_a_dataset_are_refused(minilm_dir):
    model = build("classifier", minilm_dir)
    for labels, error, match in [
        ([0, 1, 2, 0, 1, 0], tf.errors.InvalidArgumentError, r"Labels must be class ids, whole numbers in \[0, 2\)"),
        ([0.5] * 6, tf.errors.InvalidArgumentError, r"Labels must be class ids, whole numbers"),
        (np.eye(2, dtype="float32")[[0, 1] * 3], ValueError, r"labels have shape \(None, 2\).*Map one-hot rows to ids"),
    ]:
        with pytest.raises(error, match=match):
            model.fit(tf.data.Dataset.from_tensor_slices((TEXTS, labels)).batch(3), epochs=1, verbose=0)


def test_an_unbatched_dataset_is_refused_saying_to_batch_it(minilm_dir):
    model = build("classifier", minilm_dir)
    with pytest.raises(ValueError, match=r"unbatched.*dataset.batch\(32\)"):
        model.fit(tf.data.Dataset.from_tensor_slices((TEXTS, [1, 0] * 3)), epochs=1, verbose=0)


def test_calling_the_model_on_texts_preprocesses_them(minilm_dir):
    model = build("classifier", minilm_dir)
    expected = model.predict(TEXTS[:2], verbose=0)
    np.testing.assert_allclose(to_numpy(model(TEXTS[:2])), expected, atol=1e-5)
    np.testing.assert_allclose(to_numpy(model.predict_on_batch(TEXTS[:2])), expected, atol=1e-5)


def test_raw_text_without_a_preprocessor_says_how_to_add_one(minilm_dir):
    model = kbert.BertClassifier(build("classifier", minilm_dir).backbone, 2)
    for call in (lambda: model.predict(TEXTS), lambda: model.fit(TEXTS, [0, 1] * 3), lambda: model(TEXTS)):
        with pytest.raises(ValueError, match=r"has no preprocessor.*TextClassifierPreprocessor.from_preset"):
            call()


def test_each_task_reads_its_input_through_its_own_preprocessor_class(minilm_dir):
    for name, cls in [("classifier", kbert.BertClassifierPreprocessor),
                      ("token_classifier", kbert.BertTokenClassifierPreprocessor),
                      ("question_answerer", kbert.BertQuestionAnswererPreprocessor),
                      ("masked_lm", kbert.BertMaskedLMPreprocessor)]:
        model = build(name, minilm_dir)
        assert type(model.preprocessor) is cls and isinstance(model.preprocessor, keras.layers.Layer)
        # Rebuilt from its config, the preprocessor gives the same features.
        rebuilt = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(model.preprocessor))
        assert type(rebuilt) is cls and rebuilt.sequence_length == 24
        texts = tf.constant(TEXTS)
        for key, value in model.preprocessor(texts).items():
            np.testing.assert_array_equal(rebuilt(texts)[key].numpy(), value.numpy())


_OPENED = []


def _record_opens(event, args):
    if event == "open" and _OPENED and isinstance(args[0], str):
        _OPENED.append(os.path.realpath(args[0]))


sys.addaudithook(_record_opens)


def opened_files(function):
    """The files `function()` opens from Python (each open, by path)."""
    _OPENED[:] = [None]
    try:
        function()
    finally:
        opened = _OPENED[1:]
        _OPENED[:] = []
    return opened


@pytest.mark.parametrize("layout", ["huggingface", "kbert"])
def test_from_preset_opens_each_file_of_the_preset_once(layout, minilm_dir, tmp_path):
    folder = minilm_dir
    if layout == "kbert":
        folder = str(tmp_path / "preset")
        build("classifier", minilm_dir).save_to_preset(folder)
    opened = opened_files(lambda: kbert.BertClassifier.from_preset(folder, num_classes=2))
    in_preset = [path for path in opened if path.startswith(os.path.realpath(folder))]
    assert in_preset, "the test saw no file opened"
    for path in set(in_preset):
        assert in_preset.count(path) == 1, f"{path} opened {in_preset.count(path)} times"
    names = {os.path.basename(path) for path in in_preset}
    assert {"vocab.txt", "tokenizer_config.json"} <= names
    assert ("kbert_config.json" if layout == "kbert" else "config.json") in names



_SCORED_FIT = """
import sys
import keras
import kbert  # registers kbert's classes
from tests.models.test_task_lifecycle import TEXTS
model = keras.models.load_model(sys.argv[1])
history = model.fit((TEXTS, TEXTS[::-1]), [0.0, 0.2, 0.4, 0.6, 0.8, 1.0], batch_size=6, verbose=0)
print(history.history["loss"][0])
"""


def test_the_embedders_default_loss_choice_survives_a_reload_in_a_fresh_process(minilm_dir, tmp_path):
    # Compiled with the default loss, scored pairs train CoSENTLoss, before a
    # save as after `load_model`: the compile config keeps the choice ("auto").
    model = build("embedder", minilm_dir)
    path = str(tmp_path / "m.keras")
    model.save(path)
    assert model.get_compile_config()["loss"] == "auto"
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    result = subprocess.run([sys.executable, "-c", _SCORED_FIT, path], capture_output=True, text=True,
                            cwd=root, env={**os.environ, "PYTHONPATH": root})
    assert result.returncode == 0, result.stderr[-3000:]
    history = model.fit((TEXTS, TEXTS[::-1]), [0.0, 0.2, 0.4, 0.6, 0.8, 1.0], batch_size=6, verbose=0)
    # (One step: the loss of the saved weights, CoSENT's, not in-batch negatives'.)
    assert float(result.stdout.strip().splitlines()[-1]) == pytest.approx(history.history["loss"][0], rel=1e-5)
