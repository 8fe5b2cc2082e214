"""Where a TensorFlow mixed_bfloat16 training step (or, with `--work infer`,
a `predict_on_batch`) spends its time, op by op, and how far it is from the
arithmetic limit of its matrix multiplications.

Runs kbert's `BertClassifier` (all-MiniLM-L6-v2, compiled with its defaults,
`dtype="mixed_bfloat16"`) and, with `--libraries kbert,keras_hub`, KerasHub's
`BertTextClassifier` of the same shape (random weights, AdamW, as in
train_and_infer.py), one training step of batch 32 x 128 at a time under
`tf.profiler.experimental.start/stop`. Each library runs in its own process.
The profile's op events (the executor threads of the host plane, read from the
`.xplane.pb` with the protobuf classes TensorFlow ships, so nothing to pip
install) are summed by self time and grouped: matrix multiplications, casts,
LayerNorm, softmax, dropout, GELU, optimizer, loss and metrics, other, and
the XLA executables of what kbert fuses with XLA (its GELU, LayerNorm and
dropout bits on statically shaped tensors). Shares are of the summed op time
of a step (two executor threads run ops side by side, so the sum can exceed
the wall time); medians over the profiled steps.

The arithmetic limit: the step's matmul FLOPs counted from the model shape
(forward projections, feed-forward and attention scores/values, plus pooler
and classifier; forward + backward = 3x forward) divided by this CPU's
bfloat16 GEMM rate, measured in the same process with a 2048 x 2048
`tf.matmul` in bfloat16 (median of several).

    KERAS_BACKEND=tensorflow python benchmarks/profile_step_tf.py [--model base] [--steps 3] [--libraries kbert,keras_hub]
    KERAS_BACKEND=tensorflow python benchmarks/profile_step_tf.py --work infer [--model base]
"""

import argparse
import collections
import glob
import json
import os
import re
import statistics
import sys
import tempfile
import time

os.environ["KERAS_BACKEND"] = "tensorflow"
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from measured import measured  # noqa: E402

XLA = "XLA-fused (GELU, LayerNorm, dropout bits)"
GROUPS = ("matmul", XLA, "casts", "LayerNorm", "softmax", "dropout", "GELU", "optimizer", "loss and metrics",
          "bias gradients (BiasAddGrad)", "gradient sums (AddN)", "other")

# Layers, hidden, intermediate: MiniLM-L6 (all-MiniLM-L6-v2) and BERT-base (train_and_infer.BASE).
SHAPES = {"minilm": dict(layers=6, hidden=384, intermediate=1536),
          "base": dict(layers=12, hidden=768, intermediate=3072)}
TITLES = {"minilm": "MiniLM-L6", "base": "BERT-base"}


def group_of(node, op_type, optimizer_scope):
    """The group of one op event: by op type where it tells, else by its name scope."""
    scope = node.lower()
    if "MatMul" in op_type or "Einsum" in op_type:
        return "matmul"
    if op_type == "XlaExecutable":
        return XLA
    if op_type == "Cast":
        return "casts"
    if scope.startswith(optimizer_scope + "/") or op_type.startswith(("ResourceApply", "Assign")):
        return "optimizer"
    if "loss" in scope or "metric" in scope or "CrossEntropy" in op_type:
        return "loss and metrics"
    if "layer_norm" in scope or "layernorm" in scope or "FusedBatchNorm" in op_type:
        return "LayerNorm"
    if "softmax" in scope or "Softmax" in op_type:
        return "softmax"
    if "dropout" in scope or op_type.startswith("StatelessRandom"):
        return "dropout"
    if "gelu" in scope or op_type in ("Erf", "Erfc"):
        return "GELU"
    if op_type == "BiasAddGrad":
        return "bias gradients (BiasAddGrad)"
    if op_type == "AddN":
        return "gradient sums (AddN)"
    return "other"


