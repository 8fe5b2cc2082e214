"""Files that earlier kbert versions wrote still load."""

import os
import warnings

import keras
import numpy as np

import kbert  # noqa: F401  (as a user does before load_model)
from tests.helpers import to_numpy

DATA = os.path.join(os.path.dirname(__file__), "data")


def test_a_token_classifier_saved_when_it_still_trained_the_pooler_loads_predicts_and_trains():
    # Written by kbert at commit 22420bf (2026-12-05), on TensorFlow, after one
    # step of fit: its optimizer holds moments for the pooler, which a token
    # classifier no longer trains. Its weights load whole and predict as they
    # did; Keras skips the optimizer's state, saying so, and fit starts afresh.
    rng = np.random.default_rng(0)
    x = {"token_ids": rng.integers(5, 40, (4, 8)).astype("int32"), "segment_ids": np.zeros((4, 8), "int32"),
         "padding_mask": np.ones((4, 8), "int32")}
    y = rng.integers(0, 3, (4, 8))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = keras.saving.load_model(os.path.join(DATA, "token_classifier_2026_12_05.keras"))
    assert any("Skipping variable loading for optimizer" in str(w.message) for w in caught)
    expected = np.load(os.path.join(DATA, "token_classifier_2026_12_05.logits.npy"))
    np.testing.assert_allclose(to_numpy(model(x)), expected, atol=1e-5)
    assert model.class_names == ["O", "B-PER", "I-PER"]
    model.fit(x, y, epochs=1, verbose=0)
    assert int(model.optimizer.iterations) == 1
