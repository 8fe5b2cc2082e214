"""`from_preset(fine_tuned, num_classes=<another number>)` builds a new head,
as docs/tasks.md says and as transformers' `ignore_mismatched_sizes=True`
does: the output layer is new, the rest of the head is the checkpoint's."""

import numpy as np
import pytest
import torch
import transformers

import kbert
from tests.helpers import to_numpy

SIZES = dict(vocab_size=60, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=24,
             max_position_embeddings=40)


def _save(folder, config_class, num_labels):
    torch.manual_seed(0)
    config = config_class(**SIZES, num_labels=num_labels)
    model = getattr(transformers, config_class.__name__.replace("Config", "ForSequenceClassification"))(config)
    model.save_pretrained(folder)
    return model


@pytest.mark.parametrize("config_class", [transformers.BertConfig, transformers.RobertaConfig])
def test_another_num_classes_builds_a_new_output_layer_over_a_hugging_face_head(tmp_path, config_class):
    hf = _save(tmp_path, config_class, num_labels=3)
    with pytest.warns(UserWarning, match=r"holds a head of 3 classes; this TextClassifier has num_classes=5: the "
                                         r"output layer is new"):
        model = kbert.TextClassifier.from_preset(str(tmp_path), num_classes=5, preprocessor=None)
    assert model.get_layer("logits").kernel.shape == (16, 5)
    if config_class is transformers.RobertaConfig:  # its head's dense layer is kept
        np.testing.assert_array_equal(to_numpy(model.get_layer("classifier_dense").kernel),
                                      hf.classifier.dense.weight.detach().numpy().T)


def test_another_num_classes_builds_a_new_output_layer_over_a_kbert_head(tmp_path):
    _save(tmp_path / "hf", transformers.RobertaConfig, num_labels=3)
    trained = kbert.TextClassifier.from_preset(str(tmp_path / "hf"), preprocessor=None)
    trained.save_to_preset(str(tmp_path / "kbert"))
    with pytest.warns(UserWarning, match=r"holds a head of 3 classes; this TextClassifier has num_classes=2"):
        model = kbert.TextClassifier.from_preset(str(tmp_path / "kbert"), num_classes=2)
    assert model.get_layer("logits").kernel.shape == (16, 2)
    np.testing.assert_array_equal(to_numpy(model.get_layer("classifier_dense").kernel),
                                  to_numpy(trained.get_layer("classifier_dense").kernel))
