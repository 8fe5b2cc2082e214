"""Served model against `predict`: time and peak memory on MR sentences and long paragraphs.

Exports a kbert MiniLM-L6 classifier at the defaults (float32, the preset's
sequence length: 512) with the tokenizer in the graph, and answers the same
texts two ways, each measurement in a fresh process, alternating: the served
side loads the SavedModel the way TF Serving does (only TensorFlow and
tensorflow-text) and calls `serving_default` on the raw texts in one
request; the `predict` side loads the same model from a kbert preset and
calls `model.predict(texts, batch_size=32)`. Two corpora: 1,000 MR test
sentences (short: 27 tokens on average, 63 at most) and 1,000 SQuAD-Shifts
paragraphs (long and uneven: 159 tokens on average, 154-3,069 characters;
`examples/data/squad_shifts/paragraphs_1000.json`). Time is the median of
`--repeats` calls after one warm-up call (`--large`: the one call), wall
and CPU (the process's, all threads); memory is the process's peak resident
size from the first call on (Linux's VmHWM, reset once the model is loaded:
loading peaks higher), and that less its resident size once loaded (MB):
what answering costs on top of holding the model.

    python benchmarks/serving.py [--repeats 3] [--sizes 1 32 1000] [--corpora mr paragraphs]
        [--baseline /path/to/other/kbert] [--large 10000]

`--baseline` adds the served model as another kbert checkout exports it
(the same weights, through a preset; its package imported from that
folder), for a before/after. `--large N`: the served model's peak memory on
one request of N MR sentences against one of 1,000, bounded by its slices.

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
import json, statistics, sys, time
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
def status_mb(key):  # VmRSS: resident now; VmHWM: its peak
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) / 1024 for line in f if line.startswith(key + ":"))
loaded = status_mb("VmRSS")
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # the peak restarts from here: loading peaks higher than a request
times, cpu = [], []
for _ in range(repeats + 1):  # the first call warms up (timed only where it is the only one)
    start, used = time.perf_counter(), time.process_time()
    call()
    times.append(time.perf_counter() - start); cpu.append(time.process_time() - used)
times, cpu = times[1:] or times, cpu[1:] or cpu
peak = status_mb("VmHWM")
print(json.dumps({"seconds": statistics.median(times), "cpu_seconds": statistics.median(cpu),
                  "peak_mb": peak - loaded, "process_peak_mb": peak}))
"""


ROOT = os.path.normpath(os.path.join(HERE, ".."))

EXPORT = r"""
import sys
from kbert.models.task_presets import load_task
print(load_task(sys.argv[1]).export(sys.argv[2]))
"""


