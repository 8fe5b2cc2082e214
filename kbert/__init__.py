"""kbert: BERT for Keras 3."""

from kbert import presets
