"""A task's answers: its preprocessor's answering (preprocessing and
postprocessing), with the model between, as one TensorFlow path, run by the
Python helpers (`entities`, `answer`, `fill_mask`, `classify`) and exported as
the SavedModel's serving function."""

import json
import os
import subprocess
import sys
import tempfile

import keras
import numpy as np

from kbert.serving import saved_model
from kbert.models import task_inputs
from kbert.text.pipeline import slices, text_tensor
from kbert.tf_if_present import tf

# A model trained on JAX or PyTorch is exported by a TensorFlow process that
# loads it from a preset: argv is the preset, the version folder and the JSON
# of the export's arguments.
_EXPORT_IN_TENSORFLOW = """
import json, sys
from kbert.models.task_presets import load_task
preset, path, arguments = sys.argv[1:]
load_task(preset).export(path, **json.loads(arguments))
"""


def export(model, filepath, head=None, **arguments):
    """`Task.export` for a model with a preprocessor (see there), its answers
    read with `head` (default: the model's `head_settings()`); `arguments`
    are the export's own (`pairs`, `top_k`, an embedder's `prompt`)."""
    pairs, top_k = arguments.get("pairs", False), arguments.get("top_k", 5)
    if pairs and not model.takes_pairs:
        raise ValueError(f"pairs=True is for a model of sentence pairs; a {type(model).__name__} takes "
                         "single texts: export it without pairs.")
    path = saved_model.check_new_version(filepath)  # refused before any work
    if keras.backend.backend() != "tensorflow":
        return _export_through_tensorflow(model, path, arguments)
    # The model's own hook: a subclass that overrides it changes what is served.
    serve, signature, fills = model.serving_function(pairs=pairs, top_k=top_k, head=head)
    return saved_model.write_saved_model(model, path, serve, signature, fills, cast=model.serving_weights_to_cast())


def serving_function(model, pairs=False, top_k=5, head=None):
    """`(serve, input_signature, fills)`: raw strings in, the task's answers
    out, as TensorFlow ops; a slice of a request padded as `predict` pads a
    batch (`task_inputs.padding`: to its longest text, where shapes compile
    nothing)."""
    preprocess, postprocess, signature, fills = model.preprocessor.answering(
        head or model.head_settings(), task_inputs.padding(model), pairs=pairs, top_k=top_k)

    def serve(*inputs):
        features, context = preprocess(*inputs)
        return postprocess(model(features, training=False), context)

    return serve, signature, fills


def _decoded(value):
    """Numpy strings as str (bytes that are not UTF-8 replaced)."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, np.ndarray) and value.dtype == object:
        return np.vectorize(lambda b: b.decode("utf-8", "replace"), otypes=[object])(value)
    return value


def answers_in_slices(model, inputs, batch_size=32, pairs=False, top_k=5, head=None):
    """What the exported model answers, computed here: a list of dicts of
    numpy values, one per row of `inputs` (a tuple of lists of str)."""
    task_inputs.check_batch_size(batch_size)
    if model.preprocessor is None:
        raise ValueError(task_inputs.no_preprocessor(model))
    head, pad_to = head or model.head_settings(), task_inputs.padding(model)
    # Traced once per model: eager tensorflow-text ops cost more than a
    # small model's forward pass.
    key = ("answers", pad_to, pairs, top_k, task_inputs.frozen(head))
    preprocess, postprocess = (
        task_inputs.traced(model.preprocessor, key + (i,), lambda p, i=i: p.answering(
            head, pad_to, pairs=pairs, top_k=top_k)[i])
        for i in (0, 1)
    )
    texts = text_tensor(tuple(inputs))
    # Sorted by length as predict sorts (for little padding), given back in
    # the input's order.
    lengths = model.preprocessor.lengths((texts if len(texts) > 1 else texts[0],))
    order = None if lengths is None else np.argsort(lengths, kind="stable")
    if order is not None:
        texts = tuple(tf.gather(t, order) for t in texts)
    rows = []
    for part in slices(texts, batch_size):
        features, context = preprocess(*part)
        outputs = keras.tree.map_structure(
            lambda v: tf.convert_to_tensor(keras.ops.convert_to_numpy(v)), task_inputs.predict_batch(model, features))
        answers = {k: v.numpy() for k, v in postprocess(outputs, context).items()}
        rows += [{k: _decoded(v[i]) for k, v in answers.items()} for i in range(int(tf.shape(part[0])[0]))]
    return rows if order is None else [rows[i] for i in np.argsort(order)]


def _export_through_tensorflow(model, path, arguments):
    cls = type(model)
    if cls.__module__.split(".")[0] != "kbert":
        # The TensorFlow process imports kbert alone: it cannot rebuild a
        # class defined elsewhere, nor run its serving_function.
        raise ValueError(
            f"{cls.__name__} is exported on the {keras.backend.backend()} backend by a TensorFlow process that "
            f"rebuilds the model from a preset, and that process knows kbert's classes only, not {cls.__module__}'s. "
            f"Save it with model.save_to_preset(folder), then, with KERAS_BACKEND=tensorflow, "
            f"{cls.__name__}.from_preset(folder).export(path)."
        )
    with tempfile.TemporaryDirectory() as preset:
        model.save_to_preset(preset)
        command = [sys.executable, "-c", _EXPORT_IN_TENSORFLOW, preset, path, json.dumps(arguments)]
        result = subprocess.run(command, env={**os.environ, "KERAS_BACKEND": "tensorflow"},
                                capture_output=True, text=True)
    if result.returncode:
        raise RuntimeError(f"Exporting through a TensorFlow process failed:\n{result.stderr[-3000:]}")
    return path
