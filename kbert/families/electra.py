"""ELECTRA (Clark et al. 2020): the discriminator's encoder is BERT's, with
`modeling_electra.py`'s differences.

- Embeddings of `embedding_size` (narrower than the hidden size in small
  models), projected by `embeddings_project`; no pooler.
- The sequence classifier's head: dropout -> `classifier.dense` -> GELU ->
  dropout -> `classifier.out_proj` on `[CLS]`.
- The masked-LM head is the generator's (`generator_predictions`,
  `generator_lm_head`, tied), mapping to the embedding size.
- The tokenizer is BERT's WordPiece.
"""

from kbert.families import bert
from kbert.families.family import Family
from kbert.families.tables import T, dense, encoder_layers, layer_norm

CONFIG_TABLE = (*bert.CONFIG_TABLE, ("embedding_dim", "embedding_size", None))  # (None: the hidden size)


def backbone_config(hf_config, source="config.json"):
    config = bert.backbone_config(hf_config, source)
    embedding_size = hf_config.get("embedding_size", config["hidden_dim"])
    return {**config, "embedding_dim": None if embedding_size == config["hidden_dim"] else embedding_size}


def hf_config(backbone_config):
    config = bert.hf_config(backbone_config)
    return {**config, "model_type": "electra",
            "embedding_size": backbone_config.get("embedding_dim") or backbone_config["hidden_dim"]}


def backbone_table(backbone):
    table = [*bert.embeddings_table(backbone), *encoder_layers(backbone)]
    if backbone.embeddings_projection is not None:
        table += dense(backbone.embeddings_projection, "embeddings_project")
    return table


def classifier_table(model):
    return [*dense(model.get_layer("classifier_dense"), "classifier.dense"),
            *dense(model.get_layer("logits"), "classifier.out_proj")]


def masked_lm_table(head):
    return [
        (head.transform.kernel, "generator_predictions.dense.weight", T),
        (head.transform.bias, "generator_predictions.dense.bias", None),
        *layer_norm(head.layer_norm, "generator_predictions.LayerNorm"),
        (head.bias, "generator_lm_head.bias", None),
    ]


FAMILY = Family(
    name="ELECTRA",
    model_types=("electra",),
    class_prefix={"electra": "Electra"},
    prefix="electra.",
    backbone_parts=("embeddings.", "embeddings_project.", "encoder."),
    backbone_config=backbone_config,
    hf_config=hf_config,
    config_table=CONFIG_TABLE,
    backbone_table=backbone_table,
    classifier_table=classifier_table,
    masked_lm_table=masked_lm_table,
    classifier_output="classifier.out_proj",
    classifier_head={"activation": "gelu", "dropout_first": True},
    tokenizers={"electra": "WordPieceTokenizer"},
    tokenizer_files={"electra": bert.WORDPIECE_FILES},
    tokenizer_classes={"Electra": "WordPieceTokenizer"},
)
