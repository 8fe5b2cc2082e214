"""A task's answers: its preprocessing, model and postprocessing as one
TensorFlow path, run by the Python helpers (`entities`, `answer`,
`fill_mask`) and exported as the SavedModel's serving function."""

import os
import subprocess
import sys
import tempfile

import keras
import numpy as np
import tensorflow as tf

from kbert import serving
from kbert.text.pipeline import slices, take, text_tensor

# A model trained on JAX or PyTorch is exported by a TensorFlow process that
# loads it from a preset: argv is preset, path, pairs, top_k.
_EXPORT_IN_TENSORFLOW = """
import sys
from kbert.models.task_presets import load_task
preset, path, pairs, top_k = sys.argv[1:]
load_task(preset).export(path, pairs=pairs == "True", top_k=int(top_k))
"""


def serving_text(name="text"):
    """The input signature of a batch of strings, named as the served input."""
    return tf.TensorSpec([None], tf.string, name=name)


def _decoded(value):
    """Numpy strings as str (bytes that are not UTF-8 replaced)."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, np.ndarray) and value.dtype == object:
        return np.vectorize(lambda b: b.decode("utf-8", "replace"), otypes=[object])(value)
    return value


class Answering:
    """The answering path of a task model (subclasses give `_answering`)."""

    # Whether the task reads pairs of texts (an export with `pairs=True`).
    takes_pairs = False

    def export(self, filepath, format="tf_saved_model", pairs=False, top_k=5, **kwargs):
        """Exports a SavedModel for TF Serving that takes raw strings: the
        task's preprocessing, model and postprocessing in one graph (the same
        functions `fit` and `predict` use), run over a request in bounded
        slices. Returns the version folder written.

        Args:
            filepath: `saved_models/<name>` (the next version number is
                picked) or `saved_models/<name>/<version>`.
            pairs: for a classifier of sentence pairs, or a `BertPretrainer`
                asked for next-sentence probabilities: the signature takes
                `text` and `text_pair`.
            top_k: how many guesses a masked-LM export gives for each [MASK].

        Without a preprocessor (or with another `format`), Keras' own export
        of the id-taking model. Models trained on the JAX or PyTorch backend
        are saved as a preset and exported by a TensorFlow process.
        """
        if self.preprocessor is None or format != "tf_saved_model":
            return super().export(filepath, format=format, **kwargs)
        if pairs and not self.takes_pairs:
            raise ValueError(f"pairs=True is for a model of sentence pairs; a {type(self).__name__} takes "
                             "single texts: export it without pairs.")
        path = serving.check_new_version(filepath)
        if keras.backend.backend() != "tensorflow":
            self._export_through_tensorflow(path, pairs, top_k)
            return path
        # Slices padded to their longest text, as predict pads a batch (a
        # served graph compiles no shapes).
        with self._longest_padding():
            serve, signature, fills = self.serving_function(pairs=pairs, top_k=top_k)
            return serving.write(self, path, serve, signature, fills)

    def _answering(self, pairs=False, top_k=5):
        """The task's answering, as TensorFlow ops: `(preprocess, postprocess,
        input_signature, fills)`. `preprocess(*strings)` gives the model's
        features and what `postprocess(outputs, context)` needs besides the
        model's outputs to give the answers, a dict of `[batch, ...]` tensors.
        The exported model runs them in its graph, and the task's Python
        helpers (`entities`, `answer`, `fill_mask`) run them around
        `predict_on_batch` on any backend."""
        raise NotImplementedError(f"kbert cannot export a {type(self).__name__} yet.")

    def serving_function(self, pairs=False, top_k=5):
        """`(serve, input_signature, fills)` for `kbert.serving.write`: raw
        strings in, the task's answers out, as TensorFlow ops."""
        preprocess, postprocess, signature, fills = self._answering(pairs=pairs, top_k=top_k)

        def serve(*inputs):
            features, context = preprocess(*inputs)
            return postprocess(self(features, training=False), context)

        return serve, signature, fills

    def _predict_batch(self, features):
        """The model's outputs on one batch of features (TensorFlow tensors,
        handed over as numpy so that any backend takes them)."""
        features = keras.tree.map_structure(lambda v: v.numpy(), features)
        if self._replicas() > 1:
            # predict_on_batch would run the whole batch on every replica and
            # concatenate their outputs: one row per replica. (predict on many
            # texts runs Keras' distributed loop instead.)
            return keras.tree.map_structure(keras.ops.convert_to_numpy, self(features, training=False))
        return self.predict_on_batch(features)

    def _replicas(self):
        """How many replicas the model's `tf.distribute` strategy runs (1
        without one)."""
        strategy = getattr(self, "distribute_strategy", None)
        return 1 if strategy is None else strategy.num_replicas_in_sync

    def _answers_in_slices(self, inputs, batch_size=32, pairs=False, top_k=5):
        """What the exported model answers, computed here: a list of dicts of
        numpy values, one per row of `inputs` (a tuple of lists of str)."""
        if self.preprocessor is None:
            raise ValueError(f"{type(self).__name__} needs a preprocessor to read text; build the model with one.")
        # Sorted by length as predict sorts (its order), given back in the
        # input's order.
        order = self._length_order(tuple(inputs))
        if order is not None:
            inputs = take(tuple(inputs), order)
        rows = []
        # Padded as predict pads a batch (see `_pads_to_longest`).
        with self._longest_padding():
            # Traced once per model: eager tensorflow-text ops cost more than a
            # small model's forward pass.
            preprocess, postprocess = (
                self._traced(("answers", i, pairs, top_k), lambda i=i: self._answering(pairs=pairs, top_k=top_k)[i])
                for i in (0, 1)
            )
            for part in slices(text_tensor(tuple(inputs)), batch_size):
                features, context = preprocess(*part)
                outputs = keras.tree.map_structure(
                    lambda v: tf.convert_to_tensor(keras.ops.convert_to_numpy(v)), self._predict_batch(features))
                answers = {k: v.numpy() for k, v in postprocess(outputs, context).items()}
                rows += [{k: _decoded(v[i]) for k, v in answers.items()} for i in range(int(tf.shape(part[0])[0]))]
        return rows if order is None else [rows[i] for i in np.argsort(order)]

    def _export_through_tensorflow(self, path, pairs, top_k):
        with tempfile.TemporaryDirectory() as preset:
            self.save_to_preset(preset)
            command = [sys.executable, "-c", _EXPORT_IN_TENSORFLOW, preset, path, str(pairs), str(top_k)]
            result = subprocess.run(command, env={**os.environ, "KERAS_BACKEND": "tensorflow"},
                                    capture_output=True, text=True)
        if result.returncode:
            raise RuntimeError(f"Exporting through a TensorFlow process failed:\n{result.stderr[-3000:]}")
