import os

import keras
import tensorflow as tf
from keras import ops

from kbert.models.task import Task
from kbert.models.task_answers import serving_text
from kbert.presets import files


@keras.saving.register_keras_serializable(package="kbert")
class BertTextEmbedder(Task):
    """Sentence embeddings: the mean of the final hidden states over real
    tokens (Reimers & Gurevych 2019), or the [CLS] vector, optionally L2
    normalised (as sentence-transformers' all-MiniLM-L6-v2).

    Args:
        backbone: a `kbert.BertBackbone`.
        preprocessor: a `kbert.BertPreprocessor` for raw strings, or `None`.
        pooling: `"mean"` (over tokens where `padding_mask` is 1) or `"cls"`.
        normalize: whether to scale each embedding to unit L2 norm.

    Example:
    >>> embedder = kbert.BertTextEmbedder.from_preset(minilm_folder)
    >>> embedder.predict(["A man is eating food."]).shape
    (1, 384)
    """

    def __init__(self, backbone, preprocessor=None, pooling="mean", normalize=True, **kwargs):
        if pooling not in ("mean", "cls"):
            raise ValueError(f'pooling must be "mean" or "cls", got "{pooling}".')
        inputs = backbone.input
        sequence_output = backbone(inputs)["sequence_output"]
        if pooling == "mean":
            mask = ops.cast(inputs["padding_mask"], sequence_output.dtype)[:, :, None]
            embedding = ops.sum(sequence_output * mask, axis=1) / ops.maximum(ops.sum(mask, axis=1), 1e-9)
        else:
            embedding = sequence_output[:, 0, :]
        embedding = ops.cast(embedding, "float32")
        if normalize:
            # (ops.norm breaks under JAX jit in a functional graph: its axis
            # comes back as an unhashable list.)
            norm = ops.sqrt(ops.sum(ops.square(embedding), axis=-1, keepdims=True))
            embedding = embedding / ops.maximum(norm, 1e-12)
        super().__init__(inputs=inputs, outputs=embedding, **kwargs)
        self._finish_init(backbone, preprocessor)
        self.pooling = pooling
        self.normalize = normalize

    def _answering(self, pairs=False, top_k=5):
        preprocessor = self._batch_preprocessor()
        return (lambda text: (preprocessor(text), None),
                lambda embedding, _: {"embedding": tf.cast(embedding, tf.float32)},
                [serving_text()], None)

    def task_config(self):
        return {"pooling": self.pooling, "normalize": self.normalize}

    def default_loss(self):
        return keras.losses.CosineSimilarity()

    @classmethod
    def preset_preprocessor(cls, folder, sequence_length, backbone):
        # sentence-transformers folders say how long a text they embed.
        if sequence_length is None and os.path.exists(os.path.join(folder, "sentence_bert_config.json")):
            sequence_length = files.load_json(folder, "sentence_bert_config.json").get("max_seq_length")
        return super().preset_preprocessor(folder, sequence_length, backbone)
