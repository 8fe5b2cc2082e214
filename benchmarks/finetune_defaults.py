"""Fine-tuning at each library's defaults: what a user's first `fit` gives.

The same checkpoint (all-MiniLM-L6-v2, offline), data, test set, scorer,
maximum length, float32 and seeds as `finetune_parity.py`; each library then
trains as it does when nothing else is said:
- `kbert`: `from_preset(folder, ...)`, `fit(x, y, epochs=...)`: the default
  `compile` and `fit`'s default batch. `--kbert-compile` tries other
  settings under its own label (`--label`), e.g. `{"schedule": "constant"}`,
  and `--kbert-batch-size` another batch than `fit`'s.
- `keras_hub`: `BertTextClassifier.from_preset(folder, num_classes=...)`,
  `fit(x, y, epochs=...)`: its default `compile` (Adam at a constant 5e-5, no
  weight decay, no clipping) and Keras' batch of 32 (MR and VitaminC only:
  KerasHub has no BERT token classifier or question answerer). Its
  preprocessor's length is set to the task's (its default, 512, only pads
  more).
- `transformers`: `Trainer`'s defaults (`TrainingArguments`: batch 8, AdamW
  at 5e-5 with epsilon 1e-8, no weight decay, no warm-up, linear decay to 0,
  gradients clipped at 1.0), in `finetune_parity.py`'s loop.

Tasks (`--tasks`): `mr`, `pairs`, `ner`, `qa`, with `finetune_parity.py`'s
data, lengths and scorers. MR trains on its first 2,000 sentences by default
(the issue's short run; `--max-train-examples 0` for all 9,545).

Every run is its own process; the sides alternate, seed by seed. Prints each
run, then a table of mean ± spread (half the range) per task, epochs and side.

Usage:
    python benchmarks/finetune_defaults.py --tasks mr,pairs --epochs 1,3 --seeds 0,1,2
    python benchmarks/finetune_defaults.py --tasks mr --sides kbert --label constant \\
        --kbert-compile '{"schedule": "constant"}'
"""

import argparse
import json
import os
import sys
import time

import numpy as np
from finetune_parity import (RECIPES, RUNS, VITAMINC_LABELS, measured_score, minilm_folder, mr_data, pairs_data,
                             print_scores, spread)

# TrainingArguments' defaults.
TRAINER_DEFAULTS = {"batch_size": 8, "learning_rate": 5e-5, "warmup": 0.0, "weight_decay": 0.0}
MR_TRAIN_EXAMPLES = 2000


def keras_hub_classifier(args, data, num_classes, length):
    import keras
    import keras_hub

    (x, y), (test_x, test_y) = data(args)
    keras.utils.set_random_seed(args.seed)
    model = keras_hub.models.BertTextClassifier.from_preset(minilm_folder(), num_classes=num_classes,
                                                            dtype="float32")
    model.preprocessor.sequence_length = length

    def arrays(texts):  # a list of texts, or a tuple of two lists (pairs)
        return tuple(np.array(t) for t in texts) if isinstance(texts, tuple) else np.array(texts)

    model.fit(arrays(x), y, epochs=args.epochs, verbose=0)
    return float(np.mean(np.argmax(model.predict(arrays(test_x), batch_size=128, verbose=0), -1) == test_y))


def keras_hub_mr(args, recipe):
    return keras_hub_classifier(args, mr_data, 2, recipe["sequence_length"])


def keras_hub_pairs(args, recipe):
    return keras_hub_classifier(args, pairs_data, len(VITAMINC_LABELS), recipe["sequence_length"])


KERAS_HUB = {"mr": keras_hub_mr, "pairs": keras_hub_pairs}


def run(side, task, args):
    """One run's score: each side at its defaults, at the task's length."""
    length = {"sequence_length": RECIPES[task]["sequence_length"]}
    if side == "kbert":
        batch = {"batch_size": args.kbert_batch_size} if args.kbert_batch_size else {}
        return RUNS["kbert", task](args, {**length, **batch})
    if side == "transformers":
        return RUNS["transformers", task](args, {**length, **TRAINER_DEFAULTS})
    return KERAS_HUB[task](args, length)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", default="mr,pairs")
    parser.add_argument("--sides", default="kbert,keras_hub,transformers")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--epochs", default="1,3", help="comma-separated: each is its own set of runs")
    parser.add_argument("--max-train-examples", type=int, default=None,
                        help=f"0: all; default: MR's first {MR_TRAIN_EXAMPLES:,}, all of the others")
    parser.add_argument("--kbert-compile", type=json.loads, default={}, help="JSON of compile arguments")
    parser.add_argument("--kbert-model", type=json.loads, default={}, help="JSON of extra from_preset arguments")
    parser.add_argument("--kbert-batch-size", type=int, default=None, help="instead of fit's default batch")
    parser.add_argument("--label", default="",
                        help="the kbert column's name with --kbert-compile, --kbert-model or --kbert-batch-size")
    parser.add_argument("--run", help=argparse.SUPPRESS)  # side:task:seed:epochs, in the subprocess
    args = parser.parse_args()
    if args.run:
        side, task, seed, epochs = args.run.split(":")
        args.seed, args.epochs = int(seed), int(epochs)
        args.transformers_padding = "longest"  # as `Trainer`'s default collator pads
        if args.max_train_examples is None:
            args.max_train_examples = MR_TRAIN_EXAMPLES if task == "mr" else 0
        start = time.perf_counter()
        print_scores(run(side, task, args), start)
        return

    print(f"training examples {args.max_train_examples or 'task default'}, kbert on "
          f"{os.environ.get('KERAS_BACKEND', 'tensorflow')}, kbert compile {args.kbert_compile}, "
          f"kbert model {args.kbert_model}, kbert batch {args.kbert_batch_size or 'default'}", flush=True)
    names = {side: f"kbert {args.label}".strip() if side == "kbert" else side for side in args.sides.split(",")}
    scores = {}
    for task in args.tasks.split(","):
        for epochs in args.epochs.split(","):
            for seed in args.seeds.split(","):
                for side in args.sides.split(","):
                    if side == "keras_hub" and task not in KERAS_HUB:
                        continue
                    command = [sys.executable, __file__, "--run", f"{side}:{task}:{seed}:{epochs}",
                               "--kbert-compile", json.dumps(args.kbert_compile),
                               "--kbert-model", json.dumps(args.kbert_model)]
                    if args.kbert_batch_size:
                        command += ["--kbert-batch-size", str(args.kbert_batch_size)]
                    if args.max_train_examples is not None:
                        command += ["--max-train-examples", str(args.max_train_examples)]
                    score = measured_score(command, f"{task} {epochs} epochs {names[side]} seed {seed}")
                    if score is not None:
                        scores.setdefault((task, epochs, side), []).append(score)

    sides = args.sides.split(",")
    print(f"\n| task | epochs | {' | '.join(names[s] for s in sides)} |\n|---|---|" + "---|" * len(sides))
    for task in args.tasks.split(","):
        for epochs in args.epochs.split(","):
            print(f"| {task} | {epochs} | {' | '.join(spread(scores.get((task, epochs, side))) for side in sides)} |")


if __name__ == "__main__":
    main()
