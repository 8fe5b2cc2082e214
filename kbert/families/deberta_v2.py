"""DeBERTa-v3 (He et al. 2023; DeBERTa, He et al. 2021): `modeling_deberta_v2.py`'s
names and config (`model_type` "deberta-v2"), built as kbert's
`DebertaV2Backbone` (not `BertBackbone`).

- Token embeddings and `embeddings.LayerNorm`; no position table
  (`position_biased_input` false) and no token types (`type_vocab_size` 0).
- BERT's post-LN blocks (`encoder.layer.N`, the attention's layers named
  `query_proj`, `key_proj`, `value_proj`) with disentangled attention: each
  block's query and key layers also project the relative-position table
  `encoder.rel_embeddings`, normalised by `encoder.LayerNorm`
  (`share_att_key`, `norm_rel_ebd="layer_norm"`), read in log buckets
  (`position_buckets`, `max_relative_positions`).
- The sequence classifier's head: `pooler.dense` -> GELU on the first token
  (transformers' `ContextPooler`) -> dropout -> `classifier`; the masked-LM
  head: `lm_predictions.lm_head` (dense -> GELU -> LayerNorm -> the token
  embedding, tied, + bias), which transformers calls `cls.predictions` where
  its config says `legacy` (its default): either is read, the first is
  written (with `legacy: false`).
- The tokenizer is SentencePiece (`spm.model`, or `tokenizer.json`).

DeBERTa-v2's convolution after the first block (`conv_kernel_size`, v2-xlarge),
absolute positions, token types and separate position projections
(`share_att_key` false, DeBERTa-v1's `deberta` model type) are refused.
"""

from kbert.families import bert
from kbert.families.family import Family
from kbert.families.tables import T, check_config, dense, layer_norm

CONFIG_TABLE = (
    ("vocabulary_size", "vocab_size", None),
    ("num_layers", "num_hidden_layers", None),
    ("num_heads", "num_attention_heads", None),
    ("hidden_dim", "hidden_size", None),
    ("intermediate_dim", "intermediate_size", None),
    ("dropout", "hidden_dropout_prob", 0.1),
    ("max_sequence_length", "max_position_embeddings", 512),
    ("layer_norm_epsilon", "layer_norm_eps", 1e-7),
    # transformers: no buckets where <= 0; the range is max_position_embeddings where < 1 (resolved below).
    ("position_buckets", "position_buckets", -1),
    ("max_relative_positions", "max_relative_positions", -1),
)
# What kbert builds, as (config.json key, the value transformers takes where it is absent, kbert's).
_REQUIRED_SETTINGS = (
    ("relative_attention", False, True),
    ("position_biased_input", True, False),
    ("type_vocab_size", 0, 0),
    ("share_att_key", False, True),
    ("conv_kernel_size", 0, 0),
)
NORM_REL_EBD = {"layer_norm": True, "none": False}


