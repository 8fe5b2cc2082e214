import importlib

import keras
import numpy as np
import pytest
from keras import ops

from kbert import backend
from kbert.backend import default
from tests.helpers import to_numpy

BACKEND = keras.backend.backend()


def tensor(shape, seed, dtype="float32"):
    return ops.convert_to_tensor(np.random.default_rng(seed).normal(size=shape).astype(dtype))


def native_dtype(name, request):
    """The backend's own dtype object, as layers pass it (`inputs.dtype`)."""
    if name == "bfloat16":
        request.getfixturevalue("bfloat16")
    return ops.ones((1,), dtype=name).dtype


def test_each_backend_module_defines_only_named_primitives():
    assert all(callable(getattr(default, name)) for name in backend.PRIMITIVES)
    module = importlib.import_module(f"kbert.backend.{BACKEND}")
    defined = {
        name for name, value in vars(module).items()
        if callable(value) and not name.startswith("_") and getattr(value, "__module__", None) == module.__name__
    }
    assert defined <= set(backend.PRIMITIVES)  # a misspelt override would never run


def test_each_backend_takes_its_fast_paths(bfloat16):
    expected = {
        "tensorflow": (True, False, tensorflow_graph_softmax_of_bfloat16_is_exact(), False, False, False),
        "jax": (False, False, False, False, False, True),
        "torch": (True, True, True, True, True, True),
    }[BACKEND]
    float32_weights = [keras.Variable(np.zeros(2, "float32"))]
    taken = (backend.random_int16_is_cheap(), backend.fuses_keep_masks(),
             backend.exact_bfloat16_softmax(with_gradient=False), backend.exact_bfloat16_softmax(with_gradient=True),
             backend.fuses_adamw(float32_weights), backend.fuses_attention())
    assert taken == expected


def tensorflow_graph_softmax_of_bfloat16_is_exact():
    """Whether TensorFlow's traced softmax of bfloat16 logits is the float32
    softmax rounded, as observed here (where oneDNN's kernel runs it)."""
    import tensorflow as tf

    logits = tf.cast(tensor((8, 128), 9) * 4, tf.bfloat16)
    expected = tf.cast(tf.nn.softmax(tf.cast(logits, tf.float32)), tf.bfloat16)
    return bool(np.array_equal(tf.function(tf.nn.softmax)(logits).numpy(), expected.numpy()))


@pytest.mark.parametrize("activation", [None, "gelu", "gelu_approximate"])
@pytest.mark.parametrize("shape", [(4, 16), (2, 3, 16), (2, 2, 3, 16)])
def test_dense_equals_the_default(shape, activation):
    x, kernel, bias = tensor(shape, 0), tensor((16, 8), 1), tensor((8,), 2)
    np.testing.assert_allclose(to_numpy(backend.dense(x, kernel, bias, activation)),
                               to_numpy(default.dense(x, kernel, bias, activation)), atol=1e-5)


@pytest.mark.skipif(BACKEND != "tensorflow", reason="only TensorFlow applies the GELU differently in training")
@pytest.mark.parametrize("static", [False, True], ids=["dynamic", "static"])  # static: XLA-fused on a CPU
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_dense_in_training_has_the_default_values_and_gradients(dtype, static):
    import tensorflow as tf

    # Inputs to the GELU from -9 to 9: its tails, where erf and erfc differ most.
    x = tf.cast(tf.linspace(-3.0, 3.0, 2 * 3 * 16), dtype)
    x = tf.reshape(x, (2, 3, 16))
    kernel = tf.cast(tf.eye(16, 8) * 3.0 + tensor((16, 8), 1) * 0.01, dtype)
    bias, weights = tf.cast(tensor((8,), 2) * 0.1, dtype), tf.cast(tensor((2, 3, 8), 3), dtype)

    # Unknown dimensions, as in a model fed texts padded to their longest, or
    # all known, as with a fixed length.
    @tf.function(input_signature=[tf.TensorSpec((2, 3, 16) if static else (None, None, 16), dtype)])
    def value_and_gradients(x, dense=backend.dense, training=True):
        with tf.GradientTape() as tape:
            tape.watch([x, kernel, bias])
            y = dense(x, kernel, bias, "gelu", training=training)
            loss = tf.reduce_sum(tf.cast(y * weights, "float32"))
        return [y, *tape.gradient(loss, [x, kernel, bias])]

    ours = value_and_gradients(x)
    fused = static and cpu_only()
    assert len(xla_compiled_calls(value_and_gradients.get_concrete_function())) == (2 if fused else 0)  # forward, back
    autodiff = tf.function(lambda x: value_and_gradients.python_function(x, default.dense, False))(x)
    tolerance = {"float32": 1e-6, "bfloat16": 2e-2}[dtype]  # bfloat16: 8 significant bits
    for a, b in zip(ours, autodiff):
        a, b = to_numpy(tf.cast(a, "float32")), to_numpy(tf.cast(b, "float32"))
        np.testing.assert_allclose(a, b, rtol=tolerance, atol=tolerance * np.abs(b).max())


