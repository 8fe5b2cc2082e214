"""Encoder families: what differs between BERT, RoBERTa, XLM-RoBERTa, ... in one module each.

A family module holds:

- `MODEL_TYPES`: the config.json `model_type`s it reads; a backbone's
  `family` argument is one of them (`"bert"`, `"xlm-roberta"`, ...);
- `CLASS_PREFIX`: transformers' class names per model type (`"Bert"` +
  `"ForSequenceClassification"`), and `POOLED`, the classes with a pooler;
- `PREFIX`: the backbone's weights in a task checkpoint (`"bert."`);
- `backbone_config(hf_config, source)` / `hf_config(backbone_config)`: the
  config mapping both ways, by `CONFIG_TABLE`'s rows (kbert argument,
  config.json key, default); `backbone_table(backbone)`: the weight names,
  read both ways (rows of `kbert.families.tables`);
- the heads that differ: `CLASSIFIER_HEAD` (None: dropout and a dense layer
  on the pooled first token; else the dense layer and activation of
  RoBERTa's and ELECTRA's heads), `classifier_table(model)`,
  `masked_lm_table(head)`;
- the tokenizer: `TOKENIZERS`, a `kbert.text` class name per model type
  (the tokenizer says how pairs are packed: its `pair_layout`), and
  `TOKENIZER_FILES`, the files a hub repository holds it in.

Adding a family is writing its module and listing it in `_MODULES` below;
tasks, preprocessors, serving, `export_to_transformers`, the CLI and presets
ask this registry.
"""

from kbert.families import bert, distilbert, electra, roberta

_MODULES = (bert, roberta, distilbert, electra)
_BY_MODEL_TYPE = {model_type: module for module in _MODULES for model_type in module.MODEL_TYPES}
MODEL_TYPES = tuple(_BY_MODEL_TYPE)


def get(model_type):
    """The family module of a backbone's `family` (a config.json `model_type`)."""
    try:
        return _BY_MODEL_TYPE[model_type]
    except (KeyError, TypeError):
        raise ValueError(f"Unknown model family {model_type!r}; kbert builds {', '.join(MODEL_TYPES)}.") from None


def of_hf_config(hf_config, source="config.json"):
    """The family of a Hugging Face `config.json` dict, by its `model_type`
    (a config without one is BERT's, as old BERT checkpoints write none)."""
    model_type = hf_config.get("model_type", "bert") if isinstance(hf_config, dict) else "bert"
    if model_type not in _BY_MODEL_TYPE:
        raise ValueError(f'{source} describes a "{model_type}" model; kbert loads {", ".join(MODEL_TYPES)} '
                         "checkpoints.")
    return _BY_MODEL_TYPE[model_type]


def config_names(hf_config):
    """`{kbert argument: config.json key}` of the family of a `config.json`
    dict (BERT's for a `model_type` kbert does not read: that is refused
    where the config is read whole)."""
    model_type = hf_config.get("model_type", "bert") if isinstance(hf_config, dict) else "bert"
    return {kbert: hf for kbert, hf, _ in _BY_MODEL_TYPE.get(model_type, bert).CONFIG_TABLE}


def backbone_config(hf_config, source="config.json"):
    """kbert `BertBackbone` arguments from a `config.json` dict, by its family."""
    config = of_hf_config(hf_config, source).backbone_config(hf_config, source)
    return {**config, "family": hf_config.get("model_type", "bert")}


def hf_config(backbone_config):
    """A backbone config's `config.json` settings, by its family."""
    return get(backbone_config.get("family", "bert")).hf_config(backbone_config)


def class_name(family, suffix):
    """transformers' class of a family's `suffix` (`"Model"`, `"ForMaskedLM"`, ...)."""
    return get(family).CLASS_PREFIX[family] + suffix


def tokenizer_class_name(family):
    return get(family).TOKENIZERS[family]


def all_tokenizer_files():
    """Every set of files that holds a tokenizer kbert reads, of any family."""
    return tuple(dict.fromkeys(names for module in _MODULES for choices in module.TOKENIZER_FILES.values()
                               for names in choices))


def tokenizer_files(model_type):
    """The sets of files a hub repository of `model_type` may hold its
    tokenizer in, preferred first (an unknown type: BERT's)."""
    family = _BY_MODEL_TYPE.get(model_type, bert)
    return family.TOKENIZER_FILES.get(model_type, bert.TOKENIZER_FILES["bert"])
