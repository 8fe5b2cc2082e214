"""SentencePiece unigram models: the `ModelProto` bytes that tensorflow-text's
`SentencepieceTokenizer` runs, read from and written to Hugging Face's files.

A model here is what Hugging Face's `Unigram` holds: `pieces`, a list of
`(piece, score)` in Hugging Face id order, the id of the unknown piece, the
ids of the special tokens, and the normalizer's `precompiled_charsmap`. Two
folder layouts hold one:

- the hub's `sentencepiece.bpe.model` (a serialized `ModelProto`), whose ids
  fairseq shifts: `<s>`=0, `<pad>`=1, `</s>`=2, `<unk>`=3, every other piece
  at its SentencePiece id + 1 and `<mask>` last (XLM-RoBERTa);
- `tokenizer.json` alone, as transformers 5 saves it (`model.vocab`).

It also says what `tokenizers` does around the model that SentencePiece
does not (`text_patterns`): where WhitespaceSplit splits, what the offsets
leave out. The `ModelProto` fields are written by hand (protobuf's wire format) so that
the `sentencepiece` package is not needed; the field numbers are those of
sentencepiece's `sentencepiece_model.proto`.
"""

import base64
import functools
import json
import os
import struct
import unicodedata

from kbert import families

SENTENCEPIECE_FILE = "sentencepiece.bpe.model"
TOKENIZER_JSON = "tokenizer.json"
FAIRSEQ_SPECIALS = ("<s>", "<pad>", "</s>", "<unk>")
MASK = "<mask>"
# Unicode's White_Space characters, where `tokenizers`' WhitespaceSplit splits.
WHITE_SPACE = (
    "\t\n\v\f\r \x85\xa0\u1680" + "".join(map(chr, range(0x2000, 0x200B))) + "\u2028\u2029\u202f\u205f\u3000"
)
WORD_START = "\u2581"
# Characters that may compose with the one before them: marks and Hangul jamo.
_MARKS = {chr(c) for c in range(0x30000) if unicodedata.category(chr(c)).startswith("M")} | set(
    map(chr, [*range(0x1100, 0x1200), *range(0xE0100, 0xE01F0)])
)
# SentencePiece.Type and TrainerSpec.ModelType.
NORMAL, UNKNOWN, CONTROL = 1, 2, 3
UNIGRAM = 1


def _varint(value):
    if value < 0x80:
        return bytes((value,))
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _field(number, value):
    """One protobuf field: bytes/str length-delimited, float fixed32, int/bool varint."""
    if isinstance(value, str):
        value = value.encode("utf-8")
    if isinstance(value, bytes):
        return _varint(number << 3 | 2) + _varint(len(value)) + value
    if isinstance(value, float):
        return _varint(number << 3 | 5) + struct.pack("<f", value)
    return _varint(number << 3) + _varint(int(value))


def _fields(data):
    """The (number, value) fields of a protobuf message, in order."""
    position = 0
    while position < len(data):
        key, position = _read_varint(data, position)
        number, wire_type = key >> 3, key & 7
        if wire_type == 0:
            value, position = _read_varint(data, position)
        elif wire_type == 1:
            value, position = data[position : position + 8], position + 8
        elif wire_type == 2:
            length, position = _read_varint(data, position)
            value, position = data[position : position + length], position + length
        elif wire_type == 5:
            value, position = data[position : position + 4], position + 4
        else:
            raise ValueError(f"Not a SentencePiece model: protobuf wire type {wire_type} is unexpected.")
        if position > len(data):
            raise ValueError(_CUT_SHORT)
        yield number, struct.unpack("<f", value)[0] if wire_type == 5 else value


def _read_varint(data, position):
    value = shift = 0
    while True:
        if position >= len(data):
            raise ValueError(_CUT_SHORT)
        byte = data[position]
        value |= (byte & 0x7F) << shift
        position, shift = position + 1, shift + 7
        if not byte & 0x80:
            return value, position


def _piece(piece_and_score, kind):
    """One `ModelProto.pieces` field: {piece=1, score=2, type=3}, written
    directly (an XLM-R model has 250,000 of them)."""
    piece = piece_and_score[0].encode("utf-8")
    body = b"\x0a" + _varint(len(piece)) + piece + b"\x15" + struct.pack("<f", piece_and_score[1]) + bytes((0x18, kind))
    return b"\x0a" + _varint(len(body)) + body


