"""SentencePiece models: the `ModelProto` bytes that tensorflow-text's
`SentencepieceTokenizer` runs, read from and written to Hugging Face's files.

A model here is what Hugging Face's `Unigram` holds: `pieces`, a list of
`(piece, score)` in Hugging Face id order, the id of the unknown piece, the
ids of the special tokens, and the normalizer's `precompiled_charsmap`; or
what its `BPE` with `byte_fallback` holds (Gemma's, mmBERT's): the pieces,
with the 256 `<0xNN>` byte pieces, and the merges. Three folder layouts hold
one:

- the hub's SentencePiece model (a serialized `ModelProto`), whose ids a
  vocabulary layout (`VOCABULARY_LAYOUTS`) places: fairseq's shift
  `<s>`=0, `<pad>`=1, `</s>`=2, `<unk>`=3, every other piece at its
  SentencePiece id + 1 and `<mask>` last (XLM-RoBERTa's
  `sentencepiece.bpe.model`); DeBERTa-v3's `spm.model` keeps its ids and
  adds `[MASK]` last; Gemma's `tokenizer.model` keeps them all;
- `tokenizer.json` alone, as transformers 5 saves it (`model.vocab`, and a
  BPE's `model.merges`).

SentencePiece's BPE merges the pair whose merged piece scores highest (the
leftmost of ties); Hugging Face's, the pair of lowest rank in its merges. A
BPE's pieces are scored here by the rank of the first merge that makes them,
which gives Hugging Face's merges where they list every split of a piece
into two pieces, one after the other (as transformers' converter of
SentencePiece models writes them); `bpe_scores` refuses merges that do not.

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
import typing
import unicodedata

from kbert import families
from kbert.presets import byte_pair_files, files

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
NORMAL, UNKNOWN, CONTROL, BYTE = 1, 2, 3, 6
UNIGRAM, BPE = 1, 2
# The byte pieces of a model with byte fallback: "<0x00>" ... "<0xFF>".
BYTE_PIECES = tuple(f"<0x{b:02X}>" for b in range(256))


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


def model_proto(pieces, types, precompiled_charsmap, add_dummy_prefix=True, model_type=UNIGRAM):
    """A serialized `ModelProto`: `pieces` [(piece, score)] with their
    `types` (NORMAL, UNKNOWN, CONTROL or BYTE), normalized by
    `precompiled_charsmap`. A unigram model removes runs of spaces, as
    SentencePiece does by default; a BPE (`model_type=BPE`, Gemma's) keeps
    every space, adds no dummy prefix and falls back to its byte pieces."""
    proto = b"".join(map(_piece, pieces, types))
    bpe = model_type == BPE
    proto += _field(2, _field(3, model_type) + _field(4, len(pieces)) + (_field(35, True) if bpe else b""))
    normalizer = _field(1, "nmt_nfkc" if precompiled_charsmap else "identity")
    normalizer += _field(2, precompiled_charsmap) if precompiled_charsmap else b""
    normalizer += _field(3, add_dummy_prefix and not bpe) + _field(4, not bpe) + _field(5, True)
    return proto + _field(3, normalizer)


def runnable_model_proto(pieces, unk_id, special_tokens, precompiled_charsmap, merges=None):
    """The `ModelProto` that runs `pieces` in their own id order, and each
    piece's id: special tokens (cut out of the text before the model runs)
    and repeated pieces (which `tokenizers` gives their first id) are
    control pieces, which SentencePiece never makes from text. With
    `merges`, a BPE: pieces scored by their merges' ranks (`bpe_scores`),
    those that no merge makes of two pieces control pieces too, and the
    byte pieces byte pieces (those the vocabulary lacks added after it)."""
    scores = None if merges is None else bpe_scores(pieces, merges)
    ids, types, once = {}, [], []
    for i, (piece, score) in enumerate(pieces):
        kind = NORMAL
        if i == unk_id:
            kind = UNKNOWN
        elif piece in special_tokens or piece in ids:
            kind = CONTROL
        elif scores is not None:
            kind = BYTE if piece in BYTE_PIECES else NORMAL if piece in scores or len(piece) == 1 else CONTROL
            score = scores.get(piece, 0.0)
        if piece in ids:
            piece = f"{piece} (id {i}, repeated)"
        ids.setdefault(piece, i)
        types.append(kind)
        once.append((piece, score))
    if merges is not None:
        # SentencePiece falls back only where all 256 byte pieces are there:
        # those a vocabulary lacks (Gemma's converter made <0x09> a "\t" that
        # the vocabulary holds) come after its pieces, never made from text.
        for piece in BYTE_PIECES:
            if piece not in ids:
                ids[piece] = len(once)
                types.append(BYTE)
                once.append((piece, 0.0))
    model_type = UNIGRAM if merges is None else BPE
    return model_proto(once, types, base64.b64decode(precompiled_charsmap), model_type=model_type), ids, types


def bpe_scores(pieces, merges):
    """Each piece that a merge makes, scored minus the rank of the first
    merge that makes it, so that SentencePiece's BPE merges as Hugging
    Face's does with these merges. Refuses merges that leave out a split of
    a piece into two pieces, or that are not one after the other for one
    piece: with them, the two would merge otherwise."""
    known = {piece for piece, _ in pieces}
    first, last, count = {}, {}, {}
    for rank, (left, right) in enumerate(merges):
        merged = left + right
        first.setdefault(merged, rank)
        last[merged], count[merged] = rank, count.get(merged, 0) + 1
    apart = [p for p in first if last[p] - first[p] + 1 != count[p]]
    listed = set(map(tuple, merges))
    missing = [f"{piece[:k]} {piece[k:]}" for piece in first for k in range(1, len(piece))
               if piece[:k] in known and piece[k:] in known and (piece[:k], piece[k:]) not in listed][:1]
    if apart or missing:
        example = f'the merges of "{apart[0]}" are apart' if apart else f'"{missing[0]}" is not a merge'
        raise ValueError(f"These BPE merges do not list every split of a piece into two pieces one after the other "
                         f"({example}); SentencePieceTokenizer runs BPE as SentencePiece does, which gives Hugging "
                         "Face's ids only with such merges (transformers' converter of SentencePiece models writes "
                         "them).")
    return {piece: -float(rank) for piece, rank in first.items()}


def generate_merges(pieces):
    """The merges transformers writes for a SentencePiece BPE model's pieces
    (`generate_merges`): every split of each piece into two pieces, by the
    piece's id, then the left part's length."""
    ids = {piece: i for i, (piece, _) in enumerate(pieces)}
    merges = []
    for piece, piece_id in ids.items():
        splits = sorted(((piece[:k], piece[k:]) for k in range(1, len(piece)) if piece[:k] in ids and piece[k:] in ids),
                        key=lambda pair: (ids[pair[0]], ids[pair[1]]))
        merges += [(piece_id, len(left), len(right), left, right) for left, right in splits]
    return [(left, right) for *_, left, right in sorted(merges, key=lambda m: m[:3])]


_REPLACE = "Replace it with the file from the checkpoint it belongs to."
_CUT_SHORT = f"The SentencePiece model ends inside a field: the file is cut short. {_REPLACE}"


def read_model_proto(data):
    """`(pieces, types, precompiled_charsmap, add_dummy_prefix, model_type, byte_fallback)` of a
    serialized `ModelProto`."""
    pieces, types, charsmap, add_dummy_prefix = [], [], b"", True
    model_type, byte_fallback = UNIGRAM, False
    normalized = False
    for number, value in _fields(data):
        if number == 1:
            piece = dict(_fields(value))
            try:
                pieces.append((piece.get(1, b"").decode("utf-8"), piece.get(2, 0.0)))
            except UnicodeDecodeError:
                raise ValueError(f"Piece {len(pieces)} of the SentencePiece model is not UTF-8. {_REPLACE}") from None
            types.append(piece.get(3, NORMAL))
        elif number == 2:
            trainer = dict(_fields(value))
            model_type, byte_fallback = trainer.get(3, UNIGRAM), bool(trainer.get(35, False))
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
    if not (model_type == UNIGRAM or (model_type == BPE and byte_fallback)):
        raise ValueError(
            f"This SentencePiece model is neither a unigram model nor a BPE with byte fallback (TrainerSpec."
            f"model_type is {model_type}, byte_fallback {byte_fallback}); SentencePieceTokenizer runs those, as "
            "XLM-RoBERTa's, DeBERTa-v3's and Gemma's are."
        )
    return pieces, types, charsmap, add_dummy_prefix, model_type, byte_fallback


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


def mask_last_pieces(sp_pieces):
    """DeBERTa-v3's vocabulary of its SentencePiece model (`[PAD]`,
    `[CLS]`, `[SEP]`, `[UNK]`, ...): every piece at its own id, `[MASK]` last."""
    return list(sp_pieces) + [("[MASK]", 0.0)]


def same_pieces(sp_pieces):
    """Gemma's vocabulary of its SentencePiece model: every piece at its own id."""
    return list(sp_pieces)


