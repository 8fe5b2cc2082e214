"""Hugging Face BERT checkpoints <-> kbert: one table of names, read both ways.

Hugging Face's `modeling_bert.py` parameter and `config.json` names are the
lingua franca of BERT checkpoints. This module holds the backbone's (and the
config's); each task model's `hf_head_table()` holds its head's, in the same
row format. Importing runs the rows forwards (`assign`), exporting backwards
(`tensors_of`, `hf_config`). PyTorch's `Linear.weight` is `[out, in]` and
Keras' `Dense.kernel` is `[in, out]`, hence the transposes.
"""

import keras
import ml_dtypes
import numpy as np

from kbert.presets import weight_check
from kbert.presets.files import how_to_replace

T = "transpose"


_REQUIRED = ("vocab_size", "num_hidden_layers", "num_attention_heads", "hidden_size", "intermediate_size")
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
    """kbert `BertBackbone` arguments from a Hugging Face `config.json` dict
    (read from `source`, named in errors)."""
    if not isinstance(hf_config, dict):
        raise ValueError(f"{source} holds a JSON {type(hf_config).__name__}, not an object of settings.")
    missing = [key for key in _REQUIRED if key not in hf_config]
    if missing:
        raise ValueError(
            f"{source} lacks {', '.join(missing)}: a BERT config.json sets {', '.join(_REQUIRED)}. "
            "Use the config.json that came with these weights."
        )
    model_type = hf_config.get("model_type", "bert")
    if model_type != "bert":
        raise ValueError(f'{source} describes a "{model_type}" model; kbert loads BERT ("bert") checkpoints.')
    position_type = hf_config.get("position_embedding_type", "absolute")
    if position_type != "absolute":
        raise ValueError(
            f'config.json has position_embedding_type="{position_type}"; kbert supports "absolute" (BERT\'s).'
        )
    hidden_act = hf_config.get("hidden_act", "gelu")
    if hidden_act not in ACTIVATIONS:
        raise ValueError(
            f'config.json has hidden_act="{hidden_act}"; kbert supports {", ".join(ACTIVATIONS)}.'
        )
    config = {kbert: hf_config.get(hf, default) for kbert, hf, default in CONFIG_TABLE}
    return {**config, "activation": ACTIVATIONS[hidden_act]}


def hf_config(backbone_config):
    """The `config.json` settings of a `BertModel` from kbert `BertBackbone`
    arguments: `backbone_config` run backwards."""
    config = {hf: backbone_config[kbert] for kbert, hf, _ in CONFIG_TABLE}
    # kbert has one dropout rate for the embeddings, residuals and attention.
    config["attention_probs_dropout_prob"] = backbone_config["dropout"]
    config["hidden_act"] = next(hf for hf, kbert in ACTIVATIONS.items() if kbert == backbone_config["activation"])
    return {"model_type": "bert", **config, "position_embedding_type": "absolute", "initializer_range": 0.02}


def _dense(layer, name):
    return [(layer.kernel, f"{name}.weight", T), (layer.bias, f"{name}.bias", None)]


def _layer_norm(layer, name):
    return [(layer.gamma, f"{name}.weight", None), (layer.beta, f"{name}.bias", None)]


def backbone_table(backbone):
    """(kbert variable, Hugging Face name without the `bert.` prefix, transform)."""
    table = [
        (backbone.token_embedding.embeddings, "embeddings.word_embeddings.weight", None),
        (backbone.position_embedding.position_embeddings, "embeddings.position_embeddings.weight", None),
        (backbone.segment_embedding.embeddings, "embeddings.token_type_embeddings.weight", None),
        *_layer_norm(backbone.embeddings_layer_norm, "embeddings.LayerNorm"),
    ]
    for i, layer in enumerate(backbone.transformer_layers):
        hf = f"encoder.layer.{i}"
        table += [
            *_dense(layer.query, f"{hf}.attention.self.query"),
            *_dense(layer.key, f"{hf}.attention.self.key"),
            *_dense(layer.value, f"{hf}.attention.self.value"),
            *_dense(layer.attention_output, f"{hf}.attention.output.dense"),
            *_layer_norm(layer.attention_layer_norm, f"{hf}.attention.output.LayerNorm"),
            *_dense(layer.intermediate, f"{hf}.intermediate.dense"),
            *_dense(layer.output_dense, f"{hf}.output.dense"),
            *_layer_norm(layer.output_layer_norm, f"{hf}.output.LayerNorm"),
        ]
    table += _dense(backbone.pooled_dense, "pooler.dense")
    return table


