"""Exports work on the TensorFlow Serving releases there are, not only on the
TensorFlow that wrote them. TF Serving 2.20 links TensorFlow 2.20.0 and
tensorflow-text 2.20.0; TF Serving 2.12 to 2.19 link tensorflow-text 2.12.1.

The first test loads a fresh export with TensorFlow 2.20.0 and tensorflow-text
2.20.0, in the virtual environment `make compat-env` creates; the second
checks that every tensorflow-text op of an export is one that 2.12.1 registers.
"""

import json
import os
import subprocess
from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf
from tensorflow.core.protobuf import saved_model_pb2

import kbert

ROOT = Path(__file__).resolve().parents[2]
SERVING_2_20_PYTHON = ROOT / ".venv-tf220" / "bin" / "python"
TF_TEXT_2_12_1_OPS = Path(__file__).with_name("tensorflow_text_2.12.1_ops.txt")

TEXTS = ["a wonderful, moving film", "Ein Film — café, 東京 🙂", "", "word " * 300]
QUESTIONS = ["When was it published?", "Where is the café?"]
CONTEXTS = ["Pride and Prejudice, written in 1796-97, was published in 1813.",
            "The Café Müller stands next to 東京タワー, close to the İstanbul bakery."]

pytestmark = pytest.mark.skipif(
    keras.backend.backend() != "tensorflow",
    reason="runs once, in the tensorflow pass: an export is TensorFlow's whatever the backend",
)

# Run by TF Serving 2.20's TensorFlow: it imports only what a model server has.
SERVE = r"""
import json, sys
import tensorflow as tf
import tensorflow_text  # noqa: F401  (registers the ops the graph uses)
answers = {}
for name, (path, inputs) in json.loads(sys.stdin.read()).items():
    outputs = tf.saved_model.load(path).signatures["serving_default"](
        **{k: tf.constant(v) for k, v in inputs.items()})
    answers[name] = {k: v.numpy().tolist() if v.dtype != tf.string else tf.nest.map_structure(
        lambda s: s.decode("utf-8", "replace"), v.numpy().tolist()) for k, v in outputs.items()}
answers["versions"] = [tf.__version__, tensorflow_text.__version__]
answers["kbert_imported"] = "kbert" in sys.modules
print(json.dumps(answers))
"""


def serve_here(path, inputs):
    """The same request, answered by this environment's TensorFlow."""
    outputs = tf.saved_model.load(path).signatures["serving_default"](**{k: tf.constant(v) for k, v in inputs.items()})
    return {k: v.numpy() for k, v in outputs.items()}


@pytest.fixture(scope="module")
def serving_2_20_python():
    """The interpreter of `.venv-tf220`; requested before `exports` (in the
    same scope, so set up first), so that a skip costs no export."""
    if SERVING_2_20_PYTHON.exists():
        return str(SERVING_2_20_PYTHON)
    reason = f"{SERVING_2_20_PYTHON} does not exist: `make compat-env` creates it (TensorFlow 2.20.0, tensorflow-text 2.20.0)"
    if os.environ.get("CI"):
        pytest.fail(f"{reason}; CI must run this test, and .ci/run makes it first.")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def exports(minilm_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("saved_models")
    preprocessor = kbert.BertPreprocessor.from_preset(minilm_dir, sequence_length=32)

    def backbone():
        return kbert.BertBackbone(vocabulary_size=30522, num_layers=1, num_heads=2, hidden_dim=16,
                                  intermediate_dim=32, max_sequence_length=64, dropout=0.0)

    classifier = kbert.BertClassifier(backbone(), 2, preprocessor, class_names=["negative", "positive"])
    qa = kbert.BertQuestionAnswerer(backbone(), preprocessor, stride=8, max_question_length=12, max_answer_length=6)
    classifier.fit(TEXTS, [1, 0, 1, 0], epochs=1, verbose=0)  # what users export is a fitted model
    return {
        "classifier": (classifier.export(str(root / "classifier")), {"text": TEXTS}),
        "qa": (qa.export(str(root / "qa")), {"question": QUESTIONS, "context": CONTEXTS}),
    }


def test_export_answers_alike_under_tf_serving_2_20_versions(serving_2_20_python, exports):
    result = subprocess.run([serving_2_20_python, "-c", SERVE], input=json.dumps(exports), capture_output=True, text=True,
                            env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    served = json.loads(result.stdout.strip().splitlines()[-1])
    assert served.pop("versions") == ["2.20.0", "2.20.0"]
    assert served.pop("kbert_imported") is False
    for name, (path, inputs) in exports.items():
        here = serve_here(path, inputs)
        assert set(served[name]) == set(here), name
        for key, value in here.items():
            if value.dtype == object:
                assert served[name][key] == tf.nest.map_structure(lambda s: s.decode("utf-8", "replace"),
                                                                  value.tolist()), f"{name}: {key}"
            else:
                np.testing.assert_allclose(served[name][key], value, atol=1e-5, err_msg=f"{name}: {key}")


def graph_ops(path):
    """The op types a SavedModel's graphs run, its functions' bodies included."""
    saved_model = saved_model_pb2.SavedModel()
    saved_model.ParseFromString((Path(path) / "saved_model.pb").read_bytes())
    ops = set()
    for meta_graph in saved_model.meta_graphs:
        library = meta_graph.graph_def.library.function
        ops |= {node.op for node in meta_graph.graph_def.node}
        ops |= {node.op for function in library for node in function.node_def}
        ops -= {function.signature.name for function in library}  # calls of the graph's own functions
    return ops


def test_export_uses_only_tensorflow_text_ops_of_tf_serving_2_12_to_2_19(exports):
    known = {line.strip() for line in TF_TEXT_2_12_1_OPS.read_text().splitlines() if not line.startswith("#")}
    # tf.raw_ops lists TensorFlow's own ops; what else a graph runs comes from tensorflow-text.
    text_ops = set().union(*(graph_ops(path) for path, _ in exports.values())) - set(dir(tf.raw_ops))
    assert "FastWordpieceTokenizeWithOffsets" in text_ops  # the walk sees the tokenizer
    missing = sorted(text_ops - known)
    assert not missing, (
        f"The exports use tensorflow-text ops that tensorflow-text 2.12.1 (linked by TF Serving 2.12 to 2.19) "
        f"lacks: {missing}. Such exports load only on TF Serving 2.20: build the graph from older ops, or "
        "say so in the README."
    )
