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

from kbert.models import (
    BertClassifier,
    BertMaskedLM,
    BertPretrainer,
    BertQuestionAnswerer,
    BertTextEmbedder,
    BertTokenClassifier,
)
from kbert.models.bert_token_classifier import pack_words
from kbert.serving import question_answering

TEXT = tf.TensorSpec([None], tf.string)


def next_version_path(path):
    """`path` itself when its last part is a version number (TF Serving's
    `<name>/<version>`), else `path/<1 + the highest version in it>`."""
    path = os.path.normpath(os.fspath(path))
    if re.fullmatch(r"\d+", os.path.basename(path)):
        return path
    versions = [int(v) for v in os.listdir(path) if v.isdigit()] if os.path.isdir(path) else []
    return os.path.join(path, str(max(versions, default=0) + 1))


def export(model, path, pairs=False, top_k=5):
    """Writes `model` as a SavedModel taking raw strings; returns its folder.

    Args:
        model: a kbert task model with a preprocessor (`BertClassifier`,
            `BertTextEmbedder`, ...).
        path: `saved_models/<name>` (the next version number is picked) or
            `saved_models/<name>/<version>`.
        pairs: for a classifier of sentence pairs, or a `BertPretrainer`
            asked for next-sentence probabilities: the signature takes `text`
            and `text_pair`.
        top_k: how many guesses a masked-LM export gives for each [MASK].

    The `serving_default` signature takes a batch of strings `text` and
    returns, for a `BertClassifier`, `logits`, `probabilities`, `label_id` and
    `label`; for a `BertTextEmbedder`, `embedding`; for a
    `BertTokenClassifier`, the text split on whitespace as `words` with each
    word's `label_id`, `label` and `score` (read at its first WordPiece;
    -1 / "" / 0 for words cut off by the sequence length), padded with "";
    for a `BertQuestionAnswerer`, taking `question` and `context`, the
    `answer` text, its `start` and `end` character offsets in the context and
    its `score` (long contexts are read in windows, as `predict` does; ""
    and the lowest float32 score where the context has no token); for a
    `BertMaskedLM` or `BertPretrainer`, the `top_k` guesses at each [MASK]
    written in `text`: `tokens`, `token_ids`, `probabilities`
    `[batch, masks, top_k]` ("" / -1 / 0 past a row's masks), and with
    `pairs`, `next_sentence_probability`, that `text_pair` follows `text`.
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
        _export_through_tensorflow(model, path, pairs, top_k)
        return path
    module = _servable(model, pairs, top_k)
    tf.saved_model.save(module, path, signatures={"serving_default": module.serving_default})
    return path


def _export_through_tensorflow(model, path, pairs, top_k):
    with tempfile.TemporaryDirectory() as preset:
        model.save_to_preset(preset)
        command = [sys.executable, "-m", "kbert.serving.export", preset, path, f"--top-k={top_k}"]
        command += ["--pairs"] if pairs else []
        result = subprocess.run(
            command, env={**os.environ, "KERAS_BACKEND": "tensorflow"}, capture_output=True, text=True
        )
    if result.returncode:
        raise RuntimeError(f"Exporting through a TensorFlow process failed:\n{result.stderr[-3000:]}")


def _servable(model, pairs, top_k):
    if pairs and (isinstance(model, BertTokenClassifier) or not isinstance(model, (BertClassifier, BertPretrainer))):
        raise ValueError(
            f"pairs=True is for a BertClassifier of sentence pairs or a BertPretrainer, not a "
            f"{type(model).__name__}; export it without pairs."
        )
    if isinstance(model, BertMaskedLM):
        return _MaskedLMModule(model, pairs and isinstance(model, BertPretrainer), top_k)
    if isinstance(model, BertQuestionAnswerer):
        return _QuestionAnswererModule(model)
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


class _QuestionAnswererModule(_ServingModule):
    def __init__(self, model):
        super().__init__(model)
        self.serving_default = tf.function(self._answer, input_signature=[TEXT, TEXT])

    def _answer(self, question, context):
        return question_answering.answer(self.model, question, context)


class _MaskedLMModule(_ServingModule):
    def __init__(self, model, pairs, top_k):
        super().__init__(model)
        self.top_k = top_k
        self.vocabulary = tf.constant(model.preprocessor.tokenizer.vocabulary)
        if pairs:
            self.serving_default = tf.function(self._fill_pairs, input_signature=[TEXT, TEXT])
        else:
            self.serving_default = tf.function(self._fill, input_signature=[TEXT])

    def _fill(self, text):
        return self._outputs(self._features(text))[0]

    def _fill_pairs(self, text, text_pair):
        outputs, logits = self._outputs(self._features(text, text_pair))
        outputs["next_sentence_probability"] = tf.nn.softmax(tf.cast(logits["nsp_logits"], tf.float32))[:, 0]
        return outputs

    def _outputs(self, features):
        is_mask = tf.equal(features["token_ids"], self.model.preprocessor.tokenizer.mask_id)
        positions = tf.ragged.boolean_mask(tf.broadcast_to(tf.range(tf.shape(is_mask)[1]), tf.shape(is_mask)), is_mask)
        # At least one slot per row, so a batch without [MASK] keeps its shape.
        num_slots = tf.maximum(tf.reduce_max(tf.concat([positions.row_lengths(), [0]], 0)), 1)
        is_slot = tf.sequence_mask(positions.row_lengths(), num_slots)
        features = dict(features, mask_positions=positions.to_tensor(0, shape=tf.stack([positions.nrows(), num_slots])))
        logits = self.model(features, training=False)
        probabilities, token_ids = tf.math.top_k(tf.nn.softmax(tf.cast(logits["mlm_logits"], tf.float32)), self.top_k)
        is_slot = is_slot[:, :, None]
        outputs = {
            "tokens": tf.where(is_slot, tf.gather(self.vocabulary, token_ids), ""),
            "token_ids": tf.where(is_slot, token_ids, -1),
            "probabilities": tf.where(is_slot, probabilities, 0.0),
        }
        return outputs, logits


def _main():
    parser = argparse.ArgumentParser(description="Export a kbert task preset as a SavedModel (TensorFlow backend).")
    parser.add_argument("preset")
    parser.add_argument("path")
    parser.add_argument("--pairs", action="store_true")
    parser.add_argument("--top-k", type=int, default=5)
    args = parser.parse_args()
    import kbert
    from kbert.presets import files

    task = files.load_json(args.preset, files.KBERT_CONFIG)["task"]["class"]
    export(getattr(kbert, task).from_preset(args.preset), args.path, pairs=args.pairs, top_k=args.top_k)


if __name__ == "__main__":
    _main()
