import keras
import numpy as np
import pytest

import kbert
from kbert.training import optimizers


def learning_rates(optimizer, steps):
    schedule = keras.optimizers.schedules.deserialize(optimizer.get_config()["learning_rate"])
    return [float(schedule(step)) for step in steps]


def test_pretraining_optimizer_is_berts_adam_with_warmup_and_linear_decay():
    # BERT §A.2: lr 1e-4, β1 0.9, β2 0.999, weight decay 0.01, 10k warm-up steps, linear decay.
    optimizer = kbert.training.pretraining_optimizer(1_000_000)
    assert isinstance(optimizer, keras.optimizers.AdamW)
    assert (optimizer.beta_1, optimizer.beta_2, optimizer.weight_decay) == (0.9, 0.999, 0.01)
    np.testing.assert_allclose(learning_rates(optimizer, [0, 5_000, 10_000, 505_000, 1_000_000]),
                               [0, 5e-5, 1e-4, 5e-5, 0], atol=1e-12)


def test_fine_tuning_optimizer_warms_up_over_its_share_of_the_run():
    optimizer = kbert.training.fine_tuning_optimizer(1000, learning_rate=3e-5, warmup=0.1)
    np.testing.assert_allclose(learning_rates(optimizer, [50, 100, 550, 1000]), [1.5e-5, 3e-5, 1.5e-5, 0], atol=1e-12)


def test_lamb_decays_weights_but_not_biases_or_layer_norm():
    optimizer = kbert.training.pretraining_optimizer(10, learning_rate=0.1, warmup_steps=0, optimizer="lamb",
                                                     weight_decay=0.5)
    assert isinstance(optimizer, keras.optimizers.Lamb)
    variables = [keras.Variable(np.ones(3, "float32"), name=name) for name in ("kernel", "bias", "gamma", "beta")]
    # No gradient: only weight decay can move a variable.
    optimizer.apply_gradients([(keras.ops.zeros(3), v) for v in variables])
    kernel, *not_decayed = [keras.ops.convert_to_numpy(v) for v in variables]
    assert (kernel < 1).all()
    np.testing.assert_array_equal(not_decayed, np.ones((3, 3)))


def test_global_clipnorm_bounds_the_norm_of_all_gradients_together():
    optimizer = optimizers.with_options(keras.optimizers.SGD(1.0), global_clipnorm=1.0)
    a, b = keras.Variable(np.zeros(2, "float32")), keras.Variable(np.zeros(1, "float32"))
    optimizer.apply_gradients([(keras.ops.array([3.0, 0.0]), a), (keras.ops.array([4.0]), b)])
    np.testing.assert_allclose(np.concatenate([keras.ops.convert_to_numpy(v) for v in (a, b)]), [-0.6, 0, -0.8],
                               rtol=1e-6)


@pytest.mark.skipif(keras.backend.backend() != "tensorflow", reason="TensorFlow's sparse gradients of a lookup")
def test_global_clipnorm_takes_the_norm_of_an_embedding_row_used_twice_once():
    import tensorflow as tf

    table = keras.Variable(np.zeros((4, 2), "float32"))
    with tf.GradientTape() as tape:
        rows = tf.gather(table.value, [0, 0, 1])
        loss = tf.reduce_sum(rows * [[3.0, 0.0], [3.0, 0.0], [0.0, 8.0]])
    gradient = tape.gradient(loss, table.value)
    assert isinstance(gradient, tf.IndexedSlices)  # row 0 twice: [3, 0], [3, 0]
    # The gradient is [[6, 0], [0, 8], 0, 0]: norm 10, not sqrt(9 + 9 + 64).
    (clipped,) = kbert.training.AdamW(global_clipnorm=1.0)._clip_gradients([gradient])
    np.testing.assert_allclose(keras.ops.convert_to_numpy(clipped), [[0.6, 0], [0, 0.8], [0, 0], [0, 0]], rtol=1e-6)


