"""A training step with fused attention (`kbert.backend.attention`) against
attention written out, on the current machine, for PyTorch and JAX.

MiniLM-L6's shape with random weights (6 blocks, hidden 384, 12 heads),
`dtype="auto"`, `BertClassifier.train_on_batch` on token ids. Each backend
and dropout rate runs in its own process, which takes the two classifiers'
steps in turn, so that the machine's load hits both alike. Dropout 0.1 (the
default: PyTorch's fused attention then drops inside
`scaled_dot_product_attention`) and 0 (JAX fuses only without dropout).

    python benchmarks/attention_training.py                    # 8 x 128, 7 steps
    python benchmarks/attention_training.py --batch-size 32 --backends torch
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
    """In the subprocess: the same classifier twice, attention fused and
    written out, their steps taken in turn (so that the machine's load hits
    both alike); prints the median step of each."""
    import keras

    import kbert
    from kbert import backend

    implementation = backend._current()
    rng = np.random.default_rng(0)
    token_ids = rng.integers(1000, 30000, size=(args.batch_size, args.length)).astype("int32")
    padding_mask = np.ones_like(token_ids)
    padding_mask[: args.batch_size // 2, args.length // 2:] = 0  # half the rows half padding
    x = {"token_ids": token_ids, "segment_ids": np.zeros_like(token_ids), "padding_mask": padding_mask}
    labels = rng.integers(0, 2, args.batch_size)
    steps = {}
    for fused in (True, False):
        keras.utils.set_random_seed(0)
        backbone = kbert.BertBackbone(vocabulary_size=30522, num_layers=6, num_heads=12, hidden_dim=384,
                                      intermediate_dim=1536, dropout=args.dropout,
                                      dtype=kbert.training.precision.resolve_dtype("auto"))
        model = kbert.BertClassifier(backbone, num_classes=2)
        model.compile()
        steps[fused] = model
    seconds = {True: [], False: []}
    for i in range(2 + args.steps):  # 2 to trace / warm up
        for fused, model in steps.items():
            # Fused even where kbert would not fuse (PyTorch on a CPU, with
            # dropout), or written out: the path without a fused kernel.
            implementation.fuses_attention = lambda dropout=False, fused=fused: fused
            start = time.perf_counter()
            model.train_on_batch(x, labels)
            if i >= 2:
                seconds[fused].append(time.perf_counter() - start)
    print(json.dumps({"fused_s": statistics.median(seconds[True]), "written_s": statistics.median(seconds[False])}))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--length", type=int, default=128)
    parser.add_argument("--steps", type=int, default=7)
    parser.add_argument("--backends", default="torch,jax")
    parser.add_argument("--dropout", type=float, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.dropout is not None:
        return measure(args)
    print(f"MiniLM-L6 shape, random weights, batch {args.batch_size} x {args.length}, median of {args.steps} "
          "steps taken in turn")
    for backend in args.backends.split(","):
        # (JAX's fused attention has no dropout: with it both runs would be the same.)
        for dropout in (0.0,) if backend == "jax" else (0.1, 0.0):
            command = [sys.executable, __file__, "--dropout", str(dropout), "--batch-size", str(args.batch_size),
                       "--length", str(args.length), "--steps", str(args.steps)]
            result = measured(command, f"{backend} {dropout}", env=dict(os.environ, KERAS_BACKEND=backend))
            if result:
                fused, written = result["fused_s"], result["written_s"]
                print(f"  {backend:<6} dropout {dropout}: fused {fused * 1000:6.0f} ms, written out "
                      f"{written * 1000:6.0f} ms, written out / fused {written / fused:.2f}x", flush=True)


if __name__ == "__main__":
    main()
