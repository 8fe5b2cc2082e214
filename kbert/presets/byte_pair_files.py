"""A byte-level BPE tokenizer's files (RoBERTa's) in Hugging Face's layout, read and written.

Read: the vocabulary and merges from `tokenizer.json` (its BPE model; merges
as `"a b"` strings or `[a, b]` pairs), else from `vocab.json` and
`merges.txt`; `add_prefix_space` and `trim_offsets` from
`tokenizer_config.json` (what transformers' `RobertaTokenizer` builds its
pre-tokenizer from), else from `tokenizer.json`; which special tokens take
the whitespace around them (`lstrip`, `rstrip`) from `tokenizer.json`'s
added tokens, else `tokenizer_config.json`'s, else none, as transformers 5
reads such a folder (transformers 4 made `<mask>` lstrip there; RoBERTa's
own `tokenizer.json` says it lstrips).

Written: all five files, saying the same thing.
"""

import os

from kbert.presets import files

VOCAB_JSON, MERGES_TXT = "vocab.json", "merges.txt"
SPECIAL_TOKENS_MAP = "special_tokens_map.json"
# Hugging Face's names of RoBERTa's special tokens.
SPECIAL_TOKEN_NAMES = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "sep_token": "</s>",
                       "pad_token": "<pad>", "cls_token": "<s>", "mask_token": "<mask>"}


def read_vocabulary(path):
    """The tokens of a `vocab.json` (token -> id), as a list indexed by id."""
    return _tokens_by_id(files.load_json(os.path.dirname(path), os.path.basename(path)), path)


def read_merges(path):
    """The merges of a `merges.txt`, lowest rank first, as pairs (a `#version` line is skipped)."""
    with open(path, encoding="utf-8") as f:
        lines = [line.rstrip("\r\n") for line in f]
    return [parse_merge(line, path) for line in lines if line and not line.startswith("#version")]


def parse_merge(merge, path):
    pair = merge.split(" ") if isinstance(merge, str) else list(merge)
    if len(pair) != 2:
        raise ValueError(f'{path} has the merge {merge!r}; a merge is two tokens, "a b" or [a, b].')
    return tuple(pair)


def _tokens_by_id(ids, path):
    """The tokens of a vocabulary as `vocab.json` and `tokenizer.json` hold
    it (an object of token -> id), as a list indexed by id."""
    if not isinstance(ids, dict):
        raise ValueError(f'{path} has a vocabulary that is not an object of token -> id ({{"<s>": 0, ...}}). '
                         f"{files.how_to_replace(path)}")
    tokens = [None] * len(ids)
    for token, i in ids.items():
        if type(i) is not int:
            raise ValueError(f"{path} gives the token {token!r} the id {i!r}; ids are integers, 0 to {len(ids) - 1}. "
                             f"{files.how_to_replace(path)}")
        if not 0 <= i < len(ids) or tokens[i] is not None:
            raise ValueError(f"{path} has a vocabulary whose ids are not 0 to {len(ids) - 1} once each; fix the file.")
        tokens[i] = token
    return tokens


