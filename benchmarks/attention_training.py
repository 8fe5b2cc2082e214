"""A training step with fused attention (`kbert.backend.attention`) against
attention written out, on the current machine, for PyTorch and JAX.

MiniLM-L6's shape with random weights (6 blocks, hidden 384, 12 heads),
`dtype="auto"`, `BertClassifier.train_on_batch` on token ids. Each run is its
own process; fused and written-out runs alternate, backend after backend, and
the table shows the median step of each over the passes. Dropout 0.1 (the
default: PyTorch's fused attention then drops inside
`scaled_dot_product_attention`) and dropout 0 (JAX fuses only without
dropout).

    python benchmarks/attention_training.py                    # 16 x 128, 3 passes
    python benchmarks/attention_training.py --batch-size 32 --passes 5
"""

import argparse
import json
import os
import statistics
import sys
import time

import numpy as np
from measured import measured


def measure(args):
    import keras

    import kbert
    from kbert import backend

    # Fused even where kbert would not fuse it (PyTorch on a CPU, with
    # dropout), or written out: the path a backend takes without a fused kernel.
    fused = args.attention == "fused"
    backend._current().fuses_attention = lambda dropout=False: fused
    keras.utils.set_random_seed(0)
    backbone = kbert.BertBackbone(vocabulary_size=30522, num_layers=6, num_heads=12, hidden_dim=384,
                                  intermediate_dim=1536, dropout=args.dropout,
                                  dtype=kbert.training.precision.resolve_dtype("auto"))
    model = kbert.BertClassifier(backbone, num_classes=2)
    model.compile()
    rng = np.random.default_rng(0)
    token_ids = rng.integers(1000, 30000, size=(args.batch_size, args.length)).astype("int32")
    padding_mask = np.ones_like(token_ids)
    padding_mask[: args.batch_size // 2, args.length // 2:] = 0  # half the rows half padding
    x = {"token_ids": token_ids, "segment_ids": np.zeros_like(token_ids), "padding_mask": padding_mask}
    labels = rng.integers(0, 2, args.batch_size)
    for _ in range(2):
        model.train_on_batch(x, labels)  # trace / compile
    seconds = []
    for _ in range(args.steps):
        start = time.perf_counter()
        model.train_on_batch(x, labels)
        seconds.append(time.perf_counter() - start)
    print(json.dumps({"step_s": statistics.median(seconds)}))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--length", type=int, default=128)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--backends", default="torch,jax")
    parser.add_argument("--attention", choices=["fused", "written"], help=argparse.SUPPRESS)
    parser.add_argument("--dropout", type=float, default=0.1, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.attention:
        return measure(args)
    # (JAX's fused attention has no dropout: with it both runs would be the same.)
    runs = [(backend, dropout, attention) for backend in args.backends.split(",")
            for dropout in ((0.0,) if backend == "jax" else (0.1, 0.0)) for attention in ("fused", "written")]
    steps = {run: [] for run in runs}
    for _ in range(args.passes):
        for backend, dropout, attention in runs:
            command = [sys.executable, __file__, "--attention", attention, "--dropout", str(dropout),
                       "--batch-size", str(args.batch_size), "--length", str(args.length),
                       "--steps", str(args.steps)]
            result = measured(command, f"{backend} {attention}", env=dict(os.environ, KERAS_BACKEND=backend))
            if result:
                steps[(backend, dropout, attention)].append(result["step_s"])
    print(f"MiniLM-L6 shape, batch {args.batch_size} x {args.length}, median step of {args.steps}, "
          f"median of {args.passes} passes")
    for backend, dropout, attention in runs:
        if attention == "fused" and steps[(backend, dropout, "fused")] and steps[(backend, dropout, "written")]:
            fused = statistics.median(steps[(backend, dropout, "fused")])
            written = statistics.median(steps[(backend, dropout, "written")])
            print(f"  {backend:<6} dropout {dropout}: fused {fused * 1000:7.0f} ms, written out "
                  f"{written * 1000:7.0f} ms, written out / fused {written / fused:.2f}x")


if __name__ == "__main__":
    main()
