import itertools
import os

import numpy as np
import pytest
import tensorflow as tf

from kbert.text import (
    BertTokenizer,
    MaskedLMMaskGenerator,
    SegmentPacker,
    next_sentence_dataset,
    next_sentence_pairs,
    read_documents,
)

AUSTEN = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "data", "austen.txt.gz")


@pytest.fixture(scope="module")
def paragraphs():
    return list(read_documents(AUSTEN))


@pytest.fixture(scope="module")
def chapters(paragraphs):
    """Documents of 50 paragraphs each: long documents, like the Wikipedia
    articles BERT was trained on."""
    return [sum(paragraphs[i:i + 50], []) for i in range(0, len(paragraphs), 50)]


def test_read_documents_splits_at_blank_lines(paragraphs):
    assert paragraphs[:3] == [["EMMA"], ["By Jane Austen"], ["VOLUME I"]]
    assert paragraphs[4][0].startswith("Emma Woodhouse, handsome, clever, and rich")
    assert len(paragraphs[4]) == 4 and all(paragraphs[4])


def test_about_half_of_the_pairs_are_random_next(chapters):
    labels = [label for _, _, label in next_sentence_pairs(chapters, max_seq_length=128, seed=0)]
    # Above 50%: as in the reference, a chunk of one sentence (at a document's
    # end) can only be paired with a random B.
    assert len(labels) > 8000
    assert 0.48 < np.mean(labels) < 0.54


def test_is_next_pairs_are_consecutive_text(chapters):
    text = "\n".join(" ".join(" ".join(s.split()) for s in d) for d in chapters)
    pairs = next_sentence_pairs(chapters, max_seq_length=512, seed=1)
    is_next = [(a, b) for a, b, label in itertools.islice(pairs, 400) if label == 0]
    assert len(is_next) > 100
    for a, b in is_next:
        if len(a.split()) + len(b.split()) < 512 - 3:
            assert f"{a} {b}" in text  # untruncated: A then B is a span of a document
        else:
            # Trimmed at the front or back: B still comes after A in A's document.
            document = next(d for d in text.split("\n") if a in d)
            assert document.index(b) >= document.index(a) + len(a)


def test_random_next_pairs_are_not_consecutive_text(chapters):
    text = "\n".join(" ".join(" ".join(s.split()) for s in d) for d in chapters)
    pairs = next_sentence_pairs(chapters, max_seq_length=512, seed=1)
    not_next = [(a, b) for a, b, label in itertools.islice(pairs, 400) if label == 1]
    assert sum(f"{a} {b}" in text for a, b in not_next) < 0.02 * len(not_next)


@pytest.mark.parametrize("max_seq_length", [16, 64, 128])
def test_pairs_never_exceed_max_seq_length(paragraphs, max_seq_length):
    for a, b, _ in next_sentence_pairs(paragraphs[:3000], max_seq_length=max_seq_length, seed=2):
        assert a and b and len(a.split()) + len(b.split()) <= max_seq_length - 3


def test_short_seq_prob_makes_shorter_pairs(chapters):
    def mean_length(short_seq_prob):
        pairs = next_sentence_pairs(chapters, max_seq_length=128, short_seq_prob=short_seq_prob, seed=3)
        return np.mean([len(a.split()) + len(b.split()) for a, b, _ in pairs])

    assert mean_length(0.0) > 110
    assert mean_length(0.5) < 0.85 * mean_length(0.0)


def test_same_seed_same_pairs(paragraphs):
    first = list(next_sentence_pairs(paragraphs[:500], max_seq_length=64, seed=4))
    assert first == list(next_sentence_pairs(paragraphs[:500], max_seq_length=64, seed=4))
    assert first != list(next_sentence_pairs(paragraphs[:500], max_seq_length=64, seed=5))


def test_pairs_stream_from_a_bounded_buffer(paragraphs):
    read = []

    def documents():
        for document in paragraphs:
            read.append(document)
            yield document

    pairs = next_sentence_pairs(documents(), max_seq_length=64, buffer_size=100, seed=0)
    next(pairs)
    assert len(read) == 101  # the buffer, and one more document to start


def test_every_document_is_used_once(paragraphs):
    documents = [[f"<doc{i}> {s}" for s in d] for i, d in enumerate(paragraphs[:400])]
    pairs = next_sentence_pairs(documents, max_seq_length=512, buffer_size=50, seed=0)
    tags = {word for a, _, _ in pairs for word in a.split() if word.startswith("<doc")}
    assert tags == {f"<doc{i}>" for i in range(400)}


def test_token_id_documents_give_id_pairs():
    documents = [[[i * 100 + j] * 3 for j in range(10)] for i in range(20)]
    for a, b, label in next_sentence_pairs(documents, max_seq_length=16, seed=0):
        assert isinstance(a, list) and len(a) + len(b) <= 13
        if label == 0:
            assert a[-1] // 100 == b[0] // 100  # same document


def test_dataset_of_wordpiece_pairs_feeds_packer_and_masker(minilm_dir, paragraphs):
    tokenizer = BertTokenizer.from_preset(minilm_dir)
    dataset = next_sentence_dataset(paragraphs[:300], max_seq_length=64, buffer_size=50, seed=0, tokenizer=tokenizer)
    packer = SegmentPacker(tokenizer.cls_id, tokenizer.sep_id, tokenizer.pad_id, sequence_length=64)
    masker = MaskedLMMaskGenerator.from_tokenizer(tokenizer, max_predictions=10, seed=0)
    dataset = dataset.ragged_batch(16).map(
        lambda x: {**masker(packer((x["segment_a"], x["segment_b"]))), "next_sentence_label": x["next_sentence_label"]}
    )
    batches = list(dataset)
    assert sum(len(b["next_sentence_label"]) for b in batches) > 100
    first = batches[0]
    assert first["token_ids"].shape == (16, 64) and first["mask_positions"].shape == (16, 10)
    # The pairs were made to fit: no [SEP] is ever truncated away.
    assert (tf.reduce_sum(tf.cast(first["segment_ids"] == 1, tf.int32), axis=1) > 0).numpy().all()


def test_dataset_gives_new_pairs_each_epoch_and_the_same_when_rebuilt(paragraphs):
    def epochs():
        dataset = next_sentence_dataset(paragraphs[:300], max_seq_length=32, buffer_size=50, seed=0)
        return [[x["segment_a"].numpy() for x in dataset] for _ in range(2)]

    first, second = epochs()
    assert first != second
    assert epochs() == [first, second]


def test_dataset_reads_a_file_path():
    dataset = next_sentence_dataset(AUSTEN, max_seq_length=32, buffer_size=10, seed=0)
    element = next(iter(dataset))
    assert element["segment_a"].dtype == tf.string and element["next_sentence_label"].dtype == tf.int32


def test_dataset_rejects_a_one_shot_iterator(paragraphs):
    with pytest.raises(TypeError, match="one-shot iterator"):
        next_sentence_dataset(iter(paragraphs))
