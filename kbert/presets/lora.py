"""LoRA adapters alone in a safetensors file: the adapters' tensors by
weight path, with the rank and the adapted layers in its metadata."""

from safetensors import safe_open
from safetensors.numpy import save_file


def write_adapters(path, tensors, rank, layer_names):
    """Writes `tensors` (numpy, by weight path) as adapters of `rank` on `layer_names`."""
    save_file(tensors, path, metadata={"lora_rank": str(rank), "lora_layer_names": ",".join(layer_names)})


def read_adapters(path):
    """`(rank, layer_names, tensors)` from a file `write_adapters` wrote."""
    with safe_open(path, framework="numpy") as f:
        metadata, tensors = f.metadata() or {}, {k: f.get_tensor(k) for k in f.keys()}
    if "lora_rank" not in metadata:
        raise ValueError(f"{path} holds no LoRA adapters written by save_lora_weights (no lora_rank in it).")
    return int(metadata["lora_rank"]), tuple(metadata["lora_layer_names"].split(",")), tensors
