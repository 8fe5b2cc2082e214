"""Fine-tuning fidelity: kbert's `fit` with its default `compile` trains as
transformers trains with its `Trainer`'s recipe.

A tiny random checkpoint of each head is written by `transformers`
(`save_pretrained`) and loaded by kbert (`from_preset`), so both start from
the same weights, vocabulary included. Both then take the same batches in the
same order, dropout off, float32:

- kbert: `fit` on raw input (words and tags, texts and labels, sentence
  pairs and scores, texts and multi-hot labels, questions, contexts and
  answers), `shuffle=False`, its default optimizer and loss;
- transformers: its tokenizer, labels on each word's first piece (-100
  elsewhere, as `run_ner.py`), answer positions from the offsets (as
  `run_qa.py`), and what `Trainer` does with `torch.optim.AdamW`: weight
  decay on all but biases and LayerNorm, epsilon 1e-8, gradients clipped to
  norm 1.0, linear warm-up over ceil(10%) of the steps, linear decay to 0.

The losses of every step and all weights at the end must agree: a change in
label alignment, the loss over padding or later pieces, epsilon, clipping,
the schedule's step count or the head's loading shows here.
"""

import math

import keras
import numpy as np
import pytest
import torch
import transformers

import kbert
from kbert.families.tables import T
from kbert.presets.huggingface import backbone_table

SEQUENCE_LENGTH = 12
BATCH, STEPS = 4, 12  # ceil(10% of 12) = 2 warm-up steps, where a floor gives 1
LEARNING_RATE = 2e-3  # large, so that a difference in the recipe shows in 12 steps

WORDS = ["the", "cat", "sat", "on", "a", "mat", "big", "red", "dog", "ran", "home", "to", "and", "is", "it"]
PIECES = ["play", "un", "jump", "##ing", "##ed", "##able", "##s", "##er"]
# Several pieces each, and one unknown word ([UNK], one piece).
SPLIT_WORDS = ["playing", "unable", "jumped", "players", "jumpers", "zzz"]
VOCABULARY = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS, *PIECES, ".", "?"]


def save_checkpoint(folder, model_class, **config):
    """A tiny random transformers checkpoint with its WordPiece vocabulary."""
    with open(folder / "vocab.txt", "w") as f:
        f.write("\n".join(VOCABULARY) + "\n")
    transformers.BertTokenizerFast(vocab=str(folder / "vocab.txt")).save_pretrained(folder)
    hf_config = transformers.BertConfig(
        vocab_size=len(VOCABULARY), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=64, max_position_embeddings=32, hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0, **config,
    )
    torch.manual_seed(0)
    model_class(hf_config).save_pretrained(folder)
    return transformers.BertTokenizerFast.from_pretrained(folder), model_class.from_pretrained(folder)


def random_sentences(count, seed):
    rng = np.random.default_rng(seed)
    vocabulary = WORDS + SPLIT_WORDS
    # Up to 14 words: the longest are cut at SEQUENCE_LENGTH pieces.
    return [[vocabulary[i] for i in rng.integers(0, len(vocabulary), rng.integers(2, 15))] for _ in range(count)]


def train_transformers(model, batches):
    """`Trainer`'s optimizer, schedule and clipping in a plain loop; returns
    the loss of each step."""
    no_decay = [n for n, _ in model.named_parameters() if n.endswith("bias") or "LayerNorm" in n]
    optimizer = torch.optim.AdamW(
        [{"params": [p for n, p in model.named_parameters() if n not in no_decay], "weight_decay": 0.01},
         {"params": [p for n, p in model.named_parameters() if n in no_decay], "weight_decay": 0.0}],
        lr=LEARNING_RATE, eps=1e-8,
    )
    total = len(batches)
    schedule = transformers.get_linear_schedule_with_warmup(optimizer, math.ceil(0.1 * total), total)
    model.train()
    losses = []
    for batch in batches:
        loss = model(**batch).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad()
        losses.append(float(loss.detach()))
    return losses


class StepLosses(keras.callbacks.Callback):
    """Each step's loss: Keras logs the mean over the epoch so far."""

    def on_train_begin(self, logs=None):
        self.means = []

    def on_train_batch_end(self, batch, logs=None):
        self.means.append(float(logs["loss"]))

    def losses(self):
        means = np.array(self.means, "float64")
        seen = np.arange(1, len(means) + 1)
        return means * seen - np.concatenate([[0.0], means[:-1] * seen[:-1]])


