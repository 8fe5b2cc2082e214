"""Task models to and from presets: kbert's layout and Hugging Face
checkpoints with their task heads."""

import json
import os
import warnings

import keras

from kbert.models.bert_backbone import BertBackbone
from kbert.presets import files, huggingface, loading
from kbert.text import BertPreprocessor

TASK_WEIGHTS = "task.weights.h5"


def load_task(folder):
    """The task model saved in a kbert preset folder, whatever its class."""
    task = (files.load_json(folder, files.KBERT_CONFIG).get("task") or {}).get("class")
    cls = keras.saving.get_registered_object(f"kbert>{task}") if task else None
    if cls is None:
        raise ValueError(f"{folder} holds no kbert task model (its {files.KBERT_CONFIG} names none); "
                         "save one with model.save_to_preset(folder).")
    return cls.from_preset(folder)


class TaskPresets:
    """`save_to_preset`, `from_preset` and the Hugging Face head of a task."""

    def save_to_preset(self, folder):
        """Writes backbone, head and vocabulary to `folder` in kbert's layout;
        `from_preset(folder)` restores the model bit for bit, and
        `BertBackbone.from_preset(folder)` its backbone."""
        loading.save_backbone(self.backbone, folder)
        config = files.load_json(folder, files.KBERT_CONFIG)
        config["task"] = {"class": type(self).__name__, "config": self.task_config()}
        if self.preprocessor is not None:
            config["sequence_length"] = self.preprocessor.sequence_length
            self.preprocessor.tokenizer.save_to_preset(folder)
        with open(os.path.join(folder, files.KBERT_CONFIG), "w") as f:
            json.dump(config, f, indent=2)
        self.save_weights(os.path.join(folder, TASK_WEIGHTS))

    @classmethod
    def from_preset(cls, preset, sequence_length=None, **kwargs):
        """Builds the task from a preset: a registered name (`"base"`, ...),
        `"hf://owner/name"`, or a folder in Hugging Face's layout or kbert's.

        The backbone's weights come from the preset, and so do the head's
        when the preset has them: a Hugging Face checkpoint of this task
        (`BertForSequenceClassification`, ...) or a kbert preset saved from
        this task. Otherwise the head starts from its initialisation.

        Args:
            preset: the preset.
            sequence_length: the preprocessor's packed length (default: the
                preset's, at most 512).
            **kwargs: the head's arguments (e.g. `num_classes`), backbone
                settings that leave the architecture alone (`dropout`,
                `dtype`), and `preprocessor` to use instead of the preset's
                (`None`: a model fed token ids).
        """
        folder = files.get_preset_dir(preset)
        backbone_kwargs = {k: kwargs.pop(k) for k in ("dropout", "dtype") if k in kwargs}
        backbone = BertBackbone.from_preset_config(loading.checked_backbone_config(folder, preset, backbone_kwargs))
        preprocessor = (kwargs.pop("preprocessor") if "preprocessor" in kwargs
                        else cls.preset_preprocessor(folder, sequence_length, backbone))
        if files.is_kbert_layout(folder):
            saved = files.load_json(folder, files.KBERT_CONFIG).get("task") or {}
            same_task = saved.get("class") == cls.__name__
            model = cls(backbone=backbone, preprocessor=preprocessor,
                        **{**(saved["config"] if same_task else {}), **kwargs})
            if same_task:
                model.load_weights(os.path.join(folder, TASK_WEIGHTS))
            else:
                backbone.load_weights(os.path.join(folder, loading.KBERT_WEIGHTS))
            return model
        path = files.weights_file(folder)
        tensors = huggingface.read_checkpoint(path)
        hf_config = files.load_json(folder, "config.json")
        model = cls(backbone=backbone, preprocessor=preprocessor,
                    **{**cls.hf_head_config(hf_config, tensors), **kwargs})
        loading.load_hf_backbone_weights(backbone, path, tensors)
        model.load_hf_head(tensors, path)
        return model

    @classmethod
    def preset_preprocessor(cls, folder, sequence_length, backbone):
        if not os.path.exists(os.path.join(folder, files.VOCABULARY)):
            return None
        if sequence_length is None and files.is_kbert_layout(folder):
            sequence_length = files.load_json(folder, files.KBERT_CONFIG).get("sequence_length")
        if sequence_length and sequence_length > backbone.max_sequence_length:
            raise ValueError(
                f"sequence_length={sequence_length} is longer than this model's maximum, "
                f"{backbone.max_sequence_length} positions; use sequence_length <= {backbone.max_sequence_length}."
            )
        return BertPreprocessor.from_preset(
            folder, sequence_length=sequence_length or min(512, backbone.max_sequence_length)
        )

    # === Hugging Face heads ===

    def hf_head_table(self):
        """(variable, Hugging Face name, transform) rows of the head; empty
        for heads that Hugging Face has no checkpoint of."""
        return []

    @classmethod
    def hf_head_config(cls, hf_config, tensors):
        """Head arguments read from a Hugging Face checkpoint (e.g. num_classes)."""
        return {}

    def load_hf_head(self, tensors, path):
        table = self.hf_head_table()
        if not table:
            return
        if not all(name in tensors for _, name, _ in table):
            warnings.warn(
                f"{path} has no {type(self).__name__} head ({table[0][1]} and others); "
                "the head starts from its initialisation: fine-tune before use."
            )
            return
        huggingface.assign(table, tensors, source=path)
