"""Each task's preprocessor: how its raw input (texts, pairs, words, questions
and contexts) becomes features, labels and weights, and how its answers are
read off the model's outputs. Every step is TensorFlow ops, shared by `fit`,
`evaluate`, `predict`, the task's helpers and the exported model.

A preprocessor takes the task's settings as `head` (the task model's
`head_settings()`: class names, a question answerer's stride, ...), so the
same preprocessor serves any model it is given to."""

import re

import keras
import numpy as np

from kbert.aliases import also_named
from kbert.text import classifier_labels, pipeline
from kbert.text import question_answering as qa
from kbert.text import token_classification as tc
from kbert.text.preprocessor import BertPreprocessor, serving_text
from kbert.text.tokenizer_base import as_valid_utf8
from kbert.tf_if_present import tf


@keras.saving.register_keras_serializable(package="kbert")
class TextClassifierPreprocessor(BertPreprocessor):
    """`BertPreprocessor` for `BertClassifier`: texts or pairs of texts in;
    labels as the model's `problem_type` takes them (`kbert.text.
    classifier_labels`): class ids or names of its `class_names`, multi-hot
    rows or lists of names, or scores; answers are logits, probabilities and
    the label(s), or the score.

    Example:
    >>> preprocessor = kbert.BertClassifierPreprocessor.from_preset("base", sequence_length=128)
    >>> model = kbert.BertClassifier.from_preset("base", num_classes=2, preprocessor=preprocessor)
    """

    def label_ids(self, y, head=None):
        """Labels as the model's problem type takes them (class ids, with
        names looked up in `class_names`; multi-hot rows; scores), checked
        before any training."""
        return classifier_labels.label_ids(y, head or {})

    def dataset_labels(self, head=None):
        return classifier_labels.dataset_labels(head or {})

    def answering(self, head=None, pad_to=None, pairs=False, top_k=5):
        preprocessor = self.with_padding(pad_to or self.packer.pad_to)

        def preprocess(*texts):
            return preprocessor(texts if len(texts) > 1 else texts[0]), None

        def postprocess(logits, _):
            return classifier_labels.answers(logits, head)

        return preprocess, postprocess, [serving_text(), serving_text("text_pair")][:2 if pairs else 1], None


# The name of the first releases (kbert.aliases).
BertClassifierPreprocessor = also_named(TextClassifierPreprocessor, "BertClassifierPreprocessor")