def model_proto(pieces, types, precompiled_charsmap, add_dummy_prefix=True):
    """A serialized unigram `ModelProto`: `pieces` [(piece, score)] with their
    `types` (NORMAL, UNKNOWN or CONTROL), normalized by `precompiled_charsmap`,
    runs of spaces removed as SentencePiece does by default."""
    proto = b"".join(map(_piece, pieces, types))
    proto += _field(2, _field(3, UNIGRAM) + _field(4, len(pieces)))
    normalizer = _field(1, "nmt_nfkc" if precompiled_charsmap else "identity")
    normalizer += _field(2, precompiled_charsmap) if precompiled_charsmap else b""
    normalizer += _field(3, add_dummy_prefix) + _field(4, True) + _field(5, True)
    return proto + _field(3, normalizer)


def runnable_model_proto(pieces, unk_id, special_tokens, precompiled_charsmap):
    """The `ModelProto` that runs `pieces` in their own id order, and each
    piece's id: special tokens (cut out of the text before the model runs)
    and repeated pieces (which `tokenizers` gives their first id) are
    control pieces, which SentencePiece never makes from text."""
    ids, types, once = {}, [], []
    for i, (piece, score) in enumerate(pieces):
        kind = NORMAL
        if i == unk_id:
            kind = UNKNOWN
        elif piece in special_tokens or piece in ids:
            kind = CONTROL
        if piece in ids:
            piece = f"{piece} (id {i}, repeated)"
        ids.setdefault(piece, i)
        types.append(kind)
        once.append((piece, score))
    return model_proto(once, types, base64.b64decode(precompiled_charsmap)), ids, types


_REPLACE = "Replace it with the file from the checkpoint it belongs to."
_CUT_SHORT = f"The SentencePiece model ends inside a field: the file is cut short. {_REPLACE}"


def read_model_proto(data):
    """`(pieces, types, precompiled_charsmap, add_dummy_prefix)` of a serialized `ModelProto`."""
    pieces, types, charsmap, add_dummy_prefix = [], [], b"", True
    normalized = False
    for number, value in _fields(data):
        if number == 1:
            piece = dict(_fields(value))
            try:
                pieces.append((piece.get(1, b"").decode("utf-8"), piece.get(2, 0.0)))
            except UnicodeDecodeError:
                raise ValueError(f"Piece {len(pieces)} of the SentencePiece model is not UTF-8. {_REPLACE}") from None
            types.append(piece.get(3, NORMAL))
        elif number == 2 and dict(_fields(value)).get(3, UNIGRAM) != UNIGRAM:
            raise ValueError(
                "This SentencePiece model is not a unigram model (TrainerSpec.model_type is "
                f"{dict(_fields(value))[3]}); SentencePieceTokenizer runs unigram models, as "
                "XLM-RoBERTa's and CamemBERT's are."
            )
        elif number == 3:
            normalizer = dict(_fields(value))
            charsmap = normalizer.get(2, b"")
            add_dummy_prefix = bool(normalizer.get(3, True))
            normalized = True
    if not data:
        raise ValueError(f"The file is empty; a SentencePiece model holds its pieces. {_REPLACE}")
    # SentencePiece writes the pieces first, its normalizer spec after them.
    if not (pieces and normalized):
        raise ValueError(f"The SentencePiece model ends after {len(pieces)} pieces, before its normalizer spec: "
                         f"the file is cut short. {_REPLACE}")
    return pieces, types, charsmap, add_dummy_prefix


def fairseq_pieces(sp_pieces):
    """Hugging Face's (fairseq's) vocabulary of an XLM-RoBERTa SentencePiece
    model: its first three pieces (`<unk>`, `<s>`, `</s>`) give way to the
    four fairseq specials, the others move up by one, `<mask>` comes last."""
    return [(token, 0.0) for token in FAIRSEQ_SPECIALS] + list(sp_pieces[3:]) + [(MASK, 0.0)]


