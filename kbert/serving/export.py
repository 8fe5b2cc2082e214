"""Writing a SavedModel for TF Serving that takes raw strings.

The writer knows no task: each task model hands it one serving function, built
from its own preprocessor and postprocessor (the very ones `fit` and
`predict` use), and its input signature. The writer runs that function over a
request in slices of `SLICE_ROWS` rows inside the graph, so that the memory a
request takes stays flat however many rows it has, and saves it as
`serving_default`.
"""

import os
import re

import tensorflow as tf

from kbert.layers.fused_dense import weights_cast_once

# Rows that one slice of a request runs through the model at once: what
# `predict` runs per batch.
SLICE_ROWS = 32


def next_version_path(path):
    """`path` itself when its last part is a version number (TF Serving's
    `<name>/<version>`), else `path/<1 + the highest version in it>`."""
    path = os.path.normpath(os.fspath(path))
    if re.fullmatch(r"\d+", os.path.basename(path)):
        return path
    versions = [int(v) for v in os.listdir(path) if v.isdigit()] if os.path.isdir(path) else []
    return os.path.join(path, str(max(versions, default=0) + 1))


def check_new_version(path):
    """The version folder to write, `next_version_path(path)`; refuses one
    that already holds something, so an export never overwrites another."""
    path = next_version_path(path)
    if os.path.exists(path) and os.listdir(path):
        raise FileExistsError(
            f"{path} exists and is not empty; export to a new version folder (or pass the model's folder "
            "without a version, and the next version number is picked)."
        )
    return path


def export(model, path, **kwargs):
    """`model.export(path, **kwargs)`: see the task model's `export`."""
    return model.export(path, **kwargs)


def write(model, path, serve, input_signature, fills=None, slice_rows=SLICE_ROWS):
    """Saves `serve` as the `serving_default` signature of a SavedModel at `path`.

    Args:
        model: the kbert task model `serve` calls (TensorFlow backend); its
            variables (its backbone's dense weights cast, `cast_weights`)
            and its `preprocessor`'s lookup tables are saved.
        path: the version folder.
        serve: a function of string tensors `[batch]` returning a dict of
            tensors `[batch, ...]`; it is run on slices of the request.
        input_signature: `serve`'s `tf.TensorSpec`s.
        fills: the value that pads each output where slices differ in their
            inner dimensions (default: "" for strings, 0 for numbers).
        slice_rows: the rows of a slice.
    """
    module = tf.Module()
    # Only what serving needs is tracked: the preprocessor's lookup tables and
    # the model's variables, not the optimizer (whose state has no place in a
    # served model, and which Keras may have rebuilt).
    module.preprocessor = model.preprocessor
    cast = cast_weights(model)
    replaced = {id(w) for layer in cast for w in (layer.kernel, layer.bias)}
    module.model_variables = [getattr(v, "value", v) for v in model.variables if id(v) not in replaced]
    module.cast_weights = [w for pair in cast.values() for w in pair]
    with weights_cast_once(cast):
        # The serving code is graph code already (explicit while_loop and
        # cond): autograph would only re-read and re-convert its source.
        module.serving_default = tf.function(in_slices(serve, input_signature, fills, slice_rows),
                                             input_signature=input_signature, autograph=False)
        tf.saved_model.save(module, path, signatures={"serving_default": module.serving_default})
    return path


def cast_weights(model):
    """`{layer: (kernel, bias)}`: for each of the backbone's encoder blocks'
    dense layers whose compute dtype is not its variables' (mixed
    precision), new variables holding its kernel and bias in the compute
    dtype. A served model stores and reads these instead of casting its
    float32 weights on every request, with the same outputs; the model
    itself keeps its float32 weights."""
    cast = {}
    for block in model.backbone.transformer_layers:
        for layer in block.dense_layers():
            dtype = layer.compute_dtype
            if dtype == layer.variable_dtype or getattr(layer, "quantization_mode", None) or layer.lora_enabled:
                continue  # nothing to cast, or a kernel that fused_dense does not read as a variable
            cast[layer] = tuple(
                tf.Variable(tf.cast(w, dtype), trainable=False, name=w.path.replace("/", "_") + "_" + dtype)
                for w in (layer.kernel, layer.bias)
            )
    return cast


def in_slices(serve, input_signature, fills=None, slice_rows=SLICE_ROWS):
    """`serve` over a request in slices of `slice_rows` rows, in a
    `tf.while_loop`: the activations of one slice at a time, padded to that
    slice's longest row, as `predict` pads a batch. Outputs whose inner
    dimensions differ between slices (words, masks) are padded with `fills`."""
    fills = fills or {}
    outputs = tf.function(serve, autograph=False).get_concrete_function(*input_signature).structured_outputs
    dtypes = {k: v.dtype for k, v in outputs.items()}

    def run(*inputs):
        rows = tf.shape(inputs[0])[0]
        # At least one slice, so an empty request still gives outputs of the right rank.
        count = tf.maximum((rows + slice_rows - 1) // slice_rows, 1)
        parts = {k: tf.TensorArray(d, size=count, infer_shape=False) for k, d in dtypes.items()}
        shapes = {k: tf.TensorArray(tf.int32, size=count) for k in dtypes}

        def step(i, parts, shapes):
            out = serve(*(x[i * slice_rows:(i + 1) * slice_rows] for x in inputs))
            return (i + 1, {k: parts[k].write(i, out[k]) for k in parts},
                    {k: shapes[k].write(i, tf.shape(out[k]) + 0) for k in shapes})

        _, parts, shapes = tf.while_loop(lambda i, *_: i < count, step, (0, parts, shapes))
        return {k: _padded_concat(parts[k], shapes[k].stack(), fills.get(k)) for k in parts}

    return run


def _padded_concat(parts, shapes, fill):
    """The slices in `parts` joined along rows, each padded to the widest."""
    widest = tf.reduce_max(shapes, axis=0)

    def pad(i, joined):
        part = parts.read(i)
        extra = widest[1:] - tf.shape(part)[1:]
        paddings = tf.stack([tf.concat([[0], tf.zeros_like(extra)], 0), tf.concat([[0], extra], 0)], axis=1)
        value = fill if fill is not None else ("" if parts.dtype == tf.string else 0)
        return i + 1, joined.write(i, tf.pad(part, paddings, constant_values=tf.cast(value, parts.dtype)))

    joined = tf.TensorArray(parts.dtype, size=parts.size(), infer_shape=False)
    _, joined = tf.while_loop(lambda i, _: i < parts.size(), pad, (0, joined))
    return joined.concat()
