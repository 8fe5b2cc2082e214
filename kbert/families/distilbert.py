"""DistilBERT (Sanh et al. 2019): BERT's post-LN encoder, distilled, with
`modeling_distilbert.py`'s names and config.

- No token types (`num_segments=0`) and no pooler.
- Its own weight names (`transformer.layer.N.attention.q_lin`, ...) and
  config keys (`dim`, `n_layers`, `hidden_dim` for the feed-forward).
- The sequence classifier's head: `pre_classifier` -> ReLU -> dropout ->
  `classifier` on `[CLS]`; the masked-LM head: `vocab_transform`,
  `vocab_layer_norm`, `vocab_projector` (tied).
- The tokenizer is BERT's WordPiece.
"""

from kbert.families import bert
from kbert.families.family import Family
from kbert.families.tables import T, check_config, dense, layer_norm

REQUIRED = ("vocab_size", "n_layers", "n_heads", "dim", "hidden_dim")
CONFIG_TABLE = (
    ("vocabulary_size", "vocab_size", None),
    ("num_layers", "n_layers", None),
    ("num_heads", "n_heads", None),
    ("hidden_dim", "dim", None),
    ("intermediate_dim", "hidden_dim", None),
    ("dropout", "dropout", 0.1),
    ("max_sequence_length", "max_position_embeddings", 512),
)
# Fixed in modeling_distilbert.py.
LAYER_NORM_EPSILON = 1e-12


def backbone_config(hf_config, source="config.json"):
    check_config(hf_config, REQUIRED, "DistilBERT", source)
    config = {kbert: hf_config.get(hf, default) for kbert, hf, default in CONFIG_TABLE}
    return {**config, "num_segments": 0, "layer_norm_epsilon": LAYER_NORM_EPSILON,
            "activation": bert.activation(hf_config, source, key="activation")}


def hf_config(backbone_config):
    config = {hf: backbone_config[kbert] for kbert, hf, _ in CONFIG_TABLE}
    activation = next(hf for hf, kbert in bert.ACTIVATIONS.items() if kbert == backbone_config["activation"])
    return {"model_type": "distilbert", **config, "attention_dropout": backbone_config["dropout"],
            "activation": activation, "sinusoidal_pos_embds": False, "initializer_range": 0.02}


def backbone_table(backbone):
    table = [
        (backbone.token_embedding.embeddings, "embeddings.word_embeddings.weight", None),
        (backbone.position_embedding.position_embeddings, "embeddings.position_embeddings.weight", None),
        *layer_norm(backbone.embeddings_layer_norm, "embeddings.LayerNorm"),
    ]
    for i, layer in enumerate(backbone.transformer_layers):
        hf = f"transformer.layer.{i}"
        table += [
            *dense(layer.query, f"{hf}.attention.q_lin"),
            *dense(layer.key, f"{hf}.attention.k_lin"),
            *dense(layer.value, f"{hf}.attention.v_lin"),
            *dense(layer.attention_output, f"{hf}.attention.out_lin"),
            *layer_norm(layer.attention_layer_norm, f"{hf}.sa_layer_norm"),
            *dense(layer.intermediate, f"{hf}.ffn.lin1"),
            *dense(layer.output_dense, f"{hf}.ffn.lin2"),
            *layer_norm(layer.output_layer_norm, f"{hf}.output_layer_norm"),
        ]
    return table


def classifier_table(model):
    return [*dense(model.get_layer("classifier_dense"), "pre_classifier"),
            *dense(model.get_layer("logits"), "classifier")]


def masked_lm_table(head):
    return [
        (head.transform.kernel, "vocab_transform.weight", T),
        (head.transform.bias, "vocab_transform.bias", None),
        *layer_norm(head.layer_norm, "vocab_layer_norm"),
        (head.bias, "vocab_projector.bias", None),
    ]


FAMILY = Family(
    name="DistilBERT",
    model_types=("distilbert",),
    class_prefix={"distilbert": "DistilBert"},
    prefix="distilbert.",
    backbone_parts=("embeddings.", "transformer."),
    backbone_config=backbone_config,
    hf_config=hf_config,
    config_table=CONFIG_TABLE,
    backbone_table=backbone_table,
    classifier_table=classifier_table,
    masked_lm_table=masked_lm_table,
    classifier_output="classifier",
    classifier_head={"activation": "relu", "dropout_first": False},
    token_types=False,
    tokenizers={"distilbert": "WordPieceTokenizer"},
    tokenizer_files={"distilbert": bert.WORDPIECE_FILES},
    tokenizer_classes={"DistilBert": "WordPieceTokenizer"},
)
