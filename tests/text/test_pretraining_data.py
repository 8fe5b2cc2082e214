"""Shards of pre-training data: written in parallel and reproducibly, read
back as fixed-shape batches, every row once per epoch, sharded by file."""

import gzip
import os

import keras
import numpy as np
import pytest
import tensorflow as tf
import transformers

from kbert.text import pretraining_dataset, read_documents, write_pretraining_data

AUSTEN = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "data", "austen.txt.gz")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """Three files of Austen's paragraphs (one plain, two gzipped), ~100 lines each."""
    folder = tmp_path_factory.mktemp("corpus")
    documents = [d for d, _ in zip(read_documents(AUSTEN), range(90))][30:]
    paths = []
    for i in range(3):
        path = folder / (f"part-{i}.txt" + (".gz" if i else ""))
        text = "\n\n".join("\n".join(d) for d in documents[i::3]) + "\n"
        with (gzip.open if i else open)(path, "wt", encoding="utf-8") as f:
            f.write(text)
        paths.append(str(path))
    return paths


@pytest.fixture(scope="module")
def vocabulary(minilm_dir):
    return os.path.join(minilm_dir, "vocab.txt")


@pytest.fixture(scope="module")
def packed_shards(corpus, vocabulary, tmp_path_factory):
    folder = tmp_path_factory.mktemp("packed")
    return folder, write(corpus, vocabulary, folder)


@pytest.fixture(scope="module")
def unpacked_shards(corpus, vocabulary, tmp_path_factory):
    folder = tmp_path_factory.mktemp("unpacked")
    return folder, write(corpus, vocabulary, folder, packing=False)


def write(corpus, vocabulary, folder, **kwargs):
    kwargs = {"sequence_length": 64, "seed": 3, "processes": 1, **kwargs}
    return write_pretraining_data(corpus, str(folder), vocabulary, **kwargs)


def shard_bytes(folder):
    return {name: open(os.path.join(folder, name), "rb").read() for name in sorted(os.listdir(folder))}


def one_epoch(folder, batch_size, **kwargs):
    return [keras.tree.map_structure(lambda t: t.numpy(), b)
            for b in pretraining_dataset(str(folder), batch_size, **kwargs)]


def unmasked(x, y, w):
    """The batch's token ids with the masked-LM labels put back."""
    token_ids = x["token_ids"].copy()
    for row, positions, labels, weights in zip(token_ids, x["mask_positions"], y["mlm_logits"], w["mlm_logits"]):
        row[positions[weights > 0]] = labels[weights > 0]
    return token_ids


def sequences(batches):
    """Every packed sequence of the batches, as a tuple of its token ids
    (unmasked: the masked-LM labels put back)."""
    found = []
    for x, y, w in batches:
        ids = x.get("sequence_ids", x["padding_mask"])
        for row, row_ids in zip(unmasked(x, y, w), ids):
            found.extend(tuple(row[row_ids == k]) for k in range(1, row_ids.max() + 1))
    return found


def test_same_seed_gives_byte_identical_shards_with_any_number_of_processes(corpus, vocabulary, tmp_path):
    write(corpus, vocabulary, tmp_path / "a", masks="precomputed", processes=1)
    write(corpus, vocabulary, tmp_path / "b", masks="precomputed", processes=2)
    write(corpus, vocabulary, tmp_path / "c", masks="precomputed", processes=1, seed=4)
    a, b, c = (shard_bytes(tmp_path / name) for name in "abc")
    assert sorted(a) == ["pretraining_data.json", "shard-00000-of-00003.tfrecord", "shard-00001-of-00003.tfrecord",
                         "shard-00002-of-00003.tfrecord", "vocab.txt"]
    assert a == b
    assert all(a[name] != c[name] for name in a if name.endswith(".tfrecord"))


def test_packed_rows_hold_the_unpacked_pairs_with_little_padding(packed_shards, unpacked_shards):
    (packed_folder, packed), (unpacked_folder, unpacked) = packed_shards, unpacked_shards
    tokens = sum(s["tokens"] for s in packed["shards"])
    assert tokens == sum(s["tokens"] for s in unpacked["shards"])
    # Most pairs fill their 64 tokens (create_pretraining_data.py aims at the
    # full length); packing fills the rows of the shorter ones.
    padding, unpacked_padding = (1 - tokens / (m["rows"] * 64) for m in (packed, unpacked))
    assert padding < unpacked_padding / 2.5, (padding, unpacked_padding)
    batches = one_epoch(packed_folder, 8, seed=0, drop_remainder=False)
    unpacked_batches = one_epoch(unpacked_folder, 8, seed=0, drop_remainder=False)
    assert sorted(sequences(batches)) == sorted(sequences(unpacked_batches))
    assert len(sequences(batches)) == sum(s["sequences"] for s in packed["shards"])