def fairseq_unused_unk_pieces(sp_pieces):
    """CamemBERT's vocabulary of its SentencePiece model: four fairseq
    specials of its own, then every piece at its SentencePiece id + 4 (the
    model's `<unk>` unused), `<mask>` last."""
    unused = [("<unk>NOTUSED", -100.0)]
    return [("<s>NOTUSED", 0.0), ("<pad>", 0.0), ("</s>NOTUSED", 0.0), ("<unk>", 0.0)] + unused + list(
        sp_pieces[1:]
    ) + [(MASK, 0.0)]


# How a Hugging Face vocabulary lays out a SentencePiece model's pieces, by
# shape: (the vocabulary's pieces, its special tokens). Which tokenizer uses
# which is a family fact (`Family.sentencepiece_vocabularies`).
VOCABULARY_LAYOUTS = {
    "fairseq": (fairseq_pieces, [*FAIRSEQ_SPECIALS, MASK]),
    "fairseq_unused_unk": (fairseq_unused_unk_pieces, ["<pad>", "<unk>", "<s>", "</s>", MASK]),
}


def read_model(folder):
    """The settings of `SentencePieceTokenizer` from a folder's Hugging Face
    files: `tokenizer.json` if there is one (what `AutoTokenizer` reads
    first), else `sentencepiece.bpe.model`."""
    json_path = os.path.join(folder, TOKENIZER_JSON)
    if os.path.isfile(json_path):
        with open(json_path, encoding="utf-8") as f:
            try:
                config = json.load(f)
            except json.JSONDecodeError as e:
                raise ValueError(f"{json_path} is not valid JSON ({e.msg} at line {e.lineno}, column {e.colno}). "
                                 f"{_REPLACE}") from None
        return _read_tokenizer_json(config, json_path)
    sp_path = os.path.join(folder, SENTENCEPIECE_FILE)
    if not os.path.isfile(sp_path):
        raise FileNotFoundError(
            f"{folder} has no SentencePiece tokenizer: looked for {TOKENIZER_JSON} (transformers 5) "
            f"and {SENTENCEPIECE_FILE} (the hub's XLM-RoBERTa files). Download the model's tokenizer "
            "files (huggingface_hub.snapshot_download), or save a tokenizer there with "
            "SentencePieceTokenizer.save_to_preset."
        )
    with open(sp_path, "rb") as f:
        data = f.read()
    try:
        sp_pieces, _, charsmap, add_dummy_prefix = read_model_proto(data)
    except ValueError as e:
        raise ValueError(f"{sp_path} cannot be read. {e}") from None
    tokenizer_config = {}
    config_path = os.path.join(folder, "tokenizer_config.json")
    if os.path.isfile(config_path):
        with open(config_path, encoding="utf-8") as f:
            tokenizer_config = json.load(f)
    pieces_of, special_tokens = VOCABULARY_LAYOUTS[
        families.sentencepiece_vocabulary(str(tokenizer_config.get("tokenizer_class") or ""))]
    added = (tokenizer_config.get("added_tokens_decoder") or {}).values()
    return {
        "pieces": pieces_of(sp_pieces),
        "unk_id": FAIRSEQ_SPECIALS.index("<unk>"),
        "special_tokens": special_tokens,
        "precompiled_charsmap": base64.b64encode(charsmap).decode("ascii"),
        "lstrip_tokens": [token["content"] for token in added if token.get("lstrip")],
        "add_prefix_space": add_dummy_prefix,
    }


def _read_tokenizer_json(config, path):
    model = config.get("model") or {}
    if model.get("type") != "Unigram":
        raise ValueError(
            f"{path} holds a {model.get('type')} model; SentencePieceTokenizer reads Unigram "
            "models (XLM-RoBERTa, CamemBERT). Use the tokenizer class of that model family."
        )
    charsmap = ""
    normalizers = config.get("normalizer") or {}
    for normalizer in normalizers.get("normalizers", [normalizers]):
        if normalizer and normalizer.get("type") == "Precompiled":
            charsmap = normalizer.get("precompiled_charsmap") or ""
    pre_tokenizers = config.get("pre_tokenizer") or {}
    prepend_scheme = "always"
    for pre_tokenizer in pre_tokenizers.get("pretokenizers", [pre_tokenizers]):
        if pre_tokenizer and pre_tokenizer.get("type") == "Metaspace":
            prepend_scheme = pre_tokenizer.get("prepend_scheme", "always")
    if prepend_scheme == "never":
        raise ValueError(
            f"{path} adds no prefix space (Metaspace prepend_scheme='never'), which SentencePiece "
            "models cannot reproduce; save the tokenizer with add_prefix_space=True."
        )
    vocab = model.get("vocab")
    if not isinstance(vocab, list) or not all(
        isinstance(p, list) and len(p) == 2 and isinstance(p[0], str) and isinstance(p[1], (int, float)) for p in vocab
    ):
        raise ValueError(
            f'{path} has a Unigram vocabulary (model.vocab) that is not a list of [piece, score] ([["<s>", 0.0], '
            f"...]). {_REPLACE}"
        )
    return {
        "pieces": [(piece, score) for piece, score in vocab],
        "unk_id": model.get("unk_id", 0),
        "special_tokens": [token["content"] for token in config.get("added_tokens", []) if token.get("special")],
        "precompiled_charsmap": charsmap,
        "lstrip_tokens": [token["content"] for token in config.get("added_tokens", []) if token.get("lstrip")],
        "add_prefix_space": True,
    }


