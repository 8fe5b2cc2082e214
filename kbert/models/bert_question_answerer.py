"""Extractive question answering (BERT §4.2): find the answer's span in a context.

The tokenizer gives ids, not character offsets, so this module aligns
WordPieces to the original text itself:

1. `word_spans` splits the ORIGINAL text into words exactly where BERT's
   pre-tokenizer does (whitespace, and each punctuation or CJK character
   a word of its own), remembering each word's characters;
2. each word is tokenized on its own, which gives the same pieces as
   tokenizing the whole text (WordPiece never crosses a word boundary);
3. `piece_spans` normalizes the word's characters one by one as the
   tokenizer does (accents stripped, lowercased, control characters
   dropped), and walks the pieces along them: a piece's span runs from the
   original character that produced its first normalized character to the
   one that produced its last (and any combining accents after it). A word
   that became `[UNK]`, or whose pieces do not spell its normalized text,
   gives every piece the whole word's span.

The spans equal Hugging Face's `offset_mapping` (BertTokenizerFast), except
that a trailing combining accent stays in the span.

So an answer decoded from pieces `i..j` is `context[start_char:end_char]` with
the original casing, accents and inner punctuation.
"""

import re
import string
import unicodedata
from collections import Counter

import keras
import numpy as np
import tensorflow as tf

from kbert.models.bert_backbone import bert_initializer
from kbert.models.task import Task
from kbert.presets.huggingface import T

# The tokenizer's "Chinese character" blocks (kbert/text/tokenizer.py `_CJK`).
_CJK_RANGES = (
    (0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F),
    (0x2B740, 0x2B81F), (0x2B820, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F),
)


def _is_whitespace(char):
    return char in "\t\n\r" or unicodedata.category(char) in ("Zs", "Zl", "Zp")


def _is_own_word(char):
    """Punctuation (BERT counts ASCII symbols such as $ + < = > ^ ` | ~) and CJK ideographs."""
    code = ord(char)
    if 33 <= code <= 47 or 58 <= code <= 64 or 91 <= code <= 96 or 123 <= code <= 126:
        return True
    return unicodedata.category(char).startswith("P") or any(lo <= code <= hi for lo, hi in _CJK_RANGES)


def word_spans(text):
    """Where BERT's pre-tokenizer splits `text` into words, as character spans.

    Words are separated by whitespace, and every punctuation character and
    CJK ideograph is a word of its own.

    Args:
        text: a str.

    Returns:
        A list of `(start, end)` character offsets, `text[start:end]` a word.

    Example:
    >>> word_spans("Café-au-lait, s'il")
    [(0, 4), (4, 5), (5, 7), (7, 8), (8, 12), (12, 13), (14, 15), (15, 16), (16, 18)]
    """
    spans, start = [], None
    for i, char in enumerate(text):
        if _is_whitespace(char) or _is_own_word(char):
            if start is not None:
                spans.append((start, i))
                start = None
            if not _is_whitespace(char):
                spans.append((i, i + 1))
        elif start is None:
            start = i
    if start is not None:
        spans.append((start, len(text)))
    return spans


def _normalize_char(char, lowercase, strip_accents):
    """One character as the tokenizer's normalizer leaves it (often "" or several)."""
    if char in "\x00\ufffd" or (unicodedata.category(char).startswith("C") and char not in "\t\n\r"):
        return ""
    if strip_accents:
        char = "".join(c for c in unicodedata.normalize("NFD", char) if unicodedata.category(c) != "Mn")
    return char.lower() if lowercase else char