class VocabularyLayout(typing.NamedTuple):
    """How a Hugging Face vocabulary lays out a SentencePiece model's pieces
    (`pieces`: the model's pieces -> the vocabulary's), the token of each
    special role, and how its tokenizer packs a pair where no
    `tokenizer.json` says (`kbert.text.packing`)."""

    pieces: typing.Callable
    special_tokens_map: dict
    pair_layout: str
    second_segment_id: int
    whitespace_split: bool = True
    # The tokens cut out of the text as written; None: the roles' tokens and the model's control pieces.
    special_tokens: tuple = None


_XLM_R_ROLES = {"cls_token": "<s>", "sep_token": "</s>", "pad_token": "<pad>", "unk_token": "<unk>",
                "mask_token": MASK}
_BERT_ROLES = {"cls_token": "[CLS]", "sep_token": "[SEP]", "pad_token": "[PAD]", "unk_token": "[UNK]",
               "mask_token": "[MASK]"}
_GEMMA_ROLES = {"cls_token": "<bos>", "sep_token": "<eos>", "pad_token": "<pad>", "unk_token": "<unk>",
                "mask_token": MASK}
# The layouts by name. Which tokenizer uses which is a family fact
# (`Family.sentencepiece_vocabularies`, by transformers' tokenizer class).
VOCABULARY_LAYOUTS = {
    "fairseq": VocabularyLayout(fairseq_pieces, _XLM_R_ROLES, "two_separators", 0,
                                special_tokens=(*FAIRSEQ_SPECIALS, MASK)),
    "fairseq_unused_unk": VocabularyLayout(fairseq_unused_unk_pieces, _XLM_R_ROLES, "two_separators", 0,
                                           special_tokens=("<pad>", "<unk>", "<s>", "</s>", MASK)),
    # DeBERTa-v3: [CLS] A [SEP] B [SEP], B in segment 1; Metaspace splits its words.
    "mask_last": VocabularyLayout(mask_last_pieces, _BERT_ROLES, "one_separator", 1, whitespace_split=False),
    # Gemma's BPE packed as mmBERT (ModernBERT) packs it: <bos> A <eos> B <eos>, one segment.
    "same_ids": VocabularyLayout(same_pieces, _GEMMA_ROLES, "one_separator", 0),
}
# The SentencePiece model files, as hub repositories name them, and the
# layout of each where the tokenizer class names none: XLM-R's, DeBERTa-v3's, Gemma's.
SENTENCEPIECE_FILES = {SENTENCEPIECE_FILE: "fairseq", "spm.model": "mask_last", "tokenizer.model": "same_ids"}