@keras.saving.register_keras_serializable(package="kbert")
class TokenClassifierPreprocessor(BertPreprocessor):
    """`BertPreprocessor` for `BertTokenClassifier`: sentences as lists of
    words (CoNLL style) with one tag per word, an id or a name of
    `class_names`, or a batched `tf.data.Dataset` of ragged `(words,
    tag_ids)`. A word's tag goes on its first WordPiece; other pieces,
    special tokens and padding get weight 0. Answers are each word's tag and
    the text's BIO entities."""

    batched_rank = 2  # [sentences, (words)]

    def is_raw(self, x):
        if isinstance(x, tf.data.Dataset):
            spec = x.element_spec[0] if isinstance(x.element_spec, tuple) else x.element_spec
            return isinstance(spec, tf.RaggedTensorSpec) and spec.dtype == tf.string
        return super().is_raw(x)

    def examples(self, x, y=None, sample_weight=None, head=None):
        """`(words[, tag ids][, sample weights])`: words a ragged
        `[sentences, (words)]` tensor (tagged texts are split where BERT's
        pre-tokenizer splits them); or `(texts,)`, untagged texts as a 1-D
        tensor, tokenized whole as `answering` tokenizes them
        (`tc.pack_text`)."""
        if all(isinstance(sentence, (str, bytes)) for sentence in x):
            texts = as_valid_utf8(tf.constant(list(x)))  # bytes may be any
            if y is None and sample_weight is None:
                return (texts,)
            words = tc.text_words(self, texts)[0]
        else:
            word_lists = as_word_lists(x)
            if y is not None:
                _check_words(word_lists)
            words = tf.ragged.constant(word_lists, dtype=tf.string, ragged_rank=1)
        parts = (words,)
        if y is not None:
            tag_ids = self.tag_ids(y, words.row_lengths().numpy(), head or {})
            parts += (tf.ragged.constant(tag_ids, dtype=tf.int32, ragged_rank=1),)
        if sample_weight is not None:
            parts += (tf.constant(sample_weight, tf.float32),)
        return parts

    def lengths(self, examples):
        return None  # sentences keep their order

    @staticmethod
    def tag_ids(tags, word_counts, head):
        names = head.get("class_names") or []
        index = {name: i for i, name in enumerate(names)}
        if len(tags) != len(word_counts):
            raise ValueError(f"Got {len(word_counts)} sentences but {len(tags)} tag lists; give one per sentence.")
        ids = []
        for i, (sentence_tags, count) in enumerate(zip(tags, word_counts)):
            if len(sentence_tags) != count:
                raise ValueError(f"Sentence {i} has {count} words but {len(sentence_tags)} tags; give one tag per word.")
            for tag in sentence_tags:
                if isinstance(tag, str) and tag not in index:
                    raise ValueError(
                        f'Unknown tag "{tag}" in sentence {i}. '
                        + (f"Known tags (class_names): {', '.join(names)}."
                           if names else "Build the model with class_names to give tags by name.")
                    )
            sentence_ids = [index[t] if isinstance(t, str) else int(t) for t in sentence_tags]
            if any(not 0 <= t < head["num_classes"] for t in sentence_ids):
                raise ValueError(f"Sentence {i} has tag ids {sentence_ids}; ids must be in [0, {head['num_classes']}).")
            ids.append(sentence_ids)
        return ids

    def batch_function(self, head=None, pad_to=None, dataset_spec=None, labeled=False):
        preprocessor = self.with_padding(pad_to or self.packer.pad_to)

        def batch(words, tags=None, sample_weight=None):
            if not isinstance(words, tf.RaggedTensor):  # texts (`examples`)
                return (tc.pack_text(preprocessor, words)[0],)
            features, first_pieces = tc.pack_words(preprocessor, words)
            if tags is None:
                return (features,)
            labels, weights = tc.token_labels(first_pieces, tags, tf.shape(features["token_ids"]))
            if sample_weight is not None:
                weights *= sample_weight[:, None]
            return features, labels, weights

        return batch

    def answering(self, head=None, pad_to=None, pairs=False, top_k=5):
        preprocessor = self.with_padding(pad_to or self.packer.pad_to)
        names = classifier_labels.class_names(head)

        def preprocess(text):
            text = as_valid_utf8(text)  # a request may carry any bytes
            features, first_pieces, words, starts, ends = tc.pack_text(preprocessor, text)
            return features, (text, words, starts, ends, first_pieces)

        def postprocess(logits, context):
            text, words, starts, ends, first_pieces = context
            tags = tc.word_tags(logits, first_pieces, names)
            entities = tc.text_entities(text, tc.bio_entities(tags["label"], tags["score"]), starts, ends)
            outputs = {"words": words, **tags, **entities}
            return {k: v.to_tensor(TAG_FILLS.get(k, "" if v.dtype == tf.string else 0)) for k, v in outputs.items()}

        return preprocess, postprocess, [serving_text()], TAG_FILLS


# The name of the first releases (kbert.aliases).
BertTokenClassifierPreprocessor = also_named(TokenClassifierPreprocessor, "BertTokenClassifierPreprocessor")


def _check_words(sentences):
    """Refuses, for training, a sentence without words and a word without
    characters: neither gets a token to carry its tag, so its tag would be
    dropped without a word."""
    for i, words in enumerate(sentences):
        if not len(words):
            raise ValueError(f"Sentence {i} has no words (and so no tags to learn); drop it from the training data.")
        for j, word in enumerate(words):
            if not str(word.decode("utf-8", "replace") if isinstance(word, bytes) else word).strip():
                raise ValueError(f"Sentence {i}, word {j} is {word!r}: a word needs characters to get a token for its "
                                 "tag. Drop the word and its tag.")


# Padding of the served token classifier's outputs, per sentence: words and
# entities past its own.
TAG_FILLS = {"label_id": -1, "entity_start": -1, "entity_end": -1}


