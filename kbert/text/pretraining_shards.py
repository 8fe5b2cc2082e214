"""Writing pre-training shards (`write_pretraining_data`): text files in,
TFRecord shards of tokenized next-sentence pairs out, one shard per input
file, one process per file, the same bytes for the same seed whatever the
number of processes. `kbert.text.pretraining_data` reads them back
(`pretraining_dataset`) and says what the format holds.
"""

import glob
import json
import math
import multiprocessing
import os
import random

import numpy as np

from kbert.text.masking import MaskedLMMaskGenerator
from kbert.text.next_sentence import next_sentence_pairs, read_documents
from kbert.text.packing import SegmentPacker
from kbert.text.sequence_packing import pack_sequences, packed_row
from kbert.text.tokenizer import BertTokenizer, write_vocabulary
from kbert.tf_if_present import tf

METADATA = "pretraining_data.json"
VOCABULARY = "vocab.txt"
MASKS = ("dynamic", "precomputed")
_CHUNK = 256  # pairs packed and masked per TensorFlow call


def write_pretraining_data(
    input_files,
    output_dir,
    vocabulary,
    sequence_length=128,
    packing=True,
    max_sequences_per_row=None,
    masks="dynamic",
    dupe_factor=1,
    mask_selection_rate=0.15,
    max_predictions=None,
    whole_word=False,
    short_seq_prob=0.1,
    buffer_size=1000,
    packing_window=10000,
    seed=0,
    processes=None,
    lowercase=True,
):
    """Writes TFRecord shards of next-sentence pairs from text files.

    Each input file (plain or `.gz`; one sentence per line, a blank line
    between documents) becomes one shard,
    `shard-00003-of-00010.tfrecord`, written by its own process; next to them
    go `vocab.txt` and `pretraining_data.json` (the settings, and rows,
    sequences and tokens per shard). A shard's content depends only on its
    file, its index and `seed`: the same call gives byte-identical shards
    with any number of processes.

    Pairs are `create_pretraining_data.py`'s (`next_sentence_pairs`, random
    B spans from the same file's documents), `dupe_factor` times with other
    random choices. With `packing`, the pairs of each `packing_window` are
    packed into rows of `sequence_length` (`pack_sequences`: best fit
    decreasing) and the rows shuffled.

    Args:
        input_files: paths or glob patterns (a pattern's files sorted).
        output_dir: where the shards go (made if missing).
        vocabulary: a `vocab.txt` path, a list of tokens, or a
            `kbert.text.BertTokenizer`.
        sequence_length: the row length (and the longest pair).
        packing: several pairs per row (the model needs `packing=True`).
        max_sequences_per_row: the most pairs in a packed row (default: no
            limit but the length; the reader pads rows to the most it finds).
        masks: `"dynamic"` (drawn in `pretraining_dataset`, new every epoch)
            or `"precomputed"` (drawn here, written into the shards).
        dupe_factor: how many times each file's documents are made into
            pairs (and, precomputed, masked), each time differently.
        mask_selection_rate, whole_word: as `MaskedLMMaskGenerator`'s.
        max_predictions: the most predictions per pair; default
            `ceil(mask_selection_rate * sequence_length)` (20 at 128, BERT §A.2).
        short_seq_prob, buffer_size: as `next_sentence_pairs`'s.
        packing_window: how many pairs are packed together (bounds memory).
        seed: the seed of every random choice.
        processes: worker processes (default: one per CPU, at most one per
            file); `1` works in this process. Workers are spawned: a script
            calling this needs `if __name__ == "__main__":`.
        lowercase: the tokenizer's.

    Returns:
        The metadata written to `pretraining_data.json` (a dict).

    Example:
    >>> write_pretraining_data(["examples/data/austen.txt.gz"], "shards", "vocab.txt", seed=0)
    """
    files = _input_files(input_files)
    if masks not in MASKS:
        raise ValueError(f'masks="{masks}": use "dynamic" (drawn every epoch) or "precomputed" (written here).')
    if int(dupe_factor) < 1:
        raise ValueError(f"dupe_factor={dupe_factor} must be at least 1.")
    if max_sequences_per_row is not None and int(max_sequences_per_row) < 1:
        raise ValueError(f"max_sequences_per_row={max_sequences_per_row} must be at least 1, or None.")
    tokenizer = vocabulary if isinstance(vocabulary, BertTokenizer) else BertTokenizer(vocabulary, lowercase=lowercase)
    max_predictions = max_predictions or math.ceil(mask_selection_rate * sequence_length)
    settings = {
        "sequence_length": int(sequence_length), "packing": bool(packing),
        "max_sequences_per_row": max_sequences_per_row if packing else 1, "masks": masks,
        "dupe_factor": int(dupe_factor), "mask_selection_rate": mask_selection_rate,
        "max_predictions": int(max_predictions), "whole_word": bool(whole_word),
        "short_seq_prob": short_seq_prob, "buffer_size": int(buffer_size),
        "packing_window": int(packing_window), "seed": int(seed),
    }
    os.makedirs(output_dir, exist_ok=True)
    names = [f"shard-{i:05d}-of-{len(files):05d}.tfrecord" for i in range(len(files))]
    jobs = [(path, i, os.path.join(output_dir, name), settings) for i, (path, name) in enumerate(zip(files, names))]
    processes = min(processes or os.cpu_count() or 1, len(files))
    if processes == 1:
        counts = [_write_shard(job, tokenizer) for job in jobs]
    else:
        context = multiprocessing.get_context("spawn")
        with context.Pool(processes, _start_worker, (tokenizer.get_config(),)) as pool:
            counts = pool.map(_write_shard, jobs, chunksize=1)
    write_vocabulary(tokenizer.vocabulary, os.path.join(output_dir, VOCABULARY))
    metadata = {
        **settings,
        "lowercase": tokenizer.lowercase,
        "max_sequences_per_row": max(c.pop("max_sequences") for c in counts),
        "max_predictions_per_row": max(c.pop("max_predictions") for c in counts),
        "rows": sum(c["rows"] for c in counts),
        "shards": [{"file": name, **c} for name, c in zip(names, counts)],
    }
    with open(os.path.join(output_dir, METADATA), "w", encoding="utf-8") as f:
        json.dump(metadata, f, indent=2, sort_keys=True)
    return metadata


