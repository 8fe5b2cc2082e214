"""RoBERTa (Liu et al. 2019), XLM-RoBERTa (Conneau et al. 2020) and
CamemBERT: BERT's encoder with `modeling_roberta.py`'s differences.

- Positions start after the padding index: position `p` reads row
  `p + pad_token_id + 1` of a table of `max_position_embeddings` rows.
- One token type; a pair is `<s> A </s></s> B </s>`, all in segment 0.
- The sequence classifier's head is dense -> tanh -> projection on `<s>`,
  not BERT's pooler; the masked-LM head is `lm_head`.
- The tokenizer: byte-level BPE (RoBERTa), SentencePiece unigram (XLM-R,
  CamemBERT).
"""

from kbert.families import bert
from kbert.families.family import Family
from kbert.families.tables import T, absolute_positions, check_config, dense, encoder_layers, layer_norm

_SENTENCEPIECE = (("tokenizer.json",), ("sentencepiece.bpe.model",))

CONFIG_TABLE = (
    *(row for row in bert.CONFIG_TABLE if row[0] not in ("max_sequence_length", "num_segments",
                                                          "layer_norm_epsilon")),
    ("num_segments", "type_vocab_size", 1),
    ("layer_norm_epsilon", "layer_norm_eps", 1e-5),
)


def backbone_config(hf_config, source="config.json"):
    check_config(hf_config, bert.REQUIRED, "RoBERTa", source)
    absolute_positions(hf_config, source)
    config = {kbert: hf_config.get(hf, default) for kbert, hf, default in CONFIG_TABLE}
    # transformers' create_position_ids_from_input_ids: padding_idx + 1 onwards.
    offset = hf_config.get("pad_token_id", 1) + 1
    length = hf_config.get("max_position_embeddings", 514) - offset
    if length < 1:
        raise ValueError(f"{source} has max_position_embeddings={hf_config.get('max_position_embeddings')}, "
                         f"no more than the {offset} rows before the first position (pad_token_id + 1).")
    return {**config, "max_sequence_length": length, "position_offset": offset,
            "activation": bert.activation(hf_config, source)}


def hf_config(backbone_config):
    """BERT's settings, with RoBERTa's positions after the padding index."""
    offset = backbone_config["position_offset"]
    return {**bert.hf_config(backbone_config), "model_type": backbone_config["family"],
            "max_position_embeddings": backbone_config["max_sequence_length"] + offset,
            "pad_token_id": offset - 1, "bos_token_id": 0, "eos_token_id": 2}


def backbone_table(backbone):
    return [*bert.embeddings_table(backbone), *encoder_layers(backbone),
            *dense(backbone.pooled_dense, "pooler.dense")]


def classifier_table(model):
    """RobertaClassificationHead: `classifier.dense`, `classifier.out_proj`."""
    return [*dense(model.get_layer("classifier_dense"), "classifier.dense"),
            *dense(model.get_layer("logits"), "classifier.out_proj")]


def masked_lm_table(head):
    """RobertaLMHead (`lm_head`; the decoder is the token embedding, tied)."""
    return [
        (head.transform.kernel, "lm_head.dense.weight", T),
        (head.transform.bias, "lm_head.dense.bias", None),
        *layer_norm(head.layer_norm, "lm_head.layer_norm"),
        (head.bias, "lm_head.bias", None),
    ]


FAMILY = Family(
    name="RoBERTa",
    model_types=("roberta", "xlm-roberta", "camembert"),
    class_prefix={"roberta": "Roberta", "xlm-roberta": "XLMRoberta", "camembert": "Camembert"},
    prefix="roberta.",  # XLMRobertaForX and CamembertForX name it so too
    backbone_config=backbone_config,
    hf_config=hf_config,
    config_table=CONFIG_TABLE,
    backbone_table=backbone_table,
    classifier_table=classifier_table,
    masked_lm_table=masked_lm_table,
    classifier_output="classifier.out_proj",
    classifier_head={"activation": "tanh", "dropout_first": True},
    pooled=("Model",),
    # Positions start after the padding index: `position_offset` = pad_token_id + 1.
    positions_after_padding=True,
    tokenizers={"roberta": "BytePairTokenizer", "xlm-roberta": "SentencePieceTokenizer",
                "camembert": "SentencePieceTokenizer"},
    tokenizer_files={"roberta": (("tokenizer.json",), ("vocab.json", "merges.txt")),
                     "xlm-roberta": _SENTENCEPIECE, "camembert": _SENTENCEPIECE},
    # ("XLMRoberta" before "Roberta": a class name is matched by its prefix.)
    tokenizer_classes={"XLMRoberta": "SentencePieceTokenizer", "Camembert": "SentencePieceTokenizer",
                       "Roberta": "BytePairTokenizer", "GPT2": "BytePairTokenizer"},
    # How each tokenizer's vocabulary lays out its SentencePiece model's pieces.
    sentencepiece_vocabularies={"XLMRoberta": "fairseq", "Camembert": "fairseq_unused_unk"},
)
