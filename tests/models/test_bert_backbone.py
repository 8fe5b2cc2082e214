import subprocess
import sys

import keras
import numpy as np
import pytest

import kbert
from tests.helpers import output_and_weight_gradients, random_inputs, rebuilt_from_config, to_numpy


def tiny_backbone(**kwargs):
    config = dict(vocabulary_size=50, num_layers=2, num_heads=2, hidden_dim=16, intermediate_dim=32,
                  max_sequence_length=24, dropout=0.0)
    config.update(kwargs)
    return kbert.BertBackbone(**config)


def test_outputs_have_bert_shapes_for_any_length_up_to_the_maximum():
    backbone = tiny_backbone()
    for length in (1, 7, 24):
        outputs = backbone(random_inputs(3, length, 50))
        assert tuple(outputs["sequence_output"].shape) == (3, length, 16)
        assert tuple(outputs["pooled_output"].shape) == (3, 16)


def test_padding_does_not_change_real_token_outputs():
    backbone = tiny_backbone()
    inputs = random_inputs(1, 6, 50)
    padded = {k: np.pad(v, ((0, 0), (0, 4))) for k, v in inputs.items()}
    short = to_numpy(backbone(inputs)["sequence_output"])
    long = to_numpy(backbone(padded)["sequence_output"])
    np.testing.assert_allclose(short, long[:, :6], atol=1e-5)


@pytest.mark.parametrize("packing", [False, True])
def test_pooled_output_model_gives_the_pooled_output_and_its_weight_gradients_in_training(packing):
    # It runs the last block at [CLS] only; values and weight gradients are
    # those of the whole backbone's pooled output, with padding (or packed
    # rows), in training (dropout 0), on every backend.
    backbone = tiny_backbone(num_layers=3, packing=packing)
    inputs = random_inputs(3, 9, 50)
    inputs["padding_mask"][0, 5:] = 0
    if packing:
        inputs["sequence_ids"] = np.array([[1, 1, 2, 2, 2, 0, 0, 0, 0], [1] * 4 + [2] * 5, [1] * 9], "int32")
    pooled = backbone.pooled_output_model()
    assert {id(w) for w in pooled.weights} == {id(w) for w in backbone.weights}
    variables = backbone.trainable_variables
    whole, whole_grads = output_and_weight_gradients(
        lambda: backbone(inputs, training=True)["pooled_output"], variables)
    first, first_grads = output_and_weight_gradients(lambda: pooled(inputs, training=True), variables)
    np.testing.assert_allclose(first, whole, atol=1e-5)
    for variable, a, b in zip(variables, first_grads, whole_grads):
        np.testing.assert_allclose(a, b, atol=1e-5, err_msg=variable.path)
    # The backbone itself still gives every position's output.
    assert tuple(backbone(inputs)["sequence_output"].shape) == (3, 9, 16)


def test_pooled_output_model_runs_the_whole_last_block_when_asked():
    backbone = tiny_backbone()
    inputs = random_inputs(2, 6, 50)
    last = backbone.transformer_layers[-1]

    def last_block_output_shape(model):
        nodes = {node for depth in model._nodes_by_depth.values() for node in depth}
        (shape,) = [tuple(node.outputs[0].shape) for node in last._inbound_nodes if node in nodes]
        return shape

    whole = backbone.pooled_output_model(first_token_only=False)
    assert last_block_output_shape(whole) == (None, None, 16)
    assert last_block_output_shape(backbone.pooled_output_model()) == (None, 1, 16)
    np.testing.assert_allclose(to_numpy(whole(inputs)), to_numpy(backbone.pooled_output_model()(inputs)), atol=1e-5)


