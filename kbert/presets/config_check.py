"""Refusing a preset's architecture that cannot be built here, before anything
is built or downloaded.

Built as given, a config.json with `num_hidden_layers: 100000` grows memory
until the process is killed, and one with `vocab_size: 10**9` is only caught
once its weights have been downloaded. The sizes are checked instead: each
must be a positive integer, the hidden size must split evenly into the
attention heads, and the memory the model needs, estimated from the sizes,
must fit in this machine's.
"""

import os

from kbert import families
from kbert.presets.registry import parameter_count

# BertBackbone's sizes. A Hugging Face config.json is checked by its own
# names for them (its family's, `families.config_names`) as soon as it
# arrives, before the rest of a hub preset's files are downloaded.
SIZES = ("vocabulary_size", "num_layers", "num_heads", "hidden_dim", "intermediate_dim", "max_sequence_length",
         "num_segments")
# Building a model holds its float32 weights; loading a checkpoint into it
# holds them again, as read from the file.
_BYTES_PER_PARAMETER = 2 * 4
# A transformer block's Keras objects, variables' bookkeeping and traced
# graph, apart from its weights: measured 0.7 MB (TensorFlow), 0.3 (JAX),
# 0.1 (PyTorch) per block of a backbone with hidden size 16.
_BYTES_PER_LAYER = 1_000_000


def check_backbone_config(config, source, names=None):
    """Refuses `config` (BertBackbone's arguments, read from `source`) if a
    size is not a positive integer, the hidden size does not split into the
    heads, or the model would not fit in memory. `names` maps each argument
    to the name `source` gives it, for the error messages."""
    names = names or {}
    for key in SIZES:
        value = config.get(key)
        smallest = 0 if key == "num_segments" else 1  # DistilBERT has no token types
        if key in config and (isinstance(value, bool) or not isinstance(value, int) or value < smallest):
            raise ValueError(
                f"{source} says {names.get(key, key)}={value!r}: the model's sizes are positive integers. "
                "Use the config that came with these weights."
            )
    heads, hidden = config.get("num_heads"), config.get("hidden_dim")
    if heads and hidden and hidden % heads:
        raise ValueError(
            f"{source} says {names.get('hidden_dim', 'hidden_dim')}={hidden} and "
            f"{names.get('num_heads', 'num_heads')}={heads}: the hidden size must split evenly into the "
            f"attention heads ({hidden} / {heads} = {hidden / heads:g}). Use the config that came with these weights."
        )
    if any(k not in config for k in ("vocabulary_size", "num_layers", "hidden_dim", "intermediate_dim")):
        return  # reading the config says what is missing
    parameters = parameter_count(config, config.get("max_sequence_length", 512), config.get("num_segments", 2))
    needed = parameters * _BYTES_PER_PARAMETER + config["num_layers"] * _BYTES_PER_LAYER
    memory = memory_bytes()
    if memory is not None and needed > memory:
        sizes = ", ".join(f"{names.get(k, k)}={config[k]:,}" for k in SIZES if k in config)
        raise ValueError(
            f"{source} describes a model of {parameters:,} parameters ({sizes}). Building it and loading its "
            f"weights needs about {needed / 1e9:,.1f} GB of memory, and this machine has {memory / 1e9:,.1f} GB. "
            "Check the config for a wrong size; for a model this large, use a machine with more memory."
        )


def check_hf_config(hf_config, source):
    """`check_backbone_config` for a Hugging Face config.json's dict, by its
    family's names (DistilBERT's `n_layers`, `dim`, ...). A config kbert
    cannot read is left to `huggingface.backbone_config` to explain."""
    if not isinstance(hf_config, dict):
        return
    names = {key: hf for key, hf in families.config_names(hf_config).items() if key in SIZES}
    config = {key: hf_config[hf] for key, hf in names.items() if hf in hf_config}
    check_backbone_config(config, source, names=names)


def memory_bytes():
    """This machine's memory, or its container's limit where lower (cgroup
    v2 or v1); None where neither can be read."""
    try:
        memory = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):  # no sysconf (Windows)
        memory = None
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            with open(path) as f:
                limit = int(f.read().strip())
        except (OSError, ValueError):  # absent, or "max": no limit
            continue
        memory = limit if memory is None else min(memory, limit)
    return memory
