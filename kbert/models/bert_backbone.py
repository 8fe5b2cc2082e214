import keras

from kbert.aliases import also_named
from kbert import families
from kbert.layers import Dropout, LayerNorm, PositionEmbedding, TokenEmbedding, TransformerEncoder
from kbert.models.backbone_lora import LoRA
from kbert.presets import loading, reader, to_transformers
from kbert.training.precision import resolve_dtype


def bert_initializer():
    # BERT §A.2 / the reference code: truncated normal with stddev 0.02.
    return keras.initializers.TruncatedNormal(stddev=0.02)


def head_initializer():
    """A fine-tuning head's kernel: normal with stddev 0.02, untruncated, as
    transformers' `_init_weights` draws it (BERT's truncated normal, cut at
    two standard deviations, has a standard deviation of 0.0176). Short runs
    are sensitive to it: with this one, short NER runs fail less often and
    end nearer transformers' (docs/finetuning.md)."""
    return keras.initializers.RandomNormal(stddev=0.02)


@keras.saving.register_keras_serializable(package="kbert")
class BertBackbone(LoRA, keras.Model):
    """BERT's encoder (Devlin et al. 2019) as a functional Keras model.

    WordPiece token, learned position and segment embeddings are summed and
    layer-normalised (§3, Figure 2), then run through `num_layers` post-LN
    `TransformerEncoder` blocks; the pooler is a tanh dense layer on the
    final [CLS] vector (§3, used for classification).

    Args:
        vocabulary_size: number of WordPiece tokens.
        num_layers: number of encoder blocks.
        num_heads: attention heads per block.
        hidden_dim: width of the model.
        intermediate_dim: width of the feed-forward layers.
        dropout: dropout rate everywhere (embeddings, attention, residuals).
        max_sequence_length: the longest input (size of the position table).
        num_segments: number of segment (token type) ids; 0 for none
            (DistilBERT: the `segment_ids` input is then read by nothing).
        activation: `"gelu"` (exact erf GELU, BERT's) or `"gelu_approximate"`.
        layer_norm_epsilon: LayerNorm epsilon (BERT: 1e-12).
        position_offset: rows of the position table before the first
            position's (RoBERTa: 2, after its padding index).
        embedding_dim: width of the embeddings where it is not `hidden_dim`
            (ELECTRA): they are projected to `hidden_dim` by a dense layer.
        family: the checkpoint family (`kbert.families`: `"bert"`,
            `"roberta"`, `"xlm-roberta"`, ...): its weight names and heads.
        packing: whether rows hold several sequences packed together
            (Krell et al. 2021), with a `sequence_ids` input: attention stays
            within each sequence and positions restart at each one's start,
            so each sequence gets the outputs it gets alone, with no padding
            between them. Not part of the architecture: a preset's weights
            load either way (`from_preset(..., packing=True)`).
        dtype: dtype or dtype policy of the layers, e.g. `"mixed_bfloat16"`;
            `"auto"`: `"mixed_bfloat16"` where the machine multiplies in
            bfloat16 fast (Ampere+ GPUs, TPUs, AMX or AVX512-BF16 CPUs except
            under JAX), else float32. The default, `None`, is Keras' global policy (float32
            unless set), which matches reference checkpoints to ~1e-6.

    Inputs: a dict of int tensors `[batch, length]` (any length up to
    `max_sequence_length`): `token_ids`, `segment_ids`, `padding_mask`
    (1 on real tokens, 0 on padding); with `packing=True` also
    `sequence_ids` (1, 2, ... on each packed sequence's tokens in turn, 0 on
    padding; see `kbert.text.pack_sequences`).

    Outputs: a dict with `sequence_output` `[batch, length, hidden_dim]` and
    `pooled_output` `[batch, hidden_dim]`. `with_hidden_states()` gives a
    model that also returns every layer's hidden states.

    Example:
    >>> backbone = BertBackbone(vocabulary_size=100, num_layers=2, num_heads=2,
    ...                         hidden_dim=16, intermediate_dim=32)
    >>> outputs = backbone({
    ...     "token_ids": np.array([[2, 7, 9, 3, 0]]),
    ...     "segment_ids": np.zeros((1, 5), "int32"),
    ...     "padding_mask": np.array([[1, 1, 1, 1, 0]]),
    ... })
    >>> outputs["sequence_output"].shape, outputs["pooled_output"].shape
    ((1, 5, 16), (1, 16))
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
        num_segments=2,
        activation="gelu",
        layer_norm_epsilon=1e-12,
        position_offset=0,
        embedding_dim=None,
        family="bert",
        packing=False,
        dtype=None,
        **kwargs,
    ):
        _check_settings(family, num_segments, position_offset, dtype)
        embeddings = _embedding_layers(vocabulary_size, embedding_dim or hidden_dim, hidden_dim, max_sequence_length,
                                       num_segments, position_offset, layer_norm_epsilon, dropout, dtype)
        transformer_layers = [
            TransformerEncoder(
                num_heads=num_heads,
                intermediate_dim=intermediate_dim,
                dropout=dropout,
                activation=activation,
                layer_norm_epsilon=layer_norm_epsilon,
                kernel_initializer=bert_initializer(),
                dtype=dtype,
                name=f"transformer_layer_{i}",
            )
            for i in range(num_layers)
        ]
        pooled_dense = keras.layers.Dense(
            hidden_dim, activation="tanh", kernel_initializer=bert_initializer(),
            dtype=dtype, name="pooled_dense",
        )

        # === Functional model ===
        inputs, packed = _inputs(packing)
        x = _embed(embeddings, inputs["token_ids"], inputs["segment_ids"], inputs["padding_mask"], packed)
        hidden_states = [x]
        for layer in transformer_layers:
            x = layer(x, padding_mask=inputs["padding_mask"], **packed)
            hidden_states.append(x)
        pooled_output = pooled_dense(x[:, 0, :])

        super().__init__(
            inputs=inputs,
            outputs={"sequence_output": x, "pooled_output": pooled_output},
            **kwargs,
        )
        # Keras' functional model takes no `dtype` (its own policy stays the
        # global one, float32, over mixed_bfloat16 layers): it reports the
        # policy its layers run.
        if embeddings["token_embedding"].dtype_policy.quantization_mode is None:
            self.dtype_policy = embeddings["token_embedding"].dtype_policy

        # === Config ===
        self.vocabulary_size = vocabulary_size
        self.num_layers = num_layers
        self.num_heads = num_heads
        self.hidden_dim = hidden_dim
        self.intermediate_dim = intermediate_dim
        self.dropout = dropout
        self.max_sequence_length = max_sequence_length
        self.num_segments = num_segments
        self.activation = activation
        self.layer_norm_epsilon = layer_norm_epsilon
        self.position_offset, self.embedding_dim, self.family = position_offset, embedding_dim, family
        self.packing = bool(packing)

        # === Layers, by what they are (the checkpoint import maps onto these) ===
        self.token_embedding = embeddings["token_embedding"]
        self.segment_embedding = embeddings["segment_embedding"]
        self.embeddings_projection = embeddings["embeddings_projection"]
        self.position_embedding = embeddings["position_embedding"]
        self.embeddings_layer_norm = embeddings["embeddings_layer_norm"]
        self.transformer_layers = transformer_layers
        self.pooled_dense = pooled_dense
        self._hidden_states = hidden_states
        self.lora_rank, self.lora_layer_names = None, ()

    def with_hidden_states(self):
        """A model sharing these weights that also outputs `hidden_states`.

        `hidden_states` is a list of `num_layers + 1` tensors
        `[batch, length, hidden_dim]`: the embeddings, then each encoder
        block's output (BERT §5.3, feature-based use).
        """
        return keras.Model(
            inputs=self.input,
            outputs={
                "sequence_output": self._hidden_states[-1],
                "pooled_output": self.output["pooled_output"],
                "hidden_states": list(self._hidden_states),
            },
            name=f"{self.name}_with_hidden_states",
        )

    def pooled_output_model(self, first_token_only=True, pool=True):
        """A model sharing these weights that outputs only `pooled_output`.

        The pooler reads the last block's output at [CLS] alone, so this
        model runs the last block for that position only: keys and values
        for every token, queries, attention output, residual, LayerNorm and
        feed-forward for [CLS]. The same values and weight gradients as the
        backbone's `pooled_output` (within float rounding), with about
        `1 / num_layers` less work, forward and backward. The sentence
        classifier is built on it; the backbone itself still gives the whole
        `sequence_output` to whoever calls it.

        It carries the backbone's name and holds the same layers, so a model
        built on it saves its weights under the same paths as one built on
        the backbone (weight files stay loadable either way).

        Args:
            first_token_only: `False` runs the whole last block (the same
                values, more work), e.g. to measure what the default saves.
            pool: `False` outputs the first token's vector without the pooler
                (RoBERTa's and ELECTRA's classification heads read it).
        """
        if not self.num_layers or not first_token_only:
            pooled = self.output["pooled_output"] if pool else self._hidden_states[-1][:, 0, :]
        else:
            packed = {"sequence_ids": self.input["sequence_ids"]} if self.packing else {}
            first = self.transformer_layers[-1](
                self._hidden_states[-2], padding_mask=self.input["padding_mask"], first_token_only=True, **packed
            )
            pooled = self.pooled_dense(first[:, 0, :]) if pool else first[:, 0, :]
        return _PooledBackbone(inputs=self.input, outputs=pooled, name=self.name)

    def attention_scores(self, inputs, layer_index):
        """Attention probabilities `[batch, num_heads, length, length]` of one
        encoder block for a batch of inputs (a dict as for `call`)."""
        if not -self.num_layers <= layer_index < self.num_layers:
            raise ValueError(
                f"layer_index {layer_index} is out of range for a backbone of {self.num_layers} layers."
            )
        layer_index %= self.num_layers
        hidden = self.with_hidden_states()(inputs)["hidden_states"][layer_index]
        packed = {"sequence_ids": inputs["sequence_ids"]} if self.packing else {}
        _, scores = self.transformer_layers[layer_index](
            hidden, padding_mask=inputs["padding_mask"], return_attention_scores=True, **packed
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
            "num_segments": self.num_segments,
            "activation": self.activation,
            "layer_norm_epsilon": self.layer_norm_epsilon,
            "position_offset": self.position_offset,
            "embedding_dim": self.embedding_dim,
            "family": self.family,
            "packing": self.packing,
            "dtype": keras.dtype_policies.serialize(self.token_embedding.dtype_policy),
            **self.lora_config(),  # the adapters merged into the kernels saved with it
        }

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        if isinstance(config.get("dtype"), dict):
            config["dtype"] = keras.dtype_policies.deserialize(config["dtype"])
        return cls(**config)

    @classmethod
    def from_preset(cls, preset, **kwargs):
        """Builds a backbone and loads its weights from a preset.

        Args:
            preset: a registered name (`kbert.presets.list_presets()`:
                `"tiny"`, ..., `"base"`, `"large"`, ...), a Hugging Face
                repository as `"hf://owner/name"`, or a local folder in Hugging
                Face's layout or kbert's (`save_to_preset`).
            **kwargs: overrides of the config, e.g. `dropout=0.0` or
                `dtype="mixed_bfloat16"` (not the architecture).

        Example:
        >>> backbone = kbert.BertBackbone.from_preset("base")
        """
        return loading.load_backbone(cls, reader.read_preset(preset), **kwargs)

    @classmethod
    def from_preset_config(cls, config):
        """A backbone from a preset's config, of its family's backbone class
        (`BertBackbone`, `ModernBertBackbone`: `kbert.families`), with its
        dtype resolved first (`dtype="auto"` chosen, a bfloat16 policy
        checked to run here)."""
        family = families.get(config.get("family", "bert"))
        built = keras.saving.get_registered_object(f"kbert>{family.backbone}")
        if not issubclass(built, cls):
            raise ValueError(f"This preset holds a {family.name} model, a kbert.{family.backbone}; "
                             f"{cls.__name__} cannot build it. Use kbert.{family.backbone}.from_preset.")
        return built.from_config({**config, "dtype": resolve_dtype(config.get("dtype"))})

    def prediction_head_arguments(self):
        """The settings of the transform (dense -> activation -> LayerNorm)
        that task heads read the sequence output through: BERT's masked-LM
        head's (`MaskedLMHead`, `PredictionHead` arguments)."""
        return {"activation": self.activation, "layer_norm_epsilon": self.layer_norm_epsilon}

    def save_to_preset(self, folder):
        """Writes the config and weights to `folder` in kbert's layout."""
        loading.save_backbone(self, folder)

    def export_to_transformers(self, path, dtype="float32"):
        """Writes a `transformers` `BertModel` (`RobertaModel`, ...) folder (`kbert.presets.to_transformers`)."""
        return to_transformers.export_to_transformers(self, path, dtype)

