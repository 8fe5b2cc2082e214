"""Which precision suits this machine: bfloat16 matrix multiplications where
the hardware runs them fast, float32 elsewhere."""

import functools
import hashlib
import json
import os
import signal
import subprocess
import sys
import warnings

from kbert.presets.files import cache_dir

# CPU flags (Linux /proc/cpuinfo) of bfloat16 matrix units: Intel AMX, and
# AVX512-BF16 (Intel Cooper Lake and later, AMD Zen 4 and later).
_BF16_CPU_FLAGS = ("amx_bf16", "avx512_bf16")


def _cpuinfo(field):
    """The first CPU's `field` in Linux' /proc/cpuinfo ("" elsewhere)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith(field):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""


def _cpu_flags():
    return set(_cpuinfo("flags").split())


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
    `fast_bfloat16()` (and bfloat16 runs here: `bfloat16_crash()`), else
    `"float32"` (variables, LayerNorm, softmax and losses stay float32 either
    way). Other values come back unchanged, after a check that a bfloat16
    policy will not crash the process (ValueError if it would)."""
    if dtype == "auto":
        if not fast_bfloat16():
            return "float32"
        crash = bfloat16_crash()
        if crash:
            warnings.warn(f"dtype='auto' chose float32: {crash}", stacklevel=2)
            return "float32"
        return "mixed_bfloat16"
    name = _policy_name(dtype)
    if "bfloat16" in name:
        crash = bfloat16_crash()
        if crash:
            raise ValueError(
                f"dtype={name!r} can't run here: {crash}. Use dtype='float32' or 'auto', "
                "or the PyTorch backend (KERAS_BACKEND=torch), or set TF_ENABLE_ONEDNN_OPTS=0 before "
                "TensorFlow is imported (slow bfloat16 kernels without oneDNN)."
            )
    return dtype


def _policy_name(dtype):
    """The policy name of a layer's `dtype` argument: None (the global policy),
    a name, a `DTypePolicy`, or its serialized config."""
    import keras

    if dtype is None:
        return keras.config.dtype_policy().name
    if isinstance(dtype, dict):
        return str(dtype.get("config", {}).get("name", ""))
    return str(getattr(dtype, "name", dtype))


# What the probe runs in a fresh process: a small kbert encoder block in
# mixed_bfloat16, eagerly and in a traced training step (where TensorFlow's
# graph rewriter fuses oneDNN matmuls, bias adds and GELU), with gradients.
_PROBE = """
import sys
sys.path.insert(0, {root!r})
import numpy as np
import tensorflow as tf
from kbert.layers.transformer_encoder import TransformerEncoder

layer = TransformerEncoder(num_heads=2, intermediate_dim=32, dtype="mixed_bfloat16")
x = np.random.default_rng(0).normal(size=(2, 8, 16)).astype("float32")
layer(x, training=True)


@tf.function
def step(x):
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(tf.cast(layer(x, training=True), "float32"))
    return tape.gradient(loss, layer.trainable_variables)


step(x)
print("bfloat16 ok")
"""


def bfloat16_crash():
    """None where bfloat16 kernels run on this machine, else why not.

    TensorFlow sends CPU bfloat16 matmuls to oneDNN wherever its own CPU check
    says bfloat16 is supported, and on some CPUs that kernel kills the process
    (a segmentation fault or abort, not an exception; seen when oneDNN's
    instruction set is narrower than TensorFlow assumes). So on TensorFlow
    without an accelerator, a small bfloat16 training step is first run in a
    child process, once per machine and TensorFlow version (the answer is
    kept in `$KBERT_HOME`). PyTorch, JAX and accelerators need no probe."""
    import keras

    if keras.backend.backend() != "tensorflow" or _accelerator_bfloat16() is not None:
        return None
    return _tensorflow_bfloat16_crash()


@functools.cache
def _tensorflow_bfloat16_crash():
    import tensorflow as tf

    flags = hashlib.sha256(" ".join(sorted(_cpu_flags())).encode()).hexdigest()[:16]
    knobs = [os.environ.get(k, "") for k in ("ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA", "TF_ENABLE_ONEDNN_OPTS")]
    key = "|".join([tf.__version__, _cpuinfo("model name"), flags, *knobs])
    path = os.path.join(cache_dir(), "bfloat16_probe.json")
    try:
        with open(path, encoding="utf-8") as f:
            known = json.load(f)
    except (OSError, ValueError):
        known = {}
    if key not in known:
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        try:
            death = run_probe(_PROBE.format(root=root), env={"KERAS_BACKEND": "tensorflow"})
        except subprocess.TimeoutExpired:
            death = None
        # Only a killed process counts: a Python exception would be raised
        # just as clearly by the model itself.
        crashed = death is not None and death.startswith("killed")
        known[key] = f"TensorFlow's bfloat16 kernels crash on this CPU ({death})" if crashed else None
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w", encoding="utf-8") as f:
                json.dump(known, f, indent=1)
        except OSError:
            pass  # a read-only home: probe again next time
    return known[key]


def run_probe(source, env=None, timeout=300):
    """Run Python `source` in a fresh interpreter; None if it exits cleanly,
    else how it died ("killed by SIGSEGV", "exit status 1: <last line>")."""
    result = subprocess.run(
        [sys.executable, "-c", source], capture_output=True, text=True, timeout=timeout, check=False,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", **(env or {})},
    )
    if result.returncode == 0:
        return None
    if result.returncode < 0:
        return f"killed by {signal.Signals(-result.returncode).name}"
    last = (result.stderr.strip().splitlines() or [""])[-1]
    return f"exit status {result.returncode}: {last}"