def train_kbert(model, x, y):
    model.compile(learning_rate=LEARNING_RATE)
    step_losses = StepLosses()
    model.fit(x, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0, callbacks=[step_losses])
    return step_losses.losses()


def assert_same_training(model, hf_model, kbert_losses, hf_losses, unmoved=()):
    """Same loss at every step, same weights at the end. `unmoved`: weights
    whose gradient is 0 in exact arithmetic (they shift every logit of a
    softmax alike), so that Adam's steps follow float rounding."""
    np.testing.assert_allclose(kbert_losses, hf_losses, rtol=2e-4, atol=2e-5)
    state = dict(hf_model.named_parameters())
    prefix = hf_model.base_model_prefix + "."
    rows = [(v, prefix + name, t) for v, name, t in backbone_table(model.backbone)] + model.hf_head_table()
    for variable, name, transform in rows:
        if name not in state or name in unmoved:  # the pooler of heads that do not use it
            continue
        expected = state[name].detach().numpy()
        expected = expected.T if transform == T else expected
        np.testing.assert_allclose(keras.ops.convert_to_numpy(variable), expected, rtol=1e-3, atol=3e-5,
                                   err_msg=name)


TAGS = ["O", "B-X", "I-X", "B-Y", "I-Y"]


def test_token_classifier_trains_as_transformers(tmp_path):
    tokenizer, hf_model = save_checkpoint(tmp_path, transformers.BertForTokenClassification, num_labels=len(TAGS))
    model = kbert.BertTokenClassifier.from_preset(str(tmp_path), sequence_length=SEQUENCE_LENGTH,
                                                  class_names=TAGS)
    sentences = random_sentences(BATCH * STEPS, seed=1)
    rng = np.random.default_rng(2)
    tags = [list(rng.integers(0, len(TAGS), len(words))) for words in sentences]

    batches = []
    for i in range(0, len(sentences), BATCH):
        encoded = tokenizer(sentences[i:i + BATCH], is_split_into_words=True, truncation=True,
                            max_length=SEQUENCE_LENGTH, padding=True, return_tensors="pt")
        labels = torch.full(encoded["input_ids"].shape, -100)
        for row in range(labels.shape[0]):
            word_ids = encoded.word_ids(row)
            for position, word in enumerate(word_ids):  # each word's first piece
                if word is not None and (position == 0 or word_ids[position - 1] != word):
                    labels[row, position] = int(tags[i + row][word])
        batches.append({**encoded, "labels": labels})
    hf_losses = train_transformers(hf_model, batches)

    kbert_losses = train_kbert(model, sentences, [[int(t) for t in row] for row in tags])
    assert_same_training(model, hf_model, kbert_losses, hf_losses)


