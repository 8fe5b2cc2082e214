import keras
from keras import ops

from kbert import backend


@keras.saving.register_keras_serializable(package="kbert")
class TokenEmbedding(keras.layers.Embedding):
    """`keras.layers.Embedding` that casts only the rows it gathers to the
    compute dtype.

    Under a mixed policy, Keras' `Embedding` casts the whole table to
    bfloat16 on every call. On TensorFlow this layer gathers float32 rows
    and casts those (`kbert.backend.embedding_rows`): a call's cost no
    longer grows with the vocabulary, whatever the batch.
    The same weights, values and gradients as `keras.layers.Embedding`; a
    LoRA-enabled or quantized table takes Keras' path.

    Example:
    >>> embedding = TokenEmbedding(100, 8, dtype="mixed_bfloat16")
    >>> embedding(keras.ops.array([[1, 2, 3]])).dtype
    'bfloat16'
    """

    def call(self, inputs):
        if self.lora_enabled or self.quantization_mode:
            return super().call(inputs)
        if keras.backend.standardize_dtype(inputs.dtype) not in ("int32", "int64"):
            inputs = ops.cast(inputs, "int32")
        return ops.cast(backend.embedding_rows(self.embeddings, inputs), self.compute_dtype)
