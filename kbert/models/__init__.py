"""BertBackbone and the task models built on it."""

from kbert.models.bert_backbone import BertBackbone
from kbert.models.bert_classifier import BertClassifier
from kbert.models.bert_text_embedder import BertTextEmbedder
