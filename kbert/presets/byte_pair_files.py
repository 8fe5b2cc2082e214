"""A byte-level BPE tokenizer's files (RoBERTa's, ModernBERT's) in Hugging Face's layout, read and written.

Read: the vocabulary and merges from `tokenizer.json` (its BPE model; merges
as `"a b"` strings or `[a, b]` pairs; added tokens past the model's
vocabulary take their ids), else from `vocab.json` and `merges.txt`.

The rest as `AutoTokenizer` takes it. Where `tokenizer_config.json` names a
generic class (`PreTrainedTokenizerFast`: ModernBERT) or none, transformers
runs `tokenizer.json` as it is: the special tokens and how a pair is packed
come from its post-processor (`TemplateProcessing`, `RobertaProcessing`,
`BertProcessing`), as does `trim_offsets` (a template trims nothing), the
normalizer and `add_prefix_space` from its normalizer and pre-tokenizer.
Where it names RoBERTa's class (`RobertaTokenizer`), transformers rebuilds
RoBERTa's pipeline: `<s> A </s></s> B </s>`, `add_prefix_space` and
`trim_offsets` from `tokenizer_config.json`, else from `tokenizer.json`.
Either way the added tokens, with which take the whitespace around them
(`lstrip`, `rstrip`) and which are matched in normalized text
(`normalized`), come from `tokenizer.json`'s added tokens, else
`tokenizer_config.json`'s, as transformers 5 reads such a folder
(transformers 4 made `<mask>` lstrip there; RoBERTa's own `tokenizer.json`
says it lstrips).

Written: RoBERTa's five files, saying the same thing; for other special
tokens, layouts, added tokens or a normalizer, `tokenizer.json` with a
`TemplateProcessing` post-processor, `tokenizer_config.json` naming the
generic class, and `special_tokens_map.json`.
"""

import os

from kbert.presets import files

VOCAB_JSON, MERGES_TXT = "vocab.json", "merges.txt"
SPECIAL_TOKENS_MAP = "special_tokens_map.json"
# RoBERTa's special tokens by their roles (Hugging Face's names).
ROBERTA_SPECIAL_TOKENS = {"cls_token": "<s>", "sep_token": "</s>", "pad_token": "<pad>", "unk_token": "<unk>",
                          "mask_token": "<mask>"}
# BERT's, which ModernBERT's byte-level BPE has.
BERT_SPECIAL_TOKENS = {"cls_token": "[CLS]", "sep_token": "[SEP]", "pad_token": "[PAD]", "unk_token": "[UNK]",
                       "mask_token": "[MASK]"}
# Hugging Face's names of RoBERTa's special tokens.
SPECIAL_TOKEN_NAMES = {"bos_token": "<s>", "eos_token": "</s>", **ROBERTA_SPECIAL_TOKENS}
# The normalizers reproduced (`tokenizer.json`'s types): Unicode normal forms.
NORMALIZERS = ("NFC", "NFKC", "NFD", "NFKD")
# transformers' classes that run `tokenizer.json` as it is.
_GENERIC_CLASSES = ("PreTrainedTokenizerFast", "TokenizersBackend")


def read_vocabulary(path):
    """The tokens of a `vocab.json` (token -> id), as a list indexed by id."""
    return tokens_by_id(files.load_json(os.path.dirname(path), os.path.basename(path)), path)


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