def piece_spans(word, tokens, lowercase=True, strip_accents=None):
    """Character spans of a word's WordPieces inside the original word.

    Args:
        word: the word as written in the original text.
        tokens: its WordPiece strings (`"##"` marks a continuation).
        lowercase, strip_accents: the tokenizer's settings (`strip_accents`
            `None` means the same as `lowercase`).

    Returns:
        A list of `(start, end)` offsets into `word`, one per token.

    Example:
    >>> piece_spans("Éclairs", ["ec", "##lair", "##s"])
    [(0, 2), (2, 6), (6, 7)]
    """
    if strip_accents is None:
        strip_accents = lowercase
    normalized = [_normalize_char(c, lowercase, strip_accents) for c in word]
    # owner[k]: the original character that the k-th normalized one came from.
    owner = [i for i, chars in enumerate(normalized) for _ in chars]
    texts = [t[2:] if i and t.startswith("##") else t for i, t in enumerate(tokens)]
    if not tokens or "".join(texts) != "".join(normalized) or not all(texts):
        return [(0, len(word))] * len(tokens)  # [UNK] or an unexpected normalization
    spans, k = [], 0
    for text in texts:
        start, end = owner[k], owner[k + len(text) - 1] + 1
        k += len(text)
        # Combining accents that the normalizer dropped stay with their
        # letter ("cafe\u0301" is "café", not "cafe"); Hugging Face's offsets
        # leave them out at a piece's end.
        while end < len(word) and not normalized[end] and unicodedata.category(word[end]) == "Mn":
            end += 1
        spans.append((start, end))
    return spans


def tokenize_with_offsets(tokenizer, texts):
    """WordPiece ids of each text with each piece's character span in it.

    Args:
        tokenizer: a `kbert.text.BertTokenizer`.
        texts: a list of str.

    Returns:
        A list, per text, of `(ids, spans)`: the ids as the tokenizer gives
        them, and one `(start_char, end_char)` per id.

    Example:
    >>> ids, spans = tokenize_with_offsets(tokenizer, ["Zoë's café"])[0]
    >>> [text[a:b] for a, b in spans]
    ['Zoë', "'", 's', 'café']
    """
    words = [[(text[a:b], a) for a, b in word_spans(text)] for text in texts]
    flat = [word for row in words for word, _ in row]
    pieces = tokenizer(tf.constant(flat, dtype=tf.string)).to_list() if flat else []
    vocabulary = tokenizer.vocabulary
    strip_accents = tokenizer.strip_accents
    results, k = [], 0
    for row in words:
        ids, spans = [], []
        for word, offset in row:
            word_ids = pieces[k]
            k += 1
            tokens = [vocabulary[i] for i in word_ids]
            ids += word_ids
            spans += [(offset + a, offset + b)
                      for a, b in piece_spans(word, tokens, tokenizer.lowercase, strip_accents)]
        results.append((ids, spans))
    return results


def window_starts(num_tokens, window_length, stride):
    """Where the windows over a long context start (BERT's `doc_stride`).

    Each window holds up to `window_length` tokens and starts `stride` tokens
    after the previous one, until one reaches the end, so every token is in
    at least one window (in several when `stride < window_length`).

    Example:
    >>> window_starts(10, window_length=4, stride=3)
    [0, 3, 6]
    """
    starts = [0]
    while starts[-1] + window_length < num_tokens:
        starts.append(starts[-1] + min(stride, window_length))
    return starts


def _max_context(windows, num_tokens):
    """For each window, which of its tokens see the most context there.

    BERT's `_check_is_max_context`: a token in several windows belongs to
    the one where min(left context, right context) + 0.01 * window length is
    largest, so an answer is taken from where the model saw most around it.
    """
    scores = np.full((len(windows), num_tokens), -np.inf)
    for w, (start, length) in enumerate(windows):
        position = np.arange(start, start + length)
        scores[w, start:start + length] = np.minimum(position - start, start + length - 1 - position) + 0.01 * length
    best = scores.argmax(0)
    return [best[start:start + length] == w for w, (start, length) in enumerate(windows)]


def _answer_char_span(answer):
    """(start, end) characters of an answer given SQuAD's way or as (text, start)."""
    if isinstance(answer, dict):
        text, start = answer["text"], answer["answer_start"]
    else:
        text, start = answer
    return int(start), int(start) + len(text)


