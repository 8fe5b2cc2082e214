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


def _accelerator_bfloat16():
    """Whether the backend's accelerator multiplies bfloat16 fast: True for a
    TPU or a GPU of compute capability 8.0 or more (Ampere and later), False
    for an older GPU, None where there is no accelerator (the CPU computes)."""
    import keras

    backend = keras.backend.backend()
    if backend == "jax":
        import jax

        devices = [d for d in jax.devices() if d.platform in ("tpu", "gpu")]
        if not devices:
            return None
        return any(d.platform == "tpu" or _gpu_bf16(d) for d in devices)
    if backend == "torch":
        import torch

        return torch.cuda.is_bf16_supported() if torch.cuda.is_available() else None
    import tensorflow as tf

    if tf.config.list_logical_devices("TPU"):
        return True
    gpus = tf.config.list_physical_devices("GPU")
    if not gpus:
        return None
    return any(
        tf.config.experimental.get_device_details(gpu).get("compute_capability", (0, 0)) >= (8, 0) for gpu in gpus
    )


def _gpu_bf16(device):
    capability = getattr(device, "compute_capability", "0")
    try:
        return float(capability) >= 8.0
    except ValueError:
        return False


def fast_bfloat16():
    """Whether this machine multiplies matrices faster in bfloat16 than in
    float32: a GPU from Ampere on or a TPU where the backend has one, else a
    CPU with AMX or AVX512-BF16 (not under JAX, whose CPU backend gains
    nothing from bfloat16).
    `KBERT_PRECISION=float32` (or `mixed_bfloat16`) overrides the answer."""
    forced = os.environ.get("KBERT_PRECISION")
    if forced:
        return forced == "mixed_bfloat16"
    accelerator = _accelerator_bfloat16()
    if accelerator is not None:
        return accelerator
    import keras

    if keras.backend.backend() == "jax":
        # XLA's CPU backend does not use the CPU's bfloat16 instructions: on
        # this project's AVX512-BF16 machine kbert's MiniLM step ran 13.6 vs
        # 13.3 seq/s (training) and 57.1 vs 56.3 (inference), so float32,
        # which costs no precision, is the better choice there.
        return False
    return bool(_cpu_flags().intersection(_BF16_CPU_FLAGS))


def resolve_dtype(dtype):
    """`dtype="auto"` as a Keras dtype policy name: `"mixed_bfloat16"` where
    `fast_bfloat16()`, else `"float32"` (variables, LayerNorm, softmax and
    losses stay float32 either way). Other values come back unchanged."""
    if dtype != "auto":
        return dtype
    return "mixed_bfloat16" if fast_bfloat16() else "float32"
