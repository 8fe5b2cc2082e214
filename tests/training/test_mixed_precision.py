import csv
import os

import keras
import numpy as np
import pytest

import kbert
from tests.helpers import random_inputs, to_numpy
from tests.training import tiny_run

MR_TRAIN = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "data", "mr", "train.tsv")

def dtype(x):
    return keras.backend.standardize_dtype(x.dtype)


def tiny_backbone(dtype, vocabulary_size=tiny_run.VOCABULARY_SIZE, **kwargs):
    return kbert.BertBackbone(vocabulary_size=vocabulary_size, num_layers=2, num_heads=2, hidden_dim=32,
                              intermediate_dim=64, max_sequence_length=32, dropout=0.0, dtype=dtype, **kwargs)


def test_layer_norm_logits_and_loss_stay_float32_under_mixed_bfloat16(bfloat16):
    backbone = tiny_backbone("mixed_bfloat16")
    model = kbert.BertClassifier(backbone, num_classes=2)
    model.compile()
    inputs = random_inputs(2, 8, tiny_run.VOCABULARY_SIZE)
    assert dtype(backbone(inputs)["sequence_output"]) == "bfloat16"  # the matmuls are bfloat16

    layer_norms = [backbone.embeddings_layer_norm] + [
        norm for layer in backbone.transformer_layers for norm in (layer.attention_layer_norm, layer.output_layer_norm)
    ]
    x = keras.ops.cast(keras.random.normal((2, 8, 32), seed=0) * 30 + 5, "bfloat16")
    for norm in layer_norms:
        assert dtype(norm.gamma) == dtype(norm.beta) == "float32"
        # Computed in float32, rounded to bfloat16 once at the end.
        in_float32 = keras.layers.LayerNormalization(epsilon=norm.epsilon, dtype="float32")
        in_float32.build(x.shape)
        in_float32.set_weights(norm.get_weights())
        np.testing.assert_array_equal(to_numpy(keras.ops.cast(norm(x), "float32")),
                                      to_numpy(keras.ops.cast(keras.ops.cast(in_float32(x), "bfloat16"), "float32")))

    logits = model(inputs)
    assert dtype(logits) == "float32"
    assert dtype(model.loss(keras.ops.array([0, 1]), logits)) == "float32"


def test_mixed_precision_survives_get_config(bfloat16):
    backbone = tiny_backbone("mixed_bfloat16")
    assert kbert.BertBackbone.from_config(backbone.get_config()).token_embedding.dtype_policy.name == "mixed_bfloat16"


def test_attention_softmax_is_taken_in_float32_under_mixed_bfloat16(bfloat16):
    backbone = tiny_backbone("mixed_bfloat16")
    scores = backbone.attention_scores(random_inputs(2, 8, tiny_run.VOCABULARY_SIZE), 0)
    assert dtype(scores) == "float32"


def read_mr(rows):
    with open(MR_TRAIN, encoding="utf-8") as f:
        read = list(csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE))[:rows]
    return [r["text"] for r in read], np.array([int(r["label"]) for r in read])


def fine_tune(policy, texts, labels, preprocessor, epochs):
    keras.utils.set_random_seed(0)
    backbone = tiny_backbone(policy, vocabulary_size=preprocessor.tokenizer.vocabulary_size)
    model = kbert.BertClassifier(backbone, num_classes=2, preprocessor=preprocessor, dropout=0.0)
    model.compile(optimizer=kbert.training.fine_tuning_optimizer(epochs * len(texts) // 32, learning_rate=5e-3))
    return model.fit(texts, labels, batch_size=32, epochs=epochs, shuffle=False, verbose=0).history


def test_bfloat16_fine_tuning_converges_like_float32(minilm_dir, bfloat16):
    # 256 MR reviews, a tiny BERT from scratch (MiniLM's WordPiece vocabulary),
    # 10 epochs at 5e-3: it learns the set by heart (loss 0.69 -> 0.01-0.04 on
    # every backend, in float32 and in bfloat16; 8-16 s a run).
    texts, labels = read_mr(256)
    preprocessor = kbert.BertPreprocessor.from_preset(minilm_dir, sequence_length=32)
    bfloat16 = fine_tune("mixed_bfloat16", texts, labels, preprocessor, epochs=10)
    float32 = fine_tune("float32", texts, labels, preprocessor, epochs=10)
    for history in (float32, bfloat16):
        assert history["loss"][-1] < 0.2 * history["loss"][0]
        assert history["accuracy"][-1] >= 0.95
    # bfloat16 keeps 8 bits of mantissa (~0.4% per rounding), so the two runs
    # drift apart step by step but land alike: within 5% accuracy (13 of 256).
    assert abs(bfloat16["accuracy"][-1] - float32["accuracy"][-1]) <= 0.05


@pytest.mark.skipif(keras.backend.backend() == "jax", reason="XLA on CPU has no float16 matmul (float16 is for GPUs)")
def test_mixed_float16_trains_with_loss_scaling():
    model = kbert.BertClassifier(tiny_backbone("mixed_float16"), num_classes=2, dropout=0.0)
    model.compile()  # the default compile scales the loss for float16 by itself
    assert isinstance(model.optimizer, keras.optimizers.LossScaleOptimizer)
    before = [to_numpy(w).copy() for w in model.trainable_weights]
    history = model.fit(tiny_run.batches(), epochs=2, verbose=0)
    assert np.isfinite(history.history["loss"]).all()
    assert any(np.abs(to_numpy(w) - b).max() > 0 for w, b in zip(model.trainable_weights, before))
