import math
import numbers

import keras
import numpy as np

from kbert.aliases import also_named
from kbert import families, text
from kbert.families import tables
from kbert.layers import Dropout, PredictionHead
from kbert.models.bert_backbone import head_initializer
from kbert.models import task_answers
from kbert.models.task import Task
from kbert.text.classifier_labels import MULTI_LABEL, PROBLEM_TYPES, REGRESSION, SCORE_ACTIVATIONS, SINGLE_LABEL


@keras.saving.register_keras_serializable(package="kbert")
class TextClassifier(Task):
    """Text or sentence-pair classification (BERT §4.1): the pooled [CLS]
    output, dropout, and one dense layer giving `num_classes` logits; also
    multi-label classification and regression (Hugging Face's
    `problem_type`), e.g. STS-B similarity scores of sentence pairs.

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
        problem_type: as Hugging Face names it:
            `"single_label_classification"` (one class id or name per text;
            softmax cross-entropy), `"multi_label_classification"`
            (multi-hot rows or lists of names per text; a sigmoid per class,
            binary cross-entropy) or `"regression"` (a number per text, the
            logit is the score; mean squared error). `None`: regression
            where `num_classes=1` (as transformers), else single-label.
        threshold: multi-label: the probability a class must exceed to be
            among a text's `labels` (in `classify` and the exported model).
        score_activation: regression: `None` (the logit is the score),
            `"sigmoid"` or `"tanh"` on the logit, as a sentence-transformers
            `CrossEncoder`'s activation (read from its folder). With
            `"sigmoid"`, scores are trained as probabilities: labels in
            [0, 1], binary cross-entropy on the logit (pointwise BCE).

    Example:
    >>> model = kbert.BertClassifier.from_preset("base", num_classes=2)
    >>> model.fit(["a fine film", "a dull film"], [1, 0], epochs=2)
    >>> model.predict(["what a film"])  # logits [1, 2]
    >>> scorer = kbert.BertClassifier.from_preset("base", num_classes=1)  # regression
    >>> scorer.fit((["a man plays"], ["a man is playing"]), [4.8])
    >>> scorer.scores((["a cat sits"], ["a dog runs"]))
    >>> reranker = kbert.BertClassifier.from_preset("hf://cross-encoder/ms-marco-MiniLM-L6-v2")
    >>> reranker.rank("who wrote Emma?", ["Emma is by Jane Austen.", "Paris is in France."])
    [{'corpus_id': 0, 'score': 0.99}, {'corpus_id': 1, 'score': 0.0001}]
    """

    # The preset's settings of its head, dropped where `from_preset` is given
    # another `num_classes` (a new head).
    head_keys = ("class_names", "problem_type", "score_activation")
    preprocessor_cls = text.ByName("BertClassifierPreprocessor")
    takes_pairs = True

    def __init__(self, backbone, num_classes, preprocessor=None, dropout=None, class_names=None, problem_type=None,
                 threshold=0.5, score_activation=None, **kwargs):
        num_classes, class_names = check_classes(num_classes, class_names)
        if problem_type is None:
            problem_type = REGRESSION if num_classes == 1 else SINGLE_LABEL
        if problem_type not in PROBLEM_TYPES:
            raise ValueError(f"Unknown problem_type={problem_type!r}. Known: {', '.join(PROBLEM_TYPES)}.")
        _check_threshold(threshold)
        if score_activation not in SCORE_ACTIVATIONS:
            raise ValueError(f"Unknown score_activation={score_activation!r}. Known: None, \"sigmoid\", \"tanh\".")
        if score_activation is not None and problem_type != REGRESSION:
            raise ValueError(f"score_activation={score_activation!r} is for regression (scores); this classifier's "
                             f"problem_type is {problem_type!r}.")
        inputs = self.backbone_inputs(backbone)
        family_head = families.get(backbone.family).classifier_head
        # A family with a head of its own (RoBERTa, ELECTRA, DistilBERT) reads
        # the first token's vector, not BERT's pooler.
        features = backbone.pooled_output_model(pool=family_head is None)(inputs)
        logits = classifier_logits(backbone, features, num_classes, dropout, family_head)
        super().__init__(inputs=inputs, outputs=logits, backbone=backbone, preprocessor=preprocessor, **kwargs)
        self.num_classes = num_classes
        self.dropout = dropout
        self.class_names = class_names
        self.problem_type = problem_type
        self.threshold = float(threshold)
        self.score_activation = score_activation

    def classify(self, texts, batch_size=32, threshold=None):
        """Each text's label(s) and class probabilities, as the exported
        model gives them.

        Args:
            texts: a list of texts, or a tuple `(texts_a, texts_b)` of
                two lists for sentence pairs.
            threshold: multi-label: this call's threshold in place of the
                model's `threshold`.

        Returns:
            A list per text of `{"label", "label_id", "probabilities"}`: the
            most likely class's name (its id as a str without
            `class_names`) and every class's probability; multi-label,
            `{"labels", "probabilities"}`: the names of the classes over the
            threshold; regression, `{"score"}` (see `scores`).
        """
        head = self.head_settings()
        if threshold is not None:
            head["threshold"] = float(_check_threshold(threshold))
        rows = self._answers(texts, batch_size, head)
        if self.problem_type == REGRESSION:
            return [{"score": r["score"].item() if "score" in r else r["scores"].tolist()} for r in rows]
        if self.problem_type == MULTI_LABEL:
            return [{"labels": [label for label in r["labels"] if label], "probabilities": r["probabilities"].tolist()}
                    for r in rows]
        return [{"label": r["label"], "label_id": int(r["label_id"]), "probabilities": r["probabilities"].tolist()}
                for r in rows]

    def scores(self, texts, batch_size=32):
        """A regression model's score of each text (or pair), as the exported
        model gives it: a float32 array `[texts]` (`[texts, num_classes]`
        for several scores)."""
        if self.problem_type != REGRESSION:
            raise ValueError(f"scores is for regression models; this one is {self.problem_type}: use classify.")
        rows = self._answers(texts, batch_size)
        return np.array([r["score"] if "score" in r else r["scores"] for r in rows], "float32")

    def _answers(self, texts, batch_size, head=None):
        """What the exported model answers for texts, or `(texts_a, texts_b)` pairs."""
        pairs = isinstance(texts, tuple)
        return task_answers.answers_in_slices(self, texts if pairs else (texts,), batch_size=batch_size, pairs=pairs,
                                              head=head)

    def rank(self, query, documents, top_k=None, batch_size=32):
        """The documents ordered by their score for `query` (a cross-encoder's
        reranking, as sentence-transformers' `CrossEncoder.rank`): a list of
        `{"corpus_id", "score"}`, best first (ties in the documents' order),
        the first `top_k` (all by default)."""
        if not isinstance(query, str):
            raise ValueError(f"rank takes one query, a str; got {type(query).__name__}. Rank each query alone.")
        if self.num_classes != 1:
            raise ValueError(f"rank needs one score per pair; this classifier has num_classes={self.num_classes}.")
        documents = list(documents)
        scores = self.scores(([query] * len(documents), documents), batch_size=batch_size) if documents else []
        order = np.argsort(-np.asarray(scores), kind="stable")[:top_k]
        return [{"corpus_id": int(i), "score": float(scores[i])} for i in order]

    def task_config(self):
        return {"num_classes": self.num_classes, "dropout": self.dropout, "class_names": self.class_names,
                "problem_type": self.problem_type, "threshold": self.threshold,
                "score_activation": self.score_activation}

    def default_loss(self):
        if self.score_activation == "sigmoid":  # a cross-encoder's pointwise loss, on the logits
            return keras.losses.BinaryCrossentropy(from_logits=True)
        if self.score_activation is not None:
            raise ValueError(f"A classifier with score_activation={self.score_activation!r} has no default loss: "
                             "its scores are the activation of its logit. compile(loss=...) with a loss on the "
                             "logit, or use score_activation=\"sigmoid\" (BCE) or None (MSE).")
        if self.problem_type == REGRESSION:
            return keras.losses.MeanSquaredError()
        if self.problem_type == MULTI_LABEL:
            return keras.losses.BinaryCrossentropy(from_logits=True)
        return keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    def default_metrics(self):
        if self.problem_type == REGRESSION:
            # (On the logit: a score through an activation has none.)
            return [] if self.score_activation else [keras.metrics.MeanAbsoluteError(name="mae")]
        if self.problem_type == MULTI_LABEL:
            # On logits: over the threshold's logit is over the threshold.
            logit = math.log(self.threshold / (1 - self.threshold))
            return [keras.metrics.BinaryAccuracy(name="accuracy", threshold=logit)]
        return [keras.metrics.SparseCategoricalAccuracy(name="accuracy")]

    # transformers' BertForSequenceClassification, RobertaForSequenceClassification, ...
    def hf_head_table(self):
        return families.get(self.backbone.family).classifier_table(self)

    @classmethod
    def hf_head_config(cls, preset, tensors):
        family = families.get(preset.backbone_config.get("family", "bert"))
        config = hf_labels(preset, tensors, family.classifier_output)
        if not config:
            return {}
        if preset.config.get("problem_type") in PROBLEM_TYPES:
            config["problem_type"] = preset.config["problem_type"]
        if config["num_classes"] == 1:
            config.update(preset.cross_encoder)
        return config

    @property
    def reads_pooler(self):
        # RoBERTa's, DistilBERT's and ELECTRA's heads have a dense layer of their own; ModernBERT has no pooler.
        backbone = getattr(self, "backbone", None)
        return backbone is None or (families.get(backbone.family).classifier_head is None
                                    and backbone.pooled_dense is not None)