def test_pairs_are_spans_of_the_text_as_bert_tokenizer_fast_splits_it(corpus, vocabulary, unpacked_shards):
    reference = transformers.BertTokenizerFast(vocabulary)
    text = " " + " ".join(
        " ".join(map(str, reference(line, add_special_tokens=False)["input_ids"]))
        for path in corpus for document in read_documents(path) for line in document
    ) + " "
    cls, sep = reference.cls_token_id, reference.sep_token_id
    x, y, w = next(iter(one_epoch(unpacked_shards[0], 16, shuffle_buffer=0, seed=0)))
    for row, label in zip(unmasked(x, y, w), y["nsp_logits"]):
        ids = row[row > 0]
        first_sep = list(ids).index(sep)
        assert ids[0] == cls and ids[-1] == sep
        segment_a, segment_b = ids[1:first_sep], ids[first_sep + 1:-1]
        a, b = (f" {' '.join(map(str, segment))} " for segment in (segment_a, segment_b))
        assert a in text and b in text
        if label == 0:  # IsNext: B comes after A (the cut may drop tokens between them)
            assert text.index(a) < text.index(b)


def test_batches_have_fixed_shapes_and_dynamic_masks_change_every_epoch(packed_shards):
    folder, metadata = packed_shards
    dataset = pretraining_dataset(str(folder), 4, seed=0)
    x, y, w = dataset.element_spec
    assert x["token_ids"].shape == x["sequence_ids"].shape == (4, 64)
    assert x["mask_positions"].shape == y["mlm_logits"].shape == (4, 10)
    assert x["cls_positions"].shape == y["nsp_logits"].shape == w["nsp_logits"].shape == (
        4, metadata["max_sequences_per_row"])
    first, second = (next(iter(dataset))[0]["token_ids"].numpy() for _ in range(2))
    assert not np.array_equal(first, second)


def test_precomputed_masks_hold_the_original_ids_of_dupe_factor_copies(corpus, vocabulary, packed_shards, tmp_path):
    once = packed_shards[1]
    twice = write(corpus, vocabulary, tmp_path / "twice", masks="precomputed", dupe_factor=2)
    assert sum(s["sequences"] for s in twice["shards"]) > 1.8 * sum(s["sequences"] for s in once["shards"])
    batches = one_epoch(tmp_path / "twice", 8, seed=0)
    mask_id = transformers.BertTokenizerFast(vocabulary).mask_token_id
    masked = kept = 0
    for x, y, w in batches:
        at_positions = np.take_along_axis(x["token_ids"], x["mask_positions"], axis=1)
        real = w["mlm_logits"] > 0
        masked += (at_positions[real] == mask_id).sum()
        kept += (at_positions[real] == y["mlm_logits"][real]).sum()
        assert (y["mlm_logits"][real] != mask_id).all()
    total = sum(int((w["mlm_logits"] > 0).sum()) for _, _, w in batches)
    assert 0.7 < masked / total < 0.9 and 0.05 < kept / total < 0.2  # BERT §3.1: 80% / 10% kept


def test_each_worker_reads_its_own_shards(packed_shards):
    tmp_path = packed_shards[0]
    everything = sequences(one_epoch(tmp_path, 2, drop_remainder=False))
    shares = [sequences(one_epoch(tmp_path, 2, drop_remainder=False,
                                  input_context=tf.distribute.InputContext(2, i, 1))) for i in range(2)]
    assert shares[0] and shares[1] and not set(shares[0]) & set(shares[1])
    assert sorted(shares[0] + shares[1]) == sorted(everything)
    with pytest.raises(ValueError, match="3 shard"):
        pretraining_dataset(str(tmp_path), 2, input_context=tf.distribute.InputContext(4, 0, 1))


def test_bad_input_says_what_to_fix(corpus, vocabulary, tmp_path):
    with pytest.raises(FileNotFoundError, match="No input file"):
        write_pretraining_data([str(tmp_path / "missing.txt")], str(tmp_path), vocabulary)
    with pytest.raises(ValueError, match='masks="static"'):
        write(corpus, vocabulary, tmp_path, masks="static")
    with pytest.raises(FileNotFoundError, match="holds no shards"):
        pretraining_dataset(str(tmp_path), 4)
