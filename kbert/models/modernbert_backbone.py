import keras

from kbert import families
from kbert.layers import Dropout, LayerNorm, RotaryEncoder, TokenEmbedding
from kbert.models.bert_backbone import BertBackbone, _inputs


def modernbert_initializer():
    # transformers' ModernBertPreTrainedModel._init_weights: a normal of
    # stddev 0.02 cut at two standard deviations.
    return keras.initializers.TruncatedNormal(stddev=0.02)


POOLINGS = ("cls", "mean")


@keras.saving.register_keras_serializable(package="kbert")
class ModernBertBackbone(BertBackbone):
    """ModernBERT's encoder (Warner et al. 2024) as a functional Keras model,
    with `BertBackbone`'s inputs, outputs and methods, so that every task
    model, preset and export takes it.

    Token embeddings, LayerNorm, then `num_layers` pre-LN `RotaryEncoder`
    blocks (rotary positions, no position table; a GeGLU feed-forward;
    local attention over `local_attention` tokens in all blocks but every
    `global_attention_every`-th, the first one included) and a final
    LayerNorm (§2.1). No token types: the `segment_ids` input is read by
    nothing. No pooler: `pooled_output` is the first token's output or the
    mean over real tokens (`pooling`, transformers' `classifier_pooling`).

    Args:
        vocabulary_size: number of tokens.
        num_layers: number of encoder blocks.
        num_heads: attention heads per block.
        hidden_dim: width of the model.
        intermediate_dim: width of the feed-forward's input and gate.
        dropout: dropout rate of the embeddings, attention and feed-forward
            (ModernBERT's checkpoints: 0).
        max_sequence_length: the longest input the model was trained on
            (the preprocessor's limit; rotary positions have no table).
        activation: the feed-forward's `"gelu"` or `"gelu_approximate"`.
        layer_norm_epsilon: LayerNorm epsilon.
        local_attention: the local blocks' window, in tokens (each token
            attends to those within half of it on either side).
        global_attention_every: every how many blocks one is global.
        global_rope_theta, local_rope_theta: the rotary base of the global
            and of the local blocks.
        attention_bias, feedforward_bias, norm_bias: whether the attention's
            and the feed-forward's dense layers, and the LayerNorms, have
            biases (ModernBERT's: none).
        head_bias, head_activation: the task heads' prediction head's dense
            bias and activation (`prediction_head_arguments`).
        pooling: `"cls"` or `"mean"`, what `pooled_output` is.
        family: `"modernbert"`.
        packing: rows of several sequences, as `BertBackbone`'s (attention
            within each, positions restarting).
        dtype: as `BertBackbone`'s.

    Example:
    >>> backbone = ModernBertBackbone(vocabulary_size=100, num_layers=3, num_heads=2, hidden_dim=32,
    ...                               intermediate_dim=48, local_attention=16)
    >>> outputs = backbone({"token_ids": np.array([[2, 7, 9, 3, 0]]), "segment_ids": np.zeros((1, 5), "int32"),
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
        dropout=0.0,
        max_sequence_length=8192,
        activation="gelu",
        layer_norm_epsilon=1e-5,
        local_attention=128,
        global_attention_every=3,
        global_rope_theta=160_000.0,
        local_rope_theta=10_000.0,
        attention_bias=False,
        feedforward_bias=False,
        norm_bias=False,
        head_bias=False,
        head_activation="gelu",
        pooling="cls",
        family="modernbert",
        packing=False,
        dtype=None,
        **kwargs,
    ):
        _check_settings(family, pooling, global_attention_every, dtype)
        token_embedding = TokenEmbedding(vocabulary_size, hidden_dim, embeddings_initializer=modernbert_initializer(),
                                         dtype=dtype, name="token_embedding")
        embeddings_layer_norm = LayerNorm(epsilon=layer_norm_epsilon, center=norm_bias, dtype=dtype,
                                          name="embeddings_layer_norm")
        embeddings_dropout = Dropout(dropout, dtype=dtype, name="embeddings_dropout")
        transformer_layers = []
        for i in range(num_layers):
            is_global = i % global_attention_every == 0  # transformers' layer_types: layer 0 is global
            transformer_layers.append(RotaryEncoder(
                num_heads=num_heads,
                intermediate_dim=intermediate_dim,
                local_attention=None if is_global else local_attention,
                rotary_theta=global_rope_theta if is_global else local_rope_theta,
                dropout=dropout,
                activation=activation,
                layer_norm_epsilon=layer_norm_epsilon,
                attention_norm=i > 0,  # the first block reads the normalized embeddings
                attention_bias=attention_bias,
                feedforward_bias=feedforward_bias,
                norm_bias=norm_bias,
                kernel_initializer=modernbert_initializer(),
                dtype=dtype,
                name=f"transformer_layer_{i}",
            ))
        final_layer_norm = LayerNorm(epsilon=layer_norm_epsilon, center=norm_bias, dtype=dtype,
                                     name="final_layer_norm")

        # === Functional model ===
        inputs, packed = _inputs(packing)
        padding_mask = inputs["padding_mask"]
        tokens = token_embedding(inputs["token_ids"])
        # Padding reads its row but does not train it (transformers' padding_idx), as BertBackbone's.
        tokens = keras.ops.where(keras.ops.expand_dims(padding_mask, -1) > 0, tokens, keras.ops.stop_gradient(tokens))
        x = embeddings_dropout(embeddings_layer_norm(tokens))
        hidden_states = [x]
        for layer in transformer_layers:
            x = layer(x, padding_mask=padding_mask, **packed)
            hidden_states.append(x)
        x = final_layer_norm(x)
        # (transformers' last hidden state is the final LayerNorm's output.)
        hidden_states[-1] = x
        # (Past BertBackbone's __init__, which builds BERT's graph, to LoRA's and keras.Model's.)
        super(BertBackbone, self).__init__(
            inputs=inputs, outputs={"sequence_output": x, "pooled_output": _pool(x, padding_mask, pooling)}, **kwargs
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
        self.local_attention = local_attention
        self.global_attention_every = global_attention_every
        self.global_rope_theta = float(global_rope_theta)
        self.local_rope_theta = float(local_rope_theta)
        self.attention_bias = bool(attention_bias)
        self.feedforward_bias = bool(feedforward_bias)
        self.norm_bias = bool(norm_bias)
        self.head_bias = bool(head_bias)
        self.head_activation = head_activation
        self.pooling = pooling
        self.family = family
        self.packing = bool(packing)
        # What BertBackbone's readers ask of any backbone: no token types, positions or pooler here.
        self.num_segments, self.position_offset, self.embedding_dim = 0, 0, None

        # === Layers, by what they are (the checkpoint import maps onto these) ===
        self.token_embedding = token_embedding
        self.embeddings_layer_norm = embeddings_layer_norm
        self.transformer_layers = transformer_layers
        self.final_layer_norm = final_layer_norm
        self.segment_embedding = self.position_embedding = self.embeddings_projection = self.pooled_dense = None
        self._hidden_states = hidden_states
        self.lora_rank, self.lora_layer_names = None, ()

    def prediction_head_arguments(self):
        """ModernBERT's task heads' prediction head (transformers'
        `ModernBertPredictionHead`): `classifier_activation`, its
        `classifier_bias` and `norm_bias`."""
        return {"activation": self.head_activation, "layer_norm_epsilon": self.layer_norm_epsilon,
                "use_bias": self.head_bias, "norm_bias": self.norm_bias}

    def pooled_output_model(self, first_token_only=True, pool=True):
        """A model sharing these weights that outputs only `pooled_output`
        (the first token's or the mean; there is no pooler to skip, so
        `pool` changes nothing, and every block runs whole)."""
        return _PooledModernBert(inputs=self.input, outputs=self.output["pooled_output"], name=self.name)

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
            "local_attention": self.local_attention,
            "global_attention_every": self.global_attention_every,
            "global_rope_theta": self.global_rope_theta,
            "local_rope_theta": self.local_rope_theta,
            "attention_bias": self.attention_bias,
            "feedforward_bias": self.feedforward_bias,
            "norm_bias": self.norm_bias,
            "head_bias": self.head_bias,
            "head_activation": self.head_activation,
            "pooling": self.pooling,
            "family": self.family,
            "packing": self.packing,
            "dtype": keras.dtype_policies.serialize(self.token_embedding.dtype_policy),
            **self.lora_config(),
        }


def _check_settings(family, pooling, global_attention_every, dtype):
    if families.get(family).backbone != "ModernBertBackbone":
        raise ValueError(f"A {family!r} backbone is a kbert.{families.get(family).backbone}; ModernBertBackbone builds "
                         "modernbert.")
    if pooling not in POOLINGS:
        raise ValueError(f'pooling={pooling!r}: "cls" (the first token) or "mean" (over real tokens).')
    if isinstance(global_attention_every, bool) or not isinstance(global_attention_every, int) \
            or global_attention_every < 1:
        raise ValueError(f"global_attention_every={global_attention_every!r}: a positive int (ModernBERT's: 3).")
    if dtype == "auto":
        raise ValueError('dtype="auto" is resolved before a model is built: use from_preset(..., dtype="auto").')


def _pool(sequence_output, padding_mask, pooling):
    if pooling == "cls":
        return sequence_output[:, 0, :]
    # transformers' ModernBertForSequenceClassification: the mean over real tokens.
    mask = keras.ops.cast(padding_mask, sequence_output.dtype)[:, :, None]
    return keras.ops.sum(sequence_output * mask, axis=1) / keras.ops.sum(mask, axis=1)


# As BertBackbone's: a model of the backbone's class name, so that a
# classifier built on `pooled_output_model()` saves its weights under the
# same paths as one built on the backbone.
_PooledModernBert = type("ModernBertBackbone", (keras.Model,), {})
