"""kbert: BERT for Keras 3."""

from kbert import layers, presets
from kbert.models import BertBackbone
