"""PyTorch's implementations of kbert's primitives.

Uses private APIs (Keras' and `torch._fused_adamw_`, through
`kbert.backend.keras_private`); without one, the primitive that needs it falls
back to its `keras.ops` default (same values; only the speed changes).
"""

import math

import keras
import torch

from kbert.backend import default, keras_private

# Keras' torch device and the torch.Generator it seeds from a SeedGenerator
# (private Keras API), or None where this Keras has them not.
get_device = torch_seed_generator = None
if keras_private.available("get_device") and keras_private.available("torch_seed_generator"):
    get_device, torch_seed_generator = keras_private.get("get_device"), keras_private.get("torch_seed_generator")

# The fused AdamW kernel (what `torch.optim.AdamW(fused=True)` runs), with
# this keyword signature and on CPU as well as on GPU since PyTorch 2.4.
_FUSED_ADAMW = keras_private.available("_fused_adamw_") and torch.__version__ >= "2.4"
_fused_adamw = keras_private.get("_fused_adamw_") if _FUSED_ADAMW else None


def _torch_dtype(dtype):
    return getattr(torch, keras.backend.standardize_dtype(dtype))


def dense(x, kernel, bias, activation=None, training=False):
    # `linear` adds the bias inside the matmul (`addmm`): one kernel.
    y = torch.nn.functional.linear(x, kernel.T, bias)
    if activation is None:
        return y
    return keras.activations.gelu(y, approximate=activation == "gelu_approximate")


def random_int16(shape, seed_generator):
    # A full-range int64 (`random_(-2**63, None)`: two raw 32-bit words) is
    # drawn in half the time per bit of a ranged int32 draw, which reduces
    # every word modulo the range (docs/benchmarks.md, "Measurements behind
    # the code"). The generator is seeded as Keras seeds it.
    if torch_seed_generator is None:
        return default.random_int16(shape, seed_generator)
    last = shape[-1]
    words = torch.empty((*shape[:-1], (last + 3) // 4), dtype=torch.int64, device=get_device())
    words.random_(-(2**63), None, generator=torch_seed_generator(seed_generator))
    return words.view(torch.int16)[..., :last]


def keep_mask(bits, threshold, dtype):
    # The comparison writes its 0 / 1 in the target dtype: one pass, where a
    # comparison then a cast makes two.
    mask = torch.empty(bits.shape, dtype=_torch_dtype(dtype), device=bits.device)
    return torch.ge(bits, threshold, out=mask)


def fuses_keep_masks():
    # `keep_mask` is one pass and `dropout_add` one `addcmul`: applying the
    # 0/1 mask inside the neighbouring op saves passes, forward and back.
    return True


def dropout_add(x, h, mask, scale):
    return torch.addcmul(x, h, mask, value=scale)


def exact_bfloat16_softmax(with_gradient):
    # PyTorch's softmax of bfloat16 logits accumulates in float32 and rounds
    # once: a float32 softmax's probabilities cast to bfloat16. Its gradient
    # is computed in float32 too, from those probabilities.
    return True


def fuses_attention(dropout=False):
    # With dropout, a CPU's `scaled_dot_product_attention` falls back to its
    # math kernel, which draws a float per probability (`bernoulli_`): the
    # written-out attention with kbert's 16-bit masks is faster there
    # (docs/benchmarks.md, "Attention on PyTorch and JAX in training"). A
    # GPU's memory-efficient and flash kernels drop inside the kernel.
    return not dropout or (get_device is not None and str(get_device()).startswith("cuda"))


def attention(query, key, value, mask, dropout_rate=0.0):
    # One `scaled_dot_product_attention`, dropout included: on a GPU its
    # fused kernels (memory-efficient, flash) draw the dropout mask inside the
    # kernel, so the [batch, heads, length, length] probabilities are never
    # written out, forward or back. Its dropout draws from PyTorch's
    # generator, which `keras.utils.set_random_seed` seeds.
    context = torch.nn.functional.scaled_dot_product_attention(
        query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2), attn_mask=mask,
        dropout_p=float(dropout_rate))
    return context.transpose(1, 2)


def fuses_adamw(variables):
    return _FUSED_ADAMW and all(keras.backend.standardize_dtype(v.dtype) == "float32" for v in variables)


def adamw_step(variables, grads, momentums, velocities, step, learning_rate, beta_1, beta_2, epsilon,
               weight_decay):
    # One kernel reads and writes each weight and its two moments once, where
    # Keras' update makes about a dozen passes. Keras adds epsilon to sqrt(v)
    # before v's bias correction and PyTorch after it, hence the kernel's
    # epsilon / sqrt(1 - beta_2 ** step).
    # (The optimizer has checked `fuses_adamw`; only the kernel's presence is
    # checked again here, not every weight's dtype on every step.)
    if not _FUSED_ADAMW:
        return default.adamw_step(variables, grads, momentums, velocities, step, learning_rate, beta_1, beta_2,
                                  epsilon, weight_decay)
    with torch.no_grad():
        steps = torch.tensor(float(step), dtype=torch.float32)
        _fused_adamw(
            [v.value for v in variables],
            list(grads),
            [m.value for m in momentums],
            [v.value for v in velocities],
            [],  # amsgrad's maxima: none
            [steps] * len(variables),
            lr=float(learning_rate),
            beta1=beta_1,
            beta2=beta_2,
            weight_decay=weight_decay,
            eps=epsilon / math.sqrt(1 - beta_2**step),
            amsgrad=False,
            maximize=False,
        )


def take_per_row(x, index):
    # An expanded view of the index: no [..., rows, count] index is built.
    return torch.gather(x, -1, index.long().expand(*x.shape[:-2], *index.shape))