def tokens_by_id(ids, path, added=()):
    """The tokens of a vocabulary as `vocab.json` and `tokenizer.json` hold
    it (an object of token -> id), as a list indexed by id, with the
    `added` tokens (`tokenizer.json`'s) at their ids: past the model's
    (ModernBERT's `[CLS]` ...), or in its place."""
    if not isinstance(ids, dict):
        raise ValueError(f'{path} has a vocabulary that is not an object of token -> id ({{"<s>": 0, ...}}). '
                         f"{files.how_to_replace(path)}")
    for token in added:
        if type(token.get("id")) is not int or token["id"] < 0 or not isinstance(token.get("content"), str):
            raise ValueError(f"{path} has the added token {token!r}; an added token has a content and an id from 0. "
                             f"{files.how_to_replace(path)}")
    size = max([len(ids)] + [t["id"] + 1 for t in added])
    tokens = [None] * size
    for token, i in ids.items():
        if type(i) is not int:
            raise ValueError(f"{path} gives the token {token!r} the id {i!r}; ids are integers, 0 to {size - 1}. "
                             f"{files.how_to_replace(path)}")
        if not 0 <= i < size or tokens[i] is not None:
            raise ValueError(f"{path} has a vocabulary whose ids are not 0 to {size - 1} once each; fix the file.")
        tokens[i] = token
    for token in added:
        tokens[token["id"]] = token["content"]
    gaps = [i for i, token in enumerate(tokens) if token is None]
    if gaps:
        raise ValueError(f"{path} gives no token the ids {gaps[:5]}, of 0 to {size - 1} (its vocabulary and added "
                         f"tokens). {files.how_to_replace(path)}")
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
                             "byte-level BPE (RoBERTa, GPT-2, ModernBERT).")
        if model.get("byte_fallback"):
            raise ValueError(f"{json_path} holds a SentencePiece BPE with byte_fallback (Gemma's, mmBERT's), which "
                             "SentencePieceTokenizer reads: SentencePieceTokenizer.from_preset.")
        unsupported = [f"{key}={model[key]!r}" for key in ("continuing_subword_prefix", "end_of_word_suffix",
                                                            "ignore_merges") if model.get(key)]
        if unsupported:
            raise ValueError(f"{json_path}'s BPE model sets {', '.join(unsupported)}; BytePairTokenizer reproduces "
                             "byte-level BPE without them (GPT-2's, RoBERTa's, ModernBERT's).")
        added, source = tokenizer.get("added_tokens") or [], json_path
        vocabulary = tokens_by_id(model.get("vocab") or {}, json_path, added)
        merges = [parse_merge(m, json_path) for m in model.get("merges") or []]
    elif os.path.exists(vocab_path) and os.path.exists(merges_path):
        added = [dict(t, id=int(i)) for i, t in (config.get("added_tokens_decoder") or {}).items()]
        source = os.path.join(folder, files.TOKENIZER_CONFIG)
        vocabulary = tokens_by_id(files.load_json(folder, VOCAB_JSON), vocab_path, added)
        merges = read_merges(merges_path)
    else:
        raise FileNotFoundError(
            f"{folder} has no byte-level BPE tokenizer: BytePairTokenizer reads {files.TOKENIZER_JSON}, or "
            f"{VOCAB_JSON} and {MERGES_TXT}. Copy them from the checkpoint's Hugging Face repository (for "
            "example with huggingface_hub.snapshot_download), or save a tokenizer there with save_to_preset.")
    single_word = [t["content"] for t in added if t.get("single_word")]
    if single_word:
        raise ValueError(f"{source} adds tokens matched as single words only ({', '.join(single_word[:5])}); "
                         "BytePairTokenizer splits an added token off wherever it is written.")
    settings = {
        "vocabulary": vocabulary,
        "merges": merges,
        "lstrip_tokens": [t["content"] for t in added if t.get("lstrip")],
        "rstrip_tokens": [t["content"] for t in added if t.get("rstrip")],
        "added_tokens": [t["content"] for t in added],
        "normalized_tokens": [t["content"] for t in added if t.get("normalized")],
    }
    pre_tokenizer = (tokenizer or {}).get("pre_tokenizer") or {}
    post_processor = (tokenizer or {}).get("post_processor") or {}
    named = str(config.get("tokenizer_class") or "")
    if tokenizer is None or (named and not named.startswith(_GENERIC_CLASSES)):
        # transformers builds RoBERTa's pipeline (`RobertaTokenizer`), its special tokens added.
        def setting(name, default):
            return config.get(name, pre_tokenizer.get(name, post_processor.get(name, default)))

        known = set(vocabulary)
        added_tokens = settings["added_tokens"] + [t for t in SPECIAL_TOKEN_NAMES.values() if t in known]
        settings["added_tokens"] = list(dict.fromkeys(added_tokens))
        return {**settings, "add_prefix_space": bool(setting("add_prefix_space", False)),
                "trim_offsets": bool(setting("trim_offsets", True))}
    # transformers runs tokenizer.json as it is.
    if pre_tokenizer and (pre_tokenizer.get("type") != "ByteLevel" or pre_tokenizer.get("use_regex") is False):
        raise ValueError(f"{json_path} pre-tokenizes with {_describe(pre_tokenizer)}; BytePairTokenizer reproduces "
                         "the ByteLevel pre-tokenizer with GPT-2's pattern (use_regex) only.")
    special_tokens_map, (pair_layout, second_segment_id), trim_offsets = post_processing(
        post_processor, json_path, config, folder, settings["added_tokens"])
    return {**settings, "add_prefix_space": bool(pre_tokenizer.get("add_prefix_space", False)),
            "trim_offsets": bool(trim_offsets), "normalizer": _normalizer(tokenizer.get("normalizer"), json_path),
            "special_tokens_map": special_tokens_map, "pair_layout": pair_layout,
            "second_segment_id": second_segment_id}