# The name of the first releases (kbert.aliases).
BertClassifier = also_named(TextClassifier, "BertClassifier")


def _check_threshold(threshold):
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not 0 < threshold < 1:
        raise ValueError(f"threshold={threshold!r}: a probability strictly between 0 and 1, e.g. 0.5.")
    return threshold


def check_classes(num_classes, class_names):
    """`(num_classes, class_names)` of a classifier of texts or of tokens:
    a positive int, and a list of as many distinct names (or None);
    refused otherwise, saying what to pass."""
    if isinstance(num_classes, bool) or not isinstance(num_classes, numbers.Integral) or num_classes < 1:
        raise ValueError(
            f"num_classes={num_classes!r} ({type(num_classes).__name__}): give the number of classes "
            "as a positive int, e.g. num_classes=2."
        )
    num_classes = int(num_classes)
    if class_names is None:
        return num_classes, None
    if len(class_names) != num_classes:
        raise ValueError(f"Got {len(class_names)} class_names for num_classes={num_classes}.")
    repeated = [n for i, n in enumerate(class_names) if n in class_names[:i]]
    if repeated:
        # A label is looked up by its name: a repeated one would map to
        # one class only, and the other would never be trained.
        raise ValueError(f"class_names={list(class_names)!r} names {repeated[0]!r} more than once; "
                         "give each class its own name.")
    return num_classes, list(class_names)


