"""sentence-transformers folders <-> the settings of a `BertTextEmbedder`.

A sentence-transformers folder lists its modules in `modules.json`: a BERT
`Transformer`, then `Pooling`, any `Dense` layers and `Normalize`. This module
reads what each one does, in the order `SentenceTransformer.encode` runs them,
and refuses any module it cannot reproduce, so that an embedding from kbert is
the folder's embedding or an error, never a silently different vector.
Both layouts are read: the one that sentence-transformers 2.x to 5.x wrote
(`sentence_bert_config.json` with `max_seq_length` and `do_lower_case`;
`pooling_mode_*_tokens` flags) and the one of 6.x (`pooling_mode` lists, the
length and lowercasing in the tokenizer's own files). `write_folder` writes
the first, the layout every version reads.
"""

import os

from safetensors.numpy import save_file

from kbert.presets import files, huggingface, to_transformers, tokenizer_files, weight_check

MODULES = "modules.json"
SENTENCE_BERT_CONFIG = "sentence_bert_config.json"
SENTENCE_TRANSFORMERS_CONFIG = "config_sentence_transformers.json"

# Pooling modes as kbert's `BertTextEmbedder(pooling=...)` names them, in the
# order sentence-transformers concatenates its legacy `pooling_mode_*` flags.
POOLING_MODES = ("cls", "max", "mean", "mean_sqrt_len_tokens", "weightedmean", "lasttoken")
_LEGACY_POOLING_FLAGS = {
    "pooling_mode_cls_token": "cls",
    "pooling_mode_max_tokens": "max",
    "pooling_mode_mean_tokens": "mean",
    "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len_tokens",
    "pooling_mode_weightedmean_tokens": "weightedmean",
    "pooling_mode_lasttoken": "lasttoken",
}
# torch activation classes (as Dense's config names them) -> Keras activations.
_ACTIVATIONS = {
    "Identity": "linear",
    "Tanh": "tanh",
    "ReLU": "relu",
    "GELU": "gelu",
    "Sigmoid": "sigmoid",
    "SiLU": "silu",
}
_MODULE_KINDS = ("Transformer", "Pooling", "Dense", "Normalize")
# Where torch keeps each activation class, for the Dense modules written.
_TORCH_MODULES = {"Identity": "torch.nn.modules.linear"}


# A CrossEncoder's activation (a torch class) -> BertClassifier's score_activation.
_SCORE_ACTIVATIONS = {"Sigmoid": "sigmoid", "Tanh": "tanh", "Identity": None}


def cross_encoder_settings(folder, hf_config):
    """A sentence-transformers `CrossEncoder` folder's `score_activation`
    (`{}` for a folder that is no cross-encoder), where each version keeps
    its activation: 6.x in `config_sentence_transformers.json` (with
    `model_type: "CrossEncoder"`), 4.x-5.x in config.json's
    `sentence_transformers` block, older ones as config.json's
    `sbert_ce_default_activation_function`. Without one, a cross-encoder
    of one label takes a sigmoid, as `CrossEncoder` does."""
    config = files.load_json(folder, SENTENCE_TRANSFORMERS_CONFIG, default={"": None})
    block = hf_config.get("sentence_transformers")
    if config.get("model_type") == "CrossEncoder":
        path, where = config.get("activation_fn"), os.path.join(folder, SENTENCE_TRANSFORMERS_CONFIG)
    elif isinstance(block, dict):
        path, where = block.get("activation_fn"), os.path.join(folder, files.HF_CONFIG)
    elif hf_config.get("sbert_ce_default_activation_function"):
        path, where = hf_config["sbert_ce_default_activation_function"], os.path.join(folder, files.HF_CONFIG)
    else:
        return {}
    if path is None:
        return {"score_activation": "sigmoid"}
    name = str(path).rsplit(".", 1)[-1]
    if not str(path).startswith("torch.") or name not in _SCORE_ACTIVATIONS:
        raise ValueError(
            f"{where} gives the cross-encoder's activation as {path!r}; kbert reproduces "
            f"{', '.join(to_transformers.TORCH_ACTIVATIONS.values())}. Pass score_activation= yourself to override it."
        )
    return {"score_activation": _SCORE_ACTIVATIONS[name]}


def is_sentence_transformers_folder(folder):
    return os.path.exists(os.path.join(folder, MODULES))


