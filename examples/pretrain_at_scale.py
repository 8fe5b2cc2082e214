"""Pre-training BERT the way a long run on many devices does it, small enough for a laptop.

Masked LM and next-sentence prediction (BERT §3.1) on Jane Austen's novels,
with what a run of days on many accelerators needs:

- shards: the text (split in 8 files here; your corpus: `--input 'wiki/*.txt.gz'`)
  is made into TFRecord shards of next-sentence pairs once, one process per
  file, the same bytes for the same seed (`kbert.text.write_pretraining_data`);
  each worker reads its own shards (`kbert.text.pretraining_dataset`);
- packing (Krell et al. 2021, on by default; `--no-packing` to compare):
  several pairs share a row, each with its own [CLS], positions and
  next-sentence label, attention kept within each pair; every batch has one
  fixed shape, with a few percent of padding;
- `kbert.training.strategy()`: the same script uses every GPU, a TPU
  (`TPU_NAME`), or several workers (`TF_CONFIG`), and one CPU here;
  `--jit-compile` compiles the train step with XLA (what TPUs run);
- BERT's pre-training optimizer (§A.2: AdamW, warm-up, linear decay), or
  LAMB for large batches, with gradient clipping at 1.0 as the reference code;
- optional mixed precision (`--mixed-precision`: bfloat16 matmuls, float32
  weights, LayerNorm, softmax and losses);
- backups every `--backup-every` steps: kill the script (Ctrl-C, `kill -9`, a
  preempted machine) and start it again with the same arguments: it resumes
  at the step it backed up, on the same stream of batches;
- TensorBoard logs: `tensorboard --logdir <run-dir>/logs`; real (non-padding)
  tokens/s and the padding share are printed at the end, and the loss
  curves of the whole run (restarts included) written to `<run-dir>/loss.png`.

    python examples/pretrain_at_scale.py                     # a few minutes on 2 CPU cores
    python examples/pretrain_at_scale.py --no-packing        # the same pairs, one per row
    python examples/pretrain_at_scale.py --optimizer lamb --learning-rate 2e-3 --batch-size 128
    KERAS_BACKEND=tensorflow python examples/pretrain_at_scale.py --mixed-precision --jit-compile  # GPUs/TPUs

The run needs the TensorFlow backend (tf.distribute); it sets it if unset.
"""

import argparse
import csv
import gzip
import os
import shutil
import time

os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import keras  # noqa: E402

import kbert  # noqa: E402

AUSTEN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "austen.txt.gz")
# Guessed at the end of the run: Austen's first line of Pride and Prejudice
# (shortened), and sentences whose blanks her novels fill many ways.
FILL_IN = [
    "she was [MASK] to see him.",
    "it is a truth universally [MASK] that a single man must want a wife.",
    "mr. darcy [MASK] the room.",
    "i am very [MASK] to hear it.",
    "he was a very [MASK] young man.",
]


