import keras

from kbert import families
from kbert.layers import DisentangledEncoder, Dropout, LayerNorm, RelativeEmbedding, TokenEmbedding
from kbert.layers.disentangled_encoder import POSITION_ATTENTION
from kbert.layers.relative_embedding import check_relative_positions
from kbert.models.bert_backbone import BertBackbone, _inputs, bert_initializer


@keras.saving.register_keras_serializable(package="kbert")
class DebertaV2Backbone(BertBackbone):
    """DeBERTa-v2/v3's encoder (He et al. 2021; 2023) as a functional Keras
    model, with `BertBackbone`'s inputs, outputs and methods, so that every
    task model, preset and export takes it.

    Token embeddings and a LayerNorm, with no position table and no token
    types (DeBERTa-v3's `position_biased_input=false`, `type_vocab_size=0`:
    the `segment_ids` input is read by nothing); then `num_layers` post-LN
    `DisentangledEncoder` blocks, whose attention adds content-to-position
    and position-to-content terms read from one relative-position table
    (`RelativeEmbedding`, layer-normalised, in `position_buckets` log
    buckets on each side up to `max_relative_positions`). No pooler:
    `pooled_output` is the first token's output (the classifier's own head,
    transformers' `ContextPooler`, reads it).

    Args:
        vocabulary_size: number of tokens.
        num_layers: number of encoder blocks.
        num_heads: attention heads per block.
        hidden_dim: width of the model.
        intermediate_dim: width of the feed-forward layers.
        dropout: dropout rate everywhere (embeddings, attention, residuals,
            the relative table).
        max_sequence_length: the longest input the model was trained on
            (the preprocessor's limit; relative positions have no table of
            absolute ones).
        activation: `"gelu"` (exact) or `"gelu_approximate"`.
        layer_norm_epsilon: LayerNorm epsilon (DeBERTa's: 1e-7).
        position_buckets: log buckets of relative distance on each side
            (DeBERTa-v3: 256); 0: none, distances clamped at
            `max_relative_positions`.
        max_relative_positions: the farthest distance the buckets tell apart.
        position_attention: the position terms of the attention, among
            `"c2p"` and `"p2c"` (transformers' `pos_att_type`).
        normalize_relative_embeddings: whether the relative table is
            layer-normalised (transformers' `norm_rel_ebd="layer_norm"`).
        family: `"deberta-v2"` (DeBERTa-v3 checkpoints say so).
        packing: rows of several sequences, as `BertBackbone`'s (attention
            stays within each; relative distances need no restart).
        dtype: as `BertBackbone`'s.

    Example:
    >>> backbone = DebertaV2Backbone(vocabulary_size=100, num_layers=2, num_heads=2, hidden_dim=32,
    ...                              intermediate_dim=64, position_buckets=8, max_relative_positions=64)
    >>> outputs = backbone({"token_ids": np.array([[1, 7, 9, 2, 0]]), "segment_ids": np.zeros((1, 5), "int32"),
    ...                     "padding_mask": np.array([[1, 1, 1, 1, 0]])})
    >>> outputs["sequence_output"].shape, outputs["pooled_output"].shape
    ((1, 5, 32), (1, 32))
    """

    def __init__(
        self,
        vocabulary_size,
        num_layers,
        num_heads,
        hidden_dim,
        intermediate_dim,
        dropout=0.1,
        max_sequence_length=512,
        activation="gelu",
        layer_norm_epsilon=1e-7,
        position_buckets=256,
        max_relative_positions=512,
        position_attention=POSITION_ATTENTION,
        normalize_relative_embeddings=True,
        family="deberta-v2",
        packing=False,
        dtype=None,
        **kwargs,
    ):
        _check_settings(family, position_buckets, max_relative_positions, dtype)
        position_attention = tuple(position_attention)
        token_embedding = TokenEmbedding(vocabulary_size, hidden_dim, embeddings_initializer=bert_initializer(),
                                         dtype=dtype, name="token_embedding")
        embeddings_layer_norm = LayerNorm(epsilon=layer_norm_epsilon, dtype=dtype, name="embeddings_layer_norm")
        embeddings_dropout = Dropout(dropout, dtype=dtype, name="embeddings_dropout")
        relative_embedding = RelativeEmbedding(
            position_buckets or max_relative_positions, layer_norm=normalize_relative_embeddings,
            layer_norm_epsilon=layer_norm_epsilon, embeddings_initializer=bert_initializer(), dtype=dtype,
            name="relative_embedding",
        )
        transformer_layers = [
            DisentangledEncoder(
                num_heads=num_heads,
                intermediate_dim=intermediate_dim,
                position_buckets=position_buckets,
                max_relative_positions=max_relative_positions,
                position_attention=position_attention,
                dropout=dropout,
                activation=activation,
                layer_norm_epsilon=layer_norm_epsilon,
                kernel_initializer=bert_initializer(),
                dtype=dtype,
                name=f"transformer_layer_{i}",
            )
            for i in range(num_layers)
        ]

        # === Functional model ===
        inputs, packed = _inputs(packing)
        padding_mask = inputs["padding_mask"]
        tokens = token_embedding(inputs["token_ids"])
        # Padding reads its row but does not train it (transformers' padding_idx), as BertBackbone's.
        tokens = keras.ops.where(keras.ops.expand_dims(padding_mask, -1) > 0, tokens, keras.ops.stop_gradient(tokens))
        x = embeddings_dropout(embeddings_layer_norm(tokens))
        relative_embeddings = relative_embedding(x)
        hidden_states = [x]
        for layer in transformer_layers:
            x = layer(x, relative_embeddings=relative_embeddings, padding_mask=padding_mask, **packed)
            hidden_states.append(x)
        super(BertBackbone, self).__init__(
            inputs=inputs, outputs={"sequence_output": x, "pooled_output": x[:, 0, :]}, **kwargs
        )
        if token_embedding.dtype_policy.quantization_mode is None:
            self.dtype_policy = token_embedding.dtype_policy

        # === Config ===
        self.vocabulary_size = vocabulary_size
        self.num_layers = num_layers
        self.num_heads = num_heads
        self.hidden_dim = hidden_dim
        self.intermediate_dim = intermediate_dim
        self.dropout = dropout
        self.max_sequence_length = max_sequence_length
        self.activation = activation
        self.layer_norm_epsilon = layer_norm_epsilon
        self.position_buckets = position_buckets
        self.max_relative_positions = max_relative_positions
        self.position_attention = position_attention
        self.normalize_relative_embeddings = bool(normalize_relative_embeddings)
        self.family = family
        self.packing = bool(packing)
        # What BertBackbone's readers ask of any backbone: no token types, absolute positions or pooler here.
        self.num_segments, self.position_offset, self.embedding_dim = 0, 0, None

        # === Layers, by what they are (the checkpoint import maps onto these) ===
        self.token_embedding = token_embedding
        self.embeddings_layer_norm = embeddings_layer_norm
        self.relative_embedding = relative_embedding
        self.transformer_layers = transformer_layers
        self.segment_embedding = self.position_embedding = self.embeddings_projection = self.pooled_dense = None
        self._hidden_states = hidden_states
        self._relative_embeddings = relative_embeddings
        self.lora_rank, self.lora_layer_names = None, ()

    def pooled_output_model(self, first_token_only=True, pool=True):
        """A model sharing these weights that outputs only the first token's
        output (there is no pooler: `pool` changes nothing), running the last
        block for that token alone, as `BertBackbone`'s."""
        packed = {"sequence_ids": self.input["sequence_ids"]} if self.packing else {}
        if not self.num_layers or not first_token_only:
            pooled = self._hidden_states[-1][:, 0, :]
        else:
            first = self.transformer_layers[-1](
                self._hidden_states[-2], relative_embeddings=self._relative_embeddings,
                padding_mask=self.input["padding_mask"], first_token_only=True, **packed,
            )
            pooled = first[:, 0, :]
        return _PooledDebertaV2(inputs=self.input, outputs=pooled, name=self.name)

    def attention_scores(self, inputs, layer_index):
        """Attention probabilities `[batch, num_heads, length, length]` of one
        encoder block for a batch of inputs (a dict as for `call`)."""
        if not -self.num_layers <= layer_index < self.num_layers:
            raise ValueError(f"layer_index {layer_index} is out of range for a backbone of {self.num_layers} layers.")
        layer_index %= self.num_layers
        hidden = self.with_hidden_states()(inputs)["hidden_states"][layer_index]
        packed = {"sequence_ids": inputs["sequence_ids"]} if self.packing else {}
        _, scores = self.transformer_layers[layer_index](
            hidden, relative_embeddings=self.relative_embedding(hidden), padding_mask=inputs["padding_mask"],
            return_attention_scores=True, **packed,
        )
        return scores

    def get_config(self):
        return {
            "name": self.name,
            "trainable": self.trainable,
            "vocabulary_size": self.vocabulary_size,
            "num_layers": self.num_layers,
            "num_heads": self.num_heads,
            "hidden_dim": self.hidden_dim,
            "intermediate_dim": self.intermediate_dim,
            "dropout": self.dropout,
            "max_sequence_length": self.max_sequence_length,
            "activation": self.activation,
            "layer_norm_epsilon": self.layer_norm_epsilon,
            "position_buckets": self.position_buckets,
            "max_relative_positions": self.max_relative_positions,
            "position_attention": list(self.position_attention),
            "normalize_relative_embeddings": self.normalize_relative_embeddings,
            "family": self.family,
            "packing": self.packing,
            "dtype": keras.dtype_policies.serialize(self.token_embedding.dtype_policy),
            **self.lora_config(),
        }


def _check_settings(family, position_buckets, max_relative_positions, dtype):
    if families.get(family).backbone != "DebertaV2Backbone":
        raise ValueError(f"A {family!r} backbone is a kbert.{families.get(family).backbone}; DebertaV2Backbone builds "
                         "deberta-v2.")
    check_relative_positions(position_buckets, max_relative_positions)
    if dtype == "auto":
        raise ValueError('dtype="auto" is resolved before a model is built: use from_preset(..., dtype="auto").')


# As BertBackbone's: a model of the backbone's class name, so that a
# classifier built on `pooled_output_model()` saves its weights under the
# same paths as one built on the backbone.
_PooledDebertaV2 = type("DebertaV2Backbone", (keras.Model,), {})