def backbone_config(hf_config, source="config.json"):
    check_config(hf_config, bert.REQUIRED, "DeBERTa-v2", source)
    for key, absent, built in _REQUIRED_SETTINGS:
        if hf_config.get(key, absent) != built:
            raise ValueError(f"{source} has {key}={hf_config.get(key, absent)!r}; kbert builds DeBERTa-v3's "
                             f"encoder, with {key}={built!r}.")
    hidden, heads = hf_config["hidden_size"], hf_config["num_attention_heads"]
    for key, built in (("embedding_size", hidden), ("pooler_hidden_size", hidden),
                       ("attention_head_size", hidden // heads if heads else None)):
        if hf_config.get(key, built) != built:
            raise ValueError(f"{source} has {key}={hf_config[key]}; kbert builds DeBERTa-v3's encoder, where it "
                             f"is {built} (from hidden_size={hidden} and num_attention_heads={heads}).")
    if hf_config.get("pooler_hidden_act", "gelu") != "gelu":
        raise ValueError(f'{source} has pooler_hidden_act="{hf_config["pooler_hidden_act"]}"; kbert builds '
                         'DeBERTa-v3\'s classifier head, with "gelu".')
    norm = str(hf_config.get("norm_rel_ebd", "none")).strip().lower()
    if norm not in NORM_REL_EBD:
        raise ValueError(f'{source} has norm_rel_ebd="{norm}"; kbert reads "layer_norm" (DeBERTa-v3\'s) or "none".')
    config = {kbert: hf_config.get(hf, default) for kbert, hf, default in CONFIG_TABLE}
    if config["position_buckets"] is None or config["position_buckets"] < 1:
        config["position_buckets"] = 0
    if config["max_relative_positions"] is None or config["max_relative_positions"] < 1:
        config["max_relative_positions"] = config["max_sequence_length"]
    return {**config, "position_attention": _position_attention(hf_config, source),
            "normalize_relative_embeddings": NORM_REL_EBD[norm], "activation": bert.activation(hf_config, source)}


def _position_attention(hf_config, source):
    """`pos_att_type` ("p2c|c2p" or ["p2c", "c2p"]) as kbert's terms, in kbert's order."""
    given = hf_config.get("pos_att_type") or []
    terms = [t.strip() for t in given.lower().split("|")] if isinstance(given, str) else list(given)
    if any(term not in ("c2p", "p2c") for term in terms):
        raise ValueError(f"{source} has pos_att_type={given!r}; kbert reads \"c2p\" and \"p2c\" (DeBERTa-v3: both).")
    return [term for term in ("c2p", "p2c") if term in terms]


def hf_config(backbone_config):
    """`backbone_config` run backwards, in transformers 5's form."""
    config = {hf: backbone_config[kbert] for kbert, hf, _ in CONFIG_TABLE}
    activation = next(hf for hf, kbert in bert.ACTIVATIONS.items() if kbert == backbone_config["activation"])
    return {"model_type": "deberta-v2", **config, "attention_probs_dropout_prob": backbone_config["dropout"],
            "hidden_act": activation, "relative_attention": True, "position_biased_input": False,
            "type_vocab_size": 0, "share_att_key": True, "pos_att_type": list(backbone_config["position_attention"]),
            "norm_rel_ebd": "layer_norm" if backbone_config["normalize_relative_embeddings"] else "none",
            "pooler_hidden_act": "gelu", "pooler_hidden_size": backbone_config["hidden_dim"], "pooler_dropout": 0,
            # The masked-LM head as DeBERTa's own checkpoints name it, `lm_predictions.lm_head`.
            "legacy": False, "initializer_range": 0.02}


def backbone_table(backbone):
    table = [(backbone.token_embedding.embeddings, "embeddings.word_embeddings.weight", None),
             *layer_norm(backbone.embeddings_layer_norm, "embeddings.LayerNorm")]
    for i, layer in enumerate(backbone.transformer_layers):
        hf = f"encoder.layer.{i}"
        table += [
            *dense(layer.query, f"{hf}.attention.self.query_proj"),
            *dense(layer.key, f"{hf}.attention.self.key_proj"),
            *dense(layer.value, f"{hf}.attention.self.value_proj"),
            *dense(layer.attention_output, f"{hf}.attention.output.dense"),
            *layer_norm(layer.attention_layer_norm, f"{hf}.attention.output.LayerNorm"),
            *dense(layer.intermediate, f"{hf}.intermediate.dense"),
            *dense(layer.output_dense, f"{hf}.output.dense"),
            *layer_norm(layer.output_layer_norm, f"{hf}.output.LayerNorm"),
        ]
    table.append((backbone.relative_embedding.embeddings, "encoder.rel_embeddings.weight", None))
    if backbone.relative_embedding.embeddings_layer_norm is not None:
        table += layer_norm(backbone.relative_embedding.embeddings_layer_norm, "encoder.LayerNorm")
    return table


def classifier_table(model):
    """DebertaV2ForSequenceClassification's `pooler.dense` (ContextPooler) and `classifier`."""
    return [*dense(model.get_layer("classifier_dense"), "pooler.dense"),
            *dense(model.get_layer("logits"), "classifier")]


def masked_lm_table(head):
    """DebertaV2ForMaskedLM's `lm_predictions.lm_head` (its `legacy` layout,
    `cls.predictions`, is read through `legacy_names`)."""
    return [
        (head.transform.kernel, "lm_predictions.lm_head.dense.weight", T),
        (head.transform.bias, "lm_predictions.lm_head.dense.bias", None),
        *layer_norm(head.layer_norm, "lm_predictions.lm_head.LayerNorm"),
        (head.bias, "lm_predictions.lm_head.bias", None),
    ]


FAMILY = Family(
    name="DeBERTa-v2",
    model_types=("deberta-v2",),
    class_prefix={"deberta-v2": "DebertaV2"},
    prefix="deberta.",
    # (Not all of "embeddings.": some checkpoints hold a position table that
    # position_biased_input=false leaves unread, as transformers does.)
    backbone_parts=("embeddings.word_embeddings.", "embeddings.LayerNorm.", "encoder."),
    backbone="DebertaV2Backbone",
    backbone_config=backbone_config,
    hf_config=hf_config,
    config_table=CONFIG_TABLE,
    backbone_table=backbone_table,
    classifier_table=classifier_table,
    masked_lm_table=masked_lm_table,
    classifier_output="classifier",
    classifier_head={"activation": "gelu", "dropout_first": True},
    token_types=False,
    legacy_names={"cls.predictions.transform.dense.": "lm_predictions.lm_head.dense.",
                  "cls.predictions.transform.LayerNorm.": "lm_predictions.lm_head.LayerNorm.",
                  "cls.predictions.bias": "lm_predictions.lm_head.bias"},
    tokenizers={"deberta-v2": "SentencePieceTokenizer"},
    tokenizer_files={"deberta-v2": (("tokenizer.json",), ("spm.model",))},
    tokenizer_classes={"DebertaV2": "SentencePieceTokenizer"},
    sentencepiece_vocabularies={"DebertaV2": "mask_last"},
)
