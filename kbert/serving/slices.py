"""Running a serving function over a whole request as `predict` runs a list
of texts: sorted by length, in slices each padded to its own longest text,
the answers given back in the request's order.

A request cut in arrival order pads each slice to its longest text, which is
mostly padding wherever lengths are uneven, and took about twice
`predict`'s time. Sorted first, a slice holds texts of
about one length. Slices are cut by tokens, not rows: each holds as many
rows as fit in a fixed budget of padded tokens, so a slice of short texts
runs many rows at once, a slice of long ones few, and the activations of a
slice are bounded however many rows the request has.

The budget is small on purpose: on CPU, small slices run as fast per token
as `predict`'s batches or faster, and budgets of many long rows ran slower
(docs/benchmarks.md, "Served against `predict`" and "Measurements behind
the code").
"""


from kbert.tf_if_present import tf

# Rows of a request whose token counts are computed at once: bounds the
# ragged token ids that counting holds (a request of 10,000 long texts would
# otherwise hold all their ids).
COUNT_ROWS = 1024


def in_length_order(serve, outputs, slice_rows, slice_tokens, lengths, fills=None):
    """`run(*inputs)`: `serve` over a request of string tensors `[batch]`,
    sorted by `lengths(*inputs)` (the tokens each row takes) and cut into
    slices of at most `slice_tokens` padded tokens (a slice padded to its own
    longest; at least one row), in a `tf.while_loop`; the outputs put back in
    the request's order.

    A request of at most `slice_rows` rows is one slice whatever its order,
    so it runs `serve` once, directly, without counting its tokens: batch-1
    latency pays for nothing it does not use.

    Args:
        serve: a function of string tensors `[batch]` returning a dict of
            tensors `[batch, ...]`.
        outputs: `serve`'s output `tf.TensorSpec`s (dtypes; the inner
            dimensions known when traced are declared on the results).
        slice_rows: a request of at most this many rows runs as one slice.
        slice_tokens: the padded tokens a slice of a longer request holds
            at most (one row at least, however long).
        lengths: `lengths(*inputs)`, an int32 `[batch]` of token counts
            (`BertPreprocessor.token_counts`).
        fills: per output, the value that pads inner dimensions where
            slices differ (default "" for strings, 0 for numbers).
    """
    fills = fills or {}

    def run(*inputs):
        rows = tf.shape(inputs[0])[0]
        result = tf.cond(rows <= slice_rows, lambda: serve(*inputs),
                         lambda: _sorted_slices(serve, inputs, rows, outputs, slice_tokens, lengths, fills))
        # Declared, so that the signature (and TF Serving's metadata) gives
        # each output's rank and its known dimensions.
        return {k: tf.ensure_shape(v, [None] + outputs[k].shape[1:].as_list()) for k, v in result.items()}

    return run


def _sorted_slices(serve, inputs, rows, outputs, budget, lengths, fills):
    counts = _counted_in_chunks(lengths, inputs, rows)
    order = tf.argsort(counts, stable=True)
    counts = tf.gather(counts, order)
    parts = {k: tf.TensorArray(spec.dtype, size=0, dynamic_size=True, infer_shape=False) for k, spec in outputs.items()}
    shapes = {k: tf.TensorArray(tf.int32, size=0, dynamic_size=True) for k in outputs}

    def step(i, start, parts, shapes):
        # Sorted, `k` rows from `start` take k * (the k-th's count) padded
        # tokens, which grows with k: the rows that fit are a prefix. At
        # most `budget` rows fit (each takes a token).
        ahead = counts[start:start + budget]
        fit = tf.range(1, tf.size(ahead) + 1) * ahead <= budget
        end = start + tf.maximum(tf.reduce_sum(tf.cast(fit, tf.int32)), 1)
        taken = order[start:end]
        out = serve(*(tf.gather(x, taken) for x in inputs))
        return (i + 1, end, {k: parts[k].write(i, out[k]) for k in parts},
                {k: shapes[k].write(i, tf.shape(out[k]) + 0) for k in shapes})

    # One slice at a time: the loop would otherwise run up to 10 slices at
    # once, each with its activations.
    _, _, parts, shapes = tf.while_loop(lambda i, start, *_: start < rows, step, (0, 0, parts, shapes),
                                        parallel_iterations=1)
    back = tf.math.invert_permutation(order)
    return {k: tf.gather(padded_concat(parts[k], shapes[k].stack(), fills.get(k)), back) for k in parts}


def _counted_in_chunks(lengths, inputs, rows):
    """`lengths(*inputs)`, `COUNT_ROWS` rows at a time."""
    chunks = (rows + COUNT_ROWS - 1) // COUNT_ROWS
    counts = tf.TensorArray(tf.int32, size=chunks, infer_shape=False)

    def step(i, counts):
        chunk = lengths(*(x[i * COUNT_ROWS:(i + 1) * COUNT_ROWS] for x in inputs))
        return i + 1, counts.write(i, tf.cast(chunk, tf.int32))

    _, counts = tf.while_loop(lambda i, _: i < chunks, step, (0, counts), parallel_iterations=1)
    return counts.concat()


def padded_concat(parts, shapes, fill=None):
    """The slices in the `tf.TensorArray` `parts` joined along rows, each
    padded to the widest (`shapes`: their shapes, stacked) with `fill`."""
    widest = tf.reduce_max(shapes, axis=0)
    value = fill if fill is not None else ("" if parts.dtype == tf.string else 0)

    def pad(i, joined):
        part = parts.read(i)
        extra = widest[1:] - tf.shape(part)[1:]
        paddings = tf.stack([tf.concat([[0], tf.zeros_like(extra)], 0), tf.concat([[0], extra], 0)], axis=1)
        return i + 1, joined.write(i, tf.pad(part, paddings, constant_values=tf.cast(value, parts.dtype)))

    joined = tf.TensorArray(parts.dtype, size=parts.size(), infer_shape=False)
    _, joined = tf.while_loop(lambda i, _: i < parts.size(), pad, (0, joined))
    return joined.concat()