@pytest.mark.skipif(keras.backend.backend() != "tensorflow", reason="SavedModels are written on TensorFlow")
def test_pooled_output_model_in_a_saved_model_gives_the_whole_backbones_pooled_output(tmp_path):
    backbone = tiny_backbone()
    inputs = random_inputs(3, 8, 50)
    backbone.pooled_output_model().export(str(tmp_path / "pooled"), verbose=False)
    np.savez(tmp_path / "inputs.npz", **inputs)
    serve = (
        "import sys, numpy as np, tensorflow as tf\n"
        "inputs = dict(np.load(sys.argv[2]))\n"
        "served = tf.saved_model.load(sys.argv[1])\n"
        "np.save(sys.argv[3], served.serve(inputs).numpy())\n"
    )
    subprocess.run([sys.executable, "-c", serve, str(tmp_path / "pooled"), str(tmp_path / "inputs.npz"),
                    str(tmp_path / "served.npy")], check=True, capture_output=True)
    np.testing.assert_allclose(np.load(tmp_path / "served.npy"), to_numpy(backbone(inputs)["pooled_output"]),
                               atol=1e-5)


def test_hidden_states_are_embeddings_plus_every_layer():
    backbone = tiny_backbone(num_layers=3)
    inputs = random_inputs(2, 5, 50)
    outputs = backbone.with_hidden_states()(inputs)
    assert len(outputs["hidden_states"]) == 4
    np.testing.assert_allclose(
        to_numpy(outputs["hidden_states"][-1]), to_numpy(backbone(inputs)["sequence_output"]), atol=1e-6
    )


def test_attention_scores_are_distributions_that_ignore_padding():
    backbone = tiny_backbone()
    inputs = random_inputs(2, 8, 50)
    scores = to_numpy(backbone.attention_scores(inputs, layer_index=-1))
    assert scores.shape == (2, 2, 8, 8)
    np.testing.assert_allclose(scores.sum(-1), 1.0, atol=1e-5)
    padded_keys = inputs["padding_mask"][:, None, None, :] == 0
    assert np.all(np.where(padded_keys, scores, 0.0) < 1e-6)


def test_a_backbone_rebuilt_from_its_config_computes_the_same():
    backbone = tiny_backbone(num_segments=3, activation="gelu_approximate", layer_norm_epsilon=1e-6)
    inputs = random_inputs(2, 7, 50, num_segments=3)
    for clone in rebuilt_from_config(backbone):
        clone.set_weights(backbone.get_weights())
        for key in ("sequence_output", "pooled_output"):
            np.testing.assert_array_equal(to_numpy(clone(inputs)[key]), to_numpy(backbone(inputs)[key]))


def test_save_to_preset_then_from_preset_is_bit_for_bit(tmp_path):
    backbone = tiny_backbone()
    backbone.save_to_preset(str(tmp_path))
    restored = kbert.BertBackbone.from_preset(str(tmp_path))
    for a, b in zip(backbone.weights, restored.weights):
        np.testing.assert_array_equal(to_numpy(a), to_numpy(b))
    inputs = random_inputs(2, 9, 50)
    np.testing.assert_array_equal(
        to_numpy(restored(inputs)["pooled_output"]), to_numpy(backbone(inputs)["pooled_output"])
    )


def test_keras_model_file_round_trips(tmp_path):
    backbone = tiny_backbone()
    path = str(tmp_path / "backbone.keras")
    backbone.save(path)
    restored = keras.saving.load_model(path)
    inputs = random_inputs(2, 5, 50)
    np.testing.assert_array_equal(
        to_numpy(restored(inputs)["sequence_output"]), to_numpy(backbone(inputs)["sequence_output"])
    )


def test_from_preset_refuses_to_change_the_architecture(tmp_path):
    tiny_backbone().save_to_preset(str(tmp_path))
    with pytest.raises(ValueError, match="Cannot change hidden_dim"):
        kbert.BertBackbone.from_preset(str(tmp_path), hidden_dim=32)
    assert kbert.BertBackbone.from_preset(str(tmp_path), dropout=0.3).dropout == 0.3


def test_weights_are_named_after_what_they_are():
    names = {w.path for w in tiny_backbone().weights}
    assert "token_embedding/embeddings" in names
    assert "segment_embedding/embeddings" in names
    assert "position_embedding/embeddings" in names
    assert "transformer_layer_0/query/kernel" in names
