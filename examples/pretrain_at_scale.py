"""Pre-training BERT the way a long run on many devices does it, small enough for a laptop.

Masked LM and next-sentence prediction (BERT §3.1) on Jane Austen's novels,
with what a run of days on many accelerators needs:

- `kbert.training.strategy()`: the same script uses every GPU, a TPU, or
  several workers (TF_CONFIG), and one CPU here;
- BERT's pre-training optimizer (§A.2: AdamW, warm-up, linear decay), or
  LAMB for large batches, with gradient clipping at 1.0 as the reference code;
- optional mixed precision (`--mixed-precision`: bfloat16 matmuls, float32
  weights, LayerNorm, softmax and losses);
- backups every `--backup-every` steps: kill the script (Ctrl-C, `kill -9`, a
  preempted machine) and start it again with the same arguments: it resumes
  at the step it backed up, on the same stream of pairs;
- TensorBoard logs: `tensorboard --logdir <run-dir>/logs`.

    python examples/pretrain_at_scale.py                     # ~2 minutes on 2 CPU cores
    python examples/pretrain_at_scale.py --optimizer lamb --learning-rate 2e-3 --batch-size 128
    KERAS_BACKEND=tensorflow python examples/pretrain_at_scale.py --mixed-precision  # on GPUs/TPUs

The run needs the TensorFlow backend (tf.distribute); it sets it if unset.
"""

import argparse
import os
import time

os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import keras  # noqa: E402

import kbert  # noqa: E402

AUSTEN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "austen.txt.gz")


def pair_stream(args, tokenizer, skip):
    """Endless, reproducible batches of next-sentence pairs, starting after
    the `skip` batches a resumed run has already trained on."""
    pairs = kbert.text.next_sentence_dataset(AUSTEN, max_seq_length=args.sequence_length, seed=args.seed,
                                             tokenizer=tokenizer)
    # Pairs of a paragraph come out together; mix them across paragraphs.
    return pairs.repeat().shuffle(2048, seed=args.seed).ragged_batch(args.batch_size).skip(skip)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run-dir", default="runs/pretrain_at_scale", help="backups, logs and the vocabulary")
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
        kbert.text.train_wordpiece_vocabulary([AUSTEN], args.vocabulary_size, output=vocabulary)
    tokenizer = kbert.BertTokenizer(vocabulary)

    total_steps = args.epochs * args.steps_per_epoch
    with strategy.scope():
        backbone = kbert.BertBackbone(
            vocabulary_size=tokenizer.vocabulary_size, num_layers=args.num_layers,
            num_heads=args.hidden_dim // 64, hidden_dim=args.hidden_dim, intermediate_dim=4 * args.hidden_dim,
            max_sequence_length=args.sequence_length,
            dtype="mixed_bfloat16" if args.mixed_precision else None,
        )
        preprocessor = kbert.BertPreprocessor(tokenizer, sequence_length=args.sequence_length)
        # BERT §A.2: at most 20 predictions per 128 tokens.
        model = kbert.BertPretrainer(backbone, preprocessor, max_predictions=max(1, args.sequence_length * 20 // 128))
        model.compile(optimizer=kbert.training.pretraining_optimizer(
            total_steps, learning_rate=args.learning_rate, warmup_steps=args.warmup_steps,
            optimizer=args.optimizer, global_clipnorm=1.0,
        ))

    backup_dir = os.path.join(args.run_dir, "backup")
    done = kbert.training.trained_steps(backup_dir)
    if done:
        print(f"resuming after step {done} of {total_steps}")
    callbacks = kbert.training.callbacks(args.run_dir, monitor=None, save_freq=args.backup_every)
    start = time.time()
    history = model.fit(pair_stream(args, tokenizer, done), epochs=args.epochs,
                        steps_per_epoch=args.steps_per_epoch, callbacks=callbacks, verbose=2)
    print(f"trained to step {int(model.optimizer.iterations)} in {time.time() - start:.0f} s")
    for mlm, nsp in zip(history.history["mlm_logits_loss"], history.history["nsp_logits_loss"]):
        print(f"  masked LM loss {mlm:.3f}  next sentence loss {nsp:.3f}")
    print("  'she was [MASK] to see him.':",
          ", ".join(f"{token} {p:.2f}" for token, p in model.fill_mask(["she was [MASK] to see him."], top_k=5)[0][0]))
    backbone.save_to_preset(os.path.join(args.run_dir, "preset"))
    tokenizer.save_to_preset(os.path.join(args.run_dir, "preset"))
    print(f"pre-trained preset in {os.path.join(args.run_dir, 'preset')}; logs: tensorboard --logdir "
          f"{os.path.join(args.run_dir, 'logs')}")


if __name__ == "__main__":
    main()