def read_model(folder):
    """The settings of `SentencePieceTokenizer` from a folder's Hugging Face
    files: `tokenizer.json` if there is one (what `AutoTokenizer` reads
    first), else its SentencePiece model (`SENTENCEPIECE_FILES`)."""
    tokenizer_config = files.load_json(folder, files.TOKENIZER_CONFIG, default={})
    json_path = os.path.join(folder, TOKENIZER_JSON)
    if os.path.isfile(json_path):
        with open(json_path, encoding="utf-8") as f:
            try:
                config = json.load(f)
            except json.JSONDecodeError as e:
                raise ValueError(f"{json_path} is not valid JSON ({e.msg} at line {e.lineno}, column {e.colno}). "
                                 f"{_REPLACE}") from None
        return _read_tokenizer_json(config, json_path, tokenizer_config, folder)
    sp_path = next((os.path.join(folder, name) for name in SENTENCEPIECE_FILES
                    if os.path.isfile(os.path.join(folder, name))), None)
    if sp_path is None:
        raise FileNotFoundError(
            f"{folder} has no SentencePiece tokenizer: looked for {TOKENIZER_JSON} (transformers 5) "
            f"and {', '.join(SENTENCEPIECE_FILES)} (the hub's SentencePiece models). Download the model's "
            "tokenizer files (huggingface_hub.snapshot_download), or save a tokenizer there with "
            "SentencePieceTokenizer.save_to_preset."
        )
    with open(sp_path, "rb") as f:
        data = f.read()
    try:
        sp_pieces, types, charsmap, add_dummy_prefix, model_type, _ = read_model_proto(data)
    except ValueError as e:
        raise ValueError(f"{sp_path} cannot be read. {e}") from None
    named = str(tokenizer_config.get("tokenizer_class") or "")
    _refuse_settings(tokenizer_config, os.path.join(folder, files.TOKENIZER_CONFIG))
    layout = VOCABULARY_LAYOUTS[families.sentencepiece_vocabulary(
        named, default=SENTENCEPIECE_FILES[os.path.basename(sp_path)])]
    pieces = layout.pieces(sp_pieces)
    tokens = [piece for piece, _ in pieces]
    unk = layout.special_tokens_map["unk_token"]
    if unk not in tokens:
        raise ValueError(f"{sp_path} has no {unk} piece, the unknown piece of its vocabulary layout. {_REPLACE}")
    special_tokens = layout.special_tokens
    if special_tokens is None:  # the roles' tokens and the model's control pieces, as transformers reads them
        control = {piece for (piece, _), kind in zip(sp_pieces, types) if kind == CONTROL}
        special_tokens = list(dict.fromkeys(
            t for t in tokens if t in control or t in layout.special_tokens_map.values()))
    added = (tokenizer_config.get("added_tokens_decoder") or {}).values()
    return {
        "pieces": pieces,
        "unk_id": tokens.index(unk),
        "special_tokens": list(special_tokens),
        "precompiled_charsmap": base64.b64encode(charsmap).decode("ascii"),
        "lstrip_tokens": [token["content"] for token in added if token.get("lstrip")],
        "add_prefix_space": add_dummy_prefix,
        "special_tokens_map": layout.special_tokens_map,
        "pair_layout": layout.pair_layout,
        "second_segment_id": layout.second_segment_id,
        "whitespace_split": layout.whitespace_split,
        "merges": generate_merges(pieces) if model_type == BPE else None,
    }


