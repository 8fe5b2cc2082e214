"""BertBackbone and the task models built on it."""

from kbert.models.bert_backbone import BertBackbone
