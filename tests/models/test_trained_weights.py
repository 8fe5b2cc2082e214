"""Which weights a task model trains is decided in one place
(`kbert.models.task_training.TrainedWeights`), and everything that trains or
runs the model follows it as it changes: the optimizer, Keras' compiled
steps, the contrastive fit, LoRA."""

import keras
import numpy as np
import pytest

import kbert
from kbert.backend import keras_private
from tests.helpers import random_inputs, to_numpy

TEXTS = ["a wonderful, moving film", "dull and far too long", "great acting and a clever plot", "I want my money back"]


def tiny_backbone(vocabulary_size=120):
    keras.utils.set_random_seed(0)
    return kbert.BertBackbone(vocabulary_size=vocabulary_size, num_layers=2, num_heads=2, hidden_dim=16,
                              intermediate_dim=32, max_sequence_length=40, dropout=0.0)


def values(variables):
    return {v.path: to_numpy(v) for v in variables}


def unchanged(before, variables):
    return all(np.array_equal(before[v.path], to_numpy(v)) for v in variables)


def built_for(model):
    optimizer = getattr(model.optimizer, "inner_optimizer", model.optimizer)
    return [v.path for v in keras_private.trainable_variables(optimizer)]


def test_an_embedder_fit_with_a_loss_of_ones_own_leaves_the_pooler_out():
    # The embedder's outputs never read the pooler: neither Keras' train step,
    # nor the optimizer, nor the trainable variables count it.
    embedder = kbert.BertTextEmbedder(tiny_backbone())
    pooler = embedder.backbone.pooled_dense.weights
    before = values(pooler)
    embedder.compile(loss=keras.losses.CosineSimilarity())
    embedder.fit(random_inputs(4, 8, 120), np.random.default_rng(0).normal(size=(4, 16)), batch_size=4, verbose=0)
    assert unchanged(before, pooler)
    assert built_for(embedder) == [v.path for v in embedder.trainable_variables]
    assert not {v.path for v in pooler} & set(built_for(embedder))


def test_the_contrastive_fit_trains_what_the_embedder_trains(minilm_dir):
    preprocessor = kbert.BertPreprocessor.from_preset(minilm_dir, sequence_length=16)
    embedder = kbert.BertTextEmbedder(tiny_backbone(30522), preprocessor)
    embedder.backbone.enable_lora(2)
    embedder.compile(optimizer=keras.optimizers.Adam(1e-2))
    frozen = [v for v in embedder.weights if "lora" not in v.path]
    before = values(frozen)
    embedder.fit((TEXTS, TEXTS[::-1]), batch_size=4, verbose=0)
    assert unchanged(before, frozen)
    assert sorted(built_for(embedder)) == sorted(embedder.backbone.lora_weights())


@pytest.mark.parametrize("how", ["enable_lora", "load_lora_weights"])
def test_a_fit_after_lora_is_switched_on_trains_only_the_adapters_and_the_head(how, tmp_path):
    # Fit, LoRA on, fit again without compile: a new optimizer for the new
    # weights (the default one, whose schedule starts again from step 0).
    x, y = random_inputs(8, 10, 120), np.arange(8) % 3
    if how == "load_lora_weights":
        source = kbert.BertClassifier(tiny_backbone(), 3)
        source.backbone.enable_lora(2)
        source.save_lora_weights(str(tmp_path / "adapters.safetensors"))
    model = kbert.BertClassifier(tiny_backbone(), 3)
    model.compile(learning_rate=1e-2)
    model.fit(x, y, batch_size=4, verbose=0)
    if how == "enable_lora":
        model.backbone.enable_lora(2)
    else:
        model.load_lora_weights(str(tmp_path / "adapters.safetensors"))
    frozen = [v for v in model.backbone.weights if "lora" not in v.path]
    before = values(model.weights)
    model.fit(x, y, batch_size=4, epochs=2, verbose=0)
    assert unchanged(before, frozen)
    trained = {*model.backbone.lora_weights(), "logits/kernel", "logits/bias"}
    changed = {p for p, v in values(model.weights).items() if not np.array_equal(before[p], v)}
    assert "transformer_layer_0/query/lora_kernel_b" in changed and changed <= trained
    assert set(built_for(model)) == trained


def random_adapters(backbone):
    rng = np.random.default_rng(0)
    for variable in backbone.lora_weights().values():
        variable.assign(rng.normal(size=variable.shape, scale=0.5).astype("float32"))


def test_predict_classify_and_encode_see_adapters_switched_on_after_a_first_call(minilm_dir):
    # On TensorFlow, Keras' predict step, traced at the first call, ran the
    # model without the adapters.
    preprocessor = kbert.BertPreprocessor.from_preset(minilm_dir, sequence_length=16)
    classifier = kbert.BertClassifier(tiny_backbone(30522), 3, preprocessor=preprocessor)
    embedder = kbert.BertTextEmbedder(tiny_backbone(30522), preprocessor)
    first = classifier.predict(TEXTS, verbose=0), classifier.classify(TEXTS), embedder.encode(TEXTS)
    for backbone in (classifier.backbone, embedder.backbone):
        backbone.enable_lora(2)
        random_adapters(backbone)
    logits = to_numpy(classifier(TEXTS))
    np.testing.assert_allclose(classifier.predict(TEXTS, verbose=0), logits, atol=1e-5)
    probabilities = [c["probabilities"] for c in classifier.classify(TEXTS)]
    np.testing.assert_allclose(probabilities, to_numpy(keras.ops.softmax(logits)), atol=1e-5)
    np.testing.assert_allclose(embedder.encode(TEXTS), to_numpy(embedder(TEXTS)), atol=1e-5)
    assert np.abs(logits - first[0]).max() > 1e-4 and np.abs(embedder.encode(TEXTS) - first[2]).max() > 1e-3
