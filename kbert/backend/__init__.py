"""The few primitives whose fastest form differs by backend.

Layers call these and otherwise read as plain `keras.ops` code. Each
primitive's default is `keras.ops` (`kbert/backend/default.py`); a backend's
module (`tensorflow.py`, `torch.py`, `jax.py`) implements the ones it runs
faster, with the same values. Private framework APIs appear only in those
modules, each guarded so that without it the default runs. This package is
kbert's bottom layer: it imports nothing else from kbert.
"""

import functools
import importlib
import types

import keras

from kbert.backend import default

PRIMITIVES = (
    "dense",
    "layer_norm",
    "random_int16",
    "random_int16_is_cheap",
    "keep_mask",
    "fuses_keep_masks",
    "dropout_add",
    "exact_bfloat16_softmax",
    "fuses_attention",
    "attention",
    "fuses_adamw",
    "adamw_step",
    "adam_update",
    "embedding_rows",
    "take_per_row",
    "rows_once",
    "clip_by_global_norm",
    "gather_replicas",
    "sum_replicas",
    "remat_in_turn",
)


@functools.cache
def _implementation(backend_name):
    """The primitives for `backend_name`: its module's, else the defaults."""
    module = None
    if backend_name in ("tensorflow", "jax", "torch"):
        module = importlib.import_module(f"kbert.backend.{backend_name}")
    return types.SimpleNamespace(**{name: getattr(module, name, getattr(default, name)) for name in PRIMITIVES})


def _current():
    return _implementation(keras.backend.backend())


def dense(x, kernel, bias, activation=None, training=False):
    """`activation(x @ kernel + bias)` as one fusable call; `x` of any rank
    >= 2 (also with unknown dimensions in a TensorFlow graph), `activation`
    None, "gelu" (exact) or "gelu_approximate". TensorFlow: a 2-D `MatMul` +
    `BiasAdd` (one `_FusedMatMul`), the exact GELU in its Erf form (which
    oneDNN, where on, fuses into the matmul; cheaper than `tf.nn.gelu`'s
    Erfc where not), in `training` with a hand-written gradient (faster
    forward and back than autodiff's in bfloat16; docs/benchmarks.md,
    "Measurements behind the code"). PyTorch: `linear` (`addmm`)."""
    return _current().dense(x, kernel, bias, activation, training)


def layer_norm(x, gamma, beta, epsilon, training=False):
    """LayerNorm over the last axis, `(x - mean) / sqrt(variance + epsilon)
    * gamma + beta`, computed in at least float32 and returned in `x`'s
    dtype, as `keras.ops.layer_normalization`. TensorFlow, in `training`:
    with its gradient written out (far fewer ops per LayerNorm in
    a traced training step than autodiff's through the mean and variance,
    most of those shape arithmetic; docs/benchmarks.md, "Measurements behind
    the code"); on a CPU where every dimension is known, one XLA computation
    forward, and in training one back."""
    return _current().layer_norm(x, gamma, beta, epsilon, training)


def random_int16(shape, seed_generator):
    """Uniform int16 of `shape` (16 independent random bits per element),
    drawn from `seed_generator` (a `keras.random.SeedGenerator`)."""
    return _current().random_int16(shape, seed_generator)


def random_int16_is_cheap():
    """Whether `random_int16` draws fewer random words than a float per
    element (not on JAX, whose `randint` draws two words per element)."""
    return _current().random_int16_is_cheap()


def keep_mask(bits, threshold, dtype):
    """`bits >= threshold` as 1 / 0 in `dtype` (PyTorch: in one pass)."""
    return _current().keep_mask(bits, threshold, dtype)


def fuses_keep_masks():
    """Whether dropout runs faster as a `keep_mask` applied inside the
    neighbouring op (`dropout_add`, attention's values) than as its own op."""
    return _current().fuses_keep_masks()


def dropout_add(x, h, mask, scale):
    """`x + h * mask * scale`: a residual add after dropout with a given 0/1
    `mask` and Python float `scale` (PyTorch: one `addcmul`)."""
    return _current().dropout_add(x, h, mask, scale)


def exact_bfloat16_softmax(with_gradient):
    """Whether a softmax of bfloat16 logits gives the float32 softmax's
    probabilities rounded to bfloat16, so the logits need no cast to
    float32. `with_gradient`: where a gradient is taken, which must then be
    computed in float32 too. PyTorch's does both; TensorFlow's gives the
    probabilities where oneDNN's CPU kernel runs it (observed once per
    process) and computes its gradient in bfloat16 ops."""
    return _current().exact_bfloat16_softmax(with_gradient)


def fuses_attention(dropout=False):
    """Whether `attention` (fused) is faster than attention written out
    (queries scaled, the mask added as a bias, softmax, and the two einsums)
    where no probabilities are needed; `dropout`: with dropout on the
    probabilities, in training. PyTorch's `scaled_dot_product_attention`
    fuses it (with dropout on a GPU only: on a CPU its kernel with dropout is
    the unfused one), JAX's `jax.nn.dot_product_attention` without dropout;
    TensorFlow's runs as separate ops, scaling and masking the `[batch,
    heads, length, length]` logits in float32."""
    return _current().fuses_attention(dropout)


def attention(query, key, value, mask, dropout_rate=0.0):
    """`softmax(query . key / sqrt(head_dim))`, keys where the boolean `mask`
    is False left out, with dropout at `dropout_rate` on the probabilities,
    times `value`: `keras.ops.dot_product_attention` with dropout. `query`
    `[batch, query_length, heads, head_dim]`, `key` and `value` `[batch,
    length, heads, head_dim]`, `mask` broadcastable to `[batch, heads,
    query_length, length]` or None. Only where `fuses_attention(dropout_rate
    > 0)`. PyTorch: one `scaled_dot_product_attention`, whose dropout draws
    from PyTorch's own generator (seeded by `keras.utils.set_random_seed`),
    not from a Keras `SeedGenerator`."""
    return _current().attention(query, key, value, mask, dropout_rate)


