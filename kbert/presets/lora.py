"""LoRA files: safetensors of the weights a LoRA run trained, by weight
path (the adapters, `.../lora_kernel_a` and `_b`, and a task's head where
it was saved with them), with the rank, the adapted layers and the adapters
already merged into the kernels they were trained on in its metadata."""

import collections
import hashlib

import numpy as np
from safetensors import safe_open
from safetensors.numpy import save_file

LoRAFile = collections.namedtuple("LoRAFile", ["rank", "layer_names", "trained_on", "adapters", "others"])
LoRAFile.__doc__ = """A read LoRA file: `adapters` and `others` (a head's
weights) by weight path, and `trained_on`, the fingerprints of the adapters
merged into the kernels the adapters were trained on (None in files written
before kbert recorded it)."""


def is_adapter(path):
    return "lora_kernel" in path


def fingerprint(adapters):
    """A short name for a set of adapters (numpy, by weight path), from their
    values: what a backbone records of the adapters merged into its kernels
    (`BertBackbone.lora_merged`)."""
    digest = hashlib.sha256()
    for path in sorted(adapters):
        value = np.ascontiguousarray(adapters[path])
        digest.update(f"{path}:{value.dtype}:{value.shape}:".encode())
        digest.update(value.tobytes())
    return digest.hexdigest()[:16]


def write(path, tensors, rank, layer_names, trained_on):
    """Writes `tensors` (numpy, by weight path): adapters of `rank` on
    `layer_names`, trained on kernels into which the adapters `trained_on`
    (fingerprints) were merged, and any other weights trained with them."""
    save_file(tensors, path, metadata={"lora_rank": str(rank), "lora_layer_names": ",".join(layer_names),
                                       "lora_trained_on": ",".join(trained_on)})


def read(path):
    """The `LoRAFile` that `write` wrote to `path`."""
    with safe_open(path, framework="numpy") as f:
        metadata, tensors = f.metadata() or {}, {k: f.get_tensor(k) for k in f.keys()}
    if "lora_rank" not in metadata:
        raise ValueError(f"{path} holds no LoRA adapters written by save_lora_weights (no lora_rank in it).")
    trained_on = metadata.get("lora_trained_on")
    return LoRAFile(int(metadata["lora_rank"]), tuple(metadata["lora_layer_names"].split(",")),
                    None if trained_on is None else tuple(filter(None, trained_on.split(","))),
                    {k: v for k, v in tensors.items() if is_adapter(k)},
                    {k: v for k, v in tensors.items() if not is_adapter(k)})
