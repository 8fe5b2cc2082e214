import numbers

import keras
import tensorflow as tf

from kbert.layers import Dropout
from kbert.models.bert_backbone import head_initializer
from kbert.models.task import Task
from kbert.models.task_answers import serving_text
from kbert.presets.huggingface import T
from kbert.text.pipeline import class_ids


@keras.saving.register_keras_serializable(package="kbert")
class BertClassifier(Task):
    """Text or sentence-pair classification (BERT §4.1): the pooled [CLS]
    output, dropout, and one dense layer giving `num_classes` logits.

    Args:
        backbone: a `kbert.BertBackbone`.
        num_classes: number of classes.
        preprocessor: a `kbert.BertPreprocessor`, so that `fit`, `evaluate`
            and `predict` take raw strings (or `(texts_a, texts_b)` pairs);
            `None` for a model fed token ids.
        dropout: dropout rate before the output layer; `None`: the
            backbone's rate (as transformers' `classifier_dropout=None`), so
            that `from_preset(..., dropout=0.0)` turns off all dropout.
        class_names: optional names of the classes, in label order (used by
            exported models to answer with a label).

    Example:
    >>> model = kbert.BertClassifier.from_preset("base", num_classes=2)
    >>> model.fit(["a fine film", "a dull film"], [1, 0], epochs=2)
    >>> model.predict(["what a film"])  # logits [1, 2]
    """

    # What the head classifies: the pooled [CLS] vector; the token classifier
    # classifies every position of the sequence output with the same head.
    classified_output = "pooled_output"

    def __init__(self, backbone, num_classes, preprocessor=None, dropout=None, class_names=None, **kwargs):
        if isinstance(num_classes, bool) or not isinstance(num_classes, numbers.Integral) or num_classes < 1:
            raise ValueError(
                f"num_classes={num_classes!r} ({type(num_classes).__name__}): give the number of classes "
                "as a positive int, e.g. num_classes=2."
            )
        num_classes = int(num_classes)
        if class_names is not None and len(class_names) != num_classes:
            raise ValueError(f"Got {len(class_names)} class_names for num_classes={num_classes}.")
        inputs = backbone.input
        if self.classified_output == "pooled_output":
            features = backbone.pooled_output_model()(inputs)
        else:
            features = backbone(inputs)[self.classified_output]
        x = Dropout(backbone.dropout if dropout is None else dropout, name="classifier_dropout")(features)
        logits = keras.layers.Dense(
            num_classes, kernel_initializer=head_initializer(), dtype="float32", name="logits"
        )(x)
        super().__init__(inputs=inputs, outputs=logits, **kwargs)
        self._finish_init(backbone, preprocessor)
        self.num_classes = num_classes
        self.dropout = dropout
        self.class_names = list(class_names) if class_names is not None else None

    takes_pairs = True

    def _class_names(self):
        return self.class_names or [str(i) for i in range(self.num_classes)]

    def _answering(self, pairs=False, top_k=5):
        preprocessor = self._batch_preprocessor()
        names = tf.constant(self._class_names())

        def preprocess(*texts):
            return preprocessor(texts if len(texts) > 1 else texts[0]), None

        def postprocess(logits, _):
            logits = tf.cast(logits, tf.float32)
            label_id = tf.argmax(logits, axis=-1, output_type=tf.int32)
            return {"logits": logits, "probabilities": tf.nn.softmax(logits, axis=-1), "label_id": label_id,
                    "label": tf.gather(names, label_id)}

        return preprocess, postprocess, [serving_text(), serving_text("text_pair")][:2 if pairs else 1], None

    def _label_ids(self, y):
        """Class ids, checked against num_classes before any training."""
        return class_ids(super()._label_ids(y), self.num_classes)

    def task_config(self):
        return {"num_classes": self.num_classes, "dropout": self.dropout, "class_names": self.class_names}

    def default_loss(self):
        return keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    def default_metrics(self):
        return [keras.metrics.SparseCategoricalAccuracy(name="accuracy")]

    # Hugging Face's BertForSequenceClassification (and BertForTokenClassification).
    def hf_head_table(self):
        dense = self.get_layer("logits")
        return [(dense.kernel, "classifier.weight", T), (dense.bias, "classifier.bias", None)]

    @classmethod
    def hf_head_config(cls, hf_config, tensors):
        if "classifier.weight" not in tensors:
            return {}
        config = {"num_classes": tensors["classifier.weight"].shape[0]}
        id2label = hf_config.get("id2label")
        if id2label and len(id2label) == config["num_classes"]:
            names = [id2label[str(i)] if str(i) in id2label else id2label[i] for i in range(config["num_classes"])]
            if names != [f"LABEL_{i}" for i in range(config["num_classes"])]:
                config["class_names"] = names
        return config
