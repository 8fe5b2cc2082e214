"""A BERT tokenizer's files in Hugging Face's layout, read and written.

Read: the vocabulary from `vocab.txt`, or, where there is none (transformers
5 writes none), from the WordPiece model of `tokenizer.json`. The
normalization (`lowercase`, `strip_accents`, `tokenize_chinese_chars`) comes
from where `AutoTokenizer` takes it: for a `BertTokenizer` (what
`tokenizer_config.json` names, or nothing), `tokenizer_config.json` with
BERT's defaults; transformers 4 and 5 both rebuild `tokenizer.json`'s
normalizer from those settings. Only a generic fast tokenizer
(`PreTrainedTokenizerFast`, `TokenizersBackend`) keeps the normalizer of
`tokenizer.json` as it is.

Written: `vocab.txt`, `tokenizer_config.json`, `tokenizer.json` and
`special_tokens_map.json`, all saying the same thing, so that transformers 4
and 5, `tokenizers` and kbert read the same ids.
"""

import os

from kbert import families
from kbert.presets import files

TOKENIZER_JSON = files.TOKENIZER_JSON
SPECIAL_TOKENS_MAP = "special_tokens_map.json"
# Hugging Face's names of BERT's special tokens.
SPECIAL_TOKENS = {"unk_token": "[UNK]", "sep_token": "[SEP]", "pad_token": "[PAD]", "cls_token": "[CLS]",
                  "mask_token": "[MASK]"}
_GENERIC_CLASSES = ("PreTrainedTokenizerFast", "TokenizersBackend")


def has_tokenizer(folder):
    """Whether `folder` holds a tokenizer kbert reads: one of the families'
    sets of files (vocab.txt; vocab.json with merges.txt; the SentencePiece
    model; tokenizer.json)."""
    return any(all(os.path.exists(os.path.join(folder, name)) for name in names)
               for names in families.all_tokenizer_files())


# tokenizer.json's model type -> kbert's tokenizer class (transformers'
# tokenizer classes are the families' `tokenizer_classes`).
_BY_MODEL = {"WordPiece": "WordPieceTokenizer", "BPE": "BytePairTokenizer", "Unigram": "SentencePieceTokenizer"}


def tokenizer_class_name(folder, family):
    """kbert's tokenizer class for the tokenizer a folder holds, from its
    files (a model's tokenizer need not be its family's: multilingual-e5-small
    is a BERT with XLM-R's SentencePiece; mmBERT a ModernBERT with Gemma's):
    vocab.txt, the SentencePiece model, vocab.json, tokenizer_config.json's
    `tokenizer_class`, or tokenizer.json's model (a BPE with byte_fallback is
    SentencePiece's); the family's where none says."""
    def has(name):
        return os.path.exists(os.path.join(folder, name))

    if has(files.VOCABULARY):
        return "WordPieceTokenizer"
    # (XLM-R's, DeBERTa-v3's and Gemma's SentencePiece models.)
    if any(has(name) for name in ("sentencepiece.bpe.model", "spm.model", "tokenizer.model")):
        return "SentencePieceTokenizer"
    if has("vocab.json") and has("merges.txt"):
        return "BytePairTokenizer"
    named = str(files.load_json(folder, files.TOKENIZER_CONFIG, default={"": None}).get("tokenizer_class") or "")
    if families.tokenizer_class_of(named):
        return families.tokenizer_class_of(named)
    if has(TOKENIZER_JSON):
        model = files.load_json(folder, TOKENIZER_JSON).get("model") or {}
        if model.get("type") == "BPE" and model.get("byte_fallback"):  # SentencePiece's (Gemma's, mmBERT's)
            return "SentencePieceTokenizer"
        if model.get("type") in _BY_MODEL:
            return _BY_MODEL[model["type"]]
    return families.tokenizer_class_name(family)


