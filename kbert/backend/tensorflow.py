"""TensorFlow's implementations of kbert's primitives (public TF APIs, and
private ones only through `kbert.backend.keras_private`); the elementwise
ones (LayerNorm, the GELU of `dense`) are written in `tensorflow_fused.py`."""

import functools

import keras
import tensorflow as tf

from kbert.backend import default, keras_private
from kbert.backend.tensorflow_fused import (
    custom_gradient,
    erf_gelu,
    fuses_with_xla,
    in_xla_context,
    normal_cdf,
    xla_words,
)
from kbert.backend.tensorflow_fused import layer_norm  # noqa: F401 (this backend's primitive, written there)


def dense(x, kernel, bias, activation=None, training=False):
    # A 2-D `MatMul` + `BiasAdd` is the pattern the graph rewriter fuses into
    # one `_FusedMatMul`; Keras' batched matmul and separate add are not.
    # With oneDNN on (TensorFlow's default on Intel CPUs with AVX-512), the
    # exact GELU that follows is fused into it too, in either form; with it
    # off (e.g. on AMD CPUs) the GELU runs as its own ops, and the Erf form
    # (`normal_cdf`) is the cheaper. The gradient, where one is taken, is
    # written out (`erf_gelu`).
    # (A 2-D `x`, as `TransformerEncoder` gives, needs no reshape either way.)
    rank = x.shape.rank
    flat = tf.nn.bias_add(tf.matmul(x if rank == 2 else tf.reshape(x, [-1, x.shape[-1]]), kernel), bias)
    if activation == "gelu":
        with tf.name_scope("gelu"):
            flat = erf_gelu(flat) if training else flat * normal_cdf(flat)
    elif activation is not None:
        flat = tf.nn.gelu(flat, approximate=True)
    if rank == 2:
        return flat
    return tf.reshape(flat, tf.concat([tf.shape(x)[:-1], [kernel.shape[-1]]], axis=0))


def random_int16(shape, seed_generator):
    bits = _random_words(shape, seed_generator)
    # `ops.view` checks the last axis' size in Python, which a graph with a
    # dynamic sequence length does not have.
    halves = tf.bitcast(bits, tf.int16)  # [..., half, 2]
    width = shape[-1]
    static = isinstance(width, int)
    if static and len(shape) == 2:  # (TransformerEncoder's flat activations: no ops on shapes)
        halves = tf.reshape(halves, [-1, width + width % 2])
    else:
        halves = tf.reshape(halves, tf.concat([tf.shape(bits)[:-1], [-1]], axis=0))
    return halves if static and width % 2 == 0 else halves[..., :width]