def _input_files(input_files):
    if isinstance(input_files, (str, os.PathLike)):
        input_files = [input_files]
    files = []
    for pattern in map(str, input_files):
        matches = sorted(glob.glob(pattern)) if glob.has_magic(pattern) else [pattern]
        missing = [p for p in matches if not os.path.isfile(p)]
        if not matches or missing:
            raise FileNotFoundError(
                f"No input file {(missing or [pattern])[0]!r}: give text files (plain or .gz, one sentence per "
                "line, a blank line between documents) or glob patterns that match some."
            )
        files.extend(matches)
    if not files:
        raise ValueError("write_pretraining_data got no input files.")
    return files


def _seed(*parts):
    """One int from several (the run's seed, a file's index, a copy's index),
    the same in every process (unlike Python's salted hash)."""
    return int(np.random.SeedSequence(list(parts)).generate_state(1)[0])


_worker_tokenizer = None


def _start_worker(tokenizer_config):
    """Builds a worker process's tokenizer once, for all its shards."""
    global _worker_tokenizer
    _worker_tokenizer = BertTokenizer.from_config(tokenizer_config)


def _write_shard(job, tokenizer=None):
    """Writes one file's shard; returns its counts."""
    path, index, output, s = job
    tokenizer = tokenizer or _worker_tokenizer
    packer = SegmentPacker(tokenizer.cls_id, tokenizer.sep_id, tokenizer.pad_id, s["sequence_length"])
    masker = None
    if s["masks"] == "precomputed":
        masker = MaskedLMMaskGenerator.from_tokenizer(
            tokenizer, max_predictions=s["max_predictions"], mask_selection_rate=s["mask_selection_rate"],
            whole_word=s["whole_word"],
        )
    counts = {"rows": 0, "sequences": 0, "tokens": 0, "max_sequences": 0, "max_predictions": 0}
    rng = random.Random(_seed(s["seed"], index))

    def sequences():
        for copy in range(s["dupe_factor"]):
            pairs = next_sentence_pairs(_tokenized_documents(path, tokenizer), s["sequence_length"],
                                        s["short_seq_prob"], s["buffer_size"], _seed(s["seed"], index, copy))
            chunk = []
            for number, pair in enumerate(pairs, 1):
                chunk.append(pair)
                if len(chunk) == _CHUNK:
                    yield from _tokenized_pairs(chunk, packer, masker, (_seed(s["seed"], index, copy), number))
                    chunk = []
            if chunk:
                yield from _tokenized_pairs(chunk, packer, masker, (_seed(s["seed"], index, copy), -1))

    with tf.io.TFRecordWriter(output) as writer:
        window = []
        for sequence in _then_none(sequences()):
            if sequence is not None:
                window.append(sequence)
                if len(window) < s["packing_window"]:
                    continue
            if s["packing"]:
                rows = pack_sequences([len(q["token_ids"]) for q in window], s["sequence_length"],
                                      s["max_sequences_per_row"])
                rng.shuffle(rows)
            else:
                rows = [[i] for i in range(len(window))]
            for row in rows:
                record = packed_row([window[i] for i in row])
                writer.write(_example(record).SerializeToString(deterministic=True))
                counts["rows"] += 1
                counts["sequences"] += len(row)
                counts["tokens"] += len(record["token_ids"])
                counts["max_sequences"] = max(counts["max_sequences"], len(row))
                counts["max_predictions"] = max(counts["max_predictions"], len(record.get("mask_ids", ())))
            window = []
    return counts


