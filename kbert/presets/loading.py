"""Building models from presets and saving them as presets."""

import json
import os
import warnings

from kbert import families
from kbert.presets import config_check, files, huggingface, weight_check

KBERT_WEIGHTS = "model.weights.h5"
_ARCHITECTURE = ("vocabulary_size", "num_layers", "num_heads", "hidden_dim", "intermediate_dim",
                 "max_sequence_length", "num_segments",
                 # ModernBERT's: which layers are local, how far they see, their rotary bases.
                 "local_attention", "global_attention_every", "global_rope_theta", "local_rope_theta",
                 # DeBERTa-v2's: its relative positions and the attention terms that read them.
                 "position_buckets", "max_relative_positions", "position_attention")


def backbone_config_of(config, kbert_layout, source):
    """The `BertBackbone` config in a preset's parsed `kbert_config.json`
    (`kbert_layout`) or `config.json`, read from `source` (named in errors);
    refused if it cannot be built here (`config_check`)."""
    if kbert_layout:
        if not isinstance(config, dict) or not isinstance(config.get("backbone"), dict):
            raise ValueError(
                f'{source} has no "backbone" entry; save_to_preset writes one. {files.how_to_replace(source)}'
            )
        backbone = dict(config["backbone"])
        config_check.check_backbone_config(backbone, source)
        return backbone
    backbone = huggingface.backbone_config(config, source=source)
    config_check.check_hf_config(config, source)
    config_check.check_backbone_config(backbone, source)  # by kbert's names: every family's (DistilBERT's `dim`)
    return backbone


def with_overrides(config, preset, overrides):
    """`config` with `overrides`, refusing any that would change the
    architecture (fixed by the weights)."""
    changed = [k for k in overrides if k in _ARCHITECTURE and overrides[k] != config.get(k)]
    if changed:
        raise ValueError(
            f"Cannot change {', '.join(changed)} of preset {preset!r}: the weights fix the architecture. "
            "Build BertBackbone(...) directly for a new architecture."
        )
    return {**config, **overrides}


def read_vocabulary(folder, vocabulary_size):
    """The tokens of the folder's vocab.txt (None without one), one a line,
    refused unless there is one per token id of the config: a cut download
    or another model's vocabulary would otherwise tokenize silently into the
    wrong ids."""
    path = os.path.join(folder, files.VOCABULARY)
    if not os.path.exists(path):
        return None
    try:
        # Lines split as the tokenizer's own reader splits them.
        with open(path, encoding="utf-8") as f:
            tokens = [line.rstrip("\r\n") for line in f]
    except UnicodeDecodeError as e:
        raise ValueError(f"{path} is not UTF-8 text ({e.reason} at byte {e.start}). {files.how_to_replace(path)}") from None
    if len(tokens) != vocabulary_size:
        config = files.KBERT_CONFIG if files.is_kbert_layout(folder) else files.HF_CONFIG
        raise ValueError(
            f"{path} has {len(tokens)} tokens (lines), but {os.path.join(folder, config)} says the model has "
            f"{vocabulary_size} (vocab_size): the vocabulary is cut short or belongs to another model. "
            f"{files.how_to_replace(path)}"
        )
    return tokens


def load_backbone(cls, preset, **overrides):
    """`BertBackbone.from_preset`: the backbone of a read preset (`reader.Preset`)."""
    backbone = cls.from_preset_config(preset.checked_backbone_config(overrides))
    if preset.kbert_layout:
        load_keras_weights(backbone, preset.weights_path)
    else:
        load_hf_backbone_weights(backbone, preset.weights_path, preset.tensors())
    return backbone


def load_keras_weights(model, path):
    """`model.load_weights(path)` for a kbert preset's weights file, refused
    before anything is loaded unless each weight in it is a floating-point
    tensor of finite values (`weight_check`): Keras would cast an int32
    tensor and load NaN without a word."""
    weight_check.check_keras_file(path)
    model.load_weights(path)


def load_hf_backbone_weights(backbone, path, tensors=None):
    """Loads a Hugging Face checkpoint's backbone tensors into `backbone`."""
    tensors = huggingface.read_checkpoint(path) if tensors is None else tensors
    prefix = huggingface.backbone_prefix(tensors, backbone.family)
    table = huggingface.backbone_table(backbone)
    if not any(prefix + "pooler." in k for k in tensors):
        # BertForMaskedLM, token classification and QA checkpoints have no
        # pooler; it keeps its initial weights. (Said only where the family's
        # classifier reads it: RoBERTa's task checkpoints never hold one.)
        if "ForSequenceClassification" in families.get(backbone.family).pooled:
            warnings.warn(f"{path} has no pooler weights; pooled_output uses a freshly initialised pooler.")
        table = [row for row in table if not row[1].startswith("pooler.")]
    unused = huggingface.unused_backbone_tensors(table, tensors, prefix, backbone.family)
    if unused:
        raise ValueError(
            f"The weights in {path} do not match its config: the config does not account for "
            f"{len(unused)} tensors, e.g. {', '.join(unused[:5])}. Check that config.json belongs to these weights."
        )
    huggingface.assign(table, tensors, prefix, source=path)
    return tensors


def save_backbone(backbone, folder):
    """Writes `backbone` in kbert's layout: `kbert_config.json` + weights,
    into a new or empty folder (`save_to_preset`'s first step)."""
    files.check_new_folder(folder, "save_to_preset")
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, files.KBERT_CONFIG), "w") as f:
        json.dump({"backbone": _plain_config(backbone)}, f, indent=2)
    backbone.save_weights(os.path.join(folder, KBERT_WEIGHTS))


def _plain_config(backbone):
    config = backbone.get_config()
    config.pop("name", None)
    config.pop("trainable", None)
    return config