def _random_words(shape, seed_generator):
    """32 random bits per two elements of `shape`. A full-range draw
    (`minval=None`) takes the generator's words as they come, where Keras'
    `randint` reduces each modulo its range, which takes longer
    (docs/benchmarks.md, "Measurements behind the code"). Seeded as Keras
    seeds its draws."""
    if not isinstance(seed_generator, keras.random.SeedGenerator):
        return default.int32_bits_for_int16(shape, seed_generator)
    seed = seed_generator.next()
    if seed.dtype != tf.int32:  # (as Keras: TensorFlow's stateless draws take int32 seeds)
        seed = tf.cast(tf.math.floormod(seed, tf.int32.max - 1), tf.int32)
    words = [*shape[:-1], (shape[-1] + 1) // 2]
    if fuses_with_xla(words):
        return xla_words(tuple(words), seed)
    return tf.random.stateless_uniform(words, seed, minval=None, maxval=None, dtype=tf.uint32)


def exact_bfloat16_softmax(with_gradient):
    # oneDNN's CPU kernel computes a softmax of bfloat16 logits in float32 and
    # rounds once; Eigen's (oneDNN off, or a CPU without AVX-512, where
    # TensorFlow falls back to it even with oneDNN on) does not. TensorFlow's
    # gradient, `SoftmaxGrad` written in bfloat16 ops, rounds twice as often
    # as that of a float32 softmax rounded (docs/benchmarks.md, "Attention on
    # TensorFlow").
    return not with_gradient and _graph_softmax_of_bfloat16_is_exact()


@functools.cache
def _graph_softmax_of_bfloat16_is_exact():
    """Whether a traced softmax of bfloat16 logits gives the float32
    softmax's probabilities rounded, as observed once on this machine's
    default device (a TPU's softmax is not observed here: no)."""
    if tf.config.list_logical_devices("TPU"):
        return False
    with tf.init_scope():  # out of any graph being traced
        logits = tf.cast(tf.random.stateless_normal((8, 128), seed=(0, 0)) * 4, tf.bfloat16)
        rounded = tf.cast(tf.nn.softmax(tf.cast(logits, tf.float32)), tf.bfloat16)
        return bool(tf.reduce_all(tf.function(tf.nn.softmax)(logits) == rounded))


def fuses_attention(dropout=False):
    # `ops.dot_product_attention` is separate ops here, and scales and masks
    # the [batch, heads, length, length] logits in float32: written out
    # (the queries scaled, the mask added as a bias), attention takes fewer
    # passes over them (docs/benchmarks.md, "Attention on TensorFlow").
    return False


def adam_update(variable, gradient, m, v, beta_1_power, beta_2_power, learning_rate, beta_1, beta_2, epsilon):
    # Keras' update is many ops a variable (moments, powers, square root,
    # divide, casts), each of which the first `fit` traces and optimises;
    # `ResourceApplyAdam` computes the same formula in one (docs/benchmarks.md,
    # "Measurements behind the code"). Under a strategy, Keras calls this
    # once per replica's copy, and a distributed variable's `handle` is that
    # replica's (a TPU's variables are not plain handles: Keras' update there).
    variable, m, v = (x.value if isinstance(x, keras.Variable) else x for x in (variable, m, v))
    if (variable.dtype != tf.float32 or isinstance(gradient, tf.IndexedSlices)
            or isinstance(tf.distribute.get_strategy(), tf.distribute.TPUStrategy)):
        return False

    def scalar(x):
        return tf.cast(x, tf.float32)

    tf.raw_ops.ResourceApplyAdam(
        var=variable.handle, m=m.handle, v=v.handle, beta1_power=scalar(beta_1_power),
        beta2_power=scalar(beta_2_power), lr=scalar(learning_rate), beta1=scalar(beta_1), beta2=scalar(beta_2),
        epsilon=scalar(epsilon), grad=tf.cast(gradient, tf.float32))
    return True


def embedding_rows(table, ids):
    # `tf.gather` of the `tf.Variable` under a Keras variable reads only the
    # rows (`ResourceGather`), with no autocast of the table (which a mixed
    # layer's call applies, `autocast=False` or not), and Grappler does not
    # move the cast that follows to before it.
    variable = keras_private.backend_variable(table)
    if not hasattr(variable, "sparse_read") or _in_stateless_scope():
        return default.embedding_rows(table, ids)
    return tf.gather(variable, ids)


def _in_stateless_scope():
    if not keras_private.available("in_stateless_scope"):
        return True  # take the default path
    return keras_private.get("in_stateless_scope")()


def rows_once(gradient):
    if not isinstance(gradient, tf.IndexedSlices):
        return gradient
    # Dense: Keras' clipping multiplies the slices by the scale, which makes
    # them dense anyway (one `UnsortedSegmentSum`, as here).
    return tf.convert_to_tensor(gradient)


def clip_by_global_norm(grads, clip_norm):
    # Keras squares each gradient into a new tensor, sums it, and multiplies
    # every gradient by the factor, 1 or not: three passes over a gradient
    # and one more write (22.7M floats each in MiniLM's step, whose
    # gradients are often within the norm). The same values in one pass
    # where no clipping is needed, two where it is.
    present = [g for g in grads if g is not None]
    norm = tf.sqrt(2 * tf.add_n([tf.cast(tf.nn.l2_loss(g), tf.float32) for g in present]))  # l2_loss: sum(g**2) / 2
    scale = clip_norm * tf.minimum(1.0 / norm, 1.0 / clip_norm) + (norm - norm)  # NaN if not finite
    scaled = iter(tf.cond(tf.equal(scale, 1.0), lambda: present,
                          lambda: [g * tf.cast(scale, g.dtype) for g in present]))
    return [None if g is None else next(scaled) for g in grads]


def gather_replicas(x):
    context = tf.distribute.get_replica_context()
    if context is None or context.num_replicas_in_sync == 1:
        return x
    # A replica context's all_gather has a gradient: each replica gets the
    # sum over replicas of the gradient to its own rows.
    return context.all_gather(x, axis=0)


def sum_replicas(values):
    context = tf.distribute.get_replica_context()
    if context is None or context.num_replicas_in_sync == 1:
        return values
    return context.all_reduce(tf.distribute.ReduceOp.SUM, values)


def remat_in_turn(run, count):
    # Both ways are `tf.while_loop`s over `i`, so `run` is traced (and the
    # graph optimised) once, however many calls there are: unrolled, each
    # call added its own tracing forward and back to the first step
    # (docs/benchmarks.md, "Measurements behind the code").
    # Under XLA the calls stay unrolled, with `i` a constant: XLA clamps a
    # slice that starts at a computed index to fit (the last mini-batch
    # read rows of the one before it).
    unrolled = in_xla_context()

    def loop(body, initial):
        return tf.while_loop(lambda i, *_: i < count, body, (tf.constant(0),) + tuple(initial),
                             parallel_iterations=1)[1:]

    @custom_gradient
    def in_turn(anchor):  # (a custom gradient takes at least one tensor)
        # The way back below reads only these calls' outputs, none of the
        # tensors inside them: each call's activations are freed as soon as
        # it has run, and the next runs after it.
        if unrolled:
            outputs = []
            for i in range(count):
                with tf.control_dependencies(outputs[-1:]):
                    outputs.append(tf.identity(run(tf.constant(i))))
        else:
            traced = {}

            def forward(i, written):
                output = run(i)
                traced.update(shape=output.shape, dtype=output.dtype)
                return i + 1, written.write(i, tf.cast(output, tf.float32))

            (written,) = loop(forward, [tf.TensorArray(tf.float32, size=count, infer_shape=False)])
            outputs = [tf.ensure_shape(tf.cast(written.read(i), traced["dtype"]), traced["shape"])
                       for i in range(count)]

        def gradient(*upstream, variables=None):
            variables = list(variables or [])

            def backward(i, given, total):  # one recomputation at a time
                with tf.control_dependencies(total), tf.GradientTape() as tape:
                    output = run(i)
                grads = tape.gradient(output, variables, output_gradients=tf.cast(given, output.dtype))
                return [a if g is None else a + tf.convert_to_tensor(g) for a, g in zip(total, grads)]

            # None: an output the loss does not use.
            upstream = [tf.zeros_like(o) if u is None else u for o, u in zip(outputs, upstream)]
            total = [tf.zeros_like(v) for v in variables]
            if unrolled:
                for i in reversed(range(count)):
                    total = backward(tf.constant(i), upstream[i], total)
            else:
                given = tf.TensorArray(tf.float32, size=count, infer_shape=False)
                for i, u in enumerate(upstream):
                    given = given.write(i, tf.cast(u, tf.float32))
                total = loop(lambda i, *total: (i + 1, *backward(i, given.read(i), total)), total)
            return tf.zeros_like(anchor), list(total)

        return outputs, gradient

    return in_turn(tf.constant(0.0))


