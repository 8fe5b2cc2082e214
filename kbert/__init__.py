"""kbert: BERT for Keras 3."""

from kbert import layers, presets, serving, text
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