@keras.saving.register_keras_serializable(package="kbert")
class QuestionAnswererPreprocessor(BertPreprocessor):
    """`BertPreprocessor` for `BertQuestionAnswerer`: `(questions, contexts)`
    in, each context cut into windows `stride` tokens apart (BERT's
    `doc_stride`), packed after its question; answers as `{"text",
    "answer_start"}` dicts or `(text, start)` pairs, character offsets into
    the context. Answers are spans of the context; an empty text (SQuAD 2.0's
    unanswerable questions) trains [CLS] as the span."""

    rows_per_example = None  # a window per stride of the context

    def is_raw(self, x):
        return isinstance(x, tuple) or (isinstance(x, tf.data.Dataset) and super().is_raw(x))

    @staticmethod
    def check_raw(x):
        if not (isinstance(x, tuple) and len(x) == 2):
            raise ValueError(
                "BertQuestionAnswerer takes raw input as a tuple (questions, contexts) of two lists "
                f"of str (answers as y), or a dict of token ids; got {type(x).__name__}."
            )
        return pipeline.text_tensor(x, names=("questions", "contexts"))

    def examples(self, x, y=None, sample_weight=None, head=None):
        """`(questions, contexts[, answer starts, answer ends][, sample
        weights])`, the answers as character offsets."""
        questions, contexts = self.check_raw(x)
        parts = (questions, contexts)
        if y is not None:
            spans = _answer_chars(y, [c.decode("utf-8", "replace") for c in contexts.numpy()])
            parts += (spans[:, 0], spans[:, 1])
        if sample_weight is not None:
            parts += (np.asarray(sample_weight, "float32"),)
        return parts

    def lengths(self, examples):
        return None  # windows are cut to sequence_length

    def windows(self, questions, contexts, head, pad_to=None):
        preprocessor = self.with_padding(pad_to or self.packer.pad_to)
        return qa.windows(preprocessor, questions, contexts, head["stride"], head["max_question_length"])

    def batch_function(self, head=None, pad_to=None, dataset_spec=None, labeled=False):
        """A batch of examples as the windows their contexts need (more rows
        than examples), with each window's answer positions and weights."""

        def batch(questions, contexts, *rest):
            windowed = self.windows(questions, contexts, head, pad_to)
            if not rest:
                return (windowed["features"],)
            starts, ends = qa.answer_positions(windowed, contexts, rest[0], rest[1])
            weights = tf.ones_like(starts, tf.float32)
            if len(rest) == 3:
                weights = tf.gather(rest[2], windowed["example"])
            return (windowed["features"], {"start_logits": starts, "end_logits": ends},
                    {"start_logits": weights, "end_logits": weights})

        return batch

    def answering(self, head=None, pad_to=None, pairs=False, top_k=5):
        def preprocess(question, context):
            windowed = self.windows(question, context, head, pad_to)
            return windowed["features"], (context, windowed)

        def postprocess(outputs, context):
            contexts, windowed = context
            return qa.answers(windowed, contexts, outputs["start_logits"], outputs["end_logits"],
                              head["max_answer_length"], head["num_candidates"], head.get("null_score_margin"))

        return preprocess, postprocess, [serving_text("question"), serving_text("context")], None


# The name of the first releases (kbert.aliases).
BertQuestionAnswererPreprocessor = also_named(QuestionAnswererPreprocessor, "BertQuestionAnswererPreprocessor")


@keras.saving.register_keras_serializable(package="kbert")
class TextEmbedderPreprocessor(BertPreprocessor):
    """`BertPreprocessor` for `BertTextEmbedder`: texts in, with the
    embedder's prompt put before each; where the pooling leaves the prompt
    out (`include_prompt=False`), a `pooling_mask` without the prompt's
    tokens. The answer is the embedding."""

    def prompt_length(self, prompt):
        """The tokens sentence-transformers leaves out of the pooling for
        `prompt`: [CLS] and the prompt's pieces, the prompt tokenized alone
        and cut to the sequence length, less its [SEP]."""
        pieces = int(self.tokenizer(tf.constant([prompt])).row_lengths()[0])
        return min(1 + pieces, self.sequence_length - 1)

    def features(self, texts, head, skip=0, pad_to=None):
        """The model's features of `texts`; with `include_prompt=False`, a
        `pooling_mask`: the padding mask less the first `skip` tokens (a
        prompt's, see `prompt_length`)."""
        features = self.with_padding(pad_to or self.packer.pad_to)(texts)
        if head.get("include_prompt", True):
            return features
        mask = features["padding_mask"]
        mask = mask * tf.cast(tf.range(tf.shape(mask)[1]) >= skip, mask.dtype)[None, :]
        return {**features, "pooling_mask": mask}

    def batch_function(self, head=None, pad_to=None, dataset_spec=None, labeled=False):
        """Texts (with their prompt, if any, in them already) to features."""

        def batch(texts, *rest):
            return (self.features(texts, head, pad_to=pad_to), *rest)

        return batch

    def prompted_function(self, head, pad_to=None):
        """`(texts, skip)` to features, the first `skip` tokens left out of
        the pooling: `skip` a scalar tensor, an argument so that one trace
        serves every prompt."""
        return lambda texts, skip: self.features(texts, head, skip, pad_to)

    def answering(self, head=None, pad_to=None, pairs=False, top_k=5):
        text = head.get("prompt") or ""
        skip = self.prompt_length(text) if text and not head.get("include_prompt", True) else 0

        def preprocess(texts):
            return self.features(tf.strings.join([text, texts]) if text else texts, head, skip, pad_to), None

        def postprocess(embedding, _):
            return {"embedding": tf.cast(embedding, tf.float32)[:, :head.get("truncate_dim")]}

        return preprocess, postprocess, [serving_text()], None


