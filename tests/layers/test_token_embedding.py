import keras
import numpy as np
import pytest

from kbert.layers import TokenEmbedding
from tests.helpers import rebuilt_from_config, to_numpy


def one_sgd_step(embedding, ids, weights):
    """The embedding's output, and its table after one SGD step on
    `sum(output * weights)`, through `train_on_batch` (each backend's own
    training step)."""
    inputs = keras.Input((ids.shape[1],), dtype="int32")
    model = keras.Model(inputs, embedding(inputs))
    model.compile(optimizer=keras.optimizers.SGD(1.0), loss=lambda y, out: -keras.ops.sum(
        keras.ops.cast(out, "float32") * y, axis=-1))
    output = to_numpy(keras.ops.cast(model.predict_on_batch(ids), "float32"))
    model.train_on_batch(ids, weights)
    return output, to_numpy(embedding.embeddings)


@pytest.mark.parametrize("dtype", ["float32", "mixed_bfloat16"])
def test_token_embedding_has_keras_embeddings_values_and_gradients(dtype, request):
    if dtype != "float32":
        request.getfixturevalue("bfloat16")
    rng = np.random.default_rng(0)
    table = rng.normal(size=(50, 8)).astype("float32")
    ids = np.array([[1, 4, 4, 0], [7, 49, 1, 2]], "int32")  # repeated rows add up
    weights = rng.normal(size=(2, 4, 8)).astype("float32")
    results = []
    for layer in (TokenEmbedding(50, 8, dtype=dtype), keras.layers.Embedding(50, 8, dtype=dtype)):
        layer.build((None, 4))
        layer.set_weights([table])
        results.append(one_sgd_step(layer, ids, weights))
    (ours, our_table), (keras_output, keras_table) = results
    np.testing.assert_array_equal(ours, keras_output)
    np.testing.assert_allclose(our_table, keras_table, rtol=1e-6, atol=1e-6)
    assert not np.allclose(our_table, table)  # the step moved it


def test_a_layer_rebuilt_from_its_config_gives_the_same_rows_mask_and_penalty():
    # Every setting differs from its default: a copy that lost one from the
    # config initializes, casts, masks, trains or regularizes differently.
    layer = TokenEmbedding(
        30, 4, embeddings_initializer=keras.initializers.RandomNormal(seed=3), mask_zero=True,
        embeddings_regularizer=keras.regularizers.L2(0.1), trainable=False, dtype="float16",
    )
    copies = rebuilt_from_config(layer)
    for embedding in [layer, *copies]:
        embedding.build((None, 3))
    for copy in copies:
        np.testing.assert_array_equal(to_numpy(copy.embeddings), to_numpy(layer.embeddings))
    table = np.random.default_rng(0).normal(size=(30, 4)).astype("float32")
    for embedding in [layer, *copies]:
        embedding.set_weights([table])
    ids = np.array([[3, 29, 0], [7, 0, 0]], "int32")
    for copy in copies:
        np.testing.assert_array_equal(to_numpy(copy(ids)), to_numpy(layer(ids)))
        np.testing.assert_array_equal(to_numpy(copy.compute_mask(ids)), to_numpy(layer.compute_mask(ids)))
        assert copy.trainable_weights == []
        copy.trainable = layer.trainable = True  # the penalty counts trainable weights only
        assert [float(to_numpy(loss)) for loss in copy.losses] == [float(to_numpy(loss)) for loss in layer.losses]


@pytest.mark.skipif(keras.backend.backend() != "tensorflow", reason="inspects a TensorFlow graph")
def test_tensorflow_casts_the_gathered_rows_not_the_table(bfloat16):
    import tensorflow as tf

    layer = TokenEmbedding(1000, 16, dtype="mixed_bfloat16")
    layer.build((None, None))
    graph = tf.function(layer).get_concrete_function(tf.TensorSpec((None, None), tf.int32)).graph
    casts = [op for op in graph.get_operations() if op.type == "Cast"]
    assert [op.type for op in graph.get_operations() if "Gather" in op.type] == ["ResourceGather"]
    assert casts and all(op.inputs[0].shape.as_list() == [None, None, 16] for op in casts)
