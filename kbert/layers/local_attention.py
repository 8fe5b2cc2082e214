"""Local (sliding-window) self-attention: each token attends to the tokens
within `half_window` positions of it, `|i - j| <= half_window`
(Longformer, Beltagy et al. 2020, §3.1; ModernBERT's local layers, whose
`local_attention` is the whole window, `2 * half_window`).

`banded_attention` computes it block by block, in memory that grows with
`length * half_window`; `attention_mask` is the same pattern as a
`[batch, 1, length, length]` mask, for short inputs and attention maps."""

import numpy as np
from keras import ops

# A masked logit: exp() of it is 0 in float32, and a row with every key
# masked (padding past a sequence's end) stays finite.
_MASKED = -1e9


def attention_mask(length, half_window=None, padding_mask=None, sequence_ids=None):
    """Which keys each query attends to, `[batch or 1, 1, length or 1,
    length]` booleans: real tokens (`padding_mask`) or those of the query's
    own sequence (`sequence_ids`, packed rows), within `half_window`
    positions where it is given; None where every token sees every other."""
    mask = None
    if sequence_ids is not None:
        ids = ops.cast(sequence_ids, "int32")
        mask = ops.equal(ids[:, :, None], ids[:, None, :])[:, None]
    elif padding_mask is not None:
        mask = ops.cast(padding_mask, "bool")[:, None, None, :]
    if half_window is not None:
        index = ops.arange(length, dtype="int32")
        band = ops.abs(index[:, None] - index[None, :]) <= half_window
        mask = band[None, None] if mask is None else ops.logical_and(mask, band[None, None])
    return mask


def banded_attention(query, key, value, half_window, padding_mask=None, sequence_ids=None, dropout=None,
                     training=None):
    """Softmax attention of each token over the keys within `half_window`
    positions of it, in blocks of `half_window` queries, each against the
    keys of its own block and the two beside it (`3 * half_window` keys,
    masked to the band): `[batch, heads, length / b, b, 3b]` logits for
    `b = half_window`, not `[batch, heads, length, length]`.

    Args:
        query, key, value: `[batch, length, heads, head_dim]`.
        half_window: the farthest a key may be from its query.
        padding_mask: `[batch, length]`, 1 on real tokens: keys to attend to.
        sequence_ids: `[batch, length]` for packed rows: a query attends to
            keys of its own id only (replaces `padding_mask`).
        dropout: a dropout layer applied to the probabilities, or None.

    Returns the context `[batch, length, heads, head_dim]` in `value`'s dtype.
    """
    b = int(half_window)
    shape = ops.shape(query)
    batch, length = shape[0], shape[1]
    heads, head_dim = query.shape[2], query.shape[3]
    blocks = (length + b - 1) // b
    tail = blocks * b - length  # padding that fills the last block
    q = ops.reshape(_pad(query, 0, tail), (batch, blocks, b, heads, head_dim))
    k = _neighbours(key, b, blocks, tail)
    v = _neighbours(value, b, blocks, tail)
    logits = ops.einsum("bcqnh,bcknh->bcnqk", ops.cast(q, "float32"), ops.cast(k, "float32"))
    logits = logits * (head_dim ** -0.5)
    if sequence_ids is not None:
        ids = ops.cast(sequence_ids, "int32")
        # (-1 on the queries and -2 on the keys that fill the blocks: never equal.)
        query_ids = ops.reshape(_pad(ids, 0, tail, -1), (batch, blocks, b))
        key_ids = _neighbours(ids, b, blocks, tail, -2)
        keep = ops.equal(query_ids[:, :, None, :, None], key_ids[:, :, None, None, :])
    else:
        real = ops.ones((batch, length), "int32") if padding_mask is None else ops.cast(padding_mask, "int32")
        keep = ops.greater(_neighbours(real, b, blocks, tail, 0), 0)[:, :, None, None, :]
    # Query r of a block is at offset b + r of its keys: the band is |j - b - r| <= b.
    offsets = np.arange(3 * b)[None, :] - b - np.arange(b)[:, None]
    keep = ops.logical_and(keep, ops.convert_to_tensor(np.abs(offsets) <= b))
    logits = logits + ops.where(keep, 0.0, _MASKED)
    probabilities = ops.softmax(logits, axis=-1)
    if dropout is not None:
        probabilities = dropout(probabilities, training=training)
    context = ops.einsum("bcnqk,bcknh->bcqnh", ops.cast(probabilities, value.dtype), v)
    return ops.reshape(context, (batch, blocks * b, heads, head_dim))[:, :length]


def _pad(x, before, after, value=0):
    widths = [[0, 0], [before, after]] + [[0, 0]] * (len(x.shape) - 2)
    return ops.pad(x, widths, constant_values=value)


def _neighbours(x, b, blocks, tail, value=0):
    """`x` `[batch, length, ...]` as `[batch, blocks, 3b, ...]`: for each
    block of `b` positions, the positions of the block before it, its own
    and the one after (`value` past either end)."""
    shape = ops.shape(x)
    padded = ops.reshape(_pad(x, b, tail + b, value), (shape[0], blocks + 2, b, *x.shape[2:]))
    return ops.concatenate([padded[:, :-2], padded[:, 1:-1], padded[:, 2:]], axis=2)