def fuses_adamw(variables):
    """Whether `adamw_step` is one fused kernel for `variables` (PyTorch,
    float32 weights); elsewhere an optimizer keeps Keras' own update."""
    return _current().fuses_adamw(variables)


def adamw_step(variables, grads, momentums, velocities, step, learning_rate, beta_1, beta_2, epsilon,
               weight_decay):
    """Keras AdamW's update of `variables` in place: `w -= learning_rate *
    weight_decay * w`, then Adam's step with Keras' epsilon (added to
    `sqrt(v)` before v's bias correction). `step` (counting from 1) and
    `learning_rate` are Python numbers; `momentums` and `velocities` are the
    optimizer's slots for `variables`. One fused kernel where
    `fuses_adamw(variables)`; an optimizer keeps its own update elsewhere."""
    _current().adamw_step(variables, grads, momentums, velocities, step, learning_rate, beta_1, beta_2, epsilon,
                          weight_decay)


def adam_update(variable, gradient, m, v, beta_1_power, beta_2_power, learning_rate, beta_1, beta_2, epsilon):
    """Adam's update of one variable in place as one op where the backend has
    it (TensorFlow's `ResourceApplyAdam`, float32 weights, a dense gradient,
    not on a TPU), with Keras' formula: `epsilon` added to `sqrt(v)` before
    v's bias correction. Called inside Keras' per-variable update (under a
    `tf.distribute` strategy, once per replica's copy). True where done;
    False: the caller updates the variable itself."""
    return _current().adam_update(variable, gradient, m, v, beta_1_power, beta_2_power, learning_rate, beta_1,
                                  beta_2, epsilon)


def embedding_rows(table, ids):
    """`table[ids]`, the rows of an embedding's Keras variable `table`.
    Under a mixed policy a layer's call autocasts the table, so the default
    casts all of it to gather a batch's rows. TensorFlow: a `ResourceGather`
    on the variable itself, in its dtype, for the caller to cast. (A
    `GatherV2` of the float32 value followed by a cast to bfloat16 would not
    do: Grappler's arithmetic optimizer, `ReorderCastLikeAndValuePreserving`,
    rewrites it into a cast of the whole table, then the gather.)"""
    return _current().embedding_rows(table, ids)


def take_per_row(x, index):
    """`x[..., i, index[i, j]]`: from each row `i` of `x` (`[..., rows,
    width]`), the entries at `index[i]` (`[rows, count]` ints, the same for
    every leading index), `[..., rows, count]` (DeBERTa's relative-position
    logits, read from each query's or key's products with the relative
    table). Default: one `take` through a flat index of `[rows, count]`
    (TensorFlow's fastest; on JAX as fast as `take_along_axis` forward, and
    faster backward); PyTorch: `torch.gather` of an expanded view of the
    index (Keras' `take` there is an `index_select` across the last axis,
    about 4x slower on a CPU)."""
    return _current().take_per_row(x, index)


def rows_once(gradient):
    """`gradient` with each row once where it is an embedding's sparse
    gradient (TensorFlow's `tf.IndexedSlices` hold a row once per use in the
    batch, and Keras' global norm squares the slices before adding them up,
    which is not the gradient's norm): on TensorFlow the dense gradient, as
    clipping would make it anyway. Any other gradient as it is."""
    return _current().rows_once(gradient)


def clip_by_global_norm(grads, clip_norm):
    """`grads` (a list of dense tensors or None) times `clip_norm / max(norm,
    clip_norm)`, `norm` being their global norm; NaN where the norm is not
    finite: Keras' `global_clipnorm`. TensorFlow: each sum of squares in one
    op (`tf.nn.l2_loss`), and no multiplication where the factor is 1 (the
    norm is at most `clip_norm`): MiniLM's step then reads its 22.7M
    gradients once or twice instead of three or four times."""
    return _current().clip_by_global_norm(grads, clip_norm)


def gather_replicas(x):
    """`x` from every replica of a `tf.distribute` strategy, concatenated
    along axis 0 in replica order, with a gradient to each replica's own
    rows: the whole global batch, e.g. as in-batch negatives. `x` itself
    outside a strategy, with one replica, and on JAX (whose arrays already
    span every device) and PyTorch."""
    return _current().gather_replicas(x)


def sum_replicas(values):
    """`values` (a list of tensors, each replica's own) summed over the
    replicas of a `tf.distribute` strategy, in every replica: e.g. the
    gradient of the global batch from the replicas' gradients of theirs.
    `values` themselves outside a strategy, with one replica, and on JAX and
    PyTorch (whose gradients are already of the global batch)."""
    return _current().sum_replicas(values)


def remat_in_turn(run, count):
    """`[run(0), ..., run(count - 1)]`, each a float tensor, keeping none of
    the activations inside `run`: on the way back each `run(i)` is computed
    again, one after another, so that one call's activations are held at a
    time (measured on PyTorch and TensorFlow: docs/embeddings.md). `run`
    must compute the same values twice (draw its random numbers from states
    it sets itself). `keras.remat` on each; TensorFlow, whose graph would
    run independent calls (and their recomputations) at once, in a
    `tf.while_loop` traced once, so `i` there is a scalar int32 tensor."""
    return _current().remat_in_turn(run, count)