def run_python(code, stdin="", kbert_root=ROOT, args=()):
    """The last line `code` prints, run in a fresh process that imports kbert
    from `kbert_root`."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "KERAS_BACKEND": "tensorflow",
           "PYTHONPATH": os.pathsep.join(filter(None, [kbert_root, os.environ.get("PYTHONPATH")]))}
    out = subprocess.run([sys.executable, "-c", code, *args], input=stdin, capture_output=True, text=True, env=env)
    if out.returncode:
        raise RuntimeError(out.stderr[-2000:])
    return out.stdout.strip().splitlines()[-1]


def measure(side, path, texts, repeats):
    return json.loads(run_python(MEASURE, json.dumps([side, path, texts, repeats])))


def read_paragraphs():
    """1,000 SQuAD-Shifts paragraphs (see examples/data/README.md)."""
    with open(os.path.join(ROOT, "examples", "data", "squad_shifts", "paragraphs_1000.json"), encoding="utf-8") as f:
        return json.load(f)


def compare_casts(args, texts):
    """Served time of the export as written against one whose dense weights
    are cast per request (`kbert.serving.saved_model._cast_weights` skipped)."""
    import statistics

    from example_data import minilm_folder

    import kbert

    writer = sys.modules["kbert.serving.saved_model"]
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
        cast_weights, writer._cast_weights = writer._cast_weights, lambda layers: {}
        try:
            paths["weights cast per request"] = model.export(os.path.join(root, "per_request"))
        finally:
            writer._cast_weights = cast_weights
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
    parser.add_argument("--corpora", nargs="+", choices=["mr", "paragraphs"], default=["mr", "paragraphs"])
    parser.add_argument("--baseline", help="another kbert checkout, whose export is served too")
    parser.add_argument("--large", type=int, help="also one served request of this many MR sentences (memory)")
    parser.add_argument("--casts", action="store_true", help="served, cast once against cast per request")
    parser.add_argument("--model", choices=["minilm", "base"], default="minilm", help="with --casts")
    parser.add_argument("--rounds", type=int, default=3, help="with --casts")
    args = parser.parse_args()
    from example_data import minilm_folder, read_mr

    if args.casts:
        return compare_casts(args, read_mr("test")[0])

    import kbert

    corpora = {"mr": ("MR test sentences", read_mr("test")[0]), "paragraphs": ("SQuAD-Shifts paragraphs",
                                                                              read_paragraphs())}
    with tempfile.TemporaryDirectory() as root:
        model = kbert.BertClassifier.from_preset(minilm_folder(), num_classes=2, dtype="float32")
        length = model.preprocessor.sequence_length
        preset = os.path.join(root, "preset")
        model.save_to_preset(preset)
        exports = {"served": model.export(os.path.join(root, "served"))}
        if args.baseline:
            exports["baseline"] = run_python(EXPORT, kbert_root=args.baseline,
                                             args=(preset, os.path.join(root, "baseline")))
        table = {}
        for corpus in args.corpora:
            texts = corpora[corpus][1]
            for size in args.sizes:
                batch = (texts * (1 + size // len(texts)))[:size]
                # Alternating sides, each in its own process.
                table[corpus, size] = {side: measure("served", path, batch, args.repeats)
                                       for side, path in exports.items()}
                table[corpus, size]["predict"] = measure("predict", preset, batch, args.repeats)
        large = {}
        if args.large:
            texts = corpora["mr"][1]
            for size in (1000, args.large):
                large[size] = measure("served", exports["served"], (texts * (1 + size // len(texts)))[:size], 0)
    sides = list(exports) + ["predict"]
    print(f"\nMiniLM-L6 classifier (float32, sequence length {length}), one request / one predict call, medians of "
          f"{args.repeats} calls: wall and CPU seconds; MB: the peak resident size over the size once loaded, and "
          "the process's peak")
    print(f"{'corpus':<10} {'texts':>5} | " + " | ".join(f"{side + ' s':>11} {'cpu s':>7} {'MB':>5} {'peak':>5}"
                                                       for side in sides)
          + " | served / predict: s, cpu s, MB" + (" | served / baseline s" if args.baseline else ""))
    for (corpus, size), row in table.items():
        served, predicted = row["served"], row["predict"]
        line = f"{corpus:<10} {size:>5} | " + " | ".join(
            f"{row[side]['seconds']:>11.3f} {row[side]['cpu_seconds']:>7.2f} {row[side]['peak_mb']:>5.0f} "
            f"{row[side]['process_peak_mb']:>5.0f}" for side in sides)
        line += (f" | {served['seconds'] / predicted['seconds']:.2f}, "
                 f"{served['cpu_seconds'] / predicted['cpu_seconds']:.2f}, "
                 f"{served['peak_mb'] - predicted['peak_mb']:+.0f}")
        if args.baseline:
            line += f" | {served['seconds'] / row['baseline']['seconds']:.2f}"
        print(line)
    for size, result in large.items():
        print(f"served, one request of {size:>6} MR sentences: {result['seconds']:.1f} s, peak resident "
              f"{result['peak_mb']:.0f} MB over the loaded size")


if __name__ == "__main__":
    main()
