import numbers

import keras

from kbert import text
from kbert.layers import Dropout
from kbert.models.bert_backbone import head_initializer
from kbert.models import task_answers
from kbert.models.task import Task
from kbert.presets.huggingface import T


@keras.saving.register_keras_serializable(package="kbert")
class BertClassifier(Task):
    """Text or sentence-pair classification (BERT §4.1): the pooled [CLS]
    output, dropout, and one dense layer giving `num_classes` logits.

    Args:
        backbone: a `kbert.BertBackbone`.
        num_classes: number of classes.
        preprocessor: a `kbert.BertClassifierPreprocessor` (or a
            `kbert.BertPreprocessor`, read as one), so that `fit`,
            `evaluate`, `predict` and `classify` take raw strings (or
            `(texts_a, texts_b)` pairs); `None` for a model fed token ids.
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
    preprocessor_class = text.ByName("BertClassifierPreprocessor")
    takes_pairs = True

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
        super().__init__(inputs=inputs, outputs=logits, backbone=backbone, preprocessor=preprocessor, **kwargs)
        self.num_classes = num_classes
        self.dropout = dropout
        self.class_names = list(class_names) if class_names is not None else None

    def classify(self, texts, batch_size=32):
        """Each text's label and class probabilities, as the exported model
        gives them.

        Args:
            texts: a list of texts, or a tuple `(texts_a, texts_b)` of
                two lists for sentence pairs.

        Returns:
            A list of `{"label", "label_id", "probabilities"}` per text:
            the most likely class's name (its id as a str without
            `class_names`) and every class's probability.
        """
        pairs = isinstance(texts, tuple)
        rows = task_answers.answers_in_slices(self, texts if pairs else (texts,), batch_size=batch_size, pairs=pairs)
        return [{"label": r["label"], "label_id": int(r["label_id"]), "probabilities": r["probabilities"].tolist()}
                for r in rows]

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