def tensors_of(table, prefix="", dtype="float32"):
    """The checkpoint tensors of `table`'s variables as numpy arrays of
    `dtype` (a numpy or ml_dtypes name, e.g. "bfloat16"): the rows run
    backwards, named `prefix` + name."""
    tensors = {}
    for variable, name, transform in table:
        # (A LoRA layer's kernel is a tensor, the kernel with its update merged.)
        value = np.asarray(keras.ops.convert_to_numpy(variable))
        value = value.T if transform == T else value
        tensors[prefix + name] = np.ascontiguousarray(value.astype(_numpy_dtype(dtype)))
    return tensors


def _numpy_dtype(dtype):
    if str(dtype) == "bfloat16":  # numpy has none; ml_dtypes' comes with TensorFlow and JAX
        return ml_dtypes.bfloat16
    return np.dtype(dtype)


def read_checkpoint(path):
    """All tensors of a `.safetensors` or `.bin` file as numpy arrays.

    `.bin` files are pickles: they are read only with PyTorch's
    `weights_only=True`, which refuses anything but tensors.
    """
    if path.endswith(".safetensors"):
        from safetensors.numpy import load_file

        try:
            tensors = load_file(path)
        except Exception as e:  # safetensors raises its own SafetensorError, or OSError
            raise ValueError(
                f"{path} is not a readable safetensors file ({type(e).__name__}: {e}). {how_to_replace(path)}"
            ) from e
    else:
        try:
            import torch
        except ImportError as e:
            raise ImportError(
                f"{path} is a PyTorch checkpoint; reading it needs `pip install torch`, "
                "or convert it to model.safetensors."
            ) from e
        try:
            state = torch.load(path, map_location="cpu", weights_only=True)
        except (RuntimeError, OSError, EOFError, ValueError) as e:
            raise ValueError(
                f"{path} is not a readable PyTorch checkpoint ({type(e).__name__}: {e}). {how_to_replace(path)}"
            ) from e
        tensors = {k: v.float().numpy() if v.is_floating_point() else v.numpy() for k, v in state.items()}
    return {_modern_name(k): v for k, v in tensors.items()}


def _modern_name(name):
    # Checkpoints converted from TensorFlow long ago name LayerNorm's scale and
    # offset `gamma` and `beta`.
    if ".LayerNorm." in name:
        name = name.replace(".LayerNorm.gamma", ".LayerNorm.weight").replace(".LayerNorm.beta", ".LayerNorm.bias")
    return name


def backbone_prefix(tensors):
    """`"bert."` for task checkpoints (BertForX), `""` for bare BertModel ones."""
    return "bert." if any(k.startswith("bert.embeddings.") for k in tensors) else ""


def assign(table, tensors, prefix="", source="checkpoint"):
    """Checks every row of `table` against `tensors`, then assigns them all.

    Nothing is assigned unless every tensor is present with the right shape
    and holds finite floating-point values (`weight_check`), so a bad
    checkpoint never leaves a half-loaded model.
    """
    problems, values = [], []
    for variable, name, transform in table:
        key = prefix + name
        if key not in tensors:
            problems.append(f"missing tensor {key} (expected shape {_hf_shape(variable.shape, transform)})")
            continue
        value = tensors[key]
        if transform == T:
            value = value.T
        if tuple(value.shape) != tuple(variable.shape):
            problems.append(
                f"tensor {key} has shape {tuple(tensors[key].shape)}, "
                f"expected {_hf_shape(variable.shape, transform)}"
            )
            continue
        values.append((variable, value))
    if problems:
        raise ValueError(
            f"The weights in {source} do not match its config:\n  " + "\n  ".join(problems)
            + "\nCheck that config.json belongs to these weights."
        )
    weight_check.check((weight_check.problem(prefix + name, tensors[prefix + name]) for _, name, _ in table), source)
    for variable, value in values:
        variable.assign(np.asarray(value, dtype=variable.dtype))


def unused_backbone_tensors(table, tensors, prefix):
    """Backbone tensors in the checkpoint that the table does not read, e.g.
    the layers of a deeper model than config.json says."""
    used = {prefix + name for _, name, _ in table}
    backbone_parts = ("embeddings.", "encoder.", "pooler.")
    return sorted(
        k for k in tensors
        if k not in used and k[len(prefix):].startswith(backbone_parts) and not k.endswith("position_ids")
    )


def _hf_shape(shape, transform):
    shape = tuple(shape)
    return shape[::-1] if transform == T else shape
