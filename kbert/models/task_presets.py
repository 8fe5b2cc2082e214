"""Task models to and from presets: kbert's layout and Hugging Face
checkpoints with their task heads."""

import difflib
import inspect
import json
import os
import warnings

import keras

from kbert.models.bert_backbone import BertBackbone
from kbert.presets import files, huggingface, loading, to_transformers, tokenizer_files
from kbert.text import BertPreprocessor

TASK_WEIGHTS = "task.weights.h5"
# The backbone's constructor arguments that `from_preset` passes on: they
# leave the architecture, fixed by the weights, alone.
BACKBONE_SETTINGS = ("dropout", "dtype", "packing")


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
                `dtype`, `packing`), and `preprocessor` to use instead of the preset's
                (`None`: a model fed token ids). Any other argument is
                refused, naming it: one that would change the architecture
                fixed by the weights (`num_layers=3`), a typo (`dropuot`), a
                `compile` or `fit` argument (`learning_rate`).
        """
        if "preprocessor" in kwargs and sequence_length is not None:
            raise ValueError(
                f"Got both preprocessor= and sequence_length={sequence_length}: the sequence length is the "
                "preprocessor's; build it with that length (BertPreprocessor.from_preset(preset, sequence_length=...))."
            )
        cls._check_preset_arguments(preset, kwargs)
        folder = files.get_preset_dir(preset)
        backbone_kwargs = {k: kwargs.pop(k) for k in BACKBONE_SETTINGS if k in kwargs}
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
                if saved:
                    model.load_saved_head(folder, saved)
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
    def _preset_arguments(cls):
        """The keyword arguments `from_preset` takes."""
        names = {*BACKBONE_SETTINGS, "name", "preprocessor", "sequence_length"}
        for klass in (k for k in cls.__mro__ if issubclass(k, TaskPresets)):
            if "__init__" in vars(klass):
                names |= {name for name, p in inspect.signature(klass.__init__).parameters.items()
                          if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)}
        return sorted(names - {"self", "inputs", "outputs", "backbone"})

    @classmethod
    def _check_preset_arguments(cls, preset, kwargs):
        """Refuses keyword arguments that `from_preset` would otherwise pass
        on silently: the backbone's must leave the preset's architecture
        alone (they can only repeat it); anything else is unknown."""
        accepted = cls._preset_arguments()
        refused = [k for k in kwargs if k not in accepted]
        if not refused:
            return
        folder = files.get_preset_dir(preset)
        config = loading.backbone_config(folder)
        backbone = {k: kwargs.pop(k) for k in refused if k in config}
        loading.checked_backbone_config(folder, preset, backbone)  # refuses a different architecture
        refused = [k for k in refused if k not in backbone or backbone[k] != config[k]]
        if not refused:
            return
        compile_arguments = inspect.signature(cls.compile).parameters
        fit_arguments = inspect.signature(cls.fit).parameters
        hints = []
        for k in refused:
            if k in compile_arguments:
                hints.append(f"{k} is a compile() argument: call model.compile({k}=...) after from_preset.")
            elif k in fit_arguments:
                hints.append(f"{k} is a fit() argument: model.fit(..., {k}=...).")
            elif difflib.get_close_matches(k, accepted, n=1):
                hints.append(f"{k}: did you mean {difflib.get_close_matches(k, accepted, n=1)[0]}?")
        raise TypeError(
            f"{cls.__name__}.from_preset() got unexpected keyword argument(s): {', '.join(refused)}. "
            + "".join(f"{hint} " for hint in hints)
            + f"It accepts: {', '.join(accepted)}."
        )

    @classmethod
    def preset_preprocessor(cls, folder, sequence_length, backbone):
        if not tokenizer_files.has_tokenizer(folder):
            warnings.warn(tokenizer_files.no_tokenizer_message(folder))
            return None
        if sequence_length is None and files.is_kbert_layout(folder):
            sequence_length = files.load_json(folder, files.KBERT_CONFIG).get("sequence_length")
        elif sequence_length is None:
            sequence_length = tokenizer_files.model_max_length(folder, backbone.max_sequence_length)
        if sequence_length and sequence_length > backbone.max_sequence_length:
            raise ValueError(
                f"sequence_length={sequence_length} is longer than this model's maximum, "
                f"{backbone.max_sequence_length} positions; use sequence_length <= {backbone.max_sequence_length}."
            )
        return BertPreprocessor.from_preset(
            folder, sequence_length=sequence_length or min(512, backbone.max_sequence_length)
        )

    def export_to_transformers(self, path, dtype="float32"):
        """Writes the model as a Hugging Face folder that `transformers`'
        `AutoModelFor...` and `pipeline` load (`BertForSequenceClassification`,
        ...; `kbert.presets.to_transformers`), with float32 weights unless
        `dtype` says otherwise; `from_preset(path)` reads it back bit for bit."""
        return to_transformers.export_to_transformers(self, path, dtype)

    # === Hugging Face heads ===

    def hf_head_table(self):
        """(variable, Hugging Face name, transform) rows of the head; empty
        for heads that Hugging Face has no checkpoint of."""
        return []

    @classmethod
    def hf_head_config(cls, hf_config, tensors):
        """Head arguments read from a Hugging Face checkpoint (e.g. num_classes)."""
        return {}

    def load_saved_head(self, folder, saved):
        """The head that another task saved in `folder` shares with this one
        (a `BertPretrainer`'s masked-LM head for a `BertMaskedLM`), matched
        by its Hugging Face names; a warning for any part it lacks."""
        table = self.hf_head_table()
        if not table:
            return
        source_class = keras.saving.get_registered_object(f"kbert>{saved.get('class')}")
        source = None
        if source_class is not None and issubclass(source_class, TaskPresets):
            # The saved task, on this model's backbone (its weights, already
            # loaded, are read again from the same file).
            source = source_class(backbone=self.backbone, preprocessor=None, **saved.get("config", {}))
        variables = {name: variable for variable, name, _ in source.hf_head_table()} if source else {}
        shared = [(variable, variables[name]) for variable, name, _ in table if name in variables]
        if shared:
            source.load_weights(os.path.join(folder, TASK_WEIGHTS))
            for variable, value in shared:
                variable.assign(value)
        if len(shared) < len(table):
            missing = [name for _, name, _ in table if name not in variables]
            part = "head" if not shared else f"head's {', '.join(missing)}"
            warnings.warn(
                f"{folder} holds a {saved.get('class')}, which has no {type(self).__name__} {part}: "
                "it starts from its initialisation; fine-tune before use."
            )

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
