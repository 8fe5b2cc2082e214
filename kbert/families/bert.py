"""BERT (Devlin et al. 2019), the first family: `modeling_bert.py`'s names.

A family module builds its `Family` record (`kbert.families.family`): the
config mapping both ways, the weight-name table read both ways, the head
variants, the embeddings' settings and the tokenizer. BERT's is `FAMILY`,
at the end; the functions before it are BERT's, which other families reuse."""

from kbert.families.family import Family
from kbert.families.tables import T, absolute_positions, check_config, dense, encoder_layers, layer_norm

# Where a hub repository holds the tokenizer: the first set of files it has.
WORDPIECE_FILES = (("vocab.txt",), ("tokenizer.json",))

REQUIRED = ("vocab_size", "num_hidden_layers", "num_attention_heads", "hidden_size", "intermediate_size")
# (kbert `BertBackbone` argument, config.json key, default where config.json
# does not say): the architecture and settings both ways.
CONFIG_TABLE = (
    ("vocabulary_size", "vocab_size", None),
    ("num_layers", "num_hidden_layers", None),
    ("num_heads", "num_attention_heads", None),
    ("hidden_dim", "hidden_size", None),
    ("intermediate_dim", "intermediate_size", None),
    ("dropout", "hidden_dropout_prob", 0.1),
    ("max_sequence_length", "max_position_embeddings", 512),
    ("num_segments", "type_vocab_size", 2),
    ("layer_norm_epsilon", "layer_norm_eps", 1e-12),
)
# config.json's hidden_act -> kbert's activation; the first of each is written.
ACTIVATIONS = {"gelu": "gelu", "gelu_new": "gelu_approximate", "gelu_pytorch_tanh": "gelu_approximate"}


def backbone_config(hf_config, source="config.json"):
    """kbert `BertBackbone` arguments from a `config.json` dict (read from
    `source`, named in errors)."""
    check_config(hf_config, REQUIRED, "BERT", source)
    absolute_positions(hf_config, source)
    config = {kbert: hf_config.get(hf, default) for kbert, hf, default in CONFIG_TABLE}
    return {**config, "activation": activation(hf_config, source)}


def activation(hf_config, source, key="hidden_act"):
    hidden_act = hf_config.get(key, "gelu")
    if hidden_act not in ACTIVATIONS:
        raise ValueError(f'{source} has {key}="{hidden_act}"; kbert supports {", ".join(ACTIVATIONS)}.')
    return ACTIVATIONS[hidden_act]


def hf_config(backbone_config):
    """The `config.json` settings from kbert `BertBackbone` arguments:
    `backbone_config` run backwards."""
    config = {hf: backbone_config[kbert] for kbert, hf, _ in CONFIG_TABLE}
    # kbert has one dropout rate for the embeddings, residuals and attention.
    config["attention_probs_dropout_prob"] = backbone_config["dropout"]
    config["hidden_act"] = next(hf for hf, kbert in ACTIVATIONS.items() if kbert == backbone_config["activation"])
    return {"model_type": "bert", **config, "position_embedding_type": "absolute", "initializer_range": 0.02}


def embeddings_table(backbone):
    return [
        (backbone.token_embedding.embeddings, "embeddings.word_embeddings.weight", None),
        (backbone.position_embedding.position_embeddings, "embeddings.position_embeddings.weight", None),
        (backbone.segment_embedding.embeddings, "embeddings.token_type_embeddings.weight", None),
        *layer_norm(backbone.embeddings_layer_norm, "embeddings.LayerNorm"),
    ]


def backbone_table(backbone):
    """(kbert variable, Hugging Face name without the `bert.` prefix, transform)."""
    return [*embeddings_table(backbone), *encoder_layers(backbone), *dense(backbone.pooled_dense, "pooler.dense")]


def classifier_table(model):
    """BertForSequenceClassification's head."""
    return dense(model.get_layer("logits"), "classifier")


def masked_lm_table(head):
    """BertForMaskedLM's / BertForPreTraining's `cls.predictions` (the output
    projection is the token embedding, tied)."""
    return [
        (head.transform.kernel, "cls.predictions.transform.dense.weight", T),
        (head.transform.bias, "cls.predictions.transform.dense.bias", None),
        *layer_norm(head.layer_norm, "cls.predictions.transform.LayerNorm"),
        (head.bias, "cls.predictions.bias", None),
    ]


FAMILY = Family(
    name="BERT",
    model_types=("bert",),
    class_prefix={"bert": "Bert"},  # "Bert" + "Model", "ForSequenceClassification", ...
    prefix="bert.",  # the backbone in a task checkpoint (BertForX); bare in BertModel's
    backbone_config=backbone_config,
    hf_config=hf_config,
    config_table=CONFIG_TABLE,
    backbone_table=backbone_table,
    classifier_table=classifier_table,
    masked_lm_table=masked_lm_table,
    # The sequence classifier's head: dropout and a dense layer on the pooled [CLS].
    classifier_output="classifier",
    classifier_head=None,
    # transformers' classes that hold the pooler (its token-level heads have none).
    pooled=("Model", "ForSequenceClassification", "ForPreTraining"),
    next_sentence=True,
    tokenizers={"bert": "WordPieceTokenizer"},
    tokenizer_files={"bert": WORDPIECE_FILES},
    tokenizer_classes={"Bert": "WordPieceTokenizer"},
)