def _kind(entry, folder):
    """`Transformer`, `Pooling`, `Dense` or `Normalize` for a modules.json entry
    (any sentence-transformers version's module path); anything else refused."""
    kind = str(entry.get("type", "")).rsplit(".", 1)[-1]
    if kind not in _MODULE_KINDS or not str(entry.get("type", "")).startswith("sentence_transformers."):
        raise ValueError(
            f"{os.path.join(folder, MODULES)} has a module {entry.get('type')!r} ({entry.get('path')!r}); "
            f"kbert reproduces sentence-transformers' {', '.join(_MODULE_KINDS)} modules only, so it cannot "
            "embed as this folder does. Use sentence-transformers for this model, or remove the module from "
            "modules.json if you mean to embed without it."
        )
    return kind


def read_folder(folder):
    """What `SentenceTransformer(folder).encode` does, as a dict:
    `transformer_folder` (where the BERT's config.json and weights are),
    `pooling` (a mode or a list of modes, concatenated), `include_prompt`,
    `dense` (a list of `{"units", "activation", "use_bias", "kernel", "bias"}`,
    weights as numpy `[in, out]` / `[out]`), `normalize`, `prompts`,
    `default_prompt_name`, `max_seq_length` and `do_lower_case` (None where
    the folder does not say)."""
    entries = files.load_json(folder, MODULES)
    if not isinstance(entries, list) or not entries:
        raise ValueError(f"{os.path.join(folder, MODULES)} should list the model's modules; it holds {entries!r}.")
    entries = sorted(entries, key=lambda e: e.get("idx", 0))
    kinds = [_kind(e, folder) for e in entries]
    if kinds[0] != "Transformer" or kinds.count("Transformer") != 1 or "Pooling" not in kinds:
        raise ValueError(
            f"{os.path.join(folder, MODULES)} lists {kinds}; kbert reproduces a Transformer first, then Pooling "
            "(then any Dense and Normalize modules)."
        )
    settings = {"dense": [], "normalize": False, "include_prompt": True}
    seen_pooling = False
    for entry, kind in zip(entries, kinds):
        path = os.path.join(folder, entry.get("path", ""))
        if kind == "Transformer":
            settings["transformer_folder"] = path
            settings.update(_transformer_settings(path))
        elif kind == "Pooling":
            if seen_pooling:
                raise ValueError(f"{os.path.join(folder, MODULES)} has two Pooling modules; kbert reproduces one.")
            seen_pooling = True
            settings.update(_pooling_settings(path))
        elif settings["normalize"]:
            raise ValueError(
                f"{os.path.join(folder, MODULES)} has a {kind} module after Normalize; kbert normalizes last."
            )
        elif kind == "Dense":
            settings["dense"].append(_dense_settings(path))
        else:
            _check_sentence_embedding(path, "Normalize")
            settings["normalize"] = True
    config = files.load_json(folder, SENTENCE_TRANSFORMERS_CONFIG, default={"": None})
    prompts = {k: v for k, v in (config.get("prompts") or {}).items() if isinstance(v, str)}
    settings["prompts"] = prompts
    default = config.get("default_prompt_name")
    if default is not None and default not in prompts:
        raise ValueError(
            f"{os.path.join(folder, SENTENCE_TRANSFORMERS_CONFIG)} names default_prompt_name={default!r}, "
            f"which is not among its prompts ({', '.join(prompts) or 'none'}); fix the file."
        )
    settings["default_prompt_name"] = default
    truncate_dim = config.get("truncate_dim")  # sentence-transformers 5.1 and later write it
    if truncate_dim is not None and (isinstance(truncate_dim, bool) or not isinstance(truncate_dim, int)
                                     or truncate_dim < 1):
        raise ValueError(f"{os.path.join(folder, SENTENCE_TRANSFORMERS_CONFIG)} has truncate_dim={truncate_dim!r}; "
                         "it is the number of leading values each embedding keeps, a positive int. Fix the file.")
    settings["truncate_dim"] = truncate_dim
    return settings


