"""BERT from scratch: a WordPiece vocabulary and a small BERT pre-trained on Jane Austen.

The whole of BERT's recipe on one machine, in about twenty minutes:

1. learn a WordPiece vocabulary (at most 8,000 tokens) from Austen's six novels;
2. pre-train a small BERT (2 layers, 128 wide) on pairs of up to 32
   WordPieces with masked LM and next-sentence prediction (BERT §3.1), new
   masks and pairs each epoch, and print the losses by epoch;
3. ask it to fill in masked words of Austen-like sentences;
4. fine-tune it on MR movie reviews and print the test accuracy.

Twenty minutes of pre-training are a sliver of BERT's days, yet enough for
context: by default (20 x 400 steps of 128 pairs) the masked-LM loss falls
from 6.89 to 3.09, and the model fills Austen's blanks with words that fit
("she was [MASK] to see him." -> obliged, sorry, glad, ready, able; "they had
been married [MASK] years." -> many, ten, four, several, two). Fine-tuned on
MR it lands well under MiniLM (examples/sentiment_mr.py), but above chance
(64%). A shorter run (--epochs 8 --steps-per-epoch 300 --batch-size 32) stops
near loss 5.5, where the guesses are still mostly Austen's most frequent words.

    python examples/pretrain_austen.py                          # ~23 minutes on 2 idle CPU cores
    python examples/pretrain_austen.py --epochs 40 --hidden-dim 256
    python examples/pretrain_austen.py --output austen_bert     # keep the pre-trained preset
"""

import argparse
import os
import tempfile
import time

import keras
from example_data import read_mr

import kbert

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
AUSTEN = os.path.join(DATA, "austen.txt.gz")
FILL_MASK_SENTENCES = [
    "she was [MASK] to see him.",
    "it is a truth universally acknowledged, that a single man in possession of a good [MASK] "
    "must be in want of a wife.",
    "mr. darcy and [MASK] sister walked into the room.",
    "\"i am very [MASK] obliged to you,\" said elizabeth.",
    "they had been married [MASK] years.",
]


