"""Task models to and from presets: kbert's layout and Hugging Face
checkpoints with their task heads."""

import difflib
import inspect
import json
import os
import warnings

import h5py
import keras

from kbert import families, text, tf_if_present
from kbert.presets import files, huggingface, loading, reader, tokenizer_files, weight_check

TASK_WEIGHTS = "task.weights.h5"
# The group of TASK_WEIGHTS that holds the head's weights. A file without it
# is from before presets held the head alone: Keras' `save_weights` of the
# whole task (backbone and optimizer included), still read.
HEAD = "head"
# What `get_config` holds that a preset keeps elsewhere: the backbone in its
# own entry and weights file, the tokenizer in its files, the packed length
# at the top of kbert_config.json.
_KEPT_ELSEWHERE = ("backbone", "preprocessor", "tokenizer", "sequence_length")
# The backbone's constructor arguments that `from_preset` passes on: they
# leave the architecture, fixed by the weights, alone.
BACKBONE_SETTINGS = ("dropout", "dtype", "packing")


def load_task(folder):
    """The task model saved in a kbert preset folder, whatever its class."""
    preset = reader.read_preset(folder)
    task = preset.task.get("class")
    cls = keras.saving.get_registered_object(f"kbert>{task}") if task else None
    if cls is None:
        raise ValueError(f"{folder} holds no kbert task model (its {files.KBERT_CONFIG} names none); "
                         "save one with model.save_to_preset(folder).")
    return cls.from_preset(preset)


def save_task(model, folder):
    """`Task.save_to_preset`: backbone, head and vocabulary in kbert's layout,
    with every setting of the task's and its preprocessor's `get_config()`."""
    loading.save_backbone(model.backbone, folder)
    config = files.load_json(folder, files.KBERT_CONFIG)
    config["task"] = {"class": type(model).__name__, "config": _settings(model.get_config())}
    if model.preprocessor is not None:
        config["sequence_length"] = model.preprocessor.sequence_length
        config["preprocessor"] = _settings(model.preprocessor.get_config())
        model.preprocessor.tokenizer.save_to_preset(folder)
    with open(os.path.join(folder, files.KBERT_CONFIG), "w") as f:
        json.dump(config, f, indent=2)
    save_head(model, os.path.join(folder, TASK_WEIGHTS))


def _settings(config):
    return {k: v for k, v in config.items() if k not in _KEPT_ELSEWHERE}


def head_variables(model):
    """The task's own weights: all but its backbone's, which the preset's
    model.weights.h5 holds."""
    backbone = {id(v) for v in model.backbone.weights}
    return [v for v in model.weights if id(v) not in backbone]


def save_head(model, path):
    """Writes the head's weights (`head_variables`) to `path`, in order,
    each with its path: neither the backbone again nor the optimizer's
    state (which a `.keras` file or a checkpoint keeps)."""
    with h5py.File(path, "w") as f:
        group = f.create_group(HEAD)
        for i, variable in enumerate(head_variables(model)):
            value = keras.ops.convert_to_numpy(variable)
            # h5py has no bfloat16: float32 holds each value exactly.
            group.create_dataset(str(i), data=value.astype("float32") if value.dtype.name == "bfloat16" else value)
            group[str(i)].attrs["path"] = variable.path


def load_task_weights(model, path):
    """Loads a task preset's TASK_WEIGHTS into `model`, whose backbone holds
    the preset's backbone: the head's weights, matched in order and checked
    by shape; or, from a preset saved before the head was kept alone, the
    whole task."""
    with h5py.File(path, "r") as f:
        if HEAD in f:
            saved = [f[HEAD][str(i)] for i in range(len(f[HEAD]))]
            _load_head(model, path, saved)
            return
    loading.load_keras_weights(model, path)


def _load_head(model, path, saved):
    variables = head_variables(model)
    shapes = [tuple(v.shape) for v in variables]
    if [tuple(d.shape) for d in saved] != shapes:
        held = ", ".join(f"{d.attrs['path']} {tuple(d.shape)}" for d in saved) or "no weights"
        wanted = ", ".join(f"{v.path} {tuple(v.shape)}" for v in variables) or "no weights"
        raise ValueError(
            f"{path} holds a head of {held}, but this {type(model).__name__}'s is {wanted}. Leave out the "
            "arguments that change the head (such as num_classes) to load the saved one, or build the task "
            "from a backbone preset to start a new head."
        )
    values = [dataset[()] for dataset in saved]
    names = [f"{d.name.lstrip('/')} ({variable.path})" for d, variable in zip(saved, variables)]
    weight_check.check((weight_check.problem(name, value) for name, value in zip(names, values)), path)
    for variable, value in zip(variables, values):
        variable.assign(value)