def read_preset(folder):
    """`BytePairTokenizer` arguments of the tokenizer in `folder`."""
    json_path, vocab_path, merges_path = (os.path.join(folder, n) for n in (files.TOKENIZER_JSON, VOCAB_JSON,
                                                                             MERGES_TXT))
    config = files.load_json(folder, files.TOKENIZER_CONFIG, default={})
    tokenizer = files.load_json(folder, files.TOKENIZER_JSON) if os.path.exists(json_path) else None
    if tokenizer is not None:
        model = tokenizer.get("model") or {}
        if model.get("type") != "BPE":
            raise ValueError(f"{json_path} describes a {model.get('type')} tokenizer; BytePairTokenizer reads "
                             "byte-level BPE (RoBERTa, GPT-2).")
        vocabulary = _tokens_by_id(model.get("vocab") or {}, json_path)
        merges = [parse_merge(m, json_path) for m in model.get("merges") or []]
        added = tokenizer.get("added_tokens") or []
        pre_tokenizer = tokenizer.get("pre_tokenizer") or {}
        post_processor = tokenizer.get("post_processor") or {}
    elif os.path.exists(vocab_path) and os.path.exists(merges_path):
        vocabulary, merges = read_vocabulary(vocab_path), read_merges(merges_path)
        added = [dict(t, content=t.get("content")) for t in (config.get("added_tokens_decoder") or {}).values()]
        pre_tokenizer = post_processor = {}
    else:
        raise FileNotFoundError(
            f"{folder} has no byte-level BPE tokenizer: BytePairTokenizer reads {files.TOKENIZER_JSON}, or "
            f"{VOCAB_JSON} and {MERGES_TXT}. Copy them from the checkpoint's Hugging Face repository (for "
            "example with huggingface_hub.snapshot_download), or save a tokenizer there with save_to_preset.")
    unknown = [t["content"] for t in added if t.get("content") not in SPECIAL_TOKEN_NAMES.values()]
    if unknown:
        raise ValueError(f"{folder} adds tokens beyond RoBERTa's special tokens ({', '.join(unknown[:5])}); "
                         "BytePairTokenizer splits off <s>, <pad>, </s>, <unk> and <mask> only.")
    setting = lambda name, default: config.get(name, pre_tokenizer.get(name, post_processor.get(name, default)))  # noqa
    return {
        "vocabulary": vocabulary,
        "merges": merges,
        "add_prefix_space": bool(setting("add_prefix_space", False)),
        "trim_offsets": bool(setting("trim_offsets", True)),
        "lstrip_tokens": [t["content"] for t in added if t.get("lstrip")],
        "rstrip_tokens": [t["content"] for t in added if t.get("rstrip")],
    }


def write_preset(folder, vocabulary, merges, add_prefix_space=False, trim_offsets=True, lstrip_tokens=("<mask>",),
                 rstrip_tokens=(), model_max_length=None):
    """Writes the tokenizer files of a `BytePairTokenizer` with these settings to `folder`."""
    os.makedirs(folder, exist_ok=True)
    ids = {token: i for i, token in enumerate(vocabulary)}
    files.write_json(folder, VOCAB_JSON, ids)
    with open(os.path.join(folder, MERGES_TXT), "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n")
        f.writelines(f"{a} {b}\n" for a, b in merges)
    special = {name: token for name, token in SPECIAL_TOKEN_NAMES.items() if token in ids}
    added = [{"id": ids[t], "content": t, "single_word": False, "lstrip": t in lstrip_tokens,
              "rstrip": t in rstrip_tokens, "normalized": False, "special": True}
             for t in sorted(set(special.values()), key=ids.get)]
    config = files.load_json(folder, files.TOKENIZER_CONFIG, default={})
    config.update(add_prefix_space=add_prefix_space, trim_offsets=trim_offsets, errors="replace",
                  clean_up_tokenization_spaces=False, tokenizer_class="RobertaTokenizer", **special,
                  added_tokens_decoder={str(t["id"]): {k: v for k, v in t.items() if k != "id"} for t in added})
    if model_max_length is not None:
        config["model_max_length"] = int(model_max_length)
    files.write_json(folder, files.TOKENIZER_CONFIG, config)
    files.write_json(folder, SPECIAL_TOKENS_MAP, special)
    cls, sep = special.get("cls_token"), special.get("sep_token")
    byte_level = {"add_prefix_space": add_prefix_space, "trim_offsets": trim_offsets, "use_regex": True}
    files.write_json(folder, files.TOKENIZER_JSON, {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added, "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", **byte_level},
        "post_processor": {"type": "RobertaProcessing", "sep": [sep, ids[sep]], "cls": [cls, ids[cls]],
                           "trim_offsets": trim_offsets, "add_prefix_space": add_prefix_space}
        if cls and sep else {"type": "ByteLevel", **byte_level},
        "decoder": {"type": "ByteLevel", **byte_level},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": ids, "merges": [[a, b] for a, b in merges]},
    })
