"""The row format of the checkpoint name tables: (kbert variable, Hugging
Face name, transform). PyTorch's `Linear.weight` is `[out, in]` and Keras'
`Dense.kernel` is `[in, out]`, hence the transposes. A checkpoint tensor
that fuses several of kbert's layers (ModernBERT's `Wqkv`: query, key and
value stacked along the output rows) is read by one row per layer, each
taking its `Part`."""

import collections

T = "transpose"


class Part(collections.namedtuple("Part", ("index", "count", "transform"))):
    """A row's transform where its variable is the `index`-th of `count`
    equal blocks of the checkpoint tensor's first axis (then `transform`d)."""


def dense(layer, name, part=None):
    """A dense layer's rows (no bias row where it has none); `part`:
    `(index, count)` of a fused tensor that holds it (`Part`)."""
    kernel, bias = (T, None) if part is None else (Part(*part, T), Part(*part, None))
    rows = [(layer.kernel, f"{name}.weight", kernel)]
    return rows + ([(layer.bias, f"{name}.bias", bias)] if layer.bias is not None else [])


def fused_dense(layers, name):
    """Dense layers stored as one tensor, their outputs stacked in order."""
    return [row for i, layer in enumerate(layers) for row in dense(layer, name, (i, len(layers)))]


def layer_norm(layer, name, scale="weight", offset="bias"):
    """A LayerNorm's rows (no offset row where it has none)."""
    rows = [(layer.gamma, f"{name}.{scale}", None)]
    return rows + ([(layer.beta, f"{name}.{offset}", None)] if layer.beta is not None else [])


def prediction_head(layer, name):
    """A `PredictionHead`'s rows: ModernBERT's `head.dense`, `head.norm`."""
    return [*dense(layer.dense, f"{name}.dense"), *layer_norm(layer.layer_norm, f"{name}.norm")]


def encoder_layers(backbone, prefix="encoder.layer"):
    """BERT's encoder block names (`modeling_bert.py`), which RoBERTa,
    XLM-RoBERTa and ELECTRA keep."""
    table = []
    for i, layer in enumerate(backbone.transformer_layers):
        hf = f"{prefix}.{i}"
        table += [
            *dense(layer.query, f"{hf}.attention.self.query"),
            *dense(layer.key, f"{hf}.attention.self.key"),
            *dense(layer.value, f"{hf}.attention.self.value"),
            *dense(layer.attention_output, f"{hf}.attention.output.dense"),
            *layer_norm(layer.attention_layer_norm, f"{hf}.attention.output.LayerNorm"),
            *dense(layer.intermediate, f"{hf}.intermediate.dense"),
            *dense(layer.output_dense, f"{hf}.output.dense"),
            *layer_norm(layer.output_layer_norm, f"{hf}.output.LayerNorm"),
        ]
    return table


def check_config(hf_config, required, name, source):
    """Refuses a config.json that is not an object of settings or lacks
    `required` keys."""
    if not isinstance(hf_config, dict):
        raise ValueError(f"{source} holds a JSON {type(hf_config).__name__}, not an object of settings.")
    missing = [key for key in required if key not in hf_config]
    if missing:
        raise ValueError(
            f"{source} lacks {', '.join(missing)}: a {name} config.json sets {', '.join(required)}. "
            "Use the config.json that came with these weights."
        )


def absolute_positions(hf_config, source):
    position_type = hf_config.get("position_embedding_type", "absolute")
    if position_type != "absolute":
        raise ValueError(
            f'{source} has position_embedding_type="{position_type}"; kbert supports "absolute" (BERT\'s).'
        )