def no_tokenizer_message(folder):
    for names in families.all_tokenizer_files():
        present = [name for name in names if os.path.exists(os.path.join(folder, name))]
        if present and len(present) < len(names):  # e.g. a byte-level BPE's vocab.json without its merges.txt
            missing = [name for name in names if name not in present]
            return (f"{folder} has {', '.join(present)} but not {', '.join(missing)}, which its tokenizer needs too, "
                    "so the model takes token ids, not text. Copy the checkpoint's "
                    f"{' and '.join(missing)} into the folder; pass preprocessor=None to say that you feed token ids.")
    return (f"{folder} has no tokenizer (neither {files.VOCABULARY} nor {TOKENIZER_JSON}), so the model takes token "
            "ids, not text. To give it text, copy the checkpoint's tokenizer files into the folder, or pass "
            "preprocessor=kbert.BertPreprocessor.from_preset(<a folder with them>); pass preprocessor=None to say "
            "that you feed token ids.")


def tokenizer_settings(folder, config=None, vocabulary=None):
    """`BertTokenizer` arguments of the tokenizer in `folder`: `vocabulary`
    (the `vocab.txt` path, or a list of tokens read from `tokenizer.json`),
    `lowercase`, `strip_accents`, `tokenize_chinese_chars`,
    `split_special_tokens`. `config` (the parsed `tokenizer_config.json`)
    and `vocabulary` (the tokens of `vocab.txt`), where read already, are
    not read again."""
    config = files.load_json(folder, files.TOKENIZER_CONFIG, default={}) if config is None else config
    settings = {
        "lowercase": config.get("do_lower_case", True),
        "strip_accents": config.get("strip_accents"),
        "tokenize_chinese_chars": config.get("tokenize_chinese_chars", True),
        "split_special_tokens": config.get("split_special_tokens", False),
    }
    if vocabulary is None:
        vocabulary = os.path.join(folder, files.VOCABULARY)
        has_vocabulary = os.path.exists(vocabulary)
    else:
        has_vocabulary = True
    path = os.path.join(folder, TOKENIZER_JSON)
    if config.get("tokenizer_class") in _GENERIC_CLASSES or not has_vocabulary:
        if not os.path.exists(path):
            raise FileNotFoundError(f"{folder} has no tokenizer: neither {files.VOCABULARY} nor {TOKENIZER_JSON}. "
                                    "Copy the tokenizer files of its checkpoint into it.")
        tokenizer = files.load_json(folder, TOKENIZER_JSON)
        if config.get("tokenizer_class") in _GENERIC_CLASSES:
            settings.update(_normalizer_settings(tokenizer, path))
        if not has_vocabulary:
            vocabulary = _wordpiece_vocabulary(tokenizer, path)
    return {"vocabulary": vocabulary, **settings}


def model_max_length(folder, max_sequence_length, config=None):
    """The length transformers' tokenizer of `folder` truncates to
    (`model_max_length`), if it is set and fits the model's positions;
    else None. `config`: the parsed `tokenizer_config.json`, if read already."""
    config = files.load_json(folder, files.TOKENIZER_CONFIG, default={}) if config is None else config
    length = config.get("model_max_length")
    return length if isinstance(length, int) and 0 < length <= max_sequence_length else None


def _wordpiece_vocabulary(tokenizer, path):
    model = tokenizer.get("model") or {}
    if model.get("type") != "WordPiece" or model.get("continuing_subword_prefix", "##") != "##":
        raise ValueError(f"{path} describes a {model.get('type')} tokenizer; kbert reads BERT's WordPiece with "
                         "## continuations.")
    ids = model.get("vocab") or {}
    if not isinstance(ids, dict):
        raise ValueError(f'{path} has a WordPiece vocabulary (model.vocab) that is not an object of token -> id '
                         f'({{"[PAD]": 0, ...}}). {files.how_to_replace(path)}')
    vocabulary = [None] * len(ids)
    for token, i in ids.items():
        if type(i) is not int:
            raise ValueError(f"{path} gives the WordPiece token {token!r} the id {i!r}; ids are integers, 0 to "
                             f"{len(ids) - 1}. {files.how_to_replace(path)}")
        if not 0 <= i < len(ids) or vocabulary[i] is not None:
            vocabulary = [None]
            break
        vocabulary[i] = token
    if None in vocabulary:
        raise ValueError(f"{path} has a WordPiece vocabulary whose ids are not 0 to {len(ids) - 1} once each; "
                         "fix the file.")
    added = [t["content"] for t in tokenizer.get("added_tokens") or [] if ids.get(t.get("content")) != t.get("id")]
    if added:
        raise ValueError(f"{path} adds tokens outside its WordPiece vocabulary ({', '.join(added[:5])}); kbert "
                         f"reads a BERT vocabulary as it is. Save the tokenizer with its {files.VOCABULARY}.")
    return vocabulary


