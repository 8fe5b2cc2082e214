"""The row format of the checkpoint name tables: (kbert variable, Hugging
Face name, transform). PyTorch's `Linear.weight` is `[out, in]` and Keras'
`Dense.kernel` is `[in, out]`, hence the transposes."""

T = "transpose"


def dense(layer, name):
    return [(layer.kernel, f"{name}.weight", T), (layer.bias, f"{name}.bias", None)]


def layer_norm(layer, name, scale="weight", offset="bias"):
    return [(layer.gamma, f"{name}.{scale}", None), (layer.beta, f"{name}.{offset}", None)]


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
