"""Raw text into task models: several models built in one process share
their traced text pipelines and warn of no retracing."""

import logging
import warnings

import keras

import kbert
from kbert.models import task_inputs

TEXTS, LABELS = ["a fine film", "a dull film", "what a waste", "a small gem"], [1, 0, 0, 1]


class _Records(logging.Handler):
    def __init__(self):
        super().__init__()
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


def test_models_built_one_after_another_share_their_traces_and_warn_of_no_retracing(minilm_dir):
    # A notebook's loop: each model from the same preset, with a tokenizer of
    # its own. TensorFlow (which runs the text pipelines on every backend)
    # counts the traces of all copies of a function together.
    records = _Records()
    logging.getLogger("tensorflow").addHandler(records)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            models = []
            for _ in range(3):
                backbone = kbert.BertBackbone(vocabulary_size=30522, num_layers=1, num_heads=2, hidden_dim=16,
                                              intermediate_dim=32, max_sequence_length=64)
                preprocessor = kbert.BertPreprocessor.from_preset(minilm_dir, sequence_length=16)
                model = kbert.BertClassifier(backbone, 2, preprocessor=preprocessor)
                model.fit(TEXTS, LABELS, epochs=1, batch_size=4, verbose=0)
                model.evaluate(TEXTS, LABELS, verbose=0)
                model.predict(TEXTS[:2], verbose=0)
                models.append(model)
    finally:
        logging.getLogger("tensorflow").removeHandler(records)
    retracing = [m for m in records.messages + [str(w.message) for w in caught] if "retracing" in m]
    assert retracing == []
    first = task_inputs.traced_functions(models[0].preprocessor)
    assert first and all(task_inputs.traced_functions(m.preprocessor) == first for m in models[1:])
    assert all(f.experimental_get_tracing_count() == 1 for f in first.values())