def _normalizer_settings(tokenizer, path):
    normalizer = tokenizer.get("normalizer") or {}
    normalizers = normalizer.get("normalizers", []) if normalizer.get("type") == "Sequence" else [normalizer]
    bert = next((n for n in normalizers if n.get("type") == "BertNormalizer"), None)
    if bert is None:
        raise ValueError(f"{path} has no BertNormalizer; kbert reproduces BERT's normalization only.")
    lowercase = bool(bert.get("lowercase", True))
    strip = bert.get("strip_accents")
    return {
        "lowercase": lowercase or any(n.get("type") == "Lowercase" for n in normalizers),
        # BertNormalizer strips accents, when not told, as it lowercases.
        "strip_accents": lowercase if strip is None else bool(strip),
        "tokenize_chinese_chars": bool(bert.get("handle_chinese_chars", True)),
    }


def write_tokenizer(folder, vocabulary, lowercase=True, strip_accents=None, tokenize_chinese_chars=True,
                    split_special_tokens=False, model_max_length=None):
    """Writes the tokenizer files of a `BertTokenizer` with these settings
    to `folder`. Keys of an existing `tokenizer_config.json` that the
    tokenizer does not own are kept."""
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, files.VOCABULARY), "w", encoding="utf-8") as f:
        f.writelines(token + "\n" for token in vocabulary)
    ids = {token: i for i, token in enumerate(vocabulary)}
    special = {name: token for name, token in SPECIAL_TOKENS.items() if token in ids}
    config = files.load_json(folder, files.TOKENIZER_CONFIG, default={})
    config.update(do_lower_case=lowercase, strip_accents=strip_accents, tokenize_chinese_chars=tokenize_chinese_chars,
                  split_special_tokens=split_special_tokens, **special, tokenizer_class="BertTokenizer")
    if model_max_length is not None:
        config["model_max_length"] = int(model_max_length)
    files.write_json(folder, files.TOKENIZER_CONFIG, config)
    files.write_json(folder, SPECIAL_TOKENS_MAP, special)
    files.write_json(folder, TOKENIZER_JSON, {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [{"id": ids[t], "content": t, "single_word": False, "lstrip": False, "rstrip": False,
                          "normalized": False, "special": True} for t in sorted(special.values(), key=ids.get)],
        "normalizer": {"type": "BertNormalizer", "clean_text": True, "handle_chinese_chars": tokenize_chinese_chars,
                       "strip_accents": strip_accents, "lowercase": lowercase},
        "pre_tokenizer": {"type": "BertPreTokenizer"},
        "post_processor": _post_processor(special, ids),
        "decoder": {"type": "WordPiece", "prefix": "##", "cleanup": True},
        "model": {"type": "WordPiece", "unk_token": SPECIAL_TOKENS["unk_token"], "continuing_subword_prefix": "##",
                  "max_input_chars_per_word": 100, "vocab": ids},
    })


def _post_processor(special, ids):
    """[CLS] A [SEP] and [CLS] A [SEP] B [SEP], B in segment 1 (BERT §3)."""
    cls, sep = special.get("cls_token"), special.get("sep_token")
    if cls is None or sep is None:
        return None

    def token(t, segment):
        return {"SpecialToken": {"id": t, "type_id": segment}}

    def sequence(name, segment):
        return {"Sequence": {"id": name, "type_id": segment}}

    return {
        "type": "TemplateProcessing",
        "single": [token(cls, 0), sequence("A", 0), token(sep, 0)],
        "pair": [token(cls, 0), sequence("A", 0), token(sep, 0), sequence("B", 1), token(sep, 1)],
        "special_tokens": {t: {"id": t, "ids": [ids[t]], "tokens": [t]} for t in (cls, sep)},
    }