def pretrain(args, folder, scratch):
    """Steps 1-3; saves the pre-trained backbone and tokenizer as a preset in
    `folder` (new or empty), learning the vocabulary in `scratch`."""
    start = time.time()
    vocabulary_path = os.path.join(scratch, "vocab.txt")
    kbert.text.train_wordpiece_vocabulary([AUSTEN], args.vocabulary_size, output=vocabulary_path)
    tokenizer = kbert.BertTokenizer(vocabulary_path)
    pieces = [tokenizer.id_to_token(int(i)) for i in tokenizer(["Elizabeth's cinematographer"])[0]]
    # The learner stops short of vocabulary_size when rarer pieces would be
    # seen too seldom to learn (it keeps words seen a few times at least).
    print(f"WordPiece vocabulary of {tokenizer.vocabulary_size} tokens (at most {args.vocabulary_size} asked) "
          f"learned in {time.time() - start:.0f} s; \"Elizabeth's cinematographer\" -> {' '.join(pieces)}")

    backbone = kbert.BertBackbone(
        vocabulary_size=tokenizer.vocabulary_size,
        num_layers=args.num_layers,
        num_heads=args.hidden_dim // 64,
        hidden_dim=args.hidden_dim,
        intermediate_dim=4 * args.hidden_dim,
        # Room for MR's longer sentences too: pre-training on short pairs is
        # faster, and fine-tuning learns the positions it alone uses.
        max_sequence_length=max(args.sequence_length, args.mr_sequence_length),
        dropout=args.pretrain_dropout,
    )
    preprocessor = kbert.BertPreprocessor(tokenizer, sequence_length=args.sequence_length)
    # BERT §A.2 masks 15% of tokens, with at most max_predictions per sequence:
    # 20 for 128 tokens, so about that share of the length.
    model = kbert.BertPretrainer(backbone, preprocessor, max_predictions=max(1, args.sequence_length * 20 // 128))
    # From scratch a small model wants a larger rate than fine-tuning's 5e-5.
    model.compile(learning_rate=args.pretrain_learning_rate)

    # The pairs stream endlessly (new pairs and masks on each pass through the
    # novels); an "epoch" here is a fixed number of steps, so each epoch's
    # loss is measured on text the model has not seen yet.
    pairs = kbert.text.next_sentence_dataset(AUSTEN, max_seq_length=args.sequence_length, seed=args.seed)
    # Pairs of a paragraph come out together; mix them across paragraphs.
    pairs = pairs.repeat().shuffle(2048, seed=args.seed).batch(args.batch_size)
    start = time.time()
    history = model.fit(pairs, epochs=args.epochs, steps_per_epoch=args.steps_per_epoch, verbose=2)
    print(f"pre-trained {args.epochs} x {args.steps_per_epoch} steps of {args.batch_size} pairs "
          f"in {time.time() - start:.0f} s")
    for epoch, (mlm, nsp) in enumerate(zip(history.history["mlm_logits_loss"], history.history["nsp_logits_loss"])):
        print(f"  epoch {epoch + 1:2}: masked LM loss {mlm:.3f}  next sentence loss {nsp:.3f}")

    for sentence, [guesses] in zip(FILL_MASK_SENTENCES, model.fill_mask(FILL_MASK_SENTENCES, top_k=5)):
        guesses = ", ".join(f"{token} {p:.2f}" for token, p in guesses)
        print(f"  {sentence!r}: {guesses}")

    backbone.save_to_preset(folder)
    tokenizer.save_to_preset(folder)


def finetune_mr(args, folder):
    """Step 4: the pre-trained backbone, a new classification head, MR."""
    train_texts, train_labels = read_mr("train")
    test_texts, test_labels = read_mr("test")
    # Dropout back to BERT's 0.1: 9,545 sentences are easy to over-fit.
    model = kbert.BertClassifier.from_preset(folder, num_classes=2, sequence_length=args.mr_sequence_length,
                                             dropout=0.1)
    model.compile(learning_rate=args.finetune_learning_rate)
    start = time.time()
    model.fit(train_texts, train_labels, batch_size=32, epochs=args.mr_epochs, verbose=2)
    _, accuracy = model.evaluate(test_texts, test_labels, batch_size=128, verbose=0)
    print(f"MR test accuracy of the Austen BERT: {accuracy:.2%} on {len(test_texts)} sentences "
          f"(fine-tuned in {time.time() - start:.0f} s; chance is about 50%)")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vocabulary-size", type=int, default=8000)
    parser.add_argument("--num-layers", type=int, default=2)
    parser.add_argument("--hidden-dim", type=int, default=128, help="a multiple of 64 (one head per 64)")
    parser.add_argument("--sequence-length", type=int, default=32, help="pre-training pair length")
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--steps-per-epoch", type=int, default=400)
    parser.add_argument("--pretrain-learning-rate", type=float, default=1e-3)
    # Minutes of pre-training see each sentence about once: nothing to
    # over-fit, and dropout would only slow the learning down.
    parser.add_argument("--pretrain-dropout", type=float, default=0.0)
    parser.add_argument("--mr-epochs", type=int, default=1)
    parser.add_argument("--mr-sequence-length", type=int, default=64)
    parser.add_argument("--finetune-learning-rate", type=float, default=3e-4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output", default=None, help="a new folder for the pre-trained preset (default: a temporary one)")
    args = parser.parse_args()
    if args.hidden_dim % 64:
        parser.error(f"--hidden-dim {args.hidden_dim} is not a multiple of 64; try 128 or 256.")

    keras.utils.set_random_seed(args.seed)
    with tempfile.TemporaryDirectory() as scratch:
        folder = args.output or os.path.join(scratch, "preset")
        pretrain(args, folder, scratch)
        finetune_mr(args, folder)


if __name__ == "__main__":
    main()