RANDOM_SHAPES = [(64, 32, 255), (2048, 255), (2048, 256)]  # (2-D: TransformerEncoder's)


@pytest.mark.parametrize("shape", RANDOM_SHAPES)
@pytest.mark.parametrize("draw", [backend.random_int16, default.random_int16], ids=["backend", "default"])
def test_random_int16_sets_each_of_the_16_bits_half_the_time(draw, shape):
    # (The shape is known: on TensorFlow on a CPU, XLA draws the bits.)
    assert_random_bits(draw, shape)


@pytest.mark.skipif(BACKEND != "tensorflow", reason="only TensorFlow's shapes can be unknown in a traced step")
@pytest.mark.parametrize("shape", RANDOM_SHAPES)
def test_random_int16_of_an_unknown_shape_sets_each_of_the_16_bits_half_the_time(shape):
    import tensorflow as tf

    seed = keras.random.SeedGenerator(1)

    @tf.function(input_signature=[tf.TensorSpec([None] * len(shape), tf.float32)])
    def unknown(x):
        return backend.random_int16(tf.unstack(tf.shape(x)), seed)

    assert_random_bits(lambda shape, _: unknown(tf.zeros(shape)), shape)


def assert_random_bits(draw, shape):
    """`draw(shape, seed)` gives int16 whose 16 bits are each set half the
    time, and new bits each call."""
    seed = keras.random.SeedGenerator(1)
    bits = to_numpy(draw(shape, seed))  # an odd last axis uses part of the last draw
    assert bits.shape == shape and bits.dtype == np.int16
    frequencies = ((bits.astype(np.int32)[..., None] >> np.arange(16)) & 1).reshape(-1, 16).mean(axis=0)
    np.testing.assert_allclose(frequencies, 0.5, atol=5e-3)  # 522k draws: standard error 7e-4
    assert (to_numpy(draw(shape, seed)) != bits).mean() > 0.99  # a new draw each call


def cpu_only():
    """Whether TensorFlow sees no GPU or TPU (where kbert fuses with XLA)."""
    import tensorflow as tf

    return not any(tf.config.list_logical_devices(kind) for kind in ("GPU", "TPU"))


def xla_compiled_calls(concrete_function):
    """The calls in a traced TensorFlow graph that XLA compiles."""
    calls = []
    for op in concrete_function.graph.get_operations():
        try:
            if op.get_attr("_XlaMustCompile"):
                calls.append(op.name)
        except ValueError:  # not a call of a function compiled by XLA
            pass
    return calls