def _refuse_settings(tokenizer_config, path):
    """DeBERTa-v2's settings that change its pipeline, which kbert does not reproduce."""
    for name in ("do_lower_case", "split_by_punct"):
        if tokenizer_config.get(name):
            raise ValueError(f"{path} sets {name}=True; SentencePieceTokenizer reproduces DeBERTa-v2's tokenizer "
                             f"with {name}=False, as DeBERTa-v3's and mDeBERTa-v3's are.")


def _components(component, key):
    """The parts of a `tokenizer.json` normalizer or pre-tokenizer (a Sequence's, or itself)."""
    if not component:
        return []
    return component.get(key, []) if component.get("type") == "Sequence" else [component]


def _read_tokenizer_json(config, path, tokenizer_config, folder):
    model = config.get("model") or {}
    kind = model.get("type")
    if kind not in ("Unigram", "BPE") or (kind == "BPE" and not model.get("byte_fallback")):
        raise ValueError(
            f"{path} holds a {kind} model{' without byte_fallback' if kind == 'BPE' else ''}; "
            "SentencePieceTokenizer reads Unigram models (XLM-RoBERTa, CamemBERT, DeBERTa-v3) and BPE with "
            "byte_fallback (Gemma's, mmBERT's). Use the tokenizer class of that model family."
        )
    normalizers = _components(config.get("normalizer"), "normalizers")
    pre_tokenizers = _components(config.get("pre_tokenizer"), "pretokenizers")
    _refuse_settings(tokenizer_config, os.path.join(folder, files.TOKENIZER_CONFIG))
    charsmap = next((n.get("precompiled_charsmap") or "" for n in normalizers if n.get("type") == "Precompiled"), "")
    added = config.get("added_tokens") or []
    if kind == "BPE":
        settings = _read_bpe(model, normalizers, pre_tokenizers, added, path)
    else:
        settings = _read_unigram(model, normalizers, pre_tokenizers, added, path)
    # Every added token is split off the text as written (Gemma's <start_of_turn> ..., special or not).
    special_tokens = [token["content"] for token in added]
    special_tokens_map, (pair_layout, second_segment_id), _ = byte_pair_files.post_processing(
        config.get("post_processor") or {}, path, tokenizer_config, folder, special_tokens)
    return {
        **settings,
        "special_tokens": special_tokens,
        "precompiled_charsmap": charsmap,
        "lstrip_tokens": [token["content"] for token in added if token.get("lstrip")],
        "add_prefix_space": True,
        "special_tokens_map": special_tokens_map,
        "pair_layout": pair_layout,
        "second_segment_id": second_segment_id,
    }