def test_gradient_accumulation_updates_with_the_mean_gradient_every_n_batches():
    optimizer = optimizers.with_options(keras.optimizers.SGD(1.0), gradient_accumulation_steps=2)
    variable = keras.Variable(np.zeros(1, "float32"))
    optimizer.apply_gradients([(keras.ops.array([1.0]), variable)])
    assert keras.ops.convert_to_numpy(variable)[0] == 0  # accumulated, not applied
    optimizer.apply_gradients([(keras.ops.array([3.0]), variable)])
    np.testing.assert_allclose(keras.ops.convert_to_numpy(variable), [-2.0])


def test_loss_scale_wraps_the_optimizer_for_float16():
    optimizer = kbert.training.fine_tuning_optimizer(100, loss_scale=True)
    assert isinstance(optimizer, keras.optimizers.LossScaleOptimizer)
    assert isinstance(optimizer.inner_optimizer, keras.optimizers.AdamW)


def test_unknown_optimizer_is_refused_with_the_choices():
    with pytest.raises(ValueError, match='"adamw".*"lamb"'):
        kbert.training.pretraining_optimizer(100, optimizer="adam")


def test_schedule_and_adamw_are_the_ones_task_compile_uses():
    from kbert.models import task, task_training

    assert kbert.training.bert_adamw is task.bert_adamw
    assert kbert.training.WarmupLinearDecay is task_training.WarmupLinearDecay


def train_small_model(optimizer, steps=8):
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16), keras.layers.LayerNormalization(),
                              keras.layers.Dense(3)])
    model.compile(optimizer, "sparse_categorical_crossentropy")
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(16 * steps, 8)).astype("float32"), rng.integers(0, 3, 16 * steps)
    model.fit(x, y, batch_size=16, shuffle=False, verbose=0)
    return [keras.ops.convert_to_numpy(w) for w in model.weights]


@pytest.mark.parametrize("options", [{}, {"global_clipnorm": 0.1, "gradient_accumulation_steps": 2}])
def test_kbert_adamw_updates_as_keras_adamw(options):
    def adamw(cls):
        schedule = kbert.training.WarmupLinearDecay(1e-2, total_steps=8, warmup_steps=2)
        optimizer = cls(learning_rate=schedule, weight_decay=0.1, epsilon=1e-6, **options)
        optimizer.exclude_from_weight_decay(var_names=["bias", "gamma", "beta"])
        return optimizer

    ours = adamw(kbert.training.AdamW)
    trained = train_small_model(ours)
    # On PyTorch one fused kernel: the same weights up to float32 rounding.
    assert ours._fused() == (keras.backend.backend() == "torch")
    assert int(ours.iterations) == 8 // options.get("gradient_accumulation_steps", 1)  # updates made
    for a, b in zip(trained, train_small_model(adamw(keras.optimizers.AdamW))):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_kbert_adamw_is_task_compiles_default_and_round_trips():
    optimizer = kbert.training.fine_tuning_optimizer(100)
    assert isinstance(optimizer, kbert.training.AdamW)
    restored = keras.optimizers.deserialize(keras.optimizers.serialize(optimizer))
    assert type(restored) is kbert.training.AdamW
    assert (restored.weight_decay, restored.epsilon, restored.bias_corrected_epsilon) == (0.01, 1e-8, True)


def test_bias_corrected_epsilon_updates_as_torch_adamw():
    import torch

    rng = np.random.default_rng(0)
    start = rng.normal(size=(4, 3)).astype("float32")
    # Gradients of very different sizes: epsilon matters for the small ones.
    grads = [(rng.normal(size=(4, 3)) * np.array([1.0, 1e-6, 1e-8])).astype("float32") for _ in range(5)]
    variable = keras.Variable(start)
    optimizer = kbert.training.bert_adamw(1e-2, weight_decay=0.1, epsilon=1e-8)
    for grad in grads:
        optimizer.apply_gradients([(keras.ops.convert_to_tensor(grad), variable)])
    weight = torch.nn.Parameter(torch.tensor(start))
    reference = torch.optim.AdamW([weight], lr=1e-2, weight_decay=0.1, eps=1e-8)
    for grad in grads:
        weight.grad = torch.tensor(grad)
        reference.step()
    np.testing.assert_allclose(keras.ops.convert_to_numpy(variable), weight.detach().numpy(), rtol=1e-6, atol=1e-7)