@pytest.mark.skipif(BACKEND != "tensorflow", reason="only TensorFlow fuses elementwise chains with XLA")
@pytest.mark.parametrize("static", [False, True], ids=["dynamic", "static"])
def test_tensorflow_fuses_with_xla_only_statically_shaped_tensors(static):
    # On a CPU. XLA compiles each new shape: batches padded to their longest
    # text would compile again and again.
    import tensorflow as tf

    gamma, beta = tf.ones((16,)), tf.zeros((16,))
    seed = keras.random.SeedGenerator(3)

    @tf.function(input_signature=[tf.TensorSpec((4, 16) if static else (None, 16), tf.bfloat16)])
    def step(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = backend.layer_norm(x, gamma, beta, 1e-12, training=True)
        bits = backend.random_int16((4, 16) if static else tf.unstack(tf.shape(x)), seed)
        return tape.gradient(y, x), bits, backend.layer_norm(x, gamma, beta, 1e-12)  # the last in inference

    step(tf.ones((4, 16), tf.bfloat16))
    # LayerNorm forward and back, the bits, LayerNorm in inference.
    assert len(xla_compiled_calls(step.get_concrete_function())) == (4 if static and cpu_only() else 0)


# Only TensorFlow's traced shapes can be unknown; where all are known, it fuses with XLA.
@pytest.mark.parametrize("static", [False, True] if BACKEND == "tensorflow" else [False],
                         ids=lambda static: "static" if static else "dynamic")
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("shape", [(6, 16), (2, 3, 16)])
def test_layer_norm_has_the_default_values_and_gradients(shape, dtype, static, request):
    # In training (TensorFlow: the gradient written out) and not, against
    # Keras' LayerNorm, with inputs far from zero mean and unit variance.
    dtype = native_dtype(dtype, request)
    x = ops.cast(tensor(shape, 4) * 3 + 2, dtype)
    gamma, beta = keras.Variable(to_numpy(tensor((16,), 5)) + 1), keras.Variable(to_numpy(tensor((16,), 6)))
    weights = ops.cast(tensor(shape, 7), "float32")

    def value_and_gradients(norm, training):
        def loss(x, gamma, beta):
            y = norm(x, gamma, beta, 1e-12, training=training)
            assert keras.backend.standardize_dtype(y.dtype) == keras.backend.standardize_dtype(dtype)
            return ops.sum(ops.cast(y, "float32") * weights), y
        return gradients_of(loss, x, gamma, beta, static=static)

    expected = value_and_gradients(default.layer_norm, False)
    tolerance = 1e-5 if keras.backend.standardize_dtype(dtype) == "float32" else 2e-2
    for training in (False, True):
        for a, b in zip(value_and_gradients(backend.layer_norm, training), expected):
            np.testing.assert_allclose(a, b, rtol=tolerance, atol=tolerance * np.abs(b).max())


def gradients_of(loss, *args, static=False):
    """`loss(*args)`'s auxiliary output and its gradients with respect to
    `args` (as float32 arrays), on the current backend, traced as a model's
    training step is (TensorFlow: in a graph, all but the last dimension
    unknown unless `static`)."""
    if BACKEND == "tensorflow":
        import tensorflow as tf

        known = list(args[0].shape) if static else [None] * (len(args[0].shape) - 1) + [args[0].shape[-1]]

        @tf.function(input_signature=[tf.TensorSpec(known, args[0].dtype)])
        def run(x):
            with tf.GradientTape() as tape:
                tape.watch(x)
                value, aux = loss(x, *args[1:])
            return [aux, *tape.gradient(value, [x, *args[1:]])]
        results = run(args[0])
    elif BACKEND == "jax":
        import jax

        values = [a.value if isinstance(a, keras.Variable) else a for a in args]
        (_, aux), grads = jax.value_and_grad(loss, argnums=tuple(range(len(args))), has_aux=True)(*values)
        results = [aux, *grads]
    else:
        import torch

        leaves = [(a.value if isinstance(a, keras.Variable) else a).detach().requires_grad_() for a in args]
        value, aux = loss(*leaves)
        results = [aux, *torch.autograd.grad(value, leaves)]
    return [to_numpy(ops.cast(r, "float32")) for r in results]


@pytest.mark.skipif(BACKEND != "torch", reason="only PyTorch's random_int16 uses Keras' private seeding")
def test_random_int16_without_keras_private_seeding_is_the_default(monkeypatch):
    monkeypatch.setattr(importlib.import_module("kbert.backend.torch"), "torch_seed_generator", None)
    ours = backend.random_int16((3, 7), keras.random.SeedGenerator(5))
    np.testing.assert_array_equal(to_numpy(ours), to_numpy(default.random_int16((3, 7), keras.random.SeedGenerator(5))))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_keep_mask_equals_the_default(dtype, request):
    dtype = native_dtype(dtype, request)
    bits = backend.random_int16((4, 8, 33), keras.random.SeedGenerator(2))
    threshold = ops.cast(-(2**15) + 6554, "int16")
    mask = backend.keep_mask(bits, threshold, dtype)
    assert keras.backend.standardize_dtype(mask.dtype) == keras.backend.standardize_dtype(dtype)
    expected = to_numpy(ops.cast(default.keep_mask(bits, threshold, dtype), "float32"))
    assert set(np.unique(expected)) == {0.0, 1.0}
    np.testing.assert_array_equal(to_numpy(ops.cast(mask, "float32")), expected)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_dropout_add_equals_the_default(dtype, request):
    dtype = native_dtype(dtype, request)
    x, h = ops.cast(tensor((4, 8, 16), 3), dtype), ops.cast(tensor((4, 8, 16), 4), dtype)
    mask = ops.cast(np.random.default_rng(5).random((4, 8, 16)) > 0.1, dtype)
    ours, expected = (ops.cast(f(x, h, mask, 1 / 0.9), "float32") for f in (backend.dropout_add, default.dropout_add))
    # bfloat16: the fused op rounds once, the default after each op.
    tolerance = 1e-6 if keras.backend.standardize_dtype(dtype) == "float32" else 2e-2
    np.testing.assert_allclose(to_numpy(ours), to_numpy(expected), rtol=tolerance, atol=tolerance)


@pytest.mark.skipif(BACKEND == "jax", reason="JAX casts bfloat16 logits to float32")
def test_exact_bfloat16_softmax_is_the_float32_softmax_rounded(bfloat16):
    if not backend.exact_bfloat16_softmax(with_gradient=False):
        pytest.skip("this machine's softmax of bfloat16 logits is not exact: they are cast to float32")
    logits = ops.cast(tensor((4, 2, 9, 9), 6) * 4, "bfloat16")
    expected = ops.cast(ops.softmax(ops.cast(logits, "float32"), axis=-1), "bfloat16")
    np.testing.assert_array_equal(to_numpy(ops.cast(ops.softmax(logits, axis=-1), "float32")),
                                  to_numpy(ops.cast(expected, "float32")))


def adamw_after_three_steps(step_function, weight_decay):
    weights = [keras.Variable(to_numpy(tensor((5, 3), 7)) + 1), keras.Variable(to_numpy(tensor((3,), 8)))]
    momentums = [keras.Variable(np.zeros(w.shape, "float32")) for w in weights]
    velocities = [keras.Variable(np.zeros(w.shape, "float32")) for w in weights]
    for step in (1, 2, 3):
        grads = [tensor(w.shape, 10 + step) for w in weights]
        step_function(weights, grads, momentums, velocities, step=step, learning_rate=0.01, beta_1=0.9,
                      beta_2=0.999, epsilon=1e-6, weight_decay=weight_decay)
    return [to_numpy(w) for w in weights]


@pytest.mark.parametrize("weight_decay", [0.0, 0.1])
def test_adamw_step_equals_the_default_and_keras_adamw(weight_decay):
    ours = adamw_after_three_steps(backend.adamw_step, weight_decay)
    for a, b in zip(ours, adamw_after_three_steps(default.adamw_step, weight_decay)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)

    weights = [keras.Variable(to_numpy(tensor((5, 3), 7)) + 1), keras.Variable(to_numpy(tensor((3,), 8)))]
    optimizer = keras.optimizers.AdamW(learning_rate=0.01, weight_decay=weight_decay, epsilon=1e-6)
    for step in (1, 2, 3):
        optimizer.apply_gradients([(tensor(w.shape, 10 + step), w) for w in weights])
    for a, b in zip(ours, weights):
        np.testing.assert_allclose(a, to_numpy(b), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("clip_norm", [1.0, 3.0, 0.7])
@pytest.mark.parametrize("size", [1e-3, 1.0, 10.0])
def test_clip_by_global_norm_scales_as_keras_global_clipnorm(size, clip_norm):
    grads = [tensor((30, 4), 1) * size, None, tensor((7,), 2) * size]
    values = [to_numpy(g) for g in grads if g is not None]
    norm = np.sqrt(sum(np.sum(np.square(v.astype("float64"))) for v in values))
    for clip in (backend.clip_by_global_norm, default.clip_by_global_norm):
        clipped = clip(grads, clip_norm)
        assert clipped[1] is None
        for value, ours in zip(values, (clipped[0], clipped[2])):
            if norm <= clip_norm * (1 - 1e-6):  # within the norm: untouched, to the bit
                np.testing.assert_array_equal(to_numpy(ours), value)
            else:
                np.testing.assert_allclose(to_numpy(ours), value * (clip_norm / norm), rtol=2e-6)


def test_clip_by_global_norm_of_a_non_finite_gradient_is_nan_as_keras():
    grads = [ops.convert_to_tensor(np.array([np.inf, 0.0], "float32")), tensor((3,), 3)]
    for clipped in backend.clip_by_global_norm(grads, 1.0):
        assert np.isnan(to_numpy(clipped)).all()


@pytest.mark.skipif(BACKEND != "torch", reason="only PyTorch has a fused AdamW kernel")
def test_without_the_fused_kernel_adamw_is_not_fused_and_steps_as_the_default(monkeypatch):
    monkeypatch.setattr(importlib.import_module("kbert.backend.torch"), "_FUSED_ADAMW", False)
    assert not backend.fuses_adamw([keras.Variable(np.zeros(2, "float32"))])
    for a, b in zip(adamw_after_three_steps(backend.adamw_step, 0.1), adamw_after_three_steps(default.adamw_step, 0.1)):
        np.testing.assert_array_equal(a, b)


@pytest.mark.skipif(BACKEND != "tensorflow", reason="TensorFlow's gradient registry")
def test_a_traced_step_leaves_tensorflows_gradient_registry_as_it_found_it():
    # In a graph, TensorFlow registers every custom gradient for good, and the
    # graph with it (tensorflow#97697): each new trace of a training step kept
    # its graph alive. The exact GELU's gradient and GradCache's recomputation
    # (whose forward calls register gradients that are never taken).
    import tensorflow as tf

    from kbert.backend import keras_private

    kernel, bias = tf.Variable(to_numpy(tensor((8, 16), 1))), tf.Variable(np.zeros(16, "float32"))
    x = tf.constant(to_numpy(tensor((6, 8), 2)))

    def run(i):
        return backend.dense(x[2 * i:2 * i + 2], kernel, bias, "gelu", training=True)

    @tf.function
    def gradients(remat):
        with tf.GradientTape() as tape:
            outputs = backend.remat_in_turn(run, 3) if remat else [run(i) for i in range(3)]
            loss = tf.add_n([tf.reduce_sum(tf.square(o)) for o in outputs])
        return tape.gradient(loss, [kernel, bias])

    before = set(keras_private.gradient_registry())
    assert before  # TensorFlow's own, by op type
    cached, plain = gradients(True), gradients(False)
    assert set(keras_private.gradient_registry()) == before
    for a, b in zip(cached, plain):
        np.testing.assert_allclose(to_numpy(a), to_numpy(b), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("rows, count", [(7, 7), (1, 7), (7, 1)])
def test_take_per_row_reads_each_rows_own_entries(rows, count):
    x = tensor((2, 3, rows, 10), 6)
    index = np.random.default_rng(7).integers(0, 10, size=(rows, count)).astype("int32")
    expected = np.take_along_axis(to_numpy(x), np.broadcast_to(index, (2, 3, rows, count)), axis=-1)
    for take in (backend.take_per_row, default.take_per_row):
        np.testing.assert_array_equal(to_numpy(take(x, ops.convert_to_tensor(index))), expected)