def _transformer_settings(path):
    config = files.load_json(path, SENTENCE_BERT_CONFIG, default={"": None})
    task = config.get("transformer_task", "feature-extraction")
    if task != "feature-extraction":
        raise ValueError(
            f"{os.path.join(path, SENTENCE_BERT_CONFIG)} has transformer_task={task!r}; kbert embeds with a BERT "
            'encoder\'s hidden states ("feature-extraction").'
        )
    output = config.get("module_output_name", "token_embeddings")
    if output != "token_embeddings":
        raise ValueError(f"{os.path.join(path, SENTENCE_BERT_CONFIG)} has module_output_name={output!r}; kbert "
                         'pools the Transformer\'s "token_embeddings".')
    return {"max_seq_length": config.get("max_seq_length"), "do_lower_case": bool(config.get("do_lower_case"))}


def _pooling_settings(path):
    config = files.load_json(path, "config.json")
    if "pooling_mode" in config:
        modes = config["pooling_mode"]
        modes = [modes] if isinstance(modes, str) else list(modes)
    else:
        modes = [mode for flag, mode in _LEGACY_POOLING_FLAGS.items() if config.get(flag)] or ["mean"]
    unknown = [m for m in modes if m not in POOLING_MODES]
    if unknown:
        raise ValueError(f"{os.path.join(path, 'config.json')} has pooling modes {unknown}; kbert reproduces "
                         f"{', '.join(POOLING_MODES)}.")
    return {"pooling": modes[0] if len(modes) == 1 else modes,
            "include_prompt": bool(config.get("include_prompt", True))}


def _check_sentence_embedding(path, kind):
    config = files.load_json(path, "config.json", default={"": None})
    names = (config.get("module_input_name", "sentence_embedding"),
             config.get("module_output_name") or config.get("module_input_name", "sentence_embedding"))
    if names != ("sentence_embedding", "sentence_embedding"):
        raise ValueError(
            f"{os.path.join(path, 'config.json')}: this {kind} module reads {names[0]!r} and writes {names[1]!r}; "
            'kbert reproduces modules on the pooled "sentence_embedding" only.'
        )
    return config


def _dense_settings(path):
    config = _check_sentence_embedding(path, "Dense")
    if config.get("use_residual"):
        raise ValueError(f"{os.path.join(path, 'config.json')} has use_residual=true; kbert reproduces plain "
                         "Dense modules (linear + activation) only.")
    # sentence-transformers' default activation is Tanh.
    activation = str(config.get("activation_function", "torch.nn.modules.activation.Tanh"))
    name = activation.rsplit(".", 1)[-1]
    if not activation.startswith("torch.") or name not in _ACTIVATIONS:
        raise ValueError(
            f"{os.path.join(path, 'config.json')} has activation_function={activation!r}; kbert reproduces "
            f"torch's {', '.join(_ACTIVATIONS)}."
        )
    use_bias = bool(config.get("bias", True))
    weights = _dense_weights(path)
    kernel = weights.get("linear.weight")
    if kernel is None or kernel.shape != (config["out_features"], config["in_features"]):
        raise ValueError(
            f"The Dense weights in {path} should hold linear.weight of shape "
            f"({config['out_features']}, {config['in_features']}); found "
            f"{None if kernel is None else tuple(kernel.shape)}. Use the weights saved with this config.json."
        )
    bias = weights.get("linear.bias") if use_bias else None
    if use_bias and (bias is None or bias.shape != (config["out_features"],)):
        raise ValueError(f"The Dense weights in {path} lack linear.bias of shape ({config['out_features']},).")
    return {"units": int(config["out_features"]), "activation": _ACTIVATIONS[name], "use_bias": use_bias,
            "kernel": kernel.T, "bias": bias}


def _dense_weights(path):
    """A Dense module's tensors: `model.safetensors`, or `pytorch_model.bin`
    (read with PyTorch's `weights_only=True`, which refuses anything else)."""
    for name in files.WEIGHT_FILES:
        if os.path.exists(os.path.join(path, name)):
            tensors = huggingface.read_checkpoint(os.path.join(path, name))
            weight_check.check_tensors(tensors, os.path.join(path, name))  # it holds the Dense layer's alone
            return tensors
    raise FileNotFoundError(f"The Dense module in {path} has no weights: expected {' or '.join(files.WEIGHT_FILES)}.")


def tokenizer_settings(folder, do_lower_case=False):
    """`BertTokenizer` arguments of a sentence-transformers Transformer
    folder (`tokenizer_files.tokenizer_settings`), with its `do_lower_case`.

    sentence-transformers' `do_lower_case` puts a plain `Lowercase` before the
    tokenizer's own normalizer, so a cased tokenizer lowercases but keeps its
    accents."""
    settings = tokenizer_files.tokenizer_settings(folder)
    if do_lower_case and not settings["lowercase"]:
        settings["strip_accents"] = bool(settings["strip_accents"])
        settings["lowercase"] = True
    return settings