def task_from_preset(cls, preset, sequence_length, kwargs):
    """`Task.from_preset`: see there. The preset is read once (`read_preset`),
    and the backbone, preprocessor and head are built from what was read."""
    if "preprocessor" in kwargs and sequence_length is not None:
        raise ValueError(
            f"Got both preprocessor= and sequence_length={sequence_length}: the sequence length is the "
            "preprocessor's; build it with that length "
            f"({cls.preprocessor_cls.__name__}.from_preset(preset, sequence_length=...))."
        )
    preset = reader.read_preset(preset, st_modules=True)  # (a CrossEncoder's activation)
    kwargs = dict(kwargs)
    _check_preset_arguments(cls, preset, kwargs)
    backbone_kwargs = {k: kwargs.pop(k) for k in BACKBONE_SETTINGS if k in kwargs}
    if "packing" not in preset.backbone_config:  # a kbert preset keeps the setting its task was saved with
        has_preprocessor = (kwargs["preprocessor"] is not None if "preprocessor" in kwargs
                            else preset.has_tokenizer and tf_if_present.installed())
        backbone_kwargs.setdefault("packing", cls.packs_texts and has_preprocessor)
    backbone = cls.backbone_cls.from_preset_config(preset.checked_backbone_config(backbone_kwargs))
    preprocessor = (kwargs.pop("preprocessor") if "preprocessor" in kwargs
                    else cls.preset_preprocessor(preset, sequence_length, backbone))
    if preset.kbert_layout:
        saved = preset.task
        # (A class saved under its first name, `BertClassifier`, is the same.)
        same_task = keras.saving.get_registered_object(f"kbert>{saved.get('class')}") is cls
        arguments, new_head = _head_arguments(cls, saved["config"] if same_task else {}, kwargs)
        model = cls(backbone=backbone, preprocessor=preprocessor, **arguments)
        loading.load_keras_weights(backbone, preset.weights_path)
        if same_task and not new_head:
            load_task_weights(model, os.path.join(preset.folder, TASK_WEIGHTS))
        elif saved:
            load_saved_head(model, preset.folder, saved)
        return model
    tensors = preset.tensors()
    huggingface.check_family(tensors, backbone.family, preset.weights_path)
    arguments, new_head = _head_arguments(cls, cls.hf_head_config(preset, tensors), kwargs)
    model = cls(backbone=backbone, preprocessor=preprocessor, **arguments)
    loading.load_hf_backbone_weights(backbone, preset.weights_path, tensors)
    load_hf_head(model, tensors, preset.weights_path, new_head)
    return model


def _head_arguments(cls, preset_config, kwargs):
    """The task's arguments: the preset's, overridden by `kwargs`, and
    whether the head is new: where they give another `num_classes`, the
    preset's settings of its old head (the task's `head_keys`) are left out."""
    new_head = "num_classes" in kwargs and kwargs["num_classes"] != preset_config.get("num_classes",
                                                                                      kwargs["num_classes"])
    if new_head:
        preset_config = {k: v for k, v in preset_config.items() if k not in cls.head_keys}
    return {**preset_config, **kwargs}, new_head


def preset_preprocessor(cls, preset, sequence_length, backbone):
    """The task's preprocessor from a read preset's tokenizer; None, with a
    warning saying how to add one, where the preset has no tokenizer."""
    if not preset.has_tokenizer:
        warnings.warn(tokenizer_files.no_tokenizer_message(preset.folder))
        return None
    if not tokenizer_runs(preset.folder):
        return None
    tokenizer = preset_tokenizer(preset, backbone.family, backbone.vocabulary_size)
    if families.get(backbone.family).positions_after_padding and tokenizer.pad_id != backbone.position_offset - 1:
        # RoBERTa's positions start after pad_token_id: padding with another id shifts every position.
        raise ValueError(f"{preset.folder}: config.json has pad_token_id={backbone.position_offset - 1}, but its "
                         f"tokenizer pads with id {tokenizer.pad_id}; this {backbone.family} model's positions start "
                         "after the padding id, so the two must agree. Use the config.json and tokenizer files "
                         "that came together.")
    sequence_length = sequence_length or preset.default_sequence_length(backbone.max_sequence_length)
    if sequence_length and sequence_length > backbone.max_sequence_length:
        raise ValueError(
            f"sequence_length={sequence_length} is longer than this model's maximum, "
            f"{backbone.max_sequence_length} positions; use sequence_length <= {backbone.max_sequence_length}."
        )
    return cls.preprocessor_cls(tokenizer,
                                  sequence_length=sequence_length or min(512, backbone.max_sequence_length),
                                  **preset.preprocessor_settings)


