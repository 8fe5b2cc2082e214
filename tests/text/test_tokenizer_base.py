"""What the three tokenizers share (`kbert.text.tokenizer_base.Tokenizer`):
one tokenization per class and settings, `detokenize` on any shape of ids,
the special tokens and the pieces that continue a word."""

import logging

import pytest
import tensorflow as tf

from kbert.text import BertTokenizer, BytePairTokenizer, SentencePieceTokenizer
from kbert.text.tokenizer_base import as_valid_utf8

# Bytes that are not UTF-8: a cut character, stray bytes, a surrogate, an
# overlong form, a code point past U+10FFFF, among valid text.
BROKEN_UTF8 = [b"caf\xc3 ok\xff!", b"\xed\xa0\x80lone surrogate", b"\xc0\xafoverlong \xf4\x90\x80\x80 past",
               b"\xff", b"Bath \xff\xfe Bristol \xe2\x82 x", "caf\u00e9 Z\u00fcrich".encode()]


def as_python_reads(texts):
    """What transformers gets: Python's str of the bytes, invalid ones U+FFFD."""
    return [text.decode("utf-8", errors="replace") for text in texts]

WORDPIECE = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "qu", "##ick", "fox", "."]
BYTE_PAIR = ["<s>", "<pad>", "</s>", "<unk>", "<mask>", "a", "b", "Ġ", "ab", "Ġab"], ["a b", "Ġ ab"]
SENTENCEPIECE = [("<s>", 0.0), ("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0), ("▁the", -1.0), ("▁qu", -2.0),
                 ("ick", -2.0), ("▁fox", -2.0), (".", -3.0), ("<mask>", 0.0)]
TOKENIZERS = {
    "wordpiece": (lambda: BertTokenizer(WORDPIECE), "the quick fox.", "the quick fox ."),
    "byte_pair": (lambda: BytePairTokenizer(*BYTE_PAIR), "ab ab", "ab ab"),
    "sentencepiece": (lambda: SentencePieceTokenizer(SENTENCEPIECE), "the quick fox.", "the quick fox."),
}


OTHER_VOCABULARIES = {
    "wordpiece": lambda i: BertTokenizer(WORDPIECE + [f"other{i}"]),
    "byte_pair": lambda i: BytePairTokenizer(BYTE_PAIR[0] + [f"other{i}"], BYTE_PAIR[1]),
    "sentencepiece": lambda i: SentencePieceTokenizer(SENTENCEPIECE + [(f"other{i}", -9.0)]),
}


@pytest.mark.parametrize("kind", TOKENIZERS)
def test_tokenizers_of_one_class_and_settings_trace_once_and_warn_of_no_retracing(kind):
    # Tokenizers of other vocabularies first, as a notebook that loads
    # several checkpoints builds them: building one traces nothing (once, a
    # BPE tokenizer traced its merges at construction, and the sixth model of
    # a process warned of retracing).
    build, text, _ = TOKENIZERS[kind]
    messages = []
    handler = logging.Handler()
    handler.emit = lambda record: messages.append(record.getMessage())
    logging.getLogger("tensorflow").addHandler(handler)
    try:
        others = [OTHER_VOCABULARIES[kind](i) for i in range(6)]
        tokenizers = [build() for _ in range(6)]
        ids = [tokenizer([text, text + text]).to_list() for tokenizer in tokenizers]
    finally:
        logging.getLogger("tensorflow").removeHandler(handler)
    assert not [m for m in messages if "retracing" in m]
    assert ids == ids[:1] * 6
    assert len({id(t._tokenization) for t in tokenizers}) == 1 and tokenizers[0]._tokenization not in {
        o._tokenization for o in others}
    assert tokenizers[0]._tokenization.tokenize.experimental_get_tracing_count() == 1


@pytest.mark.parametrize("kind", TOKENIZERS)
def test_detokenize_takes_one_text_a_list_a_dense_or_a_ragged_batch(kind):
    build, text, decoded = TOKENIZERS[kind]
    tokenizer = build()
    ids = tokenizer(text).numpy().tolist()
    assert tokenizer.detokenize(ids).numpy().decode() == decoded
    for batch in ([ids, ids], tf.constant([ids, ids]), tf.ragged.constant([ids, ids[:1]])):
        texts = [t.decode() for t in tokenizer.detokenize(batch).numpy().tolist()]
        assert texts[0] == decoded and len(texts) == 2


def test_special_tokens_and_continuation_ids_of_each_tokenizer():
    wordpiece, byte_pair, sentencepiece = (build() for build, _, _ in TOKENIZERS.values())
    assert wordpiece.special_tokens == ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
    assert wordpiece.continuation_token_ids == [7]  # ##ick
    assert byte_pair.special_tokens == ("<s>", "<pad>", "</s>", "<unk>", "<mask>")
    assert byte_pair.continuation_token_ids == [5, 6, 8]  # a, b, ab: no leading Ġ
    assert sentencepiece.special_tokens == ("<s>", "<pad>", "</s>", "<unk>", "<mask>")
    assert sentencepiece.continuation_token_ids == [6, 8]  # ick, .: no leading ▁


def test_bytes_that_are_not_utf8_read_as_pythons_replace_decodes_them():
    assert [t.decode() for t in as_valid_utf8(tf.constant(BROKEN_UTF8)).numpy()] == as_python_reads(BROKEN_UTF8)
    valid = tf.constant(["café", "ok"])
    assert as_valid_utf8(valid).numpy().tolist() == valid.numpy().tolist()
