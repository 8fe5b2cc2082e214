"""One call from a trained task model to a raw-string SavedModel for TF Serving.

The export holds the preprocessing (tokenizer, packing) in the graph, so a
client sends text and TF Serving needs nothing else. Models trained on the JAX
or PyTorch backend are saved as a kbert preset and exported by a TensorFlow
process, which carries their weights into a TensorFlow graph.
"""

import argparse
import os
import re
import subprocess
import sys
import tempfile

import keras
import tensorflow as tf

from kbert.models import BertClassifier, BertTextEmbedder, BertTokenClassifier
from kbert.models.bert_token_classifier import pack_words

TEXT = tf.TensorSpec([None], tf.string)


def next_version_path(path):
    """`path` itself when its last part is a version number (TF Serving's
    `<name>/<version>`), else `path/<1 + the highest version in it>`."""
    path = os.path.normpath(os.fspath(path))
    if re.fullmatch(r"\d+", os.path.basename(path)):
        return path
    versions = [int(v) for v in os.listdir(path) if v.isdigit()] if os.path.isdir(path) else []
    return os.path.join(path, str(max(versions, default=0) + 1))


def export(model, path, pairs=False):
    """Writes `model` as a SavedModel taking raw strings; returns its folder.

    Args:
        model: a kbert task model with a preprocessor (`BertClassifier`,
            `BertTextEmbedder`, ...).
        path: `saved_models/<name>` (the next version number is picked) or
            `saved_models/<name>/<version>`.
        pairs: for a classifier of sentence pairs: the signature takes
            `text` and `text_pair`.

    The `serving_default` signature takes a batch of strings `text` and
    returns, for a `BertClassifier`, `logits`, `probabilities`, `label_id` and
    `label`; for a `BertTextEmbedder`, `embedding`; for a
    `BertTokenClassifier`, the text split on whitespace as `words` with each
    word's `label_id`, `label` and `score` (read at its first WordPiece;
    -1 / "" / 0 for words cut off by the sequence length), padded with "".
    """
    if getattr(model, "preprocessor", None) is None:
        raise ValueError(
            "The model has no preprocessor, so an export could not take text. Build it with "
            "preprocessor=kbert.BertPreprocessor.from_preset(...) or use from_preset."
        )
    path = next_version_path(path)
    if os.path.exists(path) and os.listdir(path):
        raise FileExistsError(f"{path} exists and is not empty; export to a new version folder.")
    if keras.backend.backend() != "tensorflow":
        _export_through_tensorflow(model, path, pairs)
        return path
    module = _servable(model, pairs)
    tf.saved_model.save(module, path, signatures={"serving_default": module.serving_default})
    return path


def _export_through_tensorflow(model, path, pairs):
    with tempfile.TemporaryDirectory() as preset:
        model.save_to_preset(preset)
        command = [sys.executable, "-m", "kbert.serving.export", preset, path] + (["--pairs"] if pairs else [])
        result = subprocess.run(
            command, env={**os.environ, "KERAS_BACKEND": "tensorflow"}, capture_output=True, text=True
        )
    if result.returncode:
        raise RuntimeError(f"Exporting through a TensorFlow process failed:\n{result.stderr[-3000:]}")


def _servable(model, pairs):
    if isinstance(model, BertTokenClassifier):  # before its base class, BertClassifier
        return _TokenClassifierModule(model)
    if isinstance(model, BertClassifier):
        return _ClassifierModule(model, pairs)
    if isinstance(model, BertTextEmbedder):
        return _EmbedderModule(model)
    raise TypeError(f"kbert cannot export a {type(model).__name__} yet.")


class _ServingModule(tf.Module):
    def __init__(self, model):
        super().__init__()
        # Only what serving needs is tracked: the preprocessor's lookup tables
        # and the model's variables, not the optimizer (whose state has no
        # place in a served model, and which Keras may have rebuilt).
        object.__setattr__(self, "model", model)
        self.preprocessor = model.preprocessor
        self.model_variables = [getattr(v, "value", v) for v in model.variables]

    def _features(self, *texts):
        return self.preprocessor(texts if len(texts) > 1 else texts[0])


class _ClassifierModule(_ServingModule):
    def __init__(self, model, pairs):
        super().__init__(model)
        self.class_names = model.class_names or [str(i) for i in range(model.num_classes)]
        if pairs:
            self.serving_default = tf.function(self._classify_pairs, input_signature=[TEXT, TEXT])
        else:
            self.serving_default = tf.function(self._classify, input_signature=[TEXT])

    def _classify(self, text):
        return self._outputs(self._features(text))

    def _classify_pairs(self, text, text_pair):
        return self._outputs(self._features(text, text_pair))

    def _outputs(self, features):
        logits = tf.cast(self.model(features, training=False), tf.float32)
        label_id = tf.argmax(logits, axis=-1, output_type=tf.int32)
        return {
            "logits": logits,
            "probabilities": tf.nn.softmax(logits, axis=-1),
            "label_id": label_id,
            "label": tf.gather(tf.constant(self.class_names), label_id),
        }


class _EmbedderModule(_ServingModule):
    def __init__(self, model):
        super().__init__(model)
        self.serving_default = tf.function(self._embed, input_signature=[TEXT])

    def _embed(self, text):
        return {"embedding": tf.cast(self.model(self._features(text), training=False), tf.float32)}


class _TokenClassifierModule(_ServingModule):
    def __init__(self, model):
        super().__init__(model)
        self.class_names = model.class_names or [str(i) for i in range(model.num_classes)]
        self.serving_default = tf.function(self._tag, input_signature=[TEXT])

    def _tag(self, text):
        words = tf.strings.split(text)
        features, first_pieces = pack_words(self.preprocessor, words)
        probabilities = tf.nn.softmax(tf.cast(self.model(features, training=False), tf.float32), axis=-1)
        first_pieces = first_pieces.to_tensor(default_value=-1)
        kept = first_pieces >= 0
        word_probabilities = tf.gather(probabilities, tf.maximum(first_pieces, 0), batch_dims=1)
        label_id = tf.where(kept, tf.argmax(word_probabilities, axis=-1, output_type=tf.int32), -1)
        return {
            "words": words.to_tensor(default_value=""),
            "label_id": label_id,
            "label": tf.where(kept, tf.gather(tf.constant(self.class_names), tf.maximum(label_id, 0)), ""),
            "score": tf.where(kept, tf.reduce_max(word_probabilities, axis=-1), 0.0),
        }


def _main():
    parser = argparse.ArgumentParser(description="Export a kbert task preset as a SavedModel (TensorFlow backend).")
    parser.add_argument("preset")
    parser.add_argument("path")
    parser.add_argument("--pairs", action="store_true")
    args = parser.parse_args()
    import kbert
    from kbert.presets import files

    task = files.load_json(args.preset, files.KBERT_CONFIG)["task"]["class"]
    export(getattr(kbert, task).from_preset(args.preset), args.path, pairs=args.pairs)


if __name__ == "__main__":
    _main()