def _read_unigram(model, normalizers, pre_tokenizers, added, path):
    if any(n.get("type") == "Lowercase" for n in normalizers):
        raise ValueError(f"{path} lowercases the text (do_lower_case); SentencePieceTokenizer reproduces "
                         "SentencePiece models that do not, as DeBERTa-v3's and XLM-RoBERTa's.")
    prepend_scheme = "always"
    for pre_tokenizer in pre_tokenizers:
        if pre_tokenizer.get("type") == "Metaspace":
            prepend_scheme = pre_tokenizer.get("prepend_scheme", "always")
        elif pre_tokenizer.get("type") not in ("WhitespaceSplit", "Metaspace"):
            raise ValueError(f"{path} pre-tokenizes with {pre_tokenizer.get('type')} (split_by_punct?); "
                             "SentencePieceTokenizer reproduces WhitespaceSplit and Metaspace.")
    if prepend_scheme != "always":
        raise ValueError(
            f"{path} adds a prefix space not to every text between special tokens (Metaspace "
            f"prepend_scheme='{prepend_scheme}'), which SentencePieceTokenizer does not reproduce; save the "
            "tokenizer with add_prefix_space=True."
        )
    vocab = model.get("vocab")
    if not isinstance(vocab, list) or not all(
        isinstance(p, list) and len(p) == 2 and isinstance(p[0], str) and isinstance(p[1], (int, float)) for p in vocab
    ):
        raise ValueError(
            f'{path} has a Unigram vocabulary (model.vocab) that is not a list of [piece, score] ([["<s>", 0.0], '
            f"...]). {_REPLACE}"
        )
    pieces = [(piece, score) for piece, score in vocab]
    for token in added:  # added tokens past the model's pieces ([MASK]) take their ids
        if type(token.get("id")) is int and token["id"] >= len(pieces) and isinstance(token.get("content"), str):
            pieces += [None] * (token["id"] + 1 - len(pieces))
            pieces[token["id"]] = (token["content"], 0.0)
    if None in pieces:
        raise ValueError(f"{path} gives no piece the id {pieces.index(None)} (its vocabulary and added tokens). "
                         f"{_REPLACE}")
    return {
        "pieces": pieces,
        "unk_id": model.get("unk_id", 0),
        # XLM-R splits at whitespace first; DeBERTa-v3's Metaspace where its normalizer leaves spaces.
        "whitespace_split": any(p.get("type") == "WhitespaceSplit" for p in pre_tokenizers),
    }


