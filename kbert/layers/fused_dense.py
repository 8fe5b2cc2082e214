"""A `keras.layers.Dense` (and BERT's GELU) applied as one fusable call.

Keras applies a dense layer as a batched matmul and a separate bias add. On
TensorFlow, a 2-D `MatMul` + `BiasAdd` (+ GELU) is the pattern oneDNN's graph
rewriter fuses into one kernel (for BERT-base inference the feed-forward's
exact GELU alone otherwise costs a tenth of the time); on PyTorch,
`torch.nn.functional.linear` adds the bias inside the matmul (`addmm`). JAX's
XLA fuses the plain form itself. The layer keeps its weights, names and
checkpoints; only how it is applied changes.
"""

import keras
from keras import ops

from kbert.layers.gelu import gelu


def fused_dense(layer, x, activation=None, compute_dtype=None):
    """`activation(layer(x))` for a built `keras.layers.Dense`; `activation`
    is None, "gelu" or "gelu_approximate". `compute_dtype`: the dtype of the
    matmul (the calling layer's; defaults to `layer.compute_dtype`). LoRA
    is kept (`layer.kernel` includes it); a quantized layer, or one without
    a bias or with its own activation, is simply called."""
    plain = layer.use_bias and layer.activation is keras.activations.linear
    backend = keras.backend.backend()
    if getattr(layer, "quantization_mode", None) or not plain:
        # Quantized kernels (and other variants) go through Keras' own call.
        y = layer(x)
    else:
        compute_dtype = compute_dtype or layer.compute_dtype
        kernel = ops.cast(layer.kernel, compute_dtype)
        bias = ops.cast(layer.bias, compute_dtype)
        x = ops.cast(x, compute_dtype)
        if backend == "tensorflow":
            import tensorflow as tf

            flat = tf.nn.bias_add(tf.matmul(tf.reshape(x, [-1, x.shape[-1]]), kernel), bias)
            if activation is not None:
                flat = tf.nn.gelu(flat, approximate=activation == "gelu_approximate")
            return tf.reshape(flat, tf.concat([tf.shape(x)[:-1], [kernel.shape[-1]]], axis=0))
        if backend == "torch":
            import torch

            y = torch.nn.functional.linear(x, kernel.T, bias)
        else:
            y = ops.matmul(x, kernel) + bias
    return gelu(y, activation) if activation is not None else y
