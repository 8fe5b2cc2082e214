"""Extractive question answering (BERT §4.2): find the answer's span in a context.

The text handling (offsets, windows, answer positions, span decoding) is
`kbert.text.question_answering`, the same TensorFlow ops in `fit`, `answer`
and the exported model.
"""

import keras

from kbert.aliases import also_named
from kbert import families, text
from kbert.layers import Dropout
from kbert.models import task_answers
from kbert.models.bert_backbone import head_initializer
from kbert.models.bert_classifier import prediction_head, prediction_head_table
from kbert.models.task import Task
from kbert.families.tables import T


@keras.saving.register_keras_serializable(package="kbert")
class QuestionAnswerer(Task):
    """Extractive question answering (BERT §4.2, SQuAD): a dense layer on
    each token's `sequence_output` scores it as the answer's start and end.

    Inputs are packed `[CLS] question [SEP] context [SEP]`; the outputs are
    `start_logits` and `end_logits` `[batch, length]`, over all positions
    (decoding only looks at the context's tokens). A context too long for
    one sequence is read in overlapping windows, `stride` tokens apart, and
    the best span of all windows is the answer.

    `fit` on raw text makes the windows once and shuffles all of them
    together each epoch, as transformers' `run_qa` does with its features,
    so it holds them in memory, twice (a cache and the shuffle's buffer):
    a few KB a window (SQuAD's 88,000 training questions in windows of 384
    tokens: under 1 GB). Larger sets can be fed as token ids from a
    `tf.data.Dataset`.

    Args:
        backbone: a `kbert.BertBackbone`.
        preprocessor: a `kbert.BertQuestionAnswererPreprocessor` (or a
            `kbert.BertPreprocessor`, read as one; its `sequence_length` is
            the window's length, question included), so that `fit` and
            `predict` take raw text; `None` for a model fed token ids.
        stride: how many tokens each window moves along the context
            (BERT's `doc_stride`: 128, with sequence length 384).
        max_question_length: questions are cut to this many tokens.
        max_answer_length: the longest answer decoded, in tokens.
        num_candidates: how many best starts and best ends of each window
            are paired when decoding (BERT's `n_best_size`).
        null_score_margin: `None` (SQuAD 1.1: every question has an answer
            in its context) or a number (SQuAD 2.0): the answer is "" where
            the null score ([CLS] as start and end) beats the best span's
            score by more than this margin (BERT's
            `null_score_diff_threshold`: 0.0, tuned on a dev set). Train
            unanswerable questions with an empty answer text.

    Example:
    >>> model = kbert.BertQuestionAnswerer.from_preset("base", sequence_length=384)
    >>> context = "Jane Austen wrote Pride and Prejudice in 1813."
    >>> model.fit((["Who wrote it?"], [context]), [{"text": "Jane Austen", "answer_start": 0}])
    >>> model.answer(["When was it written?"], [context])
    [{'answer': '1813', 'start': 41, 'end': 45, 'score': 9.1}]
    """

    preprocessor_cls = text.ByName("BertQuestionAnswererPreprocessor")
    reads_pooler = False  # as transformers' BertForQuestionAnswering, which has none

    def __init__(self, backbone, preprocessor=None, stride=128, max_question_length=64, max_answer_length=30,
                 num_candidates=20, null_score_margin=None, input_padding="sequence_length", length_groups=0,
                 **kwargs):
        if stride < 1:
            raise ValueError(f"stride={stride}: windows must move at least 1 token; BERT uses 128.")
        specials = preprocessor.packer.special_tokens(2) if preprocessor is not None else 0
        if preprocessor is not None and preprocessor.sequence_length - specials - max_question_length < 1:
            raise ValueError(
                f"sequence_length={preprocessor.sequence_length} leaves no room for the context after a question "
                f"of up to max_question_length={max_question_length} tokens and {specials} special tokens; "
                "use a longer sequence_length or a smaller max_question_length."
            )
        inputs = self.backbone_inputs(backbone)
        features = backbone(inputs)["sequence_output"]
        if families.get(backbone.family).prediction_head:
            # ModernBertForQuestionAnswering: head -> dropout -> its output layer.
            features = Dropout(backbone.dropout, name="span_dropout")(prediction_head(backbone, features))
        span_logits = keras.layers.Dense(
            2, kernel_initializer=head_initializer(), dtype="float32", name="span_logits"
        )(features)
        outputs = {"start_logits": span_logits[..., 0], "end_logits": span_logits[..., 1]}
        # Its own input pipeline (strided windows, batched as windows): no
        # sorting by length, and windows padded to sequence_length.
        super().__init__(inputs=inputs, outputs=outputs, backbone=backbone, preprocessor=preprocessor,
                         input_padding=input_padding, length_groups=length_groups, **kwargs)
        self.stride = stride
        self.max_question_length = max_question_length
        self.max_answer_length = max_answer_length
        self.num_candidates = num_candidates
        self.null_score_margin = None if null_score_margin is None else float(null_score_margin)

    def task_config(self):
        return {
            "stride": self.stride,
            "max_question_length": self.max_question_length,
            "max_answer_length": self.max_answer_length,
            "num_candidates": self.num_candidates,
            "null_score_margin": self.null_score_margin,
        }

    def default_loss(self):
        return {
            "start_logits": keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            "end_logits": keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        }

    def default_metrics(self):
        return {
            "start_logits": [keras.metrics.SparseCategoricalAccuracy(name="accuracy")],
            "end_logits": [keras.metrics.SparseCategoricalAccuracy(name="accuracy")],
        }

    def compile(self, optimizer="auto", loss="auto", metrics="auto", **kwargs):
        if loss == "auto":
            # BERT §4.2: the loss is the mean of the start and end losses.
            kwargs.setdefault("loss_weights", {"start_logits": 0.5, "end_logits": 0.5})
        super().compile(optimizer=optimizer, loss=loss, metrics=metrics, **kwargs)

    # Hugging Face's BertForQuestionAnswering.
    def hf_head_table(self):
        dense, name = self.get_layer("span_logits"), families.get(self.backbone.family).question_answerer_output
        return [*prediction_head_table(self), (dense.kernel, f"{name}.weight", T), (dense.bias, f"{name}.bias", None)]

    def answer(self, questions, contexts, batch_size=32):
        """Answers each question from its context, as the exported model does.

        Returns:
            A list of `{"answer", "start", "end", "score", "null_score"}` per
            example: the answer as written in the context
            (`context[start:end]`, character offsets; "" where the context
            has no token, or, with `null_score_margin`, where the question
            has no answer there), its score (the start and end logits' sum)
            and the null score ([CLS]'s).
        """
        inputs = self.preprocessor_cls.check_raw((questions, contexts))
        rows = task_answers.answers_in_slices(self, inputs, batch_size=batch_size)
        return [{"answer": r["answer"], "start": int(r["start"]), "end": int(r["end"]), "score": float(r["score"]),
                 "null_score": float(r["null_score"])} for r in rows]


# The name of the first releases (kbert.aliases).
BertQuestionAnswerer = also_named(QuestionAnswerer, "BertQuestionAnswerer")