def write_model(folder, pieces, unk_id, special_tokens, precompiled_charsmap, lstrip_tokens=(), model_max_length=None):
    """Writes `tokenizer.json`, `tokenizer_config.json`, `special_tokens_map.json`
    and, where the vocabulary has XLM-RoBERTa's fairseq layout,
    `sentencepiece.bpe.model`: files that `AutoTokenizer` reads into the same ids."""
    os.makedirs(folder, exist_ok=True)
    ids = {piece: i for i, (piece, _) in enumerate(pieces)}
    charsmap = base64.b64decode(precompiled_charsmap)
    metaspace = {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": True}
    bos, eos = ("<s>", "</s>") if "<s>" in ids and "</s>" in ids else (None, None)
    config = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [
            {"id": ids[token], "content": token, "single_word": False, "lstrip": token in lstrip_tokens, "rstrip": False,
             "normalized": False, "special": True}
            for token in special_tokens
        ],
        "normalizer": {"type": "Precompiled", "precompiled_charsmap": precompiled_charsmap} if charsmap else None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": "WhitespaceSplit"}, metaspace]},
        "post_processor": None,
        "decoder": metaspace,
        "model": {"type": "Unigram", "unk_id": unk_id, "vocab": [list(p) for p in pieces], "byte_fallback": False},
    }
    if bos:
        special = lambda token: {"SpecialToken": {"id": token, "type_id": 0}}  # noqa: E731
        sequence = lambda name: {"Sequence": {"id": name, "type_id": 0}}  # noqa: E731
        config["post_processor"] = {
            "type": "TemplateProcessing",
            "single": [special(bos), sequence("A"), special(eos)],
            "pair": [special(bos), sequence("A"), special(eos), special(eos), sequence("B"), special(eos)],
            "special_tokens": {t: {"id": t, "ids": [ids[t]], "tokens": [t]} for t in (bos, eos)},
        }
    with open(os.path.join(folder, TOKENIZER_JSON), "w", encoding="utf-8") as f:
        json.dump(config, f, ensure_ascii=False)
    is_fairseq = [p for p, _ in pieces[:4]] == list(FAIRSEQ_SPECIALS) and pieces[-1][0] == MASK
    if is_fairseq:
        sp_pieces = [("<unk>", 0.0), ("<s>", 0.0), ("</s>", 0.0)] + list(pieces[4:-1])
        types = [UNKNOWN, CONTROL, CONTROL] + [NORMAL] * (len(sp_pieces) - 3)
        with open(os.path.join(folder, SENTENCEPIECE_FILE), "wb") as f:
            f.write(model_proto(sp_pieces, types, charsmap))
    names = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": pieces[unk_id][0], "sep_token": "</s>",
             "pad_token": "<pad>", "cls_token": "<s>", "mask_token": MASK}
    names = {key: token for key, token in names.items() if token in ids}
    config_path = os.path.join(folder, "tokenizer_config.json")
    tokenizer_config = {}
    if os.path.isfile(config_path):
        with open(config_path, encoding="utf-8") as f:
            tokenizer_config = json.load(f)
    tokenizer_config.update(names, tokenizer_class="XLMRobertaTokenizer", add_prefix_space=True)
    if model_max_length is not None:
        tokenizer_config["model_max_length"] = model_max_length
    with open(config_path, "w", encoding="utf-8") as f:
        json.dump(tokenizer_config, f, indent=2, ensure_ascii=False)
    with open(os.path.join(folder, "special_tokens_map.json"), "w", encoding="utf-8") as f:
        json.dump(names, f, indent=2, ensure_ascii=False)


