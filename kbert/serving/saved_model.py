"""Writing a SavedModel for TF Serving that takes raw strings.

The writer knows no task: each task model hands it one serving function, built
from its own preprocessor and postprocessor (the very ones `fit` and
`predict` use), its input signature and the dense layers whose weights are
stored cast to their compute dtype. The writer runs that function over a
request as `predict` runs a list of texts, sorted by length and in slices of
bounded tokens inside the graph (`kbert.serving.slices`), so that a request
costs what `predict` costs and the memory it takes stays flat however many
rows it has, and saves it as `serving_default`.
"""

import os
import re


from kbert.layers.fused_dense import weights_cast_once
from kbert.serving.slices import in_length_order
from kbert.tf_if_present import tf

# A request of at most SLICE_ROWS rows (`predict`'s batch) runs as one slice;
# a longer one is cut into slices of at most SLICE_TOKENS padded tokens (see
# `kbert.serving.slices`).
SLICE_ROWS = 32
SLICE_TOKENS = 2048


def _next_version_path(path):
    """`path` itself when its last part is a version number (TF Serving's
    `<name>/<version>`), else `path/<1 + the highest version in it>`."""
    path = os.path.normpath(os.fspath(path))
    if re.fullmatch(r"\d+", os.path.basename(path)):
        return path
    versions = [int(v) for v in os.listdir(path) if v.isdigit()] if os.path.isdir(path) else []
    return os.path.join(path, str(max(versions, default=0) + 1))


def check_new_version(path):
    """The version folder to write, `_next_version_path(path)`; refuses one
    that already holds something, so an export never overwrites another."""
    path = _next_version_path(path)
    if os.path.exists(path) and os.listdir(path):
        raise FileExistsError(
            f"{path} exists and is not empty; export to a new version folder (or pass the model's folder "
            "without a version, and the next version number is picked)."
        )
    return path


def write_saved_model(model, filepath, serve, input_signature, fills=None, cast=()):
    """Saves `serve` as the `serving_default` signature of a SavedModel in a
    new version folder of `filepath` (TF Serving's `<name>/<version>`: the
    next version is picked where `filepath` names none; an existing
    version that holds anything is refused). Returns the folder written.

    Args:
        model: the kbert task model `serve` calls (TensorFlow backend); its
            variables and its `preprocessor`'s lookup tables are saved.
        filepath: `<name>` or `<name>/<version>`.
        serve: a function of string tensors `[batch]` returning a dict of
            tensors `[batch, ...]`; it is run on slices of the request.
        input_signature: `serve`'s `tf.TensorSpec`s.
        cast: dense layers whose weights, where their compute dtype is not
            their variables' (mixed precision), are stored cast to it
            (see `_cast_weights`).
        fills: the value that pads each output where slices differ in their
            inner dimensions (default: "" for strings, 0 for numbers).
    """
    path = check_new_version(filepath)
    module = tf.Module()
    # Only what serving needs is tracked: the preprocessor's lookup tables and
    # the model's variables, not the optimizer (whose state has no place in a
    # served model, and which Keras may have rebuilt).
    module.preprocessor = model.preprocessor
    cast = _cast_weights(cast)
    replaced = {id(w) for layer in cast for w in (layer.kernel, layer.bias)}
    module.model_variables = [getattr(v, "value", v) for v in model.variables if id(v) not in replaced]
    module.cast_weights = [w for pair in cast.values() for w in pair]
    with weights_cast_once(cast):
        # The serving code is graph code already (explicit while_loop and
        # cond): autograph would only re-read and re-convert its source.
        module.serving_default = tf.function(_in_slices(serve, input_signature, model.preprocessor, fills),
                                             input_signature=input_signature, autograph=False)
        tf.saved_model.save(module, path, signatures={"serving_default": module.serving_default})
    return path


def _cast_weights(layers):
    """`{layer: (kernel, bias)}`: for each of the dense `layers` whose
    compute dtype is not its variables' (mixed precision), new variables
    holding its kernel and bias in the compute dtype. A served model stores and reads these instead of casting its
    float32 weights on every request, with the same outputs; the model
    itself keeps its float32 weights."""
    cast = {}
    for layer in layers:
        dtype = layer.compute_dtype
        if dtype == layer.variable_dtype or getattr(layer, "quantization_mode", None) or layer.lora_enabled:
            continue  # nothing to cast, or a kernel that fused_dense does not read as a variable
        cast[layer] = tuple(
            tf.Variable(tf.cast(w, dtype), trainable=False, name=w.path.replace("/", "_") + "_" + dtype)
            for w in (layer.kernel, layer.bias)
        )
    return cast


def _in_slices(serve, input_signature, preprocessor, fills):
    """`serve` over a request sorted by the tokens each row takes with
    `preprocessor`, in slices of at most SLICE_TOKENS padded tokens, each
    padded to its own longest row, the outputs in the request's order (see
    `kbert.serving.slices.in_length_order`). Outputs whose inner dimensions
    differ between slices (words, masks) are padded with `fills`."""
    # Traced once, and called by both of in_length_order's paths.
    serve = tf.function(serve, autograph=False).get_concrete_function(*input_signature)
    outputs = {k: tf.TensorSpec(v.shape, v.dtype) for k, v in serve.structured_outputs.items()}
    return in_length_order(serve, outputs, SLICE_ROWS, SLICE_TOKENS, preprocessor.token_counts, fills)
