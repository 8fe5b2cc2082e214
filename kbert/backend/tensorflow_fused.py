"""TensorFlow's elementwise chains, for `kbert.backend.tensorflow`: the
exact GELU and LayerNorm with their gradients written out, compiled by XLA
where every dimension is known, and the custom gradients they (and
GradCache's `remat_in_turn`) are built with, which TensorFlow's gradient
registry lets go of (public TF APIs, and private ones only through
`kbert.backend.keras_private`, each with a fallback)."""

import functools
import math

import tensorflow as tf

from kbert.backend import default, keras_private


def custom_gradient(f):
    """`tf.custom_gradient` whose entries in TensorFlow's gradient registry
    go once the gradient is taken.

    In a graph, each call registers its gradient function in a global
    registry that never lets go of it (tensorflow/tensorflow#97697), and the
    function holds the traced graph: every new trace of a training step
    kept its whole graph alive, and with GradCache the model too (an
    embedder's `fit` with `mini_batch_size` grew the process with every
    call: docs/benchmarks.md, "Measurements behind the code"). The entries
    a call adds are its own and those of custom gradients inside it that
    nothing differentiates (GradCache's first pass); the tape that takes the gradient holds its own reference, so
    nothing else needs them. The registry is private: where it is not a
    dict of names, entries are left as TensorFlow leaves them.
    """

    @functools.wraps(f)
    def call(*args):
        names = set()

        def forward(*args):
            result, gradient = f(*args)

            def once(*upstream, **kwargs):
                try:
                    return gradient(*upstream, **kwargs)
                finally:
                    registry = keras_private.gradient_registry()
                    for name in names:
                        registry.pop(name, None)

            return result, once

        before = set(keras_private.gradient_registry())
        result = tf.custom_gradient(forward)(*args)
        names.update(set(keras_private.gradient_registry()) - before)
        return result

    return call


def normal_cdf(x):
    # `tf.nn.gelu` is `0.5 * x * erfc(-x / sqrt(2))`, and Eigen's Erfc runs
    # element by element where Erf is vectorised, so Erf's form (the one
    # transformers writes) is the faster (docs/benchmarks.md, "Measurements
    # behind the code").
    return 0.5 * (1.0 + tf.math.erf(x * (1 / math.sqrt(2))))


def _gelu_slope(x, cdf):
    # The exact GELU's derivative, `cdf + x * pdf`.
    return cdf + x * (tf.exp(-0.5 * tf.square(x)) * (1 / math.sqrt(2 * math.pi)))


@custom_gradient
def erf_gelu(x):
    # The exact GELU with its derivative written out.
    if fuses_with_xla(x.shape, x.dtype):
        return _xla_gelu(x), lambda upstream: _xla_gelu_gradient(x, upstream)
    cdf = normal_cdf(x)

    def gradient(upstream):
        with tf.name_scope("gelu_gradient"):
            return upstream * _gelu_slope(x, cdf)

    return x * cdf, gradient


# Elementwise chains on a CPU: TensorFlow runs each op of a chain as its own
# pass over memory (the GELU's is 5 forward and 7 back, each reading and
# writing a [tokens, intermediate] tensor); XLA compiles the chain into one
# loop. A function compiled this way inside a graph that is not runs as one
# op, and the matmuls around it stay oneDNN's. XLA compiles each new shape,
# so only statically shaped tensors are fused: the batches of a fixed length
# (pre-training, `fit` on padded arrays) and not those padded to each
# batch's longest text. Computed in float32, rounded once. (Timings of both
# paths: docs/benchmarks.md, "Elementwise chains fused by XLA on TensorFlow,
# where shapes are static".)


def fuses_with_xla(shape, dtype=None):
    """Whether a tensor of `shape` (every dimension known) and `dtype` (a
    float, or None: not a float computation, e.g. random bits) is computed
    by an XLA-compiled function here."""
    known = shape.is_fully_defined() if isinstance(shape, tf.TensorShape) else all(isinstance(n, int) for n in shape)
    floats = dtype is None or dtype in (tf.bfloat16, tf.float16, tf.float32)
    return known and floats and not in_xla_context() and _cpu_only()


@functools.cache
def _cpu_only():
    return not any(tf.config.list_logical_devices(kind) for kind in ("GPU", "TPU"))


@tf.function(jit_compile=True, autograph=False)
def _xla_gelu(x):
    z = tf.cast(x, tf.float32)
    return tf.cast(z * normal_cdf(z), x.dtype)