def test_question_answerer_trains_as_transformers(tmp_path):
    tokenizer, hf_model = save_checkpoint(tmp_path, transformers.BertForQuestionAnswering)
    # Contexts of 3 to 17 tokens in windows of 24, padded as kbert pads them
    # (to the sequence length): the loss's softmax spans every position,
    # padding included, and neither side trains the [PAD] row from there.
    length = 24
    model = kbert.BertQuestionAnswerer.from_preset(str(tmp_path), sequence_length=length, max_question_length=6)
    rng = np.random.default_rng(5)
    questions, contexts, answers = [], [], []
    for words in random_sentences(BATCH * STEPS, seed=6):
        question = " ".join(WORDS[j] for j in rng.integers(0, len(WORDS), 3)) + " ?"  # 4 tokens
        room = int(rng.integers(3, length - 3 - 4 + 1))
        context_words = []
        for word in words + list(rng.choice(WORDS, room)):  # WORDS are one piece each
            pieces = len(tokenizer(word, add_special_tokens=False)["input_ids"])
            if pieces <= room:
                context_words.append(word)
                room -= pieces
        first = int(rng.integers(0, len(context_words)))
        last = min(len(context_words), first + int(rng.integers(1, 4)))
        questions.append(question)
        contexts.append(" ".join(context_words))
        start = len(" ".join(context_words[:first])) + (first > 0)
        answers.append({"text": " ".join(context_words[first:last]), "answer_start": start})

    batches = []
    for i in range(0, len(questions), BATCH):
        encoded = tokenizer(questions[i:i + BATCH], contexts[i:i + BATCH], truncation="only_second",
                            max_length=length, padding="max_length", return_offsets_mapping=True,
                            return_tensors="pt")
        assert not encoded["attention_mask"].all()  # padding in every batch
        starts, ends = [], []
        for row, answer in enumerate(answers[i:i + BATCH]):
            first_char, end_char = answer["answer_start"], answer["answer_start"] + len(answer["text"])
            in_context = [p for p, s in enumerate(encoded.sequence_ids(row)) if s == 1]
            offsets = encoded["offset_mapping"][row].tolist()
            # run_qa.py: the first token ending after the answer's start, the
            # last starting before its end.
            starts.append(next(p for p in in_context if offsets[p][1] > first_char))
            ends.append(max(p for p in in_context if offsets[p][0] < end_char))
        encoded.pop("offset_mapping")
        batches.append({**encoded, "start_positions": torch.tensor(starts), "end_positions": torch.tensor(ends)})
    hf_losses = train_transformers(hf_model, batches)

    kbert_losses = train_kbert(model, (questions, contexts), answers)
    # Every position's logit moves with these biases alike.
    unmoved = ("qa_outputs.bias", "bert.encoder.layer.1.output.LayerNorm.bias")
    assert_same_training(model, hf_model, kbert_losses, hf_losses, unmoved)


def assert_classifier_trains_as_transformers(folder, texts, labels, hf_model_config):
    """A `BertClassifier` on `texts` (a list, or a tuple of two lists of
    pairs) and `labels`: the loss of each step and the end's weights are
    transformers'."""
    tokenizer, hf_model = save_checkpoint(folder, transformers.BertForSequenceClassification, **hf_model_config)
    model = kbert.BertClassifier.from_preset(str(folder), sequence_length=SEQUENCE_LENGTH)
    assert model.problem_type == (hf_model.config.problem_type or "single_label_classification")
    columns = texts if isinstance(texts, tuple) else (texts,)
    targets = np.asarray(labels)
    targets = targets.astype("float32") if targets.dtype.kind == "f" else targets
    batches = [{**tokenizer(*[c[i:i + BATCH] for c in columns], truncation=True, max_length=SEQUENCE_LENGTH,
                            padding=True, return_tensors="pt"),
                "labels": torch.tensor(targets[i:i + BATCH])} for i in range(0, len(labels), BATCH)]
    hf_losses = train_transformers(hf_model, batches)

    # Length grouping would reorder the batches: off, to take transformers' order.
    model.length_groups = 0
    kbert_losses = train_kbert(model, texts, labels)
    assert_same_training(model, hf_model, kbert_losses, hf_losses)


def test_classifier_trains_as_transformers(tmp_path):
    texts = [" ".join(words) for words in random_sentences(BATCH * STEPS, seed=3)]
    labels = [int(label) for label in np.random.default_rng(4).integers(0, 3, len(texts))]
    assert_classifier_trains_as_transformers(tmp_path, texts, labels, {"num_labels": 3})


def test_regression_on_pairs_trains_as_transformers(tmp_path):
    # STS-B's shape: sentence pairs, one logit, float scores in [0, 5], MSE.
    first = [" ".join(words) for words in random_sentences(BATCH * STEPS, seed=7)]
    second = [" ".join(words) for words in random_sentences(BATCH * STEPS, seed=8)]
    scores = [float(s) for s in np.random.default_rng(9).uniform(0, 5, len(first)).round(2)]
    assert_classifier_trains_as_transformers(tmp_path, (first, second), scores,
                                             {"num_labels": 1, "problem_type": "regression"})


def test_multi_label_classifier_trains_as_transformers(tmp_path):
    # GoEmotions' shape: several labels a text (multi-hot), sigmoid and BCE.
    texts = [" ".join(words) for words in random_sentences(BATCH * STEPS, seed=10)]
    labels = (np.random.default_rng(11).random((len(texts), 4)) < 0.3).astype("float32")
    assert_classifier_trains_as_transformers(tmp_path, texts, labels,
                                             {"num_labels": 4, "problem_type": "multi_label_classification"})
