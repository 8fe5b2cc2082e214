"""kbert models -> Hugging Face folders that transformers loads.

A folder holds `config.json` (the architecture, the labels, the dtype),
`model.safetensors` (`huggingface`'s table of names run backwards, with the
task's own `hf_head_table()`) and the tokenizer's files
(`tokenizer_files.write_tokenizer`). `BertTextEmbedder`s are written as
sentence-transformers folders (`sentence_transformers.write_folder`), whose
Transformer module is such a folder. Either loads back into kbert with
`from_preset(folder)`, bit for bit.
"""

import os

from safetensors.numpy import save_file

from kbert import families
from kbert.presets import files, huggingface

WEIGHTS = "model.safetensors"
# kbert's class -> transformers' class, after the family's prefix ("Bert",
# "Roberta", ...: `kbert.families`). Which of them have a pooler is the
# family's `pooled`: the token-level heads have none, so theirs is not written.
ARCHITECTURES = {
    "BertBackbone": "Model",
    "TextClassifier": "ForSequenceClassification",
    "TokenClassifier": "ForTokenClassification",
    "QuestionAnswerer": "ForQuestionAnswering",
    "MaskedLM": "ForMaskedLM",
    "BertPretrainer": "ForPreTraining",
}
DTYPES = ("float32", "float16", "bfloat16")


def architecture(model):
    """transformers' class for `model` (or the nearest kbert class it
    derives from), without the family's prefix: `"ForMaskedLM"`."""
    for klass in type(model).__mro__:
        if klass.__name__ in ARCHITECTURES:
            return ARCHITECTURES[klass.__name__]
    raise ValueError(
        f"{type(model).__name__} has no transformers counterpart; export_to_transformers writes "
        f"{', '.join(ARCHITECTURES)} (and TextEmbedder, as a sentence-transformers folder)."
    )


def export_to_transformers(model, path, dtype="float32"):
    """Writes `model` (a `BertBackbone` or a task model) to the folder `path`
    in Hugging Face's layout; `transformers.AutoModelFor...` and
    `AutoTokenizer` load it, and so does kbert's `from_preset(path)`.

    Args:
        model: the model.
        path: a new (or empty) folder.
        dtype: of the weights written: `"float32"` (also for a model trained
            in mixed precision, whose weights are float32), `"float16"` or
            `"bfloat16"`.

    Returns:
        `path`.
    """
    kind = architecture(model)
    if kind == "Model":
        backbone, head, head_config = model, [], {}
    else:
        backbone, head, head_config = model.backbone, model.hf_head_table(), _head_config(model, kind)
    # A backbone has no preprocessor; a task model fed token ids has None.
    preprocessor = getattr(model, "preprocessor", None)
    return write_folder(path, kind, backbone, head, head_config, preprocessor, dtype)


def write_folder(path, kind, backbone, head=(), head_config=None, preprocessor=None, dtype="float32"):
    """Writes a transformers model of `kind` (`"Model"`, `"ForMaskedLM"`,
    ...) in the backbone's family: `backbone`'s weights under the family's
    prefix (`bert.`; bare for `"Model"`), the `head` rows
    (`hf_head_table()`), the config with `head_config`, and
    `preprocessor`'s tokenizer."""
    if str(dtype) not in DTYPES:
        raise ValueError(f"dtype={dtype!r}: export weights as one of {', '.join(DTYPES)}.")
    files.check_new_folder(path, "export_to_transformers")
    family = families.get(backbone.family)
    pooler = kind in family.pooled
    rows = [row for row in huggingface.backbone_table(backbone) if pooler or not row[1].startswith("pooler.")]
    tensors = huggingface.tensors_of(rows, "" if kind == "Model" else family.prefix, dtype)
    tensors.update(huggingface.tensors_of(head, "", dtype))
    name = families.class_name(backbone.family, kind)
    config = {"architectures": [name], **huggingface.hf_config(backbone.get_config()), **(head_config or {})}
    tokenizer = preprocessor.tokenizer if preprocessor is not None else None
    # transformers 5 reads `dtype`, earlier versions `torch_dtype`.
    config.update(dtype=str(dtype), torch_dtype=str(dtype))
    config.setdefault("pad_token_id", tokenizer.pad_id if tokenizer is not None else 0)
    if tokenizer is not None and tokenizer.pad_id != config["pad_token_id"]:
        # RoBERTa's positions start after pad_token_id: the two must agree.
        raise ValueError(f"The tokenizer's padding id is {tokenizer.pad_id}, but this {backbone.family} backbone's "
                         f"positions start after pad_token_id={config['pad_token_id']}: they belong to different "
                         "models. Export a model whose tokenizer and backbone came together.")
    files.write_json(path, files.HF_CONFIG, config)
    save_file(tensors, os.path.join(path, WEIGHTS), metadata={"format": "pt"})
    if tokenizer is not None:
        tokenizer.save_to_preset(path, model_max_length=preprocessor.sequence_length)
    return path


# BertClassifier's score_activation -> a sentence-transformers CrossEncoder's
# activation (config.json's `sentence_transformers` block, read by every
# version since 4.0; without one, CrossEncoder puts a sigmoid on one label).
TORCH_ACTIVATIONS = {"sigmoid": "torch.nn.modules.activation.Sigmoid", "tanh": "torch.nn.modules.activation.Tanh",
                     None: "torch.nn.modules.linear.Identity"}


def _head_config(model, kind):
    if kind in ("ForSequenceClassification", "ForTokenClassification"):
        # Unnamed classes as transformers names them (LABEL_0, ...), which
        # kbert reads back as no class_names.
        names = model.class_names or [f"LABEL_{i}" for i in range(model.num_classes)]
        config = {"id2label": {str(i): label for i, label in enumerate(names)},
                  "label2id": {label: i for i, label in enumerate(names)}}
        if model.dropout is not None:  # (None: the backbone's, transformers' default; ModernBERT's config refuses None)
            config["classifier_dropout"] = model.dropout
        if kind == "ForSequenceClassification":
            config["problem_type"] = model.problem_type
            if model.num_classes == 1:  # so that CrossEncoder scores as kbert does
                activation = TORCH_ACTIVATIONS[model.score_activation]
                config["sentence_transformers"] = {"activation_fn": activation}
        return config
    if kind in ("ForMaskedLM", "ForPreTraining"):
        # The output projection is the token embedding (kbert's MaskedLMHead).
        return {"tie_word_embeddings": True}
    return {}

