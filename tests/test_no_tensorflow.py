"""The model path where TensorFlow is not installed (Colab's TPU runtime, GPU
images made for PyTorch or JAX), as KerasHub's CI checks its own
(integration_tests/no_tensorflow_test.py): token ids in, on JAX and PyTorch.

These run in `make test-notf-jax` and `make test-notf-torch`, in .venv-notf,
which has neither tensorflow nor tensorflow-text."""

import subprocess
import sys
import warnings

import keras
import numpy as np
import pytest

from kbert import tf_if_present

if tf_if_present.installed():
    pytest.skip("runs where TensorFlow is not installed: make test-notf-jax, make test-notf-torch",
                allow_module_level=True)

import transformers  # noqa: E402

import kbert  # noqa: E402
from kbert import metrics  # noqa: E402
from tests.helpers import random_inputs, transformers_outputs  # noqa: E402


def token_ids(minilm_dir, texts):
    """MiniLM's inputs for `texts`, tokenized by transformers (kbert's own
    tokenizer runs in TensorFlow)."""
    encoded = transformers.BertTokenizerFast.from_pretrained(minilm_dir)(texts, padding=True, return_tensors="np")
    return {"token_ids": encoded["input_ids"].astype("int32"),
            "segment_ids": encoded["token_type_ids"].astype("int32"),
            "padding_mask": encoded["attention_mask"].astype("int32")}


@pytest.fixture(scope="module")
def features(minilm_dir):
    return token_ids(minilm_dir, ["a gripping story, beautifully acted.", "dull.", "the best film of the year",
                                  "i want my two hours back"])


def test_import_kbert_works_and_loads_no_tensorflow():
    code = "import sys, kbert; print([m for m in sys.modules if m.split('.')[0] in ('tensorflow', 'tensorflow_text')])"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "[]"


def test_minilm_backbone_from_preset_equals_transformers_on_token_ids(minilm_dir, features):
    outputs = kbert.BertBackbone.from_preset(minilm_dir)(features)
    reference = transformers_outputs(transformers.BertModel.from_pretrained(minilm_dir).eval(), features)
    real = features["padding_mask"][:, :, None].astype(bool)
    sequence = keras.ops.convert_to_numpy(outputs["sequence_output"])
    np.testing.assert_allclose(np.where(real, sequence, 0), np.where(real, reference.last_hidden_state.numpy(), 0),
                               atol=1e-4)


@pytest.fixture(scope="module")
def classifier(minilm_dir):
    """MiniLM with a new two-class head, and the warnings its `from_preset` gave."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = kbert.BertClassifier.from_preset(minilm_dir, num_classes=2)
    return model, [str(w.message) for w in caught]


def test_classifier_from_preset_warns_once_that_the_tokenizer_is_left_out(classifier):
    model, messages = classifier
    about_tokenizer = [m for m in messages if "tokenizer" in m]
    assert len(about_tokenizer) == 1, messages
    assert "TensorFlow" in about_tokenizer[0] and "pip install" in about_tokenizer[0]
    assert model.preprocessor is None


def test_classifier_fits_predicts_saves_and_loads_on_token_ids(classifier, features, tmp_path):
    model = classifier[0]
    labels = np.array([1, 0, 1, 0])
    backup = str(tmp_path / "backup")
    history = model.fit(features, labels, batch_size=2, epochs=1, verbose=0,
                        callbacks=[kbert.training.BackupAndRestore(backup)])
    assert np.isfinite(history.history["loss"]).all()
    assert kbert.training.trained_steps(backup) == 0  # a finished run keeps no backup
    model.evaluate(features, labels, verbose=0)
    predictions = model.predict(features, verbose=0)
    assert predictions.shape == (4, 2)
    model.save(tmp_path / "model.keras")
    loaded = keras.models.load_model(tmp_path / "model.keras")
    np.testing.assert_allclose(loaded.predict(features, verbose=0), predictions, atol=1e-5)


def tiny_task(task, **kwargs):
    backbone = kbert.BertBackbone(vocabulary_size=60, num_layers=1, num_heads=2, hidden_dim=16, intermediate_dim=32,
                                  max_sequence_length=16)
    return getattr(kbert, task)(backbone, **kwargs)


def labels(task, rng):
    """Labels for a batch of 4 rows of 8 token ids."""
    return {
        "BertClassifier": rng.integers(0, 2, 4),
        "BertTokenClassifier": rng.integers(0, 3, (4, 8)),
        "BertQuestionAnswerer": {"start_logits": rng.integers(0, 8, 4), "end_logits": rng.integers(0, 8, 4)},
        "BertMaskedLM": {"mlm_logits": rng.integers(1, 60, (4, 2))},
        "BertTextEmbedder": rng.normal(size=(4, 16)).astype("float32"),
    }[task]


@pytest.mark.parametrize("task", ["BertClassifier", "BertTokenClassifier", "BertQuestionAnswerer", "BertMaskedLM",
                                  "BertTextEmbedder"])
def test_every_task_fits_and_predicts_on_token_ids(task):
    model = tiny_task(task, **{"BertClassifier": {"num_classes": 2}, "BertTokenClassifier": {"num_classes": 3}}.get(
        task, {}))
    x = random_inputs(4, 8, 60)
    if task == "BertMaskedLM":
        x["mask_positions"] = np.array([[1, 2]] * 4, "int32")
    if task == "BertTextEmbedder":  # (its own fit takes texts; on features, a loss of one's own)
        model.compile(loss=keras.losses.CosineSimilarity())
    history = model.fit(x, labels(task, np.random.default_rng(0)), batch_size=2, verbose=0)
    assert np.isfinite(history.history["loss"]).all()
    assert all(np.isfinite(v).all() for v in keras.tree.flatten(model.predict(x, verbose=0)))


def test_raw_text_tf_data_and_export_are_refused_naming_tensorflow(minilm_dir, tmp_path):
    model = tiny_task("BertClassifier", num_classes=2)
    with pytest.raises(ImportError, match="TensorFlow is not installed.*pip install"):
        model.predict(["a fine film"])
    with pytest.raises(ImportError, match="TensorFlow is not installed.*pip install"):
        kbert.BertTokenizer.from_preset(minilm_dir)
    with pytest.raises(ImportError, match="TensorFlow is not installed.*pip install"):
        kbert.text.pretraining_dataset(str(tmp_path))
    with pytest.raises(ImportError, match="TensorFlow is not installed.*pip install"):
        kbert.text.train_wordpiece_vocabulary(["a fine film"], vocabulary_size=100)
    with pytest.raises(ImportError, match=r"export writes a TensorFlow SavedModel\. TensorFlow is not installed\..*"
                                          r'pip install "tensorflow>=2\.20,<2\.22" "tensorflow-text>=2\.20,<2\.22"'):
        model.export(str(tmp_path / "saved_model"))


def test_search_and_metrics_run_without_tensorflow():
    embeddings = np.eye(3, 4, dtype="float32")
    scores, ids = kbert.search.semantic_search(embeddings[:1], embeddings, top_k=2)
    assert ids[0][0] == 0
    assert metrics.squad_metrics(["Jane Austen"], [["Jane Austen"]])["exact_match"] == 100.0
    assert metrics.spearman([1, 2, 3], [1, 2, 3]) == pytest.approx(1.0)
    assert metrics.entity_f1([["B-PER", "I-PER", "O"]], [["B-PER", "I-PER", "B-LOC"]])["recall"] == 1.0
