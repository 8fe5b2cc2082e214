"""The family-neutral names (`TextClassifier`, ...) and the `Bert*` names of
the first releases: one class under two names, and presets and `.keras`
files saved under either load under both. `tests/data/saved_before_neutral_names`
was written by kbert before the neutral names (its `make.py`)."""

import os

import keras
import numpy as np
import pytest

import kbert
from tests.helpers import to_numpy

SAVED = os.path.join(os.path.dirname(os.path.dirname(__file__)), "data", "saved_before_neutral_names")
# (folder in SAVED, neutral name, first name)
TASKS = [
    ("classifier", "TextClassifier", "BertClassifier"),
    ("token_classifier", "TokenClassifier", "BertTokenClassifier"),
    ("question_answerer", "QuestionAnswerer", "BertQuestionAnswerer"),
    ("masked_lm", "MaskedLM", "BertMaskedLM"),
    ("text_embedder", "TextEmbedder", "BertTextEmbedder"),
]
TEXTS = ["the cat sat on the mat", "a dog ran"]


def _weights(model, task):
    return {f"{task}/{v.path}": to_numpy(v) for v in model.weights}


def _assert_weights_saved(model, task):
    saved = np.load(os.path.join(SAVED, "weights.npz"))
    weights = _weights(model, task)
    assert set(weights) == {k for k in saved if k.startswith(task + "/")}
    for name, value in weights.items():
        np.testing.assert_array_equal(value, saved[name], err_msg=name)


def test_each_first_name_is_the_neutral_class():
    pairs = [(new, old) for _, new, old in TASKS] + [
        ("Backbone", "BertBackbone"), ("WordPieceTokenizer", "BertTokenizer"), ("Preprocessor", "BertPreprocessor"),
        ("TextClassifierPreprocessor", "BertClassifierPreprocessor"),
        ("TokenClassifierPreprocessor", "BertTokenClassifierPreprocessor"),
        ("QuestionAnswererPreprocessor", "BertQuestionAnswererPreprocessor"),
        ("MaskedLMPreprocessor", "BertMaskedLMPreprocessor"),
        ("TextEmbedderPreprocessor", "BertTextEmbedderPreprocessor"),
    ]
    for new, old in pairs:
        assert getattr(kbert, old) is getattr(kbert, new), old
    for new, old in pairs:
        if new != "WordPieceTokenizer":  # (tokenizers are saved inside their preprocessor's config)
            assert keras.saving.get_registered_object(f"kbert>{old}") is getattr(kbert, new), old
            assert keras.saving.get_registered_object(f"kbert>{new}") is getattr(kbert, new), new


@pytest.mark.parametrize("task, new, old", TASKS)
def test_presets_saved_under_the_first_names_load_under_both(task, new, old):
    for name in (new, old):
        model = getattr(kbert, name).from_preset(os.path.join(SAVED, task))
        assert type(model) is getattr(kbert, new)
        _assert_weights_saved(model, task)  # the head too: the saved task is this one


@pytest.mark.parametrize("task, new, old", TASKS)
def test_keras_files_saved_under_the_first_names_load(task, new, old):
    model = keras.models.load_model(os.path.join(SAVED, task + ".keras"))
    assert type(model) is getattr(kbert, new)
    _assert_weights_saved(model, task)


def test_a_classifier_saved_before_predicts_as_it_did():
    model = kbert.TextClassifier.from_preset(os.path.join(SAVED, "classifier"))
    np.testing.assert_allclose(model.predict(TEXTS, verbose=0), np.load(os.path.join(SAVED, "classifier_logits.npy")),
                               atol=1e-6)


def test_a_preset_saved_under_the_neutral_name_loads_under_the_first(tmp_path):
    model = kbert.TextClassifier.from_preset(os.path.join(SAVED, "classifier"))
    model.save_to_preset(str(tmp_path / "preset"))
    model.save(str(tmp_path / "model.keras"))
    again = kbert.BertClassifier.from_preset(str(tmp_path / "preset"))
    loaded = keras.models.load_model(str(tmp_path / "model.keras"))
    for copy in (again, loaded):
        assert isinstance(copy, kbert.BertClassifier)
        np.testing.assert_allclose(to_numpy(copy(TEXTS)), to_numpy(model(TEXTS)), atol=1e-6)
