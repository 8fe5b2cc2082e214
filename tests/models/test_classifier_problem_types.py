"""BertClassifier beyond one label per text (Hugging Face's `problem_type`):
regression and multi-label classification, against transformers on the same
weights, both ways, and trained on raw text."""

import keras
import numpy as np
import pytest
import tensorflow as tf
import torch
import transformers

import kbert
from tests.helpers import random_inputs, to_numpy, transformers_outputs

PAIRS = (["a man is playing a guitar", "a cat sits on the mat", "the sky is blue today", "he eats an apple"],
         ["a man plays the guitar", "a dog runs in the park", "today the sky is clear and blue", "she is asleep"])
SCORES = [4.8, 0.4, 3.9, 0.2]
EMOTIONS = ["joy", "anger", "fear"]
TEXTS = ["what a lovely day", "how dare you, I am scared", "nothing to report", "glad but a little afraid"]
NAMES = [["joy"], ["anger", "fear"], [], ["joy", "fear"]]
MULTI_HOT = np.array([[1, 0, 0], [0, 1, 1], [0, 0, 0], [1, 0, 1]], "float32")
PROBLEMS = {"regression": (1, np.array([0.5, -1.25, 3.0], "float32")),
            "multi_label_classification": (3, MULTI_HOT[:3])}


def tiny_classifier(minilm_dir, num_classes, **kwargs):
    backbone = kbert.BertBackbone(vocabulary_size=30522, num_layers=2, num_heads=2, hidden_dim=32,
                                  intermediate_dim=64, max_sequence_length=64, dropout=0.0)
    preprocessor = kbert.BertPreprocessor.from_preset(minilm_dir, sequence_length=32)
    return kbert.BertClassifier(backbone, num_classes, preprocessor, **kwargs)


def hf_checkpoint(folder, problem_type):
    config = transformers.BertConfig(vocab_size=120, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                     intermediate_size=48, max_position_embeddings=40,
                                     num_labels=PROBLEMS[problem_type][0], problem_type=problem_type)
    torch.manual_seed(0)
    model = transformers.BertForSequenceClassification(config).eval()
    with torch.no_grad():  # off the initialisation (zero biases, unit scales)
        for parameter in model.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.05)
    model.save_pretrained(folder)
    return model


@pytest.mark.parametrize("problem_type", PROBLEMS)
def test_a_hugging_face_checkpoint_loads_with_its_problem_type_logits_and_loss(tmp_path, problem_type):
    hf = hf_checkpoint(tmp_path, problem_type)
    model = kbert.BertClassifier.from_preset(str(tmp_path))
    assert model.problem_type == problem_type
    inputs = random_inputs(3, 17, 120)
    labels = PROBLEMS[problem_type][1]
    theirs = transformers_outputs(hf, inputs, labels=torch.tensor(labels))
    np.testing.assert_allclose(to_numpy(model(inputs)), theirs.logits.numpy(), atol=1e-4)
    model.compile()  # the default loss of the problem type: MSE, or binary cross-entropy on logits
    loss = model.evaluate(inputs, labels, batch_size=3, verbose=0, return_dict=True)["loss"]
    np.testing.assert_allclose(loss, theirs.loss.item(), rtol=1e-4)


@pytest.mark.parametrize("problem_type", PROBLEMS)
def test_export_to_transformers_writes_the_problem_type_back(minilm_dir, tmp_path, problem_type):
    num_classes = PROBLEMS[problem_type][0]
    model = tiny_classifier(minilm_dir, num_classes, problem_type=problem_type)
    model.export_to_transformers(str(tmp_path))
    hf = transformers.AutoModelForSequenceClassification.from_pretrained(str(tmp_path)).eval()
    assert hf.config.problem_type == problem_type
    features = {k: to_numpy(v) for k, v in model.preprocessor(TEXTS).items()}
    theirs = transformers_outputs(hf, features).logits
    np.testing.assert_allclose(to_numpy(model(features)), theirs.numpy(), atol=1e-4)
    assert kbert.BertClassifier.from_preset(str(tmp_path)).problem_type == problem_type


