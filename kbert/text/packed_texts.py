"""Raw texts packed into rows for masked-LM training (Krell et al. 2021).

Padded one text per row, 2,048 real paragraphs of up to 128 tokens (Austen)
fill 69% of their rows; packed best fit decreasing, nearly all. A backbone
with `packing=True` reads each text of a packed row as it reads the text
alone (attention within the text, positions restarting at its [CLS]), so the
masked-LM loss of the packed rows is the loss of the texts one per row.
"""

import numpy as np

from kbert.text import pipeline
from kbert.text.sequence_packing import pack_sequences

FEATURES = ("token_ids", "segment_ids", "padding_mask", "sequence_ids")
# Texts tokenized at once: bounds the padded batch held.
CHUNK = 1024


def pack_texts(preprocessor, texts):
    """Texts as packed rows of the preprocessor's `sequence_length` tokens.

    Each text is tokenized as `preprocessor` tokenizes it alone (`[CLS] text
    [SEP]`, cut to `sequence_length`); the texts are then grouped into rows
    best fit decreasing (`pack_sequences`) and laid out one after the other.
    Masks are drawn on the rows afterwards, as on any batch: the masker never
    selects `[CLS]`, `[SEP]` or padding, wherever they are in the row.

    Args:
        preprocessor: a `kbert.text.BertPreprocessor`.
        texts: a list (or 1-D array) of str, or a string tensor `[n]`.

    Returns:
        A dict of int32 arrays `[rows, sequence_length]`, the inputs of a
        backbone with `packing=True`: `token_ids`, `segment_ids`,
        `padding_mask`, and `sequence_ids` (1, 2, ... on each text in turn, 0
        on padding).

    Example:
    >>> rows = pack_texts(preprocessor, ["A short text.", "Another one.", "A third."])
    >>> dataset = tf.data.Dataset.from_tensor_slices(rows).shuffle(len(rows["token_ids"])).batch(32)
    """
    unpadded = preprocessor.with_padding("longest")
    sequence_length = preprocessor.sequence_length
    texts = pipeline.text_tensor(texts)
    token_ids, segment_ids = [], []
    for start in range(0, int(texts.shape[0]), CHUNK):
        features = unpadded(texts[start:start + CHUNK])
        lengths = np.asarray(features["padding_mask"]).sum(axis=1)
        for ids, segments, n in zip(np.asarray(features["token_ids"]), np.asarray(features["segment_ids"]), lengths):
            token_ids.append(ids[:n])
            segment_ids.append(segments[:n])
    rows = pack_sequences([len(ids) for ids in token_ids], sequence_length)
    packed = {name: np.zeros((len(rows), sequence_length), "int32") for name in FEATURES}
    packed["token_ids"][:] = preprocessor.tokenizer.pad_id
    for r, row in enumerate(rows):
        end = 0
        for sequence_id, i in enumerate(row, start=1):
            start, end = end, end + len(token_ids[i])
            packed["token_ids"][r, start:end] = token_ids[i]
            packed["segment_ids"][r, start:end] = segment_ids[i]
            packed["sequence_ids"][r, start:end] = sequence_id
        packed["padding_mask"][r, :end] = 1
    return packed