def test_fine_tuning_warmup_rounds_up_as_transformers_trainer():
    # Trainer: warmup_steps = ceil(warmup_ratio * total).
    assert [optimizers.warmup_steps(0.1, total) for total in (18, 20, 1, 0)] == [2, 2, 1, 0]
    schedule = keras.optimizers.schedules.deserialize(
        kbert.training.fine_tuning_optimizer(18, learning_rate=1.0).get_config()["learning_rate"])
    np.testing.assert_allclose([float(schedule(s)) for s in (0, 1, 2, 10, 18)], [0, 0.5, 1, 0.5, 0], atol=1e-6)


def test_schedule_floor_decays_to_a_share_of_the_peak():
    schedule = kbert.training.WarmupLinearDecay(1.0, total_steps=110, warmup_steps=10, floor=0.1)
    np.testing.assert_allclose([float(schedule(s)) for s in (5, 10, 60, 110, 200)], [0.5, 1, 0.55, 0.1, 0.1],
                               atol=1e-6)
    with pytest.raises(ValueError, match=r"floor in \[0, 1\]"):
        kbert.training.WarmupLinearDecay(1.0, 10, 1, floor=2.0)


@pytest.mark.skipif(keras.backend.backend() != "tensorflow", reason="TensorFlow's sparse gradients of a lookup")
@pytest.mark.parametrize("optimizer_class", [kbert.training.AdamW, kbert.training.Lamb])
def test_adam_steps_an_embedding_row_used_twice_by_its_summed_gradient(optimizer_class):
    import tensorflow as tf

    def two_steps(sparse):
        table = keras.Variable(np.ones((4, 2), "float32"))
        optimizer = optimizer_class(learning_rate=0.1, weight_decay=0.0)
        for scale in (1.0, 0.25):
            with tf.GradientTape() as tape:
                rows = tf.gather(table.value, [0, 0, 1])  # row 0 twice
                loss = tf.reduce_sum(rows * [[3.0, -1.0], [3.0, 1.0], [0.0, 8.0]]) * scale
            gradient = tape.gradient(loss, table.value)
            assert isinstance(gradient, tf.IndexedSlices)
            optimizer.apply_gradients([(gradient if sparse else tf.convert_to_tensor(gradient), table)])
        return keras.ops.convert_to_numpy(table)

    # Keras' Adam alone squares the slices [3, -1] and [3, 1] (9 + 9, 1 + 1)
    # instead of their sum [6, 0] (36, 0): a different step for row 0.
    np.testing.assert_allclose(two_steps(sparse=True), two_steps(sparse=False), rtol=1e-6)


@pytest.mark.skipif(keras.backend.backend() != "tensorflow", reason="TensorFlow's ResourceApplyAdam")
def test_tensorflow_update_is_one_op_per_weight_with_the_step_scalars_computed_once():
    import collections

    import tensorflow as tf

    def traced_update(names):
        variables = [keras.Variable(np.ones((3, 2), "float32"), name=name) for name in names]
        optimizer = kbert.training.fine_tuning_optimizer(100, global_clipnorm=1.0)
        optimizer.build(variables)
        update = tf.function(lambda grads: optimizer.apply(grads, variables))
        return update.get_concrete_function([tf.TensorSpec((3, 2))] * len(names)).graph.get_operations()

    four = traced_update(("kernel", "bias", "embeddings", "gamma"))
    ops = collections.Counter(op.type for op in four)
    # Adam's step one op a weight; beta_1 ** t and beta_2 ** t once; the
    # decay (not on biases or LayerNorm) one subtraction a decayed weight.
    assert (ops["ResourceApplyAdam"], ops["Pow"], ops["AssignSubVariableOp"]) == (4, 2, 2)
    # Each decayed weight more: its gradient and three handles (weight and
    # moments), clipping (a sum of squares, and the clipped gradient out of
    # the `tf.cond` that scales only where the norm is over), the decay
    # (read, multiply, subtract) and the update: 10 ops, the betas and the
    # decay's factor shared (Keras' update adds 94 ops a weight: the
    # schedule, the powers, the moments).
    more = traced_update(("kernel", "bias", "embeddings", "gamma") + tuple(f"kernel_{i}" for i in range(4)))
    assert (len(more) - len(four)) / 4 <= 10
