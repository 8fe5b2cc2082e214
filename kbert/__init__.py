"""kbert: BERT for Keras 3."""

import os as _os
import sys as _sys

# TensorFlow's oneDNN kernels run BERT faster on CPUs where
# TensorFlow leaves them off (those without AVX-512 VNNI, BF16 or AMX;
# docs/benchmarks.md, "oneDNN"). TensorFlow reads the switch as it loads: set
# it here, as the `kbert` command does, unless the user chose (=0 wins); if
# TensorFlow is loaded already, say how.
if "tensorflow" not in _sys.modules:
    _os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")
else:
    from kbert.backend.onednn import warn_if_tensorflow_runs_without_onednn

    warn_if_tensorflow_runs_without_onednn()

from kbert import layers, metrics, presets, search, serving, text, training
from kbert.models import (
    Backbone,
    BertBackbone,
    BertClassifier,
    BertMaskedLM,
    BertPretrainer,
    BertQuestionAnswerer,
    BertTextEmbedder,
    BertTokenClassifier,
    DebertaV2Backbone,
    MaskedLM,
    ModernBertBackbone,
    QuestionAnswerer,
    TextClassifier,
    TextEmbedder,
    TokenClassifier,
)
from kbert.plots import plot_attention, plot_confusion_matrix, plot_history

# The text names are read from kbert.text at their first use (PEP 562), so that
# `import kbert` loads no TensorFlow on JAX and PyTorch (`kbert.tf_if_present`).
_TEXT = (
    "MaskedLMPreprocessor",
    "Preprocessor",
    "QuestionAnswererPreprocessor",
    "TextClassifierPreprocessor",
    "TextEmbedderPreprocessor",
    "TokenClassifierPreprocessor",
    "WordPieceTokenizer",
    "BertClassifierPreprocessor",
    "BertMaskedLMPreprocessor",
    "BertPreprocessor",
    "BertPretrainerPreprocessor",
    "BertQuestionAnswererPreprocessor",
    "BertTextEmbedderPreprocessor",
    "BertTokenClassifierPreprocessor",
    "BertTokenizer",
)


def __getattr__(name):
    if name not in _TEXT:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(text, name)


def __dir__():
    return sorted({*globals(), *_TEXT})
