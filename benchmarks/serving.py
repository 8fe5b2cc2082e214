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


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 32, 1000])
    args = parser.parse_args()
    from example_data import minilm_folder, read_mr

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
