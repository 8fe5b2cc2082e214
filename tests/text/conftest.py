import os

import keras
import pytest

# Text processing is tensorflow-text in tf.data and in the graph, the same
# code whatever the Keras backend: these tests run once, in the torch pass of
# `make test` (the lightest one). `make compat-test`, a TensorFlow pass with no
# PyTorch, sets KBERT_TEXT_TESTS_PASS=tensorflow to run them there. A test of
# what the backend does with the features is marked `every_backend`.
ONCE_IN = os.environ.get("KBERT_TEXT_TESTS_PASS", "torch")


def pytest_runtest_setup(item):
    # Before any fixture is built: a skipped test costs nothing.
    if keras.backend.backend() != ONCE_IN and item.get_closest_marker("every_backend") is None:
        pytest.skip(f"runs once, in the {ONCE_IN} pass: tensorflow-text whatever the Keras backend")
