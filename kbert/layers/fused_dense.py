"""A `keras.layers.Dense` (and BERT's GELU) applied as one fusable call.

Keras applies a dense layer as a batched matmul and a separate bias add;
`kbert.backend.dense` applies it in the form each backend fuses (TensorFlow:
a 2-D `MatMul` + `BiasAdd`, then the GELU in the form oneDNN fuses;
PyTorch: `linear`; JAX's XLA fuses the plain form itself). The layer keeps
its weights, names and checkpoints; only how it is applied changes.
"""

import contextlib
import contextvars

import keras
from keras import ops

from kbert import backend
from kbert.layers.gelu import gelu

# {layer: (kernel, bias)} already in the layer's compute dtype, read instead
# of the layer's variables inside `weights_cast_once`: a context variable, so
# that it holds in the thread (and context) that exports alone, never in a
# model another thread traces meanwhile, and no layer or module is changed.
# (Not decided at build: the same layers train, and read their variables, before and after an export.)
_CAST = contextvars.ContextVar("kbert_weights_cast_once", default={})


@contextlib.contextmanager
def weights_cast_once(weights):
    """Within it, in this thread, `fused_dense(layer, ...)` applies
    `weights[layer]`, a `(kernel, bias)` pair already in the layer's compute
    dtype, instead of casting the layer's variables on every call: for a
    served model, whose weights no longer change
    (`kbert.serving.saved_model.write_saved_model`), a mixed-precision
    BERT-base then skips casting its 85M float32 weights to bfloat16 on
    every request. Only functions traced within it read them."""
    token = _CAST.set({**_CAST.get(), **weights})
    try:
        yield
    finally:
        _CAST.reset(token)


def fused_dense(layer, x, activation=None, compute_dtype=None, training=False):
    """`activation(layer(x))` for a built `keras.layers.Dense`; `activation`
    is None, "gelu" or "gelu_approximate". `compute_dtype`: the dtype of the
    matmul (the calling layer's; defaults to `layer.compute_dtype`).
    `training`: whether a gradient will be taken (`kbert.backend.dense`
    applies the GELU in the form that trains faster then). LoRA
    is kept (`layer.kernel` includes it); a quantized layer, or one without
    a bias or with its own activation, is simply called."""
    plain = layer.use_bias and layer.activation is keras.activations.linear
    if getattr(layer, "quantization_mode", None) or not plain:
        # Quantized kernels (and other variants) go through Keras' own call.
        y = layer(x)
        return gelu(y, activation) if activation is not None else y
    compute_dtype = compute_dtype or layer.compute_dtype
    kernel, bias = _CAST.get().get(layer, (layer.kernel, layer.bias))
    kernel, bias = ops.cast(kernel, compute_dtype), ops.cast(bias, compute_dtype)
    return backend.dense(ops.cast(x, compute_dtype), kernel, bias, activation, training=bool(training))