def _describe(component):
    return component.get("type") if isinstance(component, dict) else repr(component)


def _normalizer(normalizer, path):
    """The Unicode normal form of a `tokenizer.json` normalizer (None for none)."""
    normalizers = (normalizer or {}).get("normalizers", []) if (normalizer or {}).get("type") == "Sequence" else (
        [normalizer] if normalizer else [])
    forms = [n.get("type") for n in normalizers]
    if len(forms) > 1 or any(form not in NORMALIZERS for form in forms):
        raise ValueError(f"{path} normalizes with {', '.join(map(str, forms))}; BytePairTokenizer reproduces none "
                         f"or one of {', '.join(NORMALIZERS)}.")
    return forms[0] if forms else None


def post_processing(post_processor, path, config, folder, added_tokens):
    """`(special_tokens_map, (pair_layout, second_segment_id), trim_offsets)` as a `tokenizer.json`
    post-processor adds the special tokens and trims offsets (only a
    ByteLevel or RobertaProcessing post-processor trims them). The roles it
    does not name (pad, unk, mask) come from `tokenizer_config.json`, else
    `special_tokens_map.json`."""
    processors = post_processor.get("processors", []) if post_processor.get("type") == "Sequence" else (
        [post_processor] if post_processor else [])
    cls = sep = None
    layout, trim_offsets = ("two_separators", 0), False
    for processor in processors:
        kind = processor.get("type")
        if kind == "ByteLevel":
            trim_offsets = processor.get("trim_offsets", True)
        elif kind in ("RobertaProcessing", "BertProcessing"):
            cls, sep = processor["cls"][0], processor["sep"][0]
            roberta = kind == "RobertaProcessing"
            layout = ("two_separators", 0) if roberta else ("one_separator", 1)
            trim_offsets = processor.get("trim_offsets", True) if roberta else trim_offsets
        elif kind == "TemplateProcessing":
            cls, sep, *layout = _template_layout(processor, path)
        else:
            raise ValueError(f"{path} has a {kind} post-processor; kbert reads TemplateProcessing, "
                             "RobertaProcessing, BertProcessing and ByteLevel.")
    named = {**files.load_json(folder, SPECIAL_TOKENS_MAP, default={}), **config}
    special_tokens_map = {}
    for role in ROBERTA_SPECIAL_TOKENS:
        token = {"cls_token": cls, "sep_token": sep}.get(role) or named.get(role)
        token = token.get("content") if isinstance(token, dict) else token
        if token is None:  # the role's token where the files name none: RoBERTa's or BERT's, as added
            token = next((t for t in (ROBERTA_SPECIAL_TOKENS[role], BERT_SPECIAL_TOKENS[role]) if t in added_tokens),
                         ROBERTA_SPECIAL_TOKENS[role])
        special_tokens_map[role] = token
    return special_tokens_map, tuple(layout), trim_offsets


def _template_layout(processor, path):
    """`(cls, sep, pair_layout, second_segment_id)` of a `TemplateProcessing`:
    `[CLS] $A [SEP]` for one text, and for a pair `[CLS] $A [SEP] $B [SEP]`
    ("one_separator") or `<s> $A </s> </s> $B </s>` ("two_separators"), what
    follows the first separator in one segment, 0 or 1 (ModernBERT's: 0)."""
    def items(name):
        return [(("Sequence", item["Sequence"]["id"]) if "Sequence" in item
                 else ("SpecialToken", _template_token(processor, item["SpecialToken"]["id"], path)),
                 next(iter(item.values())).get("type_id", 0)) for item in processor.get(name) or []]

    single, pair = items("single"), items("pair")
    if len(single) == 3 and [kind for (kind, _), _ in single] == ["SpecialToken", "Sequence", "SpecialToken"]:
        cls, sep = single[0][0][1], single[2][0][1]
        first = [(("SpecialToken", cls), 0), (("Sequence", "A"), 0), (("SpecialToken", sep), 0)]
        for segment in (0, 1):
            second = [(("Sequence", "B"), segment), (("SpecialToken", sep), segment)]
            layouts = {"one_separator": first + second,
                       "two_separators": first + [(("SpecialToken", sep), segment)] + second}
            for layout, template in layouts.items():
                if pair == template and single == first:
                    return cls, sep, layout, segment
    raise ValueError(f"{path} has a TemplateProcessing post-processor that packs a text as {_show(single)} and a "
                     f"pair as {_show(pair)}; kbert packs [CLS] $A [SEP] and either [CLS] $A [SEP] $B [SEP] "
                     "(BERT, ModernBERT) or <s> $A </s> </s> $B </s> (RoBERTa), A and its separator in segment 0, "
                     "the rest in segment 0 or 1.")


