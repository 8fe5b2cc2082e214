"""A task saved as a preset: the head's weights alone beside the backbone's,
every setting of its config restored, into a new folder only."""

import json
import os

import h5py
import keras
import numpy as np
import pytest

import kbert
from kbert.models.task_presets import TASK_WEIGHTS
from tests.helpers import random_inputs, to_numpy


def tiny_backbone(**kwargs):
    return kbert.BertBackbone(vocabulary_size=30522, num_layers=1, num_heads=2, hidden_dim=16, intermediate_dim=32,
                              max_sequence_length=128, **kwargs)


def assert_same_weights(a, b):
    assert [v.path for v in a.weights] == [v.path for v in b.weights]
    for x, y in zip(a.weights, b.weights):
        np.testing.assert_array_equal(to_numpy(x), to_numpy(y))


def test_a_task_preset_holds_the_heads_weights_and_no_optimizer_state(tmp_path):
    keras.utils.set_random_seed(0)
    model = kbert.BertClassifier(tiny_backbone(), num_classes=3, preprocessor=None)
    model.compile(learning_rate=1e-3)
    inputs = random_inputs(4, 8, 30522)
    model.fit(inputs, np.array([0, 1, 2, 0]), epochs=1, verbose=0)  # the optimizer now holds 2 slots a weight
    model.save_to_preset(str(tmp_path))
    with h5py.File(tmp_path / TASK_WEIGHTS, "r") as f:
        saved = {f["head"][k].attrs["path"]: f["head"][k].shape for k in f["head"]}
        assert list(f) == ["head"]
    assert saved == {"logits/kernel": (16, 3), "logits/bias": (3,)}
    restored = kbert.BertClassifier.from_preset(str(tmp_path), preprocessor=None)
    assert_same_weights(restored, model)
    np.testing.assert_array_equal(to_numpy(restored(inputs)), to_numpy(model(inputs)))


def test_a_preset_whose_task_weights_hold_the_whole_task_still_loads(tmp_path):
    # As presets were written before they held the head alone: Keras'
    # save_weights of the whole compiled task, optimizer included.
    keras.utils.set_random_seed(0)
    model = kbert.BertClassifier(tiny_backbone(), num_classes=2, preprocessor=None)
    model.compile(learning_rate=1e-3)
    model.fit(random_inputs(2, 8, 30522), np.array([0, 1]), epochs=1, verbose=0)
    model.save_to_preset(str(tmp_path))
    os.remove(tmp_path / TASK_WEIGHTS)
    model.save_weights(str(tmp_path / TASK_WEIGHTS))
    assert_same_weights(kbert.BertClassifier.from_preset(str(tmp_path), preprocessor=None), model)


def test_another_num_classes_gives_a_new_output_layer_with_a_warning(tmp_path):
    kbert.BertClassifier(tiny_backbone(), num_classes=2, preprocessor=None).save_to_preset(str(tmp_path))
    with pytest.warns(UserWarning, match=r"holds a head of 2 classes; this TextClassifier has num_classes=5"):
        model = kbert.BertClassifier.from_preset(str(tmp_path), num_classes=5, preprocessor=None)
    assert model.get_layer("logits").kernel.shape[-1] == 5


# Every setting of each task's get_config() off its default (the preprocessor's too).
OFF_DEFAULT = {
    # A cross-encoder: one score (regression) through a sigmoid.
    kbert.BertClassifier: dict(num_classes=1, dropout=0.3, class_names=["relevance"], threshold=0.3,
                               score_activation="sigmoid"),
    kbert.BertTokenClassifier: dict(num_classes=3, dropout=0.3, class_names=["O", "B-X", "I-X"]),
    kbert.BertQuestionAnswerer: dict(stride=16, max_question_length=8, max_answer_length=10, num_candidates=5,
                                     null_score_margin=1.5),
    kbert.BertMaskedLM: dict(mask_selection_rate=0.2, max_predictions=6, whole_word=True),
    kbert.BertPretrainer: dict(mask_selection_rate=0.2, max_predictions=6, whole_word=True),
    kbert.BertTextEmbedder: dict(pooling="cls", normalize=False, dense=[{"units": 8, "activation": "tanh"}],
                                 prompts={"query": "query: "}, default_prompt_name="query", include_prompt=False,
                                 truncate_dim=4),
}


@pytest.mark.parametrize("cls", list(OFF_DEFAULT), ids=lambda c: c.__name__)
def test_save_to_preset_restores_every_setting_of_get_config(cls, tmp_path, minilm_dir):
    tokenizer = kbert.BertTokenizer.from_preset(minilm_dir)
    default = cls(tiny_backbone(), preprocessor=kbert.BertPreprocessor(tokenizer, sequence_length=96),
                  **({"num_classes": 2} if "num_classes" in OFF_DEFAULT[cls] else {}))
    preprocessor = cls.preprocessor_cls(tokenizer, sequence_length=96, truncation="only_first", pad_to="longest",
                                          pad_to_multiple_of=8, name="my_preprocessor")
    padding = "bucket" if default.input_padding == "sequence_length" else "sequence_length"
    length_groups = 7 if default.length_groups == 0 else 0
    model = cls(tiny_backbone(), preprocessor=preprocessor, input_padding=padding, length_groups=length_groups,
                name="mine", trainable=False, **OFF_DEFAULT[cls])
    config, default_config = model.get_config(), default.get_config()
    settings = {k for k in config if k not in ("backbone", "preprocessor")}
    same = [k for k in settings if config[k] == default_config[k]]
    packing, default_packing = config["preprocessor"]["config"], default_config["preprocessor"]["config"]
    same += [k for k in packing if k not in ("tokenizer", "sequence_length") and packing[k] == default_packing[k]]
    assert not same, f"the test leaves {same} at their defaults"
    model.save_to_preset(str(tmp_path))
    restored = cls.from_preset(str(tmp_path))
    restored_config = restored.get_config()
    for c in (config, restored_config):
        c["backbone"]["config"].pop("name")  # numbered by Keras: a preset keeps no name of the backbone
    assert restored_config == config
    assert_same_weights(restored, model)


def test_save_to_preset_refuses_a_folder_that_holds_another_model(tmp_path):
    # Left beside kbert's files, transformers or upload_preset would read these.
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    (tmp_path / "model.safetensors").write_bytes(b"weights of another model")
    model = kbert.BertClassifier(tiny_backbone(), num_classes=2, preprocessor=None)
    for saved in (model, model.backbone):
        with pytest.raises(FileExistsError, match=f"{tmp_path} is not empty: save_to_preset writes a new folder"):
            saved.save_to_preset(str(tmp_path))
    assert sorted(os.listdir(tmp_path)) == ["config.json", "model.safetensors"]
    (tmp_path / "new").mkdir()  # an empty folder is new enough
    model.save_to_preset(str(tmp_path / "new"))
    assert "kbert_config.json" in os.listdir(tmp_path / "new")