@functools.lru_cache(maxsize=4)
def _charsmap_trie(precompiled_charsmap):
    (trie_size,) = struct.unpack("<I", precompiled_charsmap[:4])
    trie = struct.unpack(f"<{trie_size // 4}I", precompiled_charsmap[4 : 4 + trie_size])
    return trie, precompiled_charsmap[4 + trie_size :]


def text_patterns(pieces, charsmap):
    """The regexes that make the text around SentencePiece behave as in
    `tokenizers`: `(word_breaks, before_piece, after_piece, unknown_run)`.
    Whitespace that stays whitespace after the normalizer (`charsmap`,
    bytes), where WhitespaceSplit splits, becomes as many spaces as it has
    bytes (so byte offsets hold), for the text to be split at spaces.
    """
    normalized = charsmap_of_characters(charsmap)
    breaks = [c for c in WHITE_SPACE if c != " " and (c not in normalized or (normalized[c] and
                                                                            not normalized[c].strip()))]
    by_length = [(n, "".join(c for c in breaks if len(c.encode()) == n)) for n in (1, 2, 3)]
    word_breaks = [(f"[{chars}]", " " * n) for n, chars in by_length if chars]
    # Hugging Face's spans leave out the characters the normalizer deletes
    # at a piece's end, and those it deletes or turns into spaces at its start.
    deleted = "".join(c for c, n in normalized.items() if n == "")
    spaces = "".join(c for c, n in normalized.items() if n and not n.strip())
    before_piece = f"^{character_class(WHITE_SPACE + WORD_START + spaces + deleted)}+"
    after_piece = f"{character_class(deleted)}+$" if deleted else None
    # A run of characters that no piece holds and the normalizer keeps
    # (nor composes: no marks, no jamo) is one fused <unk> whatever its
    # length; SentencePiece's time grows with its square, so ids come
    # from its first character alone.
    known = {c for piece, _ in pieces for c in piece} | set(normalized) | set(WHITE_SPACE) | _MARKS
    unknown_run = f"({character_class(known, negated=True)})" + f"{character_class(known, negated=True)}+"
    return word_breaks, before_piece, after_piece, unknown_run


def character_class(chars, negated=False):
    """A regex character class of `chars` (in ranges, as \\x{...})."""
    codepoints, ranges = sorted(set(map(ord, chars))), []
    for c in codepoints:
        if ranges and ranges[-1][1] == c - 1:
            ranges[-1][1] = c
        else:
            ranges.append([c, c])
    body = "".join(f"\\x{{{a:x}}}" + (f"-\\x{{{b:x}}}" if b > a else "") for a, b in ranges)
    return f"[{'^' if negated else ''}{body}]"


def _offset(unit):
    return (unit >> 10) << ((unit & (1 << 9)) >> 6)


@functools.lru_cache(maxsize=4)
def charsmap_of_characters(precompiled_charsmap):
    """What a precompiled charsmap (SentencePiece's normalization table: a
    Darts double-array trie over UTF-8 bytes, then the replacement strings)
    turns each single character it holds into: {character: replacement}."""
    if not precompiled_charsmap:
        return {}
    trie, replacements = _charsmap_trie(precompiled_charsmap)
    table = {}

    def walk(position, key):
        # After a first byte, a character's bytes are 0x80-0xBF.
        for byte in range(1, 256) if not key else range(0x80, 0xC0):
            child = position ^ byte
            unit = trie[child] if child < len(trie) else 0
            if unit & ((1 << 31) | 0xFF) != byte:
                continue
            position_after, character = child ^ _offset(unit), key + bytes([byte])
            if (unit >> 8) & 1:
                try:
                    text = character.decode("utf-8")
                except UnicodeDecodeError:
                    text = ""
                if len(text) == 1:
                    start = trie[position_after] & ((1 << 31) - 1)
                    table[text] = replacements[start : replacements.index(b"\0", start)].decode("utf-8")
            if len(character) < 4:
                walk(position_after, character)

    walk(_offset(trie[0]), b"")
    return table