def classifier_logits(backbone, features, num_classes, dropout=None, family_head=None):
    """The classification head on `features` (a pooled vector, or every
    token's): dropout and a dense layer giving `num_classes` float32 logits,
    after the family's own dense layer where it has one (`family_head`, its
    `CLASSIFIER_HEAD`: RoBERTa's, ELECTRA's, DistilBERT's) and after the
    backbone's prediction head where the family reads features through one
    (its `prediction_head`: ModernBERT's). `dropout`: the
    rate, `None` for the backbone's (as transformers' `classifier_dropout=None`).
    The layers' names are those the Hugging Face tables read (`logits`,
    `classifier_dense`)."""
    rate = backbone.dropout if dropout is None else dropout
    features = prediction_head(backbone, features)
    if family_head is not None:
        if family_head["dropout_first"]:
            features = Dropout(rate, name="classifier_dense_dropout")(features)
        features = keras.layers.Dense(backbone.hidden_dim, activation=family_head["activation"],
                                      kernel_initializer=head_initializer(), dtype="float32",
                                      name="classifier_dense")(features)
    features = Dropout(rate, name="classifier_dropout")(features)
    return keras.layers.Dense(num_classes, kernel_initializer=head_initializer(), dtype="float32",
                              name="logits")(features)


def prediction_head(backbone, features):
    """`features` through the backbone's prediction head (`PredictionHead`,
    named `prediction_head`) where its family reads every task's features
    through one (its `prediction_head`: ModernBERT's `head`), else as they are."""
    if not families.get(backbone.family).prediction_head:
        return features
    return PredictionHead(**backbone.prediction_head_arguments(), kernel_initializer=head_initializer(),
                          dtype="float32", name="prediction_head")(features)


def prediction_head_table(model):
    """The checkpoint rows of `model`'s prediction head (`prediction_head`), none where its family has none."""
    name = families.get(model.backbone.family).prediction_head
    return tables.prediction_head(model.get_layer("prediction_head"), name) if name else []


def hf_labels(preset, tensors, output):
    """`{"num_classes", "class_names"}` of a Hugging Face checkpoint whose
    output layer is `output` (`"classifier"`, ...), read from its weights and
    its `id2label` (transformers' unnamed `LABEL_0`, ... read as no names);
    `{}` where the checkpoint has no such layer."""
    if output + ".weight" not in tensors:
        return {}
    config = {"num_classes": tensors[output + ".weight"].shape[0]}
    id2label = preset.config.get("id2label")
    if id2label and len(id2label) == config["num_classes"]:
        names = [id2label[str(i)] if str(i) in id2label else id2label[i] for i in range(config["num_classes"])]
        if names != [f"LABEL_{i}" for i in range(config["num_classes"])]:
            config["class_names"] = names
    return config