def _template_token(processor, name, path):
    tokens = ((processor.get("special_tokens") or {}).get(name) or {}).get("tokens") or [name]
    if len(tokens) != 1:
        raise ValueError(f"{path}'s template adds {name} as the tokens {tokens}; kbert adds one token of each.")
    return tokens[0]


def _show(items):
    return " ".join(f"{'$' if kind == 'Sequence' else ''}{value}:{type_id}" for (kind, value), type_id in items)


def write_preset(folder, vocabulary, merges, *, add_prefix_space, trim_offsets, lstrip_tokens, rstrip_tokens,
                 added_tokens, normalized_tokens, normalizer, special_tokens_map, pair_layout, second_segment_id,
                 model_max_length=None):
    """Writes the tokenizer files of a `BytePairTokenizer` with these
    settings (its `get_config()`) to `folder`."""
    ids = {token: i for i, token in enumerate(vocabulary)}
    roberta_tokens = set(SPECIAL_TOKEN_NAMES.values())
    if (special_tokens_map == ROBERTA_SPECIAL_TOKENS and pair_layout == "two_separators" and second_segment_id == 0
            and normalizer is None and set(added_tokens) <= roberta_tokens):
        _write_roberta(folder, vocabulary, merges, add_prefix_space, trim_offsets, lstrip_tokens, rstrip_tokens,
                       model_max_length)
        return
    os.makedirs(folder, exist_ok=True)
    special = {role: token for role, token in special_tokens_map.items() if token in ids}
    # (tokenizers' defaults: a special token is matched as written, another added token in normalized text.)
    added = [{"id": ids[t], "content": t, "single_word": False, "lstrip": t in lstrip_tokens,
              "rstrip": t in rstrip_tokens, "normalized": t in normalized_tokens,
              "special": t in special.values() or t not in normalized_tokens}
             for t in sorted(set(added_tokens), key=ids.get)]
    config = files.load_json(folder, files.TOKENIZER_CONFIG, default={})
    # A bos or eos token named in the config makes transformers write its own post-processor.
    for key in ("bos_token", "eos_token", "add_prefix_space", "trim_offsets"):
        config.pop(key, None)
    config.update(clean_up_tokenization_spaces=False, tokenizer_class="PreTrainedTokenizerFast", **special,
                  added_tokens_decoder={str(t["id"]): {k: v for k, v in t.items() if k != "id"} for t in added})
    if model_max_length is not None:
        config["model_max_length"] = int(model_max_length)
    files.write_json(folder, files.TOKENIZER_CONFIG, config)
    files.write_json(folder, SPECIAL_TOKENS_MAP, special)
    byte_level = {"add_prefix_space": add_prefix_space, "trim_offsets": trim_offsets, "use_regex": True}
    post_processor = template(special.get("cls_token"), special.get("sep_token"), ids, pair_layout,
                               second_segment_id)
    if trim_offsets or post_processor is None:
        # A template trims nothing: the ByteLevel post-processor trims first.
        post_processor = {"type": "Sequence", "processors": [{"type": "ByteLevel", **byte_level},
                                                              *([post_processor] if post_processor else [])]}
    files.write_json(folder, files.TOKENIZER_JSON, {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": {"type": normalizer} if normalizer else None,
        "pre_tokenizer": {"type": "ByteLevel", **byte_level},
        "post_processor": post_processor,
        "decoder": {"type": "ByteLevel", **byte_level},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": ids, "merges": [[a, b] for a, b in merges]},
    })


def template(cls, sep, ids, pair_layout, second_segment_id):
    """The `TemplateProcessing` of a layout (`_template_layout` reads it back)."""
    if cls is None or sep is None:
        return None

    def token(t, segment):
        return {"SpecialToken": {"id": t, "type_id": segment}}

    def sequence(name, segment):
        return {"Sequence": {"id": name, "type_id": segment}}

    single = [token(cls, 0), sequence("A", 0), token(sep, 0)]
    second = [sequence("B", second_segment_id), token(sep, second_segment_id)]
    pair = single + ([] if pair_layout == "one_separator" else [token(sep, second_segment_id)]) + second
    return {"type": "TemplateProcessing", "single": single, "pair": pair,
            "special_tokens": {t: {"id": t, "ids": [ids[t]], "tokens": [t]} for t in (cls, sep)}}


def _write_roberta(folder, vocabulary, merges, add_prefix_space, trim_offsets, lstrip_tokens, rstrip_tokens,
                   model_max_length):
    """RoBERTa's five files, `RobertaTokenizer` named (which builds RoBERTa's pipeline)."""
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