def preset_tokenizer(preset, family, vocabulary_size=None):
    """The preset's tokenizer, of the class its files hold
    (`tokenizer_files.tokenizer_class_name`), refused where it has more ids
    than the model has token embeddings."""
    name = tokenizer_files.tokenizer_class_name(preset.folder, family)
    if name == "WordPieceTokenizer":  # from the files already read, checked against the config
        return text.WordPieceTokenizer(**preset.tokenizer_arguments())
    tokenizer = getattr(text, name).from_preset(preset.folder)
    vocabulary_size = vocabulary_size or preset.backbone_config["vocabulary_size"]
    if tokenizer.vocabulary_size > vocabulary_size:
        raise ValueError(f"The tokenizer of {preset.folder} has {tokenizer.vocabulary_size} tokens, but the model has "
                         f"{vocabulary_size} token embeddings: the tokenizer belongs to another model. Use the "
                         "tokenizer files that came with these weights.")
    return tokenizer


def tokenizer_runs(folder):
    """Whether a preset's tokenizer can run here: not where TensorFlow, which
    runs it, is not installed; the model is then built without it, with a
    warning that says so."""
    if tf_if_present.installed():
        return True
    warnings.warn(f"The tokenizer of {folder} is left out: kbert's tokenizers run in TensorFlow, which is not "
                  "installed. The model takes token ids (a dict of token_ids, segment_ids and padding_mask). "
                  f"To give it raw text, install TensorFlow: {tf_if_present.INSTALL}")
    return False


def _preset_arguments(cls):
    """The keyword arguments `from_preset` takes."""
    names = {*BACKBONE_SETTINGS, "name", "preprocessor", "sequence_length"}
    for klass in (k for k in cls.__mro__ if hasattr(k, "task_config")):
        if "__init__" in vars(klass):
            names |= {name for name, p in inspect.signature(klass.__init__).parameters.items()
                      if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)}
    return sorted(names - {"self", "inputs", "outputs", "backbone"})

def _check_preset_arguments(cls, preset, kwargs):
    """Refuses keyword arguments that `from_preset` would otherwise pass
    on silently: the backbone's must leave the preset's architecture
    alone (they can only repeat it); anything else is unknown."""
    accepted = _preset_arguments(cls)
    refused = [k for k in kwargs if k not in accepted]
    if not refused:
        return
    config = preset.backbone_config
    backbone = {k: kwargs.pop(k) for k in refused if k in config}
    preset.checked_backbone_config(backbone)  # refuses a different architecture
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


def load_saved_head(model, folder, saved):
    """The head that another task saved in `folder` shares with this one
    (a `BertPretrainer`'s masked-LM head for a `BertMaskedLM`), matched
    by its Hugging Face names; a warning for any part it lacks."""
    table = model.hf_head_table()
    if not table:
        return
    source_class = keras.saving.get_registered_object(f"kbert>{saved.get('class')}")
    source = None
    if source_class is not None and hasattr(source_class, "hf_head_table"):
        # The saved task, on this model's backbone (its weights, already
        # loaded, are read again from the same file).
        source = source_class(backbone=model.backbone, preprocessor=None, **saved.get("config", {}))
    variables = {name: variable for variable, name, _ in source.hf_head_table()} if source else {}
    shared = [(variable, variables[name]) for variable, name, _ in table if name in variables]
    if shared:
        load_task_weights(source, os.path.join(folder, TASK_WEIGHTS))
        if type(source) is type(model):  # the same task with another num_classes: its output layer is new
            fitting = [(variable, value) for variable, value in shared if tuple(variable.shape) == tuple(value.shape)]
            if len(fitting) < len(shared):
                _warn_new_output(folder, model, source.num_classes)
            shared = fitting
        for variable, value in shared:
            variable.assign(value)
    if len(shared) < len(table):
        missing = [name for _, name, _ in table if name not in variables]
        part = "head" if not shared else f"head's {', '.join(missing)}"
        warnings.warn(
            f"{folder} holds a {saved.get('class')}, which has no {type(model).__name__} {part}: "
            "it starts from its initialisation; fine-tune before use."
        )


def load_hf_head(model, tensors, path, new_head=False):
    """Loads a Hugging Face checkpoint's head into `model`; where the head
    is new (another `num_classes`), the parts whose shapes still match (a
    RoBERTa head's dense layer), with a warning that the rest is new."""
    table = model.hf_head_table()
    if not table:
        return
    tensors = families.get(model.backbone.family).current_names(tensors)
    if not all(name in tensors for _, name, _ in table):
        warnings.warn(
            f"{path} has no {type(model).__name__} head ({table[0][1]} and others); "
            "the head starts from its initialisation: fine-tune before use."
        )
        return
    if new_head:
        fitting = [row for row in table if huggingface.fits(row, tensors)]
        if len(fitting) < len(table):
            _warn_new_output(path, model, tensors[table[-1][1]].shape[0])
        table = fitting
    huggingface.assign(table, tensors, source=path)


def _warn_new_output(source, model, held):
    warnings.warn(f"{source} holds a head of {held} class{'es' if held != 1 else ''}; this {type(model).__name__} has num_classes="
                  f"{model.num_classes}: the output layer is new, from its initialisation (the rest of the head is "
                  "the checkpoint's). Fine-tune before use.")