def test_regression_on_pairs_fits_float_scores_and_scores_them_as_predict(minilm_dir):
    model = tiny_classifier(minilm_dir, 1)
    assert model.problem_type == "regression"  # num_classes=1, as transformers infers it
    model.compile(optimizer=keras.optimizers.Adam(1e-2))
    history = model.fit(PAIRS, SCORES, batch_size=4, epochs=10, verbose=0).history
    assert history["loss"][-1] < history["loss"][0] / 2
    scores = model.scores(PAIRS)
    assert scores.shape == (4,) and scores.dtype == np.float32
    np.testing.assert_allclose(scores, model.predict(PAIRS, verbose=0)[:, 0], atol=1e-5)
    assert [row["score"] for row in model.classify(PAIRS)] == pytest.approx(scores.tolist(), abs=1e-6)
    dataset = tf.data.Dataset.from_tensor_slices((PAIRS, SCORES)).batch(2)  # tf.data too
    assert np.isfinite(model.evaluate(dataset, verbose=0)).all()


def test_multi_label_fits_lists_of_names_and_classifies_every_label_over_the_threshold(minilm_dir):
    model = tiny_classifier(minilm_dir, 3, class_names=EMOTIONS, problem_type="multi_label_classification")
    model.compile(optimizer=keras.optimizers.Adam(1e-2))
    history = model.fit(TEXTS, NAMES, batch_size=4, epochs=8, verbose=0).history
    assert history["loss"][-1] < history["loss"][0]
    history = model.fit(TEXTS, MULTI_HOT, batch_size=4, epochs=1, verbose=0).history  # multi-hot rows alike
    probabilities = 1 / (1 + np.exp(-model.predict(TEXTS, verbose=0)))  # a sigmoid per class
    for threshold in (0.5, 0.3):
        answers = model.classify(TEXTS, threshold=threshold)
        np.testing.assert_allclose([a["probabilities"] for a in answers], probabilities, atol=1e-5)
        assert [a["labels"] for a in answers] == [[n for n, p in zip(EMOTIONS, row) if p > threshold]
                                                  for row in probabilities]


@pytest.mark.parametrize("problem_type, labels, match", [
    ("regression", [1.0, float("nan"), 2.0, 0.5], "NaN or infinite"),
    ("regression", ["high", "low", "low", "high"], "takes numbers"),
    ("multi_label_classification", MULTI_HOT * 2, r"outside \[0, 1\]"),
    ("multi_label_classification", [["joy"], ["awe"], [], []], r"\['awe'\] are not among class_names"),
    ("multi_label_classification", [0, 1, 2, 0], "multi-hot row of 3 values"),
])
def test_bad_labels_of_each_problem_type_are_refused_saying_what_it_takes(minilm_dir, problem_type, labels, match):
    num_classes = PROBLEMS[problem_type][0]
    model = tiny_classifier(minilm_dir, num_classes, problem_type=problem_type,
                            class_names=EMOTIONS if num_classes == 3 else None)
    with pytest.raises(ValueError, match=match):
        model.fit(TEXTS, labels, epochs=1, verbose=0)


def test_problem_type_and_threshold_are_checked_and_saved(minilm_dir):
    with pytest.raises(ValueError, match="Unknown problem_type='multilabel'. Known: single_label_classification"):
        tiny_classifier(minilm_dir, 3, problem_type="multilabel")
    with pytest.raises(ValueError, match="threshold=1.5"):
        tiny_classifier(minilm_dir, 3, problem_type="multi_label_classification", threshold=1.5)
    model = tiny_classifier(minilm_dir, 3, problem_type="multi_label_classification", threshold=0.3)
    restored = kbert.BertClassifier.from_config(model.get_config())
    assert (restored.problem_type, restored.threshold) == ("multi_label_classification", 0.3)
    with pytest.raises(ValueError, match="scores is for regression models"):
        model.scores(TEXTS)