# The name of the first releases (kbert.aliases).
BertTextEmbedderPreprocessor = also_named(TextEmbedderPreprocessor, "BertTextEmbedderPreprocessor")


def _answer_chars(answers, contexts):
    """Each answer's (start, end) characters, checked against its context:
    the text must be at `answer_start` (whitespace compared as SQuAD's
    evaluation does, runs of it as one space). An unanswerable question
    (SQuAD 2.0: text "", or empty lists) is the empty span (0, 0), which
    trains the [CLS] token as its start and end (BERT's SQuAD 2.0 recipe)."""
    if len(answers) != len(contexts):
        raise ValueError(f"Got {len(answers)} answers for {len(contexts)} contexts; pass one per example.")
    spans = []
    for i, (answer, context) in enumerate(zip(answers, contexts)):
        text, start = _answer_text_and_start(i, answer)
        if text != "" and not text.strip():
            raise ValueError(f"Answer {i} ({answer!r}) is blank: give the answer's text, or \"\" for a question "
                             "its context does not answer.")
        if text == "":
            spans.append((0, 0))
            continue
        start = int(start)
        if not 0 <= start < start + len(text) <= len(context):
            raise ValueError(
                f"Answer {i} ({answer!r}) lies outside its context of {len(context)} characters; "
                "answer_start must be the answer's character offset in the context."
            )
        # Whitespace as SQuAD's evaluation compares it: any run of it equal.
        at = re.compile(r"\s*(" + r"\s+".join(map(re.escape, text.split())) + ")").match(context, start)
        if at is None:
            found = context.find(text)
            hint = f" The text is at {found}." if found >= 0 else " The text is nowhere in the context."
            raise ValueError(
                f"Answer {i} ({answer!r}): its text is not at answer_start={start} of its context, which "
                f"reads {context[start:start + len(text)]!r} there.{hint} answer_start must be the character "
                "offset of the answer's text in the context."
            )
        start, end = at.span(1)
        spans.append((start, end))
    return np.asarray(spans, "int32").reshape(-1, 2)


def _answer_text_and_start(i, answer):
    """An answer's text and start from a `{"text", "answer_start"}` dict (the
    Hugging Face datasets' lists of them too: the first is trained, none is
    unanswerable) or a `(text, start)` pair."""
    text, start = (answer["text"], answer["answer_start"]) if isinstance(answer, dict) else answer
    if isinstance(text, (list, tuple)):
        starts = list(start) if isinstance(start, (list, tuple, np.ndarray)) else [start]
        if len(text) != len(starts):
            raise ValueError(f"Answer {i} ({answer!r}) has {len(text)} texts and {len(starts)} answer_start; "
                             "give one answer_start per text.")
        if not text:
            return "", 0
        text, start = text[0], starts[0]
    if not isinstance(text, str):
        raise ValueError(f"Answer {i} ({answer!r}): the text must be a str; got {type(text).__name__}.")
    return text, start


def as_word_lists(x):
    if isinstance(x, (str, bytes)) or any(isinstance(sentence, (str, bytes)) for sentence in x):
        raise ValueError(
            "fit and evaluate take sentences as lists of words, with one tag per word "
            '(CoNLL style: [["Jane", "Austen"], ...]); got text. Split texts into words first.'
        )
    return [list(sentence) for sentence in x]
