import keras
import numpy as np
import pytest

import kbert
from tests.helpers import random_inputs, to_numpy


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


def test_pooled_output_model_gives_the_pooled_output_and_its_gradients():
    # It runs the last block at [CLS] only; values and weight gradients are
    # those of the whole backbone's pooled output.
    backbone = tiny_backbone(num_layers=3)
    inputs = random_inputs(3, 9, 50)
    inputs["padding_mask"][0, 5:] = 0
    pooled = backbone.pooled_output_model()
    np.testing.assert_allclose(to_numpy(pooled(inputs)), to_numpy(backbone(inputs)["pooled_output"]), atol=1e-5)
    assert {id(w) for w in pooled.weights} <= {id(w) for w in backbone.weights}
    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        grads = []
        for model in (lambda x: backbone(x)["pooled_output"], pooled):
            with tf.GradientTape() as tape:
                loss = tf.reduce_sum(model(inputs) ** 2)
            grads.append(tape.gradient(loss, backbone.trainable_weights))
        for whole, first in zip(*grads):
            np.testing.assert_allclose(np.asarray(tf.convert_to_tensor(whole)),
                                       np.asarray(tf.convert_to_tensor(first)), atol=1e-5)


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


def test_get_config_from_config_round_trips():
    backbone = tiny_backbone(num_segments=3, activation="gelu_approximate", layer_norm_epsilon=1e-6)
    clone = kbert.BertBackbone.from_config(backbone.get_config())
    assert clone.get_config() == backbone.get_config()
    clone.set_weights(backbone.get_weights())
    inputs = random_inputs(2, 7, 50, num_segments=3)
    np.testing.assert_array_equal(
        to_numpy(clone(inputs)["sequence_output"]), to_numpy(backbone(inputs)["sequence_output"])
    )


def test_save_to_preset_then_from_preset_is_bit_for_bit(tmp_path):
    backbone = tiny_backbone()
    backbone.save_to_preset(str(tmp_path))
    restored = kbert.BertBackbone.from_preset(str(tmp_path))
    assert {**restored.get_config(), "name": None} == {**backbone.get_config(), "name": None}
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