def op_self_times(xplane_file):
    """[(node name, op type, self time in s)] of the TF op events on the host plane."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    space = xplane_pb2.XSpace()
    with open(xplane_file, "rb") as f:
        space.ParseFromString(f.read())
    ops = []
    for plane in space.planes:
        if plane.name != "/host:CPU":
            continue
        for line in plane.lines:
            events = []
            for event in line.events:
                meta = plane.event_metadata[event.metadata_id]
                # TF op events are named "node:OpType" with the op type as display name;
                # a function compiled by XLA runs as one executable (kbert's fused
                # elementwise chains on TensorFlow), whose event names neither.
                if meta.display_name and ":" in meta.name:
                    events.append((event.offset_ps, event.duration_ps, meta.name.rsplit(":", 1)[0],
                                   meta.display_name))
                elif meta.name == "CpuExecutable::ExecuteAsyncOnStream":
                    events.append((event.offset_ps, event.duration_ps, "XLA executable", "XlaExecutable"))
            events.sort(key=lambda e: (e[0], -e[1]))
            self_ps, stack = [e[1] for e in events], []
            for i, (offset, duration, _, _) in enumerate(events):
                while stack and events[stack[-1]][0] + events[stack[-1]][1] <= offset:
                    stack.pop()
                if stack:  # nested op (a function call's body): not the caller's own time
                    self_ps[stack[-1]] -= duration
                stack.append(i)
            ops += [(node, op_type, s / 1e12) for (_, _, node, op_type), s in zip(events, self_ps)]
    return ops


def matmul_flops(batch_size, length, layers, hidden, intermediate, num_classes=2, last_layer_cls_only=False,
                 backward=True):
    """Matmul FLOPs of one training step (forward + backward = 3x forward;
    `backward=False`: the forward pass alone).
    `last_layer_cls_only`: the last layer computes only the [CLS] position
    (keys and values for every token; query, output, feed-forward and
    attention for one), as kbert's classifier does."""

    def layer(queries):  # `queries` positions per sequence attend to all `length` keys
        keys_values = batch_size * length * 2 * 2 * hidden * hidden
        rest = batch_size * queries * 2 * (2 * hidden * hidden + 2 * hidden * intermediate)  # Q, output, FFN
        return keys_values + rest + batch_size * 2 * 2 * queries * length * hidden  # Q K^T, weights x V

    forward = (layers - 1) * layer(length) + layer(1 if last_layer_cls_only else length)
    forward += batch_size * 2 * (hidden * hidden + hidden * num_classes)  # pooler, classifier
    return 3 * forward if backward else forward


def gemm_rate(dtype, n=2048, repeats=9):
    """FLOP/s of an n x n x n `tf.matmul` in `dtype`, median of `repeats`."""
    import tensorflow as tf

    a = tf.random.normal((n, n), dtype="float32")
    a, b = tf.cast(a, dtype), tf.cast(tf.transpose(a), dtype)
    for _ in range(2):
        tf.matmul(a, b).numpy()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        tf.matmul(a, b).numpy()
        times.append(time.perf_counter() - start)
    return 2 * n**3 / statistics.median(times)