def split_austen(folder, parts=8):
    """Austen's novels as `parts` files of whole documents (paragraphs), so
    that up to `parts` workers each read their own shards."""
    os.makedirs(folder, exist_ok=True)
    paths = [os.path.join(folder, f"austen-{i}.txt.gz") for i in range(parts)]
    if not all(os.path.exists(p) for p in paths):
        documents = list(kbert.text.read_documents(AUSTEN))
        for i, path in enumerate(paths):
            # Contiguous blocks keep each novel's paragraphs in order (IsNext pairs need that).
            block = documents[i * len(documents) // parts:(i + 1) * len(documents) // parts]
            with gzip.open(path, "wt", encoding="utf-8") as f:
                f.write("\n\n".join("\n".join(d) for d in block) + "\n")
    return paths


def shards(args, vocabulary):
    """The run's shards, written once (a resumed run reads the same ones)."""
    folder = os.path.join(args.run_dir, "shards-packed" if args.packing else "shards")
    if not os.path.exists(os.path.join(folder, kbert.text.pretraining_data.METADATA)):
        inputs = args.input or split_austen(os.path.join(args.run_dir, "text"))
        start = time.time()
        kbert.text.write_pretraining_data(inputs, folder, vocabulary, sequence_length=args.sequence_length,
                                          packing=args.packing, seed=args.seed, processes=args.processes)
        print(f"wrote the shards in {folder} in {time.time() - start:.0f} s")
    return folder


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run-dir", default="runs/pretrain_at_scale", help="backups, logs, shards, vocabulary")
    parser.add_argument("--input", nargs="*", help="text files or globs (default: Austen in 8 files)")
    parser.add_argument("--no-packing", dest="packing", action="store_false", help="one pair per row")
    parser.add_argument("--processes", type=int, default=None, help="processes writing the shards")
    parser.add_argument("--jit-compile", action="store_true", help="compile the train step with XLA")
    parser.add_argument("--vocabulary-size", type=int, default=4000)
    parser.add_argument("--num-layers", type=int, default=2)
    parser.add_argument("--hidden-dim", type=int, default=128, help="a multiple of 64 (one head per 64)")
    parser.add_argument("--sequence-length", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=32, help="the global batch, split between replicas")
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--steps-per-epoch", type=int, default=100)
    parser.add_argument("--optimizer", choices=["adamw", "lamb"], default="adamw")
    parser.add_argument("--learning-rate", type=float, default=1e-3,
                        help="peak rate (BERT-Base: 1e-4; a small model from scratch takes more)")
    parser.add_argument("--warmup-steps", type=int, default=40)
    parser.add_argument("--mixed-precision", action="store_true", help="bfloat16 compute (GPUs, TPUs)")
    parser.add_argument("--backup-every", type=int, default=50, help="steps between backups")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.hidden_dim % 64:
        parser.error(f"--hidden-dim {args.hidden_dim} is not a multiple of 64; try 128 or 256.")

    strategy = kbert.training.strategy()  # first: several workers must start it before any other op
    print(f"{type(strategy).__name__} with {strategy.num_replicas_in_sync} replica(s)")
    keras.utils.set_random_seed(args.seed)

    os.makedirs(args.run_dir, exist_ok=True)
    vocabulary = os.path.join(args.run_dir, "vocab.txt")
    if not os.path.exists(vocabulary):  # a resumed run keeps its vocabulary
        kbert.text.train_wordpiece_vocabulary(args.input or [AUSTEN], args.vocabulary_size, output=vocabulary)
    tokenizer = kbert.BertTokenizer(vocabulary)
    folder = shards(args, vocabulary)
    metadata = kbert.text.pretraining_data_metadata(folder)
    tokens = sum(shard["tokens"] for shard in metadata["shards"])
    padding = 1 - tokens / (metadata["rows"] * args.sequence_length)
    print(f"{metadata['rows']} rows of {args.sequence_length} tokens ({'packed' if args.packing else 'one pair each'}), "
          f"{padding:.1%} padding; an epoch of the data is {metadata['rows'] // args.batch_size} steps")

    total_steps = args.epochs * args.steps_per_epoch
    with strategy.scope():
        backbone = kbert.BertBackbone(
            vocabulary_size=tokenizer.vocabulary_size, num_layers=args.num_layers,
            num_heads=args.hidden_dim // 64, hidden_dim=args.hidden_dim, intermediate_dim=4 * args.hidden_dim,
            max_sequence_length=args.sequence_length, packing=args.packing,
            dtype="mixed_bfloat16" if args.mixed_precision else None,
        )
        preprocessor = kbert.BertPreprocessor(tokenizer, sequence_length=args.sequence_length)
        model = kbert.BertPretrainer(backbone, preprocessor)
        model.compile(optimizer=kbert.training.pretraining_optimizer(
            total_steps, learning_rate=args.learning_rate, warmup_steps=args.warmup_steps,
            optimizer=args.optimizer, global_clipnorm=1.0,
        ), jit_compile=args.jit_compile)

    backup_dir = os.path.join(args.run_dir, "backup")
    done = kbert.training.trained_steps(backup_dir)
    if done:
        print(f"resuming after step {done} of {total_steps}")
    callbacks = kbert.training.callbacks(args.run_dir, monitor=None, save_freq=args.backup_every)
    # Each epoch's means, kept across restarts: the loss curves cover the whole run.
    history_csv = os.path.join(args.run_dir, "history.csv")
    if not done and os.path.exists(history_csv):
        os.remove(history_csv)  # a new run (a finished one leaves no backup)
    callbacks.append(keras.callbacks.CSVLogger(history_csv, append=True))
    # The global batch: under a strategy each worker reads its own shards and
    # each replica gets batch_size / replicas rows of every batch.
    batches = kbert.text.pretraining_dataset(folder, args.batch_size, seed=args.seed).repeat().skip(done)
    start = time.time()
    history = model.fit(batches, epochs=args.epochs, steps_per_epoch=args.steps_per_epoch, callbacks=callbacks,
                        verbose=2)
    seconds = time.time() - start
    steps = int(model.optimizer.iterations) - done
    print(f"trained to step {int(model.optimizer.iterations)} in {seconds:.0f} s: "
          f"{steps * args.batch_size * args.sequence_length * (1 - padding) / seconds:,.0f} real tokens/s, "
          f"{padding:.1%} padding")
    for mlm, nsp in zip(history.history["mlm_logits_loss"], history.history["nsp_logits_loss"]):
        print(f"  masked LM loss {mlm:.3f}  next sentence loss {nsp:.3f}")
    with open(history_csv, newline="") as f:
        rows = list(csv.DictReader(f))
    curves = {name: [float(row[name]) for row in rows] for name in rows[0]
              if name != "epoch" and rows[0][name] != "NA"}  # (CSVLogger's val_ columns hold NA)
    kbert.plots.plot_history(curves, path=os.path.join(args.run_dir, "loss.png"))
    for text in FILL_IN:
        guesses = model.fill_mask([text], top_k=5)[0][0]
        print(f"  {text!r}: " + ", ".join(f"{token} {p:.2f}" for token, p in guesses))
    # Backbone, both heads and the vocabulary: BertMaskedLM.from_preset(preset)
    # fills in blanks, BertClassifier.from_preset(preset, ...) fine-tunes from it.
    preset = os.path.join(args.run_dir, "preset")
    # save_to_preset writes a new folder: a resumed run replaces the preset
    # that an earlier run of this same model left there.
    shutil.rmtree(preset, ignore_errors=True)
    model.save_to_preset(preset)
    print(f"pre-trained preset in {preset}; logs: tensorboard --logdir {os.path.join(args.run_dir, 'logs')}")


if __name__ == "__main__":
    main()
