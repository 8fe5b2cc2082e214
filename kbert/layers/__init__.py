"""BERT's building blocks, in `keras.ops` plus the few `kbert.backend`
primitives whose fastest form differs by backend (TensorFlow, JAX, PyTorch)."""

from kbert.layers.disentangled_encoder import DisentangledEncoder
from kbert.layers.dropout import Dropout
from kbert.layers.layer_norm import LayerNorm
from kbert.layers.masked_lm_head import MaskedLMHead
from kbert.layers.position_embedding import PositionEmbedding
from kbert.layers.prediction_head import PredictionHead
from kbert.layers.relative_embedding import RelativeEmbedding
from kbert.layers.rotary_embedding import RotaryEmbedding
from kbert.layers.rotary_encoder import RotaryEncoder
from kbert.layers.token_embedding import TokenEmbedding
from kbert.layers.transformer_encoder import TransformerEncoder
