"""ModernBERT (Warner et al. 2024): `modeling_modernbert.py`'s names and
config, built as kbert's `ModernBertBackbone` (not `BertBackbone`).

- Token embeddings and a LayerNorm (`embeddings.norm`); no token types and
  no position table: rotary positions in every block, of one base in the
  global blocks and another in the local (sliding-window) ones.
- Pre-LN blocks (`layers.N`): `attn_norm` (none in block 0), `attn.Wqkv`
  (query, key and value fused: kbert reads each third into its own layer),
  `attn.Wo`, `mlp_norm`, `mlp.Wi` (the GeGLU's input and gate, fused),
  `mlp.Wo`; then `final_norm`. No biases and no LayerNorm offsets in the
  released checkpoints (`attention_bias`, `mlp_bias`, `norm_bias`).
- Every task head reads its features through `head` (dense -> activation
  -> LayerNorm) before its output layer, `classifier`; the masked-LM
  decoder is the token embedding (tied), with `decoder.bias`.
- The tokenizer is a byte-level BPE (`tokenizer.json`: ModernBERT, Ettin), or
  Gemma's SentencePiece BPE with byte fallback (mmBERT: `tokenizer.json`,
  whose BPE model says `byte_fallback`, or `tokenizer.model`), which the
  files tell apart (`kbert.presets.tokenizer_files`).
"""

from kbert.families import bert
from kbert.families.family import Family
from kbert.families.tables import check_config, dense, fused_dense, layer_norm, prediction_head

# (kbert `ModernBertBackbone` argument, config.json key, default where config.json does not say).
CONFIG_TABLE = (
    ("vocabulary_size", "vocab_size", None),
    ("num_layers", "num_hidden_layers", None),
    ("num_heads", "num_attention_heads", None),
    ("hidden_dim", "hidden_size", None),
    ("intermediate_dim", "intermediate_size", None),
    ("dropout", "attention_dropout", 0.0),
    ("max_sequence_length", "max_position_embeddings", 8192),
    ("layer_norm_epsilon", "norm_eps", 1e-5),
    ("local_attention", "local_attention", 128),
    ("attention_bias", "attention_bias", False),
    ("feedforward_bias", "mlp_bias", False),
    ("norm_bias", "norm_bias", False),
    ("head_bias", "classifier_bias", False),
    ("pooling", "classifier_pooling", "cls"),
)
# transformers' ModernBertConfig.default_theta.
ROPE_THETAS = {"full_attention": ("global_rope_theta", 160_000.0), "sliding_attention": ("local_rope_theta", 10_000.0)}


def backbone_config(hf_config, source="config.json"):
    check_config(hf_config, bert.REQUIRED, "ModernBERT", source)
    config = {kbert: hf_config.get(hf, default) for kbert, hf, default in CONFIG_TABLE}
    return {**config, "global_attention_every": _global_attention_every(hf_config, source),
            **_rope_thetas(hf_config, source),
            "activation": bert.activation(hf_config, source, key="hidden_activation"),
            "head_activation": bert.activation(hf_config, source, key="classifier_activation")}


def _layer_types(num_layers, every):
    # transformers' ModernBertConfig: layer i is global where i % every == 0.
    return ["sliding_attention" if i % every else "full_attention" for i in range(num_layers)]


def _global_attention_every(hf_config, source):
    """`global_attn_every_n_layers`, checked against `layer_types` where the
    config has both (transformers 5 writes both), read off `layer_types`
    where it has that alone."""
    every = hf_config.get("global_attn_every_n_layers")
    types = hf_config.get("layer_types")
    if types is None:
        return 3 if every is None else every
    num_layers = hf_config["num_hidden_layers"]
    globals_ = [i for i, kind in enumerate(types) if kind == "full_attention"]
    candidates = ([every] if every is not None else []) + (globals_[1:2] or [max(num_layers, 1)])
    for candidate in candidates:
        if isinstance(candidate, int) and candidate >= 1 and list(types) == _layer_types(num_layers, candidate):
            return candidate
    raise ValueError(f"{source} has layer_types={types}; kbert builds ModernBERT's pattern, a global layer every "
                     "n layers from the first (global_attn_every_n_layers), and local layers between.")


