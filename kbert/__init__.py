"""kbert: BERT for Keras 3."""

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
from kbert.plots import plot_attention, plot_confusion_matrix, plot_history
from kbert.text import BertPreprocessor, BertTokenizer