# Gemma's normalizer and pre-tokenizer: every space a "▁", and a split at
# spaces that finds none left (`tokenizers` runs the normalizer first).
_GEMMA_NORMALIZER = {"type": "Replace", "pattern": {"String": " "}, "content": WORD_START}


def _read_bpe(model, normalizers, pre_tokenizers, added, path):
    if [dict(n) for n in normalizers] != [_GEMMA_NORMALIZER]:
        raise ValueError(f"{path} normalizes its BPE with {[n.get('type') for n in normalizers]}; "
                         "SentencePieceTokenizer reproduces Gemma's: each space replaced by \"▁\".")
    for pre_tokenizer in pre_tokenizers:
        if not (pre_tokenizer.get("type") == "Split" and pre_tokenizer.get("pattern") == {"String": " "}):
            raise ValueError(f"{path} pre-tokenizes its BPE with {pre_tokenizer.get('type')}; "
                             "SentencePieceTokenizer reproduces Gemma's, which splits nothing.")
    tokens = byte_pair_files.tokens_by_id(model.get("vocab") or {}, path, added)
    unk = model.get("unk_token")
    if unk not in tokens:
        raise ValueError(f"{path}'s BPE names the unknown token {unk!r}, which its vocabulary lacks. {_REPLACE}")
    return {
        "pieces": [(token, 0.0) for token in tokens],
        "unk_id": tokens.index(unk),
        "merges": [byte_pair_files.parse_merge(m, path) for m in model.get("merges") or []],
        "whitespace_split": True,
    }