def _rope_thetas(hf_config, source):
    """The rotary bases of the global and local layers: transformers 5's
    `rope_parameters`, or the `global_rope_theta` / `local_rope_theta` of
    earlier configs."""
    parameters = hf_config.get("rope_parameters") or {}
    thetas = {}
    for layer_type, (kbert, default) in ROPE_THETAS.items():
        these = parameters.get(layer_type) or {}
        if these.get("rope_type", "default") != "default" or hf_config.get("rope_scaling"):
            scaling = hf_config.get("rope_scaling") or these
            raise ValueError(f'{source} scales its rotary positions ({layer_type}: {scaling}); kbert builds '
                             'rope_type "default".')
        thetas[kbert] = float(these.get("rope_theta", hf_config.get(kbert, default)))
    return thetas


def hf_config(backbone_config):
    """`backbone_config` run backwards, in transformers 5's form."""
    config = {hf: backbone_config[kbert] for kbert, hf, _ in CONFIG_TABLE}
    every, dropout = backbone_config["global_attention_every"], backbone_config["dropout"]

    def activation(kbert):
        return next(hf for hf, name in bert.ACTIVATIONS.items() if name == kbert)

    return {"model_type": "modernbert", **config, "embedding_dropout": dropout, "mlp_dropout": dropout,
            "classifier_dropout": dropout,
            "hidden_activation": activation(backbone_config["activation"]),
            "classifier_activation": activation(backbone_config["head_activation"]),
            "global_attn_every_n_layers": every, "layer_types": _layer_types(backbone_config["num_layers"], every),
            "rope_parameters": {layer_type: {"rope_type": "default", "rope_theta": backbone_config[kbert]}
                                for layer_type, (kbert, _) in ROPE_THETAS.items()},
            "decoder_bias": True, "tie_word_embeddings": True, "initializer_range": 0.02}


def backbone_table(backbone):
    table = [(backbone.token_embedding.embeddings, "embeddings.tok_embeddings.weight", None),
             *layer_norm(backbone.embeddings_layer_norm, "embeddings.norm")]
    for i, layer in enumerate(backbone.transformer_layers):
        hf = f"layers.{i}"
        if layer.attention_layer_norm is not None:  # none in the first block
            table += layer_norm(layer.attention_layer_norm, f"{hf}.attn_norm")
        table += [
            *fused_dense((layer.query, layer.key, layer.value), f"{hf}.attn.Wqkv"),
            *dense(layer.attention_output, f"{hf}.attn.Wo"),
            *layer_norm(layer.feedforward_layer_norm, f"{hf}.mlp_norm"),
            *fused_dense((layer.intermediate, layer.gate), f"{hf}.mlp.Wi"),
            *dense(layer.output_dense, f"{hf}.mlp.Wo"),
        ]
    return table + layer_norm(backbone.final_layer_norm, "final_norm")


def classifier_table(model):
    """ModernBertForSequenceClassification's `head` and `classifier`."""
    return [*prediction_head(model.get_layer("prediction_head"), "head"),
            *dense(model.get_layer("logits"), "classifier")]


def masked_lm_table(head):
    """ModernBertForMaskedLM's `head` and `decoder` (its weight is the token embedding, tied)."""
    return [*dense(head.transform, "head.dense"), *layer_norm(head.layer_norm, "head.norm"),
            (head.bias, "decoder.bias", None)]


FAMILY = Family(
    name="ModernBERT",
    model_types=("modernbert",),
    class_prefix={"modernbert": "ModernBert"},
    prefix="model.",
    backbone_parts=("embeddings.", "layers.", "final_norm."),
    backbone="ModernBertBackbone",
    backbone_config=backbone_config,
    hf_config=hf_config,
    config_table=CONFIG_TABLE,
    backbone_table=backbone_table,
    classifier_table=classifier_table,
    masked_lm_table=masked_lm_table,
    classifier_output="classifier",
    prediction_head="head",
    question_answerer_output="classifier",
    token_types=False,
    tokenizers={"modernbert": "BytePairTokenizer"},
    tokenizer_files={"modernbert": (("tokenizer.json",), ("tokenizer.model",))},
    tokenizer_classes={"Gemma": "SentencePieceTokenizer"},
    sentencepiece_vocabularies={"Gemma": "same_ids"},
)
