"""Encoder families: what differs between BERT, RoBERTa, XLM-RoBERTa, ... in
one module each, read through this registry.

Each family module builds one `Family` record (`kbert.families.family`, the
contract: its fields and what each means) and names it `FAMILY`. The
registry checks every record when it loads, so a family that lacks a field
fails at import, naming what it lacks.

Adding a family is writing its module (its record and the functions the
record names), listing it in `_MODULES` below, and writing the layers for
whatever is new in its architecture; tasks, preprocessors, serving,
`export_to_transformers`, the CLI and presets ask this registry. This
package imports nothing else of kbert's, so every other package may read it.
"""

from kbert.families import bert, deberta_v2, distilbert, electra, modernbert, roberta
from kbert.families.family import Family

_MODULES = (bert, roberta, distilbert, electra, modernbert, deberta_v2)
FAMILIES = tuple(module.FAMILY for module in _MODULES)


def _check(families):
    for family in families:
        problems = family.problems() if isinstance(family, Family) else [f"{family!r} is not a Family"]
        if problems:
            raise TypeError(f"The {getattr(family, 'name', family)} family breaks the family contract "
                            f"(kbert.families.family.Family): {'; '.join(problems)}.")
    by_model_type = {}
    for family in families:
        for model_type in family.model_types:
            if model_type in by_model_type:
                raise TypeError(f'model_type "{model_type}" is claimed by both {by_model_type[model_type].name} '
                                f"and {family.name}.")
            by_model_type[model_type] = family
    return by_model_type


_BY_MODEL_TYPE = _check(FAMILIES)
MODEL_TYPES = tuple(_BY_MODEL_TYPE)


def get(model_type):
    """The `Family` of a backbone's `family` (a config.json `model_type`)."""
    try:
        return _BY_MODEL_TYPE[model_type]
    except (KeyError, TypeError):
        raise ValueError(f"Unknown model family {model_type!r}; kbert builds {', '.join(MODEL_TYPES)}.") from None


def model_type_of(hf_config):
    """A `config.json` dict's `model_type` ("bert" where it says none, as old
    BERT checkpoints write none)."""
    return hf_config.get("model_type", "bert") if isinstance(hf_config, dict) else "bert"


def of_hf_config(hf_config, source="config.json"):
    """The family of a Hugging Face `config.json` dict, by its `model_type`."""
    model_type = model_type_of(hf_config)
    if model_type not in _BY_MODEL_TYPE:
        raise ValueError(f'{source} describes a "{model_type}" model; kbert loads {", ".join(MODEL_TYPES)} '
                         "checkpoints.")
    return _BY_MODEL_TYPE[model_type]


def config_names(hf_config):
    """`{kbert argument: config.json key}` of the family of a `config.json`
    dict (BERT's for a `model_type` kbert does not read: that is refused
    where the config is read whole)."""
    return _BY_MODEL_TYPE.get(model_type_of(hf_config), bert.FAMILY).config_names


def backbone_config(hf_config, source="config.json"):
    """kbert `BertBackbone` arguments from a `config.json` dict, by its family."""
    config = of_hf_config(hf_config, source).backbone_config(hf_config, source)
    return {**config, "family": model_type_of(hf_config)}


def hf_config(backbone_config):
    """A backbone config's `config.json` settings, by its family."""
    return get(backbone_config.get("family", "bert")).hf_config(backbone_config)


def class_name(family, suffix):
    """transformers' class of a family's `suffix` (`"Model"`, `"ForMaskedLM"`, ...)."""
    return get(family).class_prefix[family] + suffix


def tokenizer_class_name(family):
    """kbert's tokenizer class of a model type."""
    return get(family).tokenizers[family]


def tokenizer_class_of(transformers_class):
    """kbert's tokenizer class for a transformers tokenizer class name
    (`tokenizer_config.json`'s `tokenizer_class`, matched by prefix), or
    None for one no family names."""
    return next((kbert_class for family in FAMILIES for prefix, kbert_class in family.tokenizer_classes.items()
                 if transformers_class.startswith(prefix)), None)


def sentencepiece_vocabulary(transformers_class, default="fairseq"):
    """How the vocabulary of a transformers tokenizer class lays out its
    SentencePiece model's pieces (`kbert.text.sentencepiece_model`)."""
    return next((layout for family in FAMILIES for prefix, layout in family.sentencepiece_vocabularies.items()
                 if transformers_class.startswith(prefix)), default)


def all_tokenizer_files():
    """Every set of files that holds a tokenizer kbert reads, of any family."""
    return tuple(dict.fromkeys(names for family in FAMILIES for choices in family.tokenizer_files.values()
                               for names in choices))


def tokenizer_files(model_type):
    """The sets of files a hub repository of `model_type` may hold its
    tokenizer in, preferred first (an unknown type: BERT's)."""
    return _BY_MODEL_TYPE.get(model_type, bert.FAMILY).tokenizer_files.get(model_type, bert.WORDPIECE_FILES)