def write_model(folder, pieces, unk_id, special_tokens, precompiled_charsmap, lstrip_tokens=(), model_max_length=None,
                special_tokens_map=None, pair_layout="two_separators", second_segment_id=0, whitespace_split=True,
                merges=None):
    """Writes `tokenizer.json`, `tokenizer_config.json`, `special_tokens_map.json`
    and, where the vocabulary has XLM-RoBERTa's fairseq layout,
    `sentencepiece.bpe.model`: files that `AutoTokenizer` reads into the same ids
    (XLM-R's files name `XLMRobertaTokenizer`, DeBERTa-v3's `DebertaV2Tokenizer`,
    a BPE's `PreTrainedTokenizerFast`, which runs `tokenizer.json` as it is)."""
    os.makedirs(folder, exist_ok=True)
    ids = {piece: i for i, (piece, _) in enumerate(pieces)}
    charsmap = base64.b64decode(precompiled_charsmap)
    roles = dict(special_tokens_map or _XLM_R_ROLES)
    metaspace = {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": True}
    if merges is not None:
        normalizer, pre_tokenizer = _GEMMA_NORMALIZER, {"type": "Split", "pattern": {"String": " "},
                                                        "behavior": "MergedWithPrevious", "invert": False}
        decoder = {"type": "Sequence", "decoders": [{"type": "Replace", "pattern": {"String": WORD_START},
                                                     "content": " "}, {"type": "ByteFallback"}, {"type": "Fuse"}]}
        model = {"type": "BPE", "dropout": None, "unk_token": pieces[unk_id][0], "continuing_subword_prefix": None,
                 "end_of_word_suffix": None, "fuse_unk": True, "byte_fallback": True, "ignore_merges": False,
                 "vocab": ids, "merges": [list(m) for m in merges]}
        tokenizer_class = "PreTrainedTokenizerFast"
    else:
        precompiled = [{"type": "Precompiled", "precompiled_charsmap": precompiled_charsmap}] if charsmap else []
        if whitespace_split:
            normalizer = precompiled[0] if precompiled else None
            pre_tokenizer = {"type": "Sequence", "pretokenizers": [{"type": "WhitespaceSplit"}, metaspace]}
            tokenizer_class = "XLMRobertaTokenizer"
        else:
            normalizer = {"type": "Sequence", "normalizers": precompiled + [
                {"type": "Strip", "strip_left": False, "strip_right": True},
                {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": " "}]}
            pre_tokenizer = {"type": "Sequence", "pretokenizers": [metaspace]}
            tokenizer_class = "DebertaV2Tokenizer"
        decoder = metaspace
        model = {"type": "Unigram", "unk_id": unk_id, "vocab": [list(p) for p in pieces], "byte_fallback": False}
    cls, sep = roles.get("cls_token"), roles.get("sep_token")
    config = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [
            {"id": ids[token], "content": token, "single_word": False, "lstrip": token in lstrip_tokens, "rstrip": False,
             "normalized": False, "special": True}
            for token in sorted(special_tokens, key=ids.get)
        ],
        "normalizer": normalizer,
        "pre_tokenizer": pre_tokenizer,
        "post_processor": byte_pair_files.template(cls, sep, ids, pair_layout, second_segment_id)
        if cls in ids and sep in ids else None,
        "decoder": decoder,
        "model": model,
    }
    with open(os.path.join(folder, TOKENIZER_JSON), "w", encoding="utf-8") as f:
        json.dump(config, f, ensure_ascii=False)
    is_fairseq = [p for p, _ in pieces[:4]] == list(FAIRSEQ_SPECIALS) and pieces[-1][0] == MASK
    if is_fairseq and merges is None and whitespace_split:
        sp_pieces = [("<unk>", 0.0), ("<s>", 0.0), ("</s>", 0.0)] + list(pieces[4:-1])
        types = [UNKNOWN, CONTROL, CONTROL] + [NORMAL] * (len(sp_pieces) - 3)
        with open(os.path.join(folder, SENTENCEPIECE_FILE), "wb") as f:
            f.write(model_proto(sp_pieces, types, charsmap))
    names = {"unk_token": pieces[unk_id][0], **{role: token for role, token in roles.items() if role != "unk_token"}}
    names.update(bos_token=cls, eos_token=sep)
    names = {key: token for key, token in names.items() if token in ids}
    config_path = os.path.join(folder, "tokenizer_config.json")
    tokenizer_config = {}
    if os.path.isfile(config_path):
        with open(config_path, encoding="utf-8") as f:
            tokenizer_config = json.load(f)
    tokenizer_config.update(names, tokenizer_class=tokenizer_class)
    if merges is None:
        tokenizer_config.update(add_prefix_space=True)
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


def text_patterns(pieces, charsmap, whitespace_split=True):
    """The regexes that make the text around SentencePiece behave as in
    `tokenizers`: `(word_breaks, before_piece, after_piece, unknown_run)`.
    Whitespace that stays whitespace after the normalizer (`charsmap`,
    bytes), where WhitespaceSplit splits (`whitespace_split`, XLM-R's), or
    else what the normalizer turns into spaces, where Metaspace splits
    (DeBERTa's), becomes as many spaces as it has bytes (so byte offsets
    hold), for the text to be split at spaces.
    """
    normalized = charsmap_of_characters(charsmap)
    if whitespace_split:
        breaks = [c for c in WHITE_SPACE if c != " " and (c not in normalized or (normalized[c] and
                                                                                not normalized[c].strip()))]
    else:
        breaks = sorted(c for c, n in normalized.items() if c != " " and n and set(n) == {" "})
    by_length = [(n, [c for c in breaks if len(c.encode()) == n]) for n in (1, 2, 3)]
    word_breaks = [(character_class(chars), " " * n) for n, chars in by_length if chars]
    # Hugging Face's spans leave out the characters the normalizer deletes
    # at a piece's end, and those it deletes or turns into spaces at its start.
    deleted = "".join(c for c, n in normalized.items() if n == "")
    spaces = "".join(c for c, n in normalized.items() if n and not n.strip())
    # (Where no WhitespaceSplit split the words, whitespace the normalizer keeps is a character of the word.)
    before_piece = f"^{character_class((WHITE_SPACE if whitespace_split else ' ') + WORD_START + spaces + deleted)}+"
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
