"""Every primitive in plain `keras.ops`: what any backend runs unless its own
module (`kbert/backend/<name>.py`) implements the primitive faster. Each
backend's version computes the same values; tests/backend pins that."""

import functools

import keras
from keras import ops


def dense(x, kernel, bias, activation=None, training=False):
    y = ops.matmul(x, kernel) + bias
    if activation is None:
        return y
    return keras.activations.gelu(y, approximate=activation == "gelu_approximate")


def layer_norm(x, gamma, beta, epsilon, training=False):
    return ops.layer_normalization(x, gamma, beta, epsilon=epsilon)


def int32_bits_for_int16(shape, seed_generator):
    """Random int32 bits for `random_int16(shape)`: one draw per two elements."""
    return keras.random.randint(
        (*shape[:-1], (shape[-1] + 1) // 2), minval=-(2**31), maxval=2**31 - 1, dtype="int32", seed=seed_generator
    )


def random_int16(shape, seed_generator):
    # Each int32 draw split in two.
    return ops.view(int32_bits_for_int16(shape, seed_generator), "int16")[..., : shape[-1]]


def random_int16_is_cheap():
    return True


def keep_mask(bits, threshold, dtype):
    return ops.cast(bits >= threshold, dtype)


def fuses_keep_masks():
    return False


def dropout_add(x, h, mask, scale):
    return x + h * mask * ops.cast(scale, h.dtype)


def exact_bfloat16_softmax(with_gradient):
    return False


def fuses_attention(dropout=False):
    # `keras.ops.dot_product_attention` has no dropout.
    return not dropout


def attention(query, key, value, mask, dropout_rate=0.0):
    if dropout_rate:
        raise ValueError(f"This backend's fused attention has no dropout (dropout_rate={dropout_rate}); "
                         f"check `kbert.backend.fuses_attention(dropout=True)` and write attention out where False.")
    return ops.dot_product_attention(query, key, value, mask=mask)


def fuses_adamw(variables):
    return False


def adamw_step(variables, grads, momentums, velocities, step, learning_rate, beta_1, beta_2, epsilon,
               weight_decay):
    # Keras AdamW's update, in its order: decoupled decay, then Adam with
    # epsilon added to sqrt(v) before v's bias correction.
    alpha = learning_rate * (1 - beta_2**step) ** 0.5 / (1 - beta_1**step)
    for variable, grad, m, v in zip(variables, grads, momentums, velocities):
        grad = ops.cast(grad, variable.dtype)
        if weight_decay:
            variable.assign(variable - variable * (learning_rate * weight_decay))
        m.assign(m + (grad - m) * (1 - beta_1))
        v.assign(v + (ops.square(grad) - v) * (1 - beta_2))
        variable.assign(variable - (m * alpha) / (ops.sqrt(v) + epsilon))


def adam_update(variable, gradient, m, v, beta_1_power, beta_2_power, learning_rate, beta_1, beta_2, epsilon):
    return False


def embedding_rows(table, ids):
    return ops.take(table, ids, axis=0)


def take_per_row(x, index):
    shape = ops.shape(x)
    rows, width = shape[-2], shape[-1]
    flat = ops.reshape(x, (*shape[:-2], -1))
    return ops.take(flat, ops.arange(rows, dtype="int32")[:, None] * width + ops.cast(index, "int32"), axis=-1)


def rows_once(gradient):
    return gradient  # dense gradients: nothing repeats


def clip_by_global_norm(grads, clip_norm):
    # Keras' formula (`keras.optimizers` with `global_clipnorm`).
    norm = ops.sqrt(ops.sum(ops.stack([ops.sum(ops.square(g)) for g in grads if g is not None])))
    scale = clip_norm * ops.minimum(1.0 / norm, 1.0 / clip_norm) + (norm - norm)  # NaN if not finite
    return [None if g is None else g * scale for g in grads]


def gather_replicas(x):
    return x  # the batch is already the whole one


def sum_replicas(values):
    return values  # gradients already of the whole batch


def remat_in_turn(run, count):
    return [keras.remat(functools.partial(run, i))() for i in range(count)]
