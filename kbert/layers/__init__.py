"""BERT's building blocks, in pure `keras.ops` (TensorFlow, JAX, PyTorch)."""

from kbert.layers.dropout import Dropout
from kbert.layers.masked_lm_head import MaskedLMHead
from kbert.layers.position_embedding import PositionEmbedding
from kbert.layers.transformer_encoder import TransformerEncoder
