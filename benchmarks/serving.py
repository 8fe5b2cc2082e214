"""Served model against `predict`: time and peak memory at batch 1, 32 and 1,000.

Exports a kbert MiniLM-L6 classifier (float32, sequence length 512, MiniLM's
own maximum, so that a served model padding every request to the sequence
length would show) with the tokenizer in the graph. Each measurement runs in
a fresh process: the served side loads the SavedModel the way TF Serving does
(only TensorFlow and tensorflow-text) and calls `serving_default` on raw MR
sentences; the `predict` side loads the same model from a kbert preset and
calls `model.predict` on the same sentences. Time is the median of `--repeats`
calls after one warm-up call; memory is the process's peak resident size
after the calls, less its size after loading (the request's own cost).

    python benchmarks/serving.py [--repeats 3] [--sizes 1 32 1000]

With `--casts`, served models only, in mixed_bfloat16 at sequence length
128: the export as written (the encoder's dense weights stored in bfloat16,
read as they are) against the same model exported with them in float32,
cast on every request, alternating, each call in a fresh process:

    python benchmarks/serving.py --casts [--model base] [--rounds 3]
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "examples"))

MEASURE = r"""
import json, resource, statistics, sys, time
side, path, texts, repeats = json.loads(sys.stdin.read())
if side == "served":
    import tensorflow as tf
    import tensorflow_text  # noqa: F401
    signature = tf.saved_model.load(path).signatures["serving_default"]
    call = lambda: signature(text=tf.constant(texts))
else:
    from kbert.models.task_presets import load_task
    model = load_task(path)
    call = lambda: model.predict(texts, batch_size=32, verbose=0)
loaded = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
call()
times = []
for _ in range(repeats):
    start = time.perf_counter(); call(); times.append(time.perf_counter() - start)
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"seconds": statistics.median(times), "peak_mb": (peak - loaded) / 1024}))
"""


def measure(side, path, texts, repeats):
    out = subprocess.run([sys.executable, "-c", MEASURE], input=json.dumps([side, path, texts, repeats]),
                         capture_output=True, text=True, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    if out.returncode:
        raise RuntimeError(out.stderr[-2000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


def compare_casts(args, texts):
    """Served time of the export as written against one whose dense weights
    are cast per request (`kbert.serving.export.cast_weights` skipped)."""
    import statistics

    from example_data import minilm_folder

    import kbert

    writer = sys.modules["kbert.serving.export"]
    if args.model == "minilm":
        model = kbert.BertClassifier.from_preset(minilm_folder(), num_classes=2, sequence_length=128,
                                                 dtype="mixed_bfloat16")
    else:  # BERT-base's shape, random weights, MiniLM's (uncased, same-sized) vocabulary
        backbone = kbert.BertBackbone(vocabulary_size=30522, num_layers=12, num_heads=12, hidden_dim=768,
                                      intermediate_dim=3072, dtype="mixed_bfloat16")
        model = kbert.BertClassifier(backbone, 2, kbert.BertPreprocessor.from_preset(minilm_folder(),
                                                                                   sequence_length=128))
    sizes = [size for size in args.sizes if size <= 32] or [1, 32]
    with tempfile.TemporaryDirectory() as root:
        paths = {"weights cast once, at export": model.export(os.path.join(root, "once"))}
        cast_weights, writer.cast_weights = writer.cast_weights, lambda model: {}
        try:
            paths["weights cast per request"] = model.export(os.path.join(root, "per_request"))
        finally:
            writer.cast_weights = cast_weights
        megabytes = {name: sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path) for f in files)
                     / 2**20 for name, path in paths.items()}
        times = {name: {size: [] for size in sizes} for name in paths}
        for _ in range(args.rounds):
            for size in sizes:
                for name, path in paths.items():
                    times[name][size].append(measure("served", path, texts[:size], args.repeats)["seconds"])
    print(f"\n{args.model} classifier served (mixed_bfloat16, sequence length 128) on MR test sentences: "
          f"medians of {args.rounds} rounds of {args.repeats} calls, alternating")
    print(f"{'export':<30} | {'MB':>5} | " + " | ".join(f"batch {size:>2}, ms" for size in sizes))
    for name in paths:
        print(f"{name:<30} | {megabytes[name]:>5.0f} | "
              + " | ".join(f"{statistics.median(times[name][size]) * 1e3:>12.1f}" for size in sizes))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 32, 1000])
    parser.add_argument("--casts", action="store_true", help="served, cast once against cast per request")
    parser.add_argument("--model", choices=["minilm", "base"], default="minilm", help="with --casts")
    parser.add_argument("--rounds", type=int, default=3, help="with --casts")
    args = parser.parse_args()
    from example_data import minilm_folder, read_mr

    if args.casts:
        return compare_casts(args, read_mr("test")[0])

    import kbert

    texts = read_mr("test")[0]
    rows = []
    with tempfile.TemporaryDirectory() as root:
        model = kbert.BertClassifier.from_preset(minilm_folder(), num_classes=2, sequence_length=512,
                                                 dtype="float32")
        preset = os.path.join(root, "preset")
        model.save_to_preset(preset)
        export = model.export(os.path.join(root, "served"))
        for size in args.sizes:
            batch = (texts * (1 + size // len(texts)))[:size]
            # Alternating sides, each in its own process.
            served = measure("served", export, batch, args.repeats)
            predicted = measure("predict", preset, batch, args.repeats)
            rows.append((size, served, predicted))
    print(f"\nMiniLM-L6 classifier (float32, sequence length 512) on MR test sentences: medians of "
          f"{args.repeats} calls; memory: peak resident growth over the loaded process")
    print(f"{'batch':>6} | {'served s':>9} {'seq/s':>8} {'MB':>7} | {'predict s':>9} {'seq/s':>8} {'MB':>7} | "
          f"{'served / predict time':>21}")
    for size, s, p in rows:
        print(f"{size:>6} | {s['seconds']:>9.3f} {size / s['seconds']:>8.1f} {s['peak_mb']:>7.0f} | "
              f"{p['seconds']:>9.3f} {size / p['seconds']:>8.1f} {p['peak_mb']:>7.0f} | "
              f"{s['seconds'] / p['seconds']:>21.2f}")


if __name__ == "__main__":
    main()