def _tokenized_documents(path, tokenizer, block=4096):
    """The file's documents as lists of WordPiece id lists, tokenized
    `block` sentences per call: a call per document costs far more
    (docs/benchmarks.md, "Measurements behind the code")."""
    documents, sentences = [], 0
    for document in _then_none(read_documents(path)):
        if document is not None:
            documents.append(document)
            sentences += len(document)
            if sentences < block:
                continue
        if documents:
            ids = iter(tokenizer([line for d in documents for line in d]).to_list())
            for d in documents:
                yield [next(ids) for _ in d]
        documents, sentences = [], 0


def _then_none(items):
    yield from items
    yield None


def _tokenized_pairs(pairs, packer, masker, seed):
    """`[CLS] A [SEP] B [SEP]` of a chunk of id pairs, masked with a
    stateless seed when masks are precomputed; dicts of int lists."""
    features = packer((tf.ragged.constant([a for a, _, _ in pairs], tf.int32, ragged_rank=1),
                       tf.ragged.constant([b for _, b, _ in pairs], tf.int32, ragged_rank=1)))
    if masker is not None:
        features = masker(features, seed=tf.constant([seed[0] % (1 << 62), seed[1]], tf.int64))
    features = {k: v.numpy() for k, v in features.items()}
    lengths = features["padding_mask"].sum(axis=1)
    for i, (_, _, label) in enumerate(pairs):
        sequence = {"token_ids": features["token_ids"][i, :lengths[i]].tolist(),
                    "segment_ids": features["segment_ids"][i, :lengths[i]].tolist(),
                    "next_sentence_label": int(label)}
        if masker is not None:
            real = int(features["mask_weights"][i].sum())
            sequence["mask_positions"] = features["mask_positions"][i, :real].tolist()
            sequence["mask_ids"] = features["mask_ids"][i, :real].tolist()
        yield sequence


def _example(record):
    return tf.train.Example(features=tf.train.Features(feature={
        name: tf.train.Feature(int64_list=tf.train.Int64List(value=values)) for name, values in record.items()
    }))