@tf.function(jit_compile=True, autograph=False)
def _xla_gelu_gradient(x, upstream):
    z = tf.cast(x, tf.float32)
    return tf.cast(tf.cast(upstream, tf.float32) * _gelu_slope(z, normal_cdf(z)), x.dtype)


def layer_norm(x, gamma, beta, epsilon, training=False):
    dtype = x.dtype
    fused = fuses_with_xla(x.shape, dtype)
    if not (training or fused):
        return default.layer_norm(x, gamma, beta, epsilon)
    compute = tf.float64 if dtype == tf.float64 else tf.float32
    gamma, beta = (tf.cast(tf.convert_to_tensor(w), compute) for w in (gamma, beta))
    if fused:
        # In inference one computation, where Keras' is about 12 ops, each a
        # pass over the activations, the casts to float32 and back among
        # them (half of BERT-base's inference op time outside matmuls); no
        # custom gradient, which nothing would take.
        return _fused_layer_norm(x, gamma, beta, epsilon) if training else _xla_layer_norm(x, gamma, beta, epsilon)
    return tf.cast(_layer_norm(tf.cast(x, compute), gamma, beta, epsilon), dtype)


def _layer_norm(x, gamma, beta, epsilon):
    @custom_gradient
    def normalize(x, gamma, beta):
        normalized, scale = _normalized(x, epsilon)

        def gradient(upstream):
            with tf.name_scope("layer_norm_gradient"):
                return _layer_norm_gradient(upstream, gamma, normalized, scale)

        return normalized * gamma + beta, gradient

    return normalize(x, gamma, beta)


def _normalized(x, epsilon):
    """`(x - mean) / sqrt(variance + epsilon)` over the last axis, and that
    `1 / sqrt(...)`."""
    centered = x - tf.reduce_mean(x, axis=-1, keepdims=True)
    scale = tf.math.rsqrt(tf.reduce_mean(tf.square(centered), axis=-1, keepdims=True) + epsilon)
    return centered * scale, scale


def _layer_norm_gradient(upstream, gamma, normalized, scale):
    """The gradients of `normalized * gamma + beta` for x, gamma and beta."""
    rows = list(range(normalized.shape.rank - 1))
    given = upstream * gamma
    mean_given = tf.reduce_mean(given, axis=-1, keepdims=True)
    along = tf.reduce_mean(given * normalized, axis=-1, keepdims=True)
    return (scale * (given - mean_given - normalized * along),
            tf.reduce_sum(upstream * normalized, axis=rows), tf.reduce_sum(upstream, axis=rows))


def _fused_layer_norm(x, gamma, beta, epsilon):
    # `_layer_norm`'s formulas, each way one XLA computation (the casts in
    # it), faster than TensorFlow's ops forward and back (docs/benchmarks.md,
    # "Elementwise chains fused by XLA on TensorFlow, where shapes are
    # static"). The way back recomputes the statistics from `x` instead of
    # keeping float32 copies.
    @custom_gradient
    def normalize(x, gamma, beta):
        return (_xla_layer_norm(x, gamma, beta, epsilon),
                lambda upstream: _xla_layer_norm_gradient(x, gamma, upstream, epsilon))

    return normalize(x, gamma, beta)


@tf.function(jit_compile=True, autograph=False)
def _xla_layer_norm(x, gamma, beta, epsilon):
    normalized, _ = _normalized(tf.cast(x, tf.float32), epsilon)
    return tf.cast(normalized * gamma + beta, x.dtype)


@tf.function(jit_compile=True, autograph=False)
def _xla_layer_norm_gradient(x, gamma, upstream, epsilon):
    normalized, scale = _normalized(tf.cast(x, tf.float32), epsilon)
    dx, dgamma, dbeta = _layer_norm_gradient(tf.cast(upstream, tf.float32), gamma, normalized, scale)
    return tf.cast(dx, x.dtype), dgamma, dbeta


@tf.function(jit_compile=True, autograph=False)
def xla_words(shape, seed):
    return tf.random.stateless_uniform(shape, seed, minval=None, maxval=None, dtype=tf.uint32, alg="threefry")


def in_xla_context():
    """Whether the graph being traced compiles with XLA (`jit_compile`);
    True where TensorFlow's private function that tells has moved."""
    if not keras_private.available("GraphOrParentsInXlaContext"):
        return True
    return keras_private.get("GraphOrParentsInXlaContext")(tf.compat.v1.get_default_graph())
