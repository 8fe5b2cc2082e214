"""kbert: BERT for Keras 3."""

import importlib

from kbert import layers, presets, serving, text, training
from kbert.models import (
    BertBackbone,
    BertClassifier,
    BertMaskedLM,
    BertPretrainer,
    BertQuestionAnswerer,
    BertTextEmbedder,
    BertTokenClassifier,
)
from kbert.text import BertPreprocessor, BertTokenizer

_PLOTS = ("plot_attention", "plot_confusion_matrix", "plot_history")


def __getattr__(name):
    # The plots load on first use: they need matplotlib, which a runtime may
    # lack (Colab's TPU runtime after the README's --no-deps install), and
    # nothing else in kbert does.
    if name not in _PLOTS:
        raise AttributeError(f"module 'kbert' has no attribute {name!r}")
    try:
        plots = importlib.import_module("kbert.plots")
    except ModuleNotFoundError as e:
        if (e.name or "").partition(".")[0] != "matplotlib":
            raise
        raise ModuleNotFoundError(f"kbert.{name} draws with matplotlib, which is not installed: "
                                  "`pip install matplotlib`.", name="matplotlib") from None
    return getattr(plots, name)


def __dir__():
    return sorted([*globals(), *_PLOTS])