@keras.saving.register_keras_serializable(package="kbert")
class BertQuestionAnswerer(Task):
    """Extractive question answering (BERT §4.2, SQuAD): a dense layer on
    each token's `sequence_output` scores it as the answer's start and end.

    Inputs are packed `[CLS] question [SEP] context [SEP]`; the outputs are
    `start_logits` and `end_logits` `[batch, length]`, over all positions
    (decoding only looks at the context's tokens). A context too long for
    one sequence is read in overlapping windows, `stride` tokens apart, and
    the best span of all windows is the answer.

    Args:
        backbone: a `kbert.BertBackbone`.
        preprocessor: a `kbert.BertPreprocessor` (its `sequence_length` is the
            window's length, question included), so that `fit` and `predict`
            take raw text; `None` for a model fed token ids.
        stride: how many tokens each window moves along the context
            (BERT's `doc_stride`: 128, with sequence length 384).
        max_question_length: questions are cut to this many tokens.
        max_answer_length: the longest answer decoded, in tokens.
        num_candidates: how many best starts and best ends of each window
            are paired when decoding (BERT's `n_best_size`).

    Example:
    >>> model = kbert.BertQuestionAnswerer.from_preset("base", sequence_length=384)
    >>> context = "Jane Austen wrote Pride and Prejudice in 1813."
    >>> model.fit((["Who wrote it?"], [context]), [{"text": "Jane Austen", "answer_start": 0}])
    >>> model.predict((["When was it written?"], [context]))
    [{'text': '1813', 'chars': (41, 45), 'score': 9.1}]
    """

    # Its own input pipeline (strided windows): no sorting by length, and
    # sequences padded to sequence_length.
    length_groups = 0
    input_padding = "sequence_length"

    def __init__(self, backbone, preprocessor=None, stride=128, max_question_length=64, max_answer_length=30,
                 num_candidates=20, **kwargs):
        if stride < 1:
            raise ValueError(f"stride={stride}: windows must move at least 1 token; BERT uses 128.")
        if preprocessor is not None and preprocessor.sequence_length - 3 - max_question_length < 1:
            raise ValueError(
                f"sequence_length={preprocessor.sequence_length} leaves no room for the context after "
                f"[CLS], a question of up to max_question_length={max_question_length} tokens and two "
                "[SEP]; use a longer sequence_length or a smaller max_question_length."
            )
        inputs = backbone.input
        sequence_output = backbone(inputs)["sequence_output"]
        span_logits = keras.layers.Dense(
            2, kernel_initializer=bert_initializer(), dtype="float32", name="span_logits"
        )(sequence_output)
        outputs = {"start_logits": span_logits[..., 0], "end_logits": span_logits[..., 1]}
        super().__init__(inputs=inputs, outputs=outputs, **kwargs)
        self._finish_init(backbone, preprocessor)
        self.stride = stride
        self.max_question_length = max_question_length
        self.max_answer_length = max_answer_length
        self.num_candidates = num_candidates

    def task_config(self):
        return {
            "stride": self.stride,
            "max_question_length": self.max_question_length,
            "max_answer_length": self.max_answer_length,
            "num_candidates": self.num_candidates,
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
        dense = self.get_layer("span_logits")
        return [(dense.kernel, "qa_outputs.weight", T), (dense.bias, "qa_outputs.bias", None)]

    # === Windows ===

    def encode(self, questions, contexts, answers=None):
        """Packs questions and contexts into windows, as numpy arrays.

        Args:
            questions, contexts: lists of str, one per example.
            answers: optional, one per example: a SQuAD answer dict
                `{"text": ..., "answer_start": ...}` or `(text, answer_start)`.

        Returns:
            A dict with one row per window: the model inputs `token_ids`,
            `segment_ids`, `padding_mask`; `example_index` (the example the
            window is of); `token_chars` `[windows, length, 2]`, each context
            token's character span in its context, `(-1, -1)` for other
            tokens; `max_context` `[windows, length]`, whether the window is
            the one where the token has most context; and with `answers`,
            `start_positions` and `end_positions` (0, the [CLS] token, where
            the answer is not wholly inside the window).
        """
        if self.preprocessor is None:
            raise ValueError("encode needs a preprocessor to read text; build the model with one.")
        if not len(contexts):
            raise ValueError("Got no examples; pass lists of at least one question and context.")
        if len(questions) != len(contexts) or (answers is not None and len(answers) != len(contexts)):
            raise ValueError(
                f"Got {len(questions)} questions, {len(contexts)} contexts"
                + ("" if answers is None else f" and {len(answers)} answers")
                + "; pass one of each per example."
            )
        tokenizer = self.preprocessor.tokenizer
        question_ids = [ids[: self.max_question_length] for ids in tokenizer(list(questions)).to_list()]
        rows = {k: [] for k in ("question", "window", "example_index", "token_chars", "max_context",
                                "start_positions", "end_positions")}
        for i, (ids, spans) in enumerate(tokenize_with_offsets(tokenizer, list(contexts))):
            offset = len(question_ids[i]) + 2  # [CLS] question [SEP]
            window_length = self.preprocessor.sequence_length - offset - 1
            windows = [(s, min(window_length, len(ids) - s))
                       for s in window_starts(len(ids), window_length, self.stride)]
            answer = None if answers is None else self._answer_tokens(spans, answers[i], contexts[i])
            for (start, length), max_context in zip(windows, _max_context(windows, len(ids))):
                token_chars = np.full((offset + length, 2), -1)
                token_chars[offset:] = np.reshape(spans[start:start + length], (length, 2))
                rows["question"].append(question_ids[i])
                rows["window"].append(ids[start:start + length])
                rows["example_index"].append(i)
                rows["token_chars"].append(token_chars)
                rows["max_context"].append(np.concatenate([np.zeros(offset, bool), max_context]))
                inside = answer is not None and start <= answer[0] and answer[1] < start + length
                rows["start_positions"].append(answer[0] - start + offset if inside else 0)
                rows["end_positions"].append(answer[1] - start + offset if inside else 0)
        encoded = self.preprocessor.packer((tf.ragged.constant(rows["question"], tf.int32, ragged_rank=1),
                                            tf.ragged.constant(rows["window"], tf.int32, ragged_rank=1)))
        encoded = {k: np.asarray(v) for k, v in encoded.items()}
        length = encoded["token_ids"].shape[1]
        encoded["example_index"] = np.asarray(rows["example_index"])
        encoded["token_chars"] = _pad(rows["token_chars"], length, -1)
        encoded["max_context"] = _pad(rows["max_context"], length, False)
        if answers is not None:
            encoded["start_positions"] = np.asarray(rows["start_positions"], "int32")
            encoded["end_positions"] = np.asarray(rows["end_positions"], "int32")
        return encoded

    @staticmethod
    def _answer_tokens(spans, answer, context):
        """First and last context token overlapping the answer's characters."""
        start_char, end_char = _answer_char_span(answer)
        if not 0 <= start_char < end_char <= len(context):
            raise ValueError(
                f"Answer {answer!r} lies outside its context of {len(context)} characters; "
                "answer_start must be the answer's character offset in the context."
            )
        inside = [k for k, (a, b) in enumerate(spans) if a < end_char and b > start_char]
        return (inside[0], inside[-1]) if inside else None

    # === Raw text in ===

    @staticmethod
    def _check_raw(x):
        if not (isinstance(x, tuple) and len(x) == 2):
            raise ValueError(
                "BertQuestionAnswerer takes raw input as a tuple (questions, contexts) of two lists "
                f"of str (answers as y), or a dict of token ids; got {type(x).__name__}."
            )
        return x

    def _dataset(self, x, y=None, sample_weight=None, batch_size=None, shuffle=False):
        encoded = self.encode(*self._check_raw(x), answers=y)
        features = {k: encoded[k] for k in ("token_ids", "segment_ids", "padding_mask")}
        parts = (features,)
        if y is not None:
            parts += ({"start_logits": encoded["start_positions"], "end_logits": encoded["end_positions"]},)
        if sample_weight is not None:
            weights = np.asarray(sample_weight, "float32")[encoded["example_index"]]
            parts += ({"start_logits": weights, "end_logits": weights},)
        dataset = tf.data.Dataset.from_tensor_slices(parts)
        if shuffle:
            dataset = dataset.shuffle(int(dataset.cardinality()), reshuffle_each_iteration=True)
        return dataset.batch(batch_size or 32).prefetch(tf.data.AUTOTUNE)

    def predict(self, x, batch_size=None, **kwargs):
        """Answers questions: with raw input `(questions, contexts)`, a list
        of `{"text", "chars": (start_char, end_char), "score"}` per example
        (`context[start_char:end_char] == text`; the score is the start and
        end logits' sum); with token ids, the model's logits."""
        if not self._is_raw(x):
            return super().predict(x, batch_size=batch_size, **kwargs)
        encoded = self.encode(*self._check_raw(x))
        features = {k: encoded[k] for k in ("token_ids", "segment_ids", "padding_mask")}
        logits = super().predict(features, batch_size=batch_size, **kwargs)
        return decode_answers(encoded, x[1], logits["start_logits"], logits["end_logits"],
                              self.max_answer_length, self.num_candidates)


def _pad(rows, length, value):
    out = np.full((len(rows), length) + rows[0].shape[1:], value, dtype=rows[0].dtype)
    for i, row in enumerate(rows):
        out[i, : len(row)] = row
    return out


def decode_answers(encoded, contexts, start_logits, end_logits, max_answer_length=30, num_candidates=20):
    """The best answer span of each example, over all its windows (BERT §4.2).

    A span goes from a context token `i` to a context token `j >= i`, at
    most `max_answer_length` tokens long, with `i` in the window where it has
    most context; its score is `start_logits[i] + end_logits[j]`. Only the
    `num_candidates` best starts and ends of each window are paired.

    Args:
        encoded: `BertQuestionAnswerer.encode(...)` of the examples.
        contexts: the examples' contexts.
        start_logits, end_logits: the model's outputs on `encoded`'s windows.

    Returns:
        A list, per example, of `{"text", "chars": (start_char, end_char),
        "score"}`; `""` with score `-inf` where no span was possible.
    """
    start_logits, end_logits = np.asarray(start_logits), np.asarray(end_logits)
    best = [(-np.inf, 0, 0)] * len(contexts)
    for w, example in enumerate(encoded["example_index"]):
        chars = encoded["token_chars"][w]
        is_context = chars[:, 0] >= 0
        starts = _top(start_logits[w], is_context & encoded["max_context"][w], num_candidates)
        ends = _top(end_logits[w], is_context, num_candidates)
        for i in starts:
            for j in ends:
                score = start_logits[w, i] + end_logits[w, j]
                if i <= j < i + max_answer_length and score > best[example][0]:
                    best[example] = (float(score), int(chars[i, 0]), int(chars[j, 1]))
    return [{"text": context[a:b], "chars": (a, b), "score": score}
            for context, (score, a, b) in zip(contexts, best)]


def _top(logits, allowed, n):
    candidates = np.flatnonzero(allowed)
    return candidates[np.argsort(-logits[candidates], kind="stable")[:n]]


# === SQuAD's metrics ===

_ASCII_PUNCTUATION = set(string.punctuation)


def normalize_answer(text):
    """The official SQuAD v1.1 normalisation: lowercase, no punctuation, no
    articles (a, an, the), single spaces."""
    text = "".join(c for c in text.lower() if c not in _ASCII_PUNCTUATION)
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


def _f1(prediction, reference):
    predicted, expected = normalize_answer(prediction).split(), normalize_answer(reference).split()
    common = sum((Counter(predicted) & Counter(expected)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(predicted), common / len(expected)
    return 2 * precision * recall / (precision + recall)


def squad_metrics(predictions, references):
    """SQuAD v1.1's exact match and F1, in percent, as its official script.

    Each prediction is scored against the best-matching of its references.

    Args:
        predictions: a list of answer strings.
        references: a list, per prediction, of the gold answer strings (or
            one str).

    Returns:
        `{"exact_match": ..., "f1": ...}`.

    Example:
    >>> squad_metrics(["the Eiffel Tower", "Paris"], [["Eiffel Tower"], ["in Paris, France"]])
    {'exact_match': 50.0, 'f1': 75.0}
    """
    if len(predictions) != len(references):
        raise ValueError(f"Got {len(predictions)} predictions for {len(references)} references; pass one each.")
    if not predictions:
        return {"exact_match": 0.0, "f1": 0.0}
    exact = f1 = 0.0
    for prediction, golds in zip(predictions, references):
        golds = [golds] if isinstance(golds, str) else golds
        exact += max(float(normalize_answer(prediction) == normalize_answer(g)) for g in golds)
        f1 += max(_f1(prediction, g) for g in golds)
    return {"exact_match": 100 * exact / len(predictions), "f1": 100 * f1 / len(predictions)}