def profile_one(args):
    """In the subprocess: build, warm up, profile `args.steps` steps one by one; print JSON."""
    import tensorflow as tf
    import train_and_infer

    setup = argparse.Namespace(model=args.model, batch_size=args.batch_size, length=args.length, work=args.work)
    if args.one == "kbert":
        name, step = train_and_infer.run_kbert(setup, dtype="mixed_bfloat16")
    else:
        name, step = train_and_infer.run_keras_hub(setup, dtype="mixed_bfloat16")
    import keras

    (model,) = (c.cell_contents for c in step.__closure__ if isinstance(c.cell_contents, keras.Model))
    optimizer_scope = model.optimizer.name
    for _ in range(args.warmup):
        step()
    plain = []
    for _ in range(args.steps):
        start = time.perf_counter()
        step()
        plain.append(time.perf_counter() - start)
    steps = []
    with tempfile.TemporaryDirectory() as logs:
        for i in range(args.steps):
            logdir = os.path.join(logs, str(i))
            tf.profiler.experimental.start(logdir)
            start = time.perf_counter()
            step()
            wall = time.perf_counter() - start
            tf.profiler.experimental.stop()
            (xplane,) = glob.glob(os.path.join(logdir, "plugins", "profile", "*", "*.xplane.pb"))
            groups, types, nodes = collections.Counter(), collections.Counter(), collections.Counter()
            for node, op_type, seconds in op_self_times(xplane):
                group = group_of(node, op_type, optimizer_scope)
                groups[group] += seconds
                types[f"{op_type} ({group})"] += seconds
                # one row per node across layers: layer numbers and op counters out
                nodes[f"{group}|" + re.sub(r"_\d+", "", node) + f" [{op_type}]"] += seconds
            steps.append({"wall": wall, "groups": groups, "types": types, "nodes": nodes})
    result = {"name": name, "plain_wall": statistics.median(plain),
              "profiled_wall": statistics.median(s["wall"] for s in steps),
              "op_time": statistics.median(sum(s["groups"].values()) for s in steps)}
    for key in ("groups", "types", "nodes"):
        keys = set().union(*(s[key] for s in steps))
        result[key] = {k: statistics.median(s[key].get(k, 0.0) for s in steps) for k in keys}
    if args.gemm:
        result["gemm_bfloat16"] = gemm_rate("bfloat16")
        result["gemm_float32"] = gemm_rate("float32")
    print(json.dumps(result))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--libraries", default="kbert,keras_hub", help="comma-separated: kbert, keras_hub")
    parser.add_argument("--model", choices=list(SHAPES), default="minilm")
    parser.add_argument("--work", choices=["train", "infer"], default="train")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--length", type=int, default=128)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--top", type=int, default=15, help="rows of the op-type listing")
    parser.add_argument("--per-group", type=int, default=4, help="nodes listed per group")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    parser.add_argument("--gemm", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        return profile_one(args)

    results = []
    libraries = args.libraries.split(",")
    for i, library in enumerate(libraries):
        command = [sys.executable, __file__, "--one", library, "--model", args.model, "--batch-size", str(args.batch_size),
                   "--length", str(args.length), "--work", args.work, "--warmup", str(args.warmup), "--steps", str(args.steps)]
        command += ["--gemm"] if i == 0 else []
        result = measured(command, library, tail=3000)
        if result is None:
            sys.exit(f"{library} failed (above)")
        results.append(result)

    work = "training step" if args.work == "train" else "inference (predict_on_batch)"
    print(f"{TITLES[args.model]} {work}, batch {args.batch_size} x {args.length}, TensorFlow, mixed_bfloat16; "
          f"medians of {args.steps} profiled steps after {args.warmup} warm-up steps\n")
    print("| | " + " | ".join(r["name"] for r in results) + " |")
    print("|---|" + "---|" * len(results))
    print("| step, wall time (unprofiled) | " + " | ".join(f"{r['plain_wall']:.2f} s" for r in results) + " |")
    print("| step, wall time (profiled) | " + " | ".join(f"{r['profiled_wall']:.2f} s" for r in results) + " |")
    print("| op time summed over threads | " + " | ".join(f"{r['op_time']:.2f} s" for r in results) + " |")
    for group in GROUPS:
        cells = [f"{100 * r['groups'].get(group, 0) / r['op_time']:.1f}% ({1000 * r['groups'].get(group, 0):.0f} ms)"
                 for r in results]
        print(f"| {group} | " + " | ".join(cells) + " |")

    backward = args.work == "train"
    flops = matmul_flops(args.batch_size, args.length, **SHAPES[args.model], backward=backward)
    rate = results[0]["gemm_bfloat16"]
    limit = flops / rate
    own = {"kbert": matmul_flops(args.batch_size, args.length, **SHAPES[args.model], last_layer_cls_only=True,
                                 backward=backward)}
    print(f"\nmatmul FLOPs of the step ({'forward + backward' if backward else 'forward'}): {flops / 1e9:.0f} GFLOP "
          f"(kbert, last layer for [CLS] only: {own['kbert'] / 1e9:.0f} GFLOP)")
    print(f"bfloat16 GEMM rate (2048 x 2048 tf.matmul, median): {rate / 1e9:.0f} GFLOP/s "
          f"(float32: {results[0]['gemm_float32'] / 1e9:.0f} GFLOP/s)")
    print(f"arithmetic limit: {limit:.3f} s per step = {1 / limit:.2f} steps/s = "
          f"{args.batch_size / limit:.0f} sequences/s")
    for library, r in zip(libraries, results):
        matmul = r["groups"].get("matmul", 0)
        print(f"{r['name']}: {r['plain_wall']:.2f} s per step = {args.batch_size / r['plain_wall']:.1f} sequences/s, "
              f"{r['plain_wall'] / limit:.1f}x the limit; its matmul ops run at "
              f"{own.get(library, flops) / matmul / 1e9:.0f} GFLOP/s (its FLOPs over their summed op time)")

    for r in results:
        print(f"\n{r['name']}: op types by self time")
        for key, seconds in sorted(r["types"].items(), key=lambda kv: -kv[1])[:args.top]:
            print(f"  {key:<55}{100 * seconds / r['op_time']:6.1f}%  {1000 * seconds:7.0f} ms")
        print(f"{r['name']}: the largest nodes of each group (summed over layers), by self time")
        for group in GROUPS:
            rows = sorted(((k.split("|", 1)[1], v) for k, v in r["nodes"].items() if k.startswith(group + "|")),
                          key=lambda kv: -kv[1])
            for key, seconds in rows[:args.per_group]:
                share = 100 * seconds / r["op_time"]
                print(f"  {group[:12]:<13}{key[-100:]:<100}{share:6.1f}%  {1000 * seconds:6.0f} ms")


if __name__ == "__main__":
    main()
