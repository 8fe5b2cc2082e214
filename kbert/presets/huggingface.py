"""Hugging Face checkpoints <-> kbert: tables of names, read both ways.

transformers' parameter and `config.json` names are the lingua franca of
checkpoints. Each family module (`kbert.families`) holds its backbone's table
and config mapping; each task model's `hf_head_table()` holds its head's, in
the same row format (`kbert.families.tables`). Importing runs the rows
forwards (`assign`), exporting backwards (`tensors_of`, `hf_config`).
"""

import pickle

import keras
import ml_dtypes
import numpy as np

from kbert import families
from kbert.families.tables import Part, T
from kbert.presets import weight_check
from kbert.presets.files import how_to_replace


def backbone_config(hf_config, source="config.json"):
    """kbert `BertBackbone` arguments from a Hugging Face `config.json` dict
    (read from `source`, named in errors), by its family (`model_type`)."""
    return families.backbone_config(hf_config, source)


def hf_config(backbone_config):
    """The `config.json` settings of a backbone's transformers model:
    `backbone_config` run backwards."""
    return families.hf_config(backbone_config)


def backbone_table(backbone):
    """(kbert variable, Hugging Face name without the task's prefix
    (`bert.`, `roberta.`), transform), by the backbone's family."""
    return families.get(backbone.family).backbone_table(backbone)


def tensors_of(table, prefix="", dtype="float32"):
    """The checkpoint tensors of `table`'s variables as numpy arrays of
    `dtype` (a numpy or ml_dtypes name, e.g. "bfloat16"): the rows run
    backwards, named `prefix` + name."""
    parts = {}
    for variable, name, transform in table:
        # (A LoRA layer's kernel is a tensor, the kernel with its update merged.)
        value = np.asarray(keras.ops.convert_to_numpy(variable))
        index = transform.index if isinstance(transform, Part) else 0
        value = value.T if _transpose(transform) else value
        parts.setdefault(prefix + name, {})[index] = value.astype(_numpy_dtype(dtype))
    # A fused tensor's parts, stacked in order along its first axis.
    return {name: np.ascontiguousarray(np.concatenate([blocks[i] for i in sorted(blocks)]))
            for name, blocks in parts.items()}


def _transpose(transform):
    return (transform.transform if isinstance(transform, Part) else transform) == T


def _to_variable(value, transform):
    """A checkpoint tensor as the value of a table row's variable."""
    if isinstance(transform, Part):
        value = np.split(value, transform.count)[transform.index]
    return value.T if _transpose(transform) else value


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
        except pickle.UnpicklingError as e:  # weights_only refused an object that is not a tensor
            raise ValueError(
                f"{path} holds pickled objects other than tensors, which could run code as they load; kbert does "
                "not unpickle them. Use the checkpoint's model.safetensors, or a .bin file of tensors alone."
            ) from e
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


def backbone_prefix(tensors, family="bert"):
    """The family's prefix (`"bert."`) for task checkpoints (BertForX), `""`
    for bare BertModel ones."""
    prefix = families.get(family).prefix
    return prefix if any(k.startswith(prefix + "embeddings.") for k in tensors) else ""


def check_family(tensors, family, source):
    """Refuses a checkpoint that holds no backbone weight of `family` (the
    config's `model_type`), bare or under the family's task prefix: its
    weights are another family's (RoBERTa's under `model_type: bert`)."""
    kind = families.get(family)
    if not any(kind.reads(name) or kind.reads(name, kind.prefix) for name in tensors):
        firsts = sorted({name.split(".")[0] + "." for name in tensors})
        raise ValueError(
            f"The weights in {source} do not match its config: config.json describes a {kind.name} model "
            f'(model_type "{family}"), whose weights start with {" or ".join(kind.prefix + p for p in kind.backbone_parts)}, '
            f"but these start with {', '.join(firsts[:5])}. Use the config.json that came with these weights."
        )


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
        if tuple(tensors[key].shape) != _hf_shape(variable.shape, transform):
            problems.append(
                f"tensor {key} has shape {tuple(tensors[key].shape)}, "
                f"expected {_hf_shape(variable.shape, transform)}"
            )
            continue
        values.append((variable, _to_variable(tensors[key], transform)))
    if problems:
        raise ValueError(
            f"The weights in {source} do not match its config:\n  " + "\n  ".join(problems)
            + "\nCheck that config.json belongs to these weights."
        )
    # (Each tensor once: a fused one is read by several rows.)
    names = dict.fromkeys(prefix + name for _, name, _ in table)
    weight_check.check((weight_check.problem(name, tensors[name]) for name in names), source)
    for variable, value in values:
        variable.assign(np.asarray(value, dtype=variable.dtype))


def fits(row, tensors, prefix=""):
    """Whether a table row's tensor has the shape of its variable."""
    variable, name, transform = row
    return tuple(tensors[prefix + name].shape) == _hf_shape(variable.shape, transform)


def unused_backbone_tensors(table, tensors, prefix, family="bert"):
    """Backbone tensors in the checkpoint that the table does not read, e.g.
    the layers of a deeper model than config.json says: those under the
    family's `backbone_parts` (DistilBERT's `transformer.`, ELECTRA's
    `embeddings_project.`)."""
    used = {prefix + name for _, name, _ in table}
    reads = families.get(family).reads
    return sorted(k for k in tensors if k not in used and reads(k, prefix) and not k.endswith("position_ids"))


def _hf_shape(shape, transform):
    shape = tuple(shape)
    shape = shape[::-1] if _transpose(transform) else shape
    if isinstance(transform, Part):  # one of `count` blocks of the first axis
        shape = (shape[0] * transform.count, *shape[1:])
    return shape