def _check_settings(family, num_segments, position_offset, dtype):
    """Refuses settings the family's checkpoints cannot have."""
    kind = families.get(family)  # refuses an unknown one
    if kind.backbone != "BertBackbone":
        raise ValueError(f"A {family!r} backbone is a kbert.{kind.backbone}, not a BertBackbone.")
    if bool(num_segments) != kind.token_types:
        raise ValueError(f"num_segments={num_segments} for a {family!r} backbone: "
                         + ("it has token types, so num_segments >= 1." if num_segments == 0 else
                            "it has no token type embeddings: num_segments=0."))
    if kind.positions_after_padding and position_offset < 1:
        raise ValueError(f"position_offset={position_offset} for a {family!r} backbone: its positions start "
                         "after the padding index, at pad_token_id + 1 (2 in RoBERTa's checkpoints).")
    if dtype == "auto":
        raise ValueError(
            'dtype="auto" is resolved before a model is built, so that a saved model holds the policy it ran '
            'with: use from_preset(..., dtype="auto"), or dtype=kbert.training.precision.resolve_dtype("auto").'
        )


def _embedding_layers(vocabulary_size, width, hidden_dim, max_sequence_length, num_segments, position_offset,
                      layer_norm_epsilon, dropout, dtype):
    """The embeddings' layers by name (None where the family has none):
    tokens, segments and positions of `width`, LayerNorm and dropout, and the
    projection to `hidden_dim` where that differs (ELECTRA's)."""
    return {
        # Casts the batch's rows to bfloat16, not the whole vocabulary table.
        "token_embedding": TokenEmbedding(vocabulary_size, width, embeddings_initializer=bert_initializer(),
                                          dtype=dtype, name="token_embedding"),
        "segment_embedding": keras.layers.Embedding(
            num_segments, width, embeddings_initializer=bert_initializer(), dtype=dtype, name="segment_embedding",
        ) if num_segments else None,
        "embeddings_projection": keras.layers.Dense(
            hidden_dim, kernel_initializer=bert_initializer(), dtype=dtype, name="embeddings_projection",
        ) if width != hidden_dim else None,
        "position_embedding": PositionEmbedding(max_sequence_length, initializer=bert_initializer(),
                                                offset=position_offset, dtype=dtype, name="position_embedding"),
        "embeddings_layer_norm": LayerNorm(epsilon=layer_norm_epsilon, dtype=dtype, name="embeddings_layer_norm"),
        "embeddings_dropout": Dropout(dropout, dtype=dtype, name="embeddings_dropout"),
    }