def max_seq_length(folder, settings, max_position_embeddings):
    """The length sentence-transformers truncates to: `max_seq_length` of
    sentence_bert_config.json, else the tokenizer's `model_max_length`, at
    most the model's positions."""
    length = settings.get("max_seq_length")
    if length is None:
        config = files.load_json(settings["transformer_folder"], files.TOKENIZER_CONFIG, default={"": None})
        length = config.get("model_max_length")
        if not isinstance(length, int) or length > max_position_embeddings:
            length = max_position_embeddings
    return int(min(length, max_position_embeddings))


def write_folder(embedder, path, dtype="float32"):
    """Writes a `BertTextEmbedder` as a sentence-transformers folder that
    `SentenceTransformer(path)` loads: the BERT (`BertModel`) and its
    tokenizer at the top, `modules.json`, the Pooling, Dense and Normalize
    modules, the length and the prompts; the layout of sentence-transformers
    2.x to 5.x, which 6.x and text-embeddings-inference read too."""
    backbone, preprocessor = embedder.backbone, embedder.preprocessor
    if preprocessor is None:
        raise ValueError("This embedder has no preprocessor, so there is no tokenizer to write, and "
                         "sentence-transformers needs one: build it with preprocessor=kbert.BertPreprocessor(...).")
    to_transformers.write_folder(path, "Model", backbone, preprocessor=preprocessor, dtype=dtype)
    modules = [("", "Transformer")]
    files.write_json(path, SENTENCE_BERT_CONFIG, {"max_seq_length": preprocessor.sequence_length, "do_lower_case": False})
    modes = [embedder.pooling] if isinstance(embedder.pooling, str) else list(embedder.pooling)
    width = backbone.hidden_dim * len(modes)
    if modes == [m for m in POOLING_MODES if m in modes]:  # the order the legacy flags concatenate in
        pooling = {"word_embedding_dimension": width,
                   **{flag: mode in modes for flag, mode in _LEGACY_POOLING_FLAGS.items()}}
    else:
        pooling = {"embedding_dimension": width, "pooling_mode": modes}
    modules.append(("1_Pooling", "Pooling"))
    files.write_json(os.path.join(path, "1_Pooling"), "config.json", {**pooling, "include_prompt": embedder.include_prompt})
    for i, layer in enumerate(embedder.dense):
        folder = f"{len(modules)}_Dense"
        modules.append((folder, "Dense"))
        weights = embedder.get_layer(f"dense_{i}")
        activation = next((name for name, keras_name in _ACTIVATIONS.items() if keras_name == layer["activation"]), None)
        if activation is None:
            raise ValueError(f"Dense layer {i} has activation {layer['activation']!r}; sentence-transformers' Dense "
                             f"takes torch's {', '.join(_ACTIVATIONS)} ({', '.join(_ACTIVATIONS.values())} in Keras).")
        files.write_json(os.path.join(path, folder), "config.json", {
            "in_features": width, "out_features": layer["units"], "bias": layer["use_bias"],
            "activation_function": f"{_TORCH_MODULES.get(activation, 'torch.nn.modules.activation')}.{activation}",
        })
        rows = [(weights.kernel, "linear.weight", huggingface.T)]
        rows += [(weights.bias, "linear.bias", None)] if layer["use_bias"] else []
        save_file(huggingface.tensors_of(rows, dtype=dtype), os.path.join(path, folder, "model.safetensors"),
                  metadata={"format": "pt"})
        width = layer["units"]
    if embedder.normalize:
        modules.append((f"{len(modules)}_Normalize", "Normalize"))
        os.makedirs(os.path.join(path, modules[-1][0]), exist_ok=True)
    files.write_json(path, MODULES, [{"idx": i, "name": str(i), "path": folder, "type": f"sentence_transformers.models.{kind}"}
                                for i, (folder, kind) in enumerate(modules)])
    config = {"prompts": embedder.prompts, "default_prompt_name": embedder.default_prompt_name,
              "similarity_fn_name": "cosine"}
    if embedder.truncate_dim is not None:
        config["truncate_dim"] = embedder.truncate_dim
    files.write_json(path, SENTENCE_TRANSFORMERS_CONFIG, config)
    return path
