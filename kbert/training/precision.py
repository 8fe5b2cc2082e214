"""Which precision suits this machine: bfloat16 matrix multiplications where
the hardware runs them fast, float32 elsewhere."""

import os

# CPU flags (Linux /proc/cpuinfo) of bfloat16 matrix units: Intel AMX, and
# AVX512-BF16 (Intel Cooper Lake and later, AMD Zen 4 and later).
_BF16_CPU_FLAGS = ("amx_bf16", "avx512_bf16")


def _cpu_flags():
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def _has_fast_bfloat16_accelerator():
    """A TPU, or a GPU of compute capability 8.0 or more (Ampere and later)."""
    import keras

    backend = keras.backend.backend()
    if backend == "jax":
        import jax

        return any(d.platform == "tpu" or (d.platform == "gpu" and _gpu_bf16(d)) for d in jax.devices())
    if backend == "torch":
        import torch

        return torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    import tensorflow as tf

    if tf.config.list_logical_devices("TPU"):
        return True
    for gpu in tf.config.list_physical_devices("GPU"):
        capability = tf.config.experimental.get_device_details(gpu).get("compute_capability", (0, 0))
        if capability >= (8, 0):
            return True
    return False


def _gpu_bf16(device):
    capability = getattr(device, "compute_capability", "0")
    try:
        return float(capability) >= 8.0
    except ValueError:
        return False


def fast_bfloat16():
    """Whether this machine multiplies matrices faster in bfloat16 than in
    float32: a CPU with AMX or AVX512-BF16, a GPU from Ampere on, or a TPU.
    `KBERT_PRECISION=float32` (or `mixed_bfloat16`) overrides the answer."""
    forced = os.environ.get("KBERT_PRECISION")
    if forced:
        return forced == "mixed_bfloat16"
    return bool(_cpu_flags().intersection(_BF16_CPU_FLAGS)) or _has_fast_bfloat16_accelerator()


def resolve_dtype(dtype):
    """`dtype="auto"` as a Keras dtype policy name: `"mixed_bfloat16"` where
    `fast_bfloat16()`, else `"float32"` (variables, LayerNorm, softmax and
    losses stay float32 either way). Other values come back unchanged."""
    if dtype != "auto":
        return dtype
    return "mixed_bfloat16" if fast_bfloat16() else "float32"