def _inputs(packing):
    """The backbone's named inputs, and those of packed rows alone."""
    inputs = {name: keras.Input(shape=(None,), dtype="int32", name=name)
              for name in ("token_ids", "segment_ids", "padding_mask")}
    packed = {}
    if packing:
        # Krell et al. 2021: block-diagonal attention and positions
        # restarting per sequence, both built in-graph from these ids.
        inputs["sequence_ids"] = packed["sequence_ids"] = keras.Input(shape=(None,), dtype="int32",
                                                                      name="sequence_ids")
    return inputs, packed


def _embed(layers, token_ids, segment_ids, padding_mask, packed):
    """BERT §3: token + segment + position embeddings, LayerNorm, dropout."""
    tokens = layers["token_embedding"](token_ids)
    # Padding positions read the [PAD] row but do not train it, as
    # transformers' `padding_idx`: a loss over every position (extractive
    # QA's softmax) would otherwise move that row on every step.
    tokens = keras.ops.where(keras.ops.expand_dims(padding_mask, -1) > 0, tokens, keras.ops.stop_gradient(tokens))
    # (In this order, which orders the optimizer's variables in saved models.)
    segments = layers["segment_embedding"]
    x = tokens + segments(segment_ids) if segments is not None else tokens
    x = x + layers["position_embedding"](tokens, **packed)
    x = layers["embeddings_dropout"](layers["embeddings_layer_norm"](x))
    if layers["embeddings_projection"] is not None:
        x = layers["embeddings_projection"](x)
    return x


# The family-neutral name (kbert.aliases). The class keeps its first name:
# a `.keras` file stores the weights of a task's backbone under it
# (`layers/bert_backbone/...`: Keras names a nested layer by its class).
Backbone = also_named(BertBackbone, "Backbone")


# Keras names a model's sublayers in weight files after their class
# (`layers/bert_backbone/...`); a class of the same name keeps the paths of a
# classifier built on `pooled_output_model()` equal to those of one built on
# the backbone itself, so weight files load across the two.
_PooledBackbone = type("BertBackbone", (keras.Model,), {})
