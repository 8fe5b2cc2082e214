"""train_wordpiece_vocabulary: a BERT vocabulary learned from Jane Austen."""

import gzip
import itertools
from pathlib import Path

import pytest
import tensorflow as tf
from transformers import BertTokenizerFast

from kbert.text import BertTokenizer, train_wordpiece_vocabulary
from kbert.text.pre_tokenization import pre_tokenize

AUSTEN = Path(__file__).resolve().parents[2] / "examples" / "data" / "austen.txt.gz"
VOCABULARY_SIZE = 1500


def austen_lines(count, skip=0):
    """`count` non-blank lines of Austen's novels, after the first `skip` of them."""
    with gzip.open(AUSTEN, "rt", encoding="utf-8") as f:
        lines = (line.rstrip("\n") for line in f if line.strip())
        return list(itertools.islice(lines, skip, skip + count))


@pytest.fixture(scope="module")
def sample():
    return austen_lines(3000)


@pytest.fixture(scope="module")
def vocabulary(sample, tmp_path_factory):
    path = tmp_path_factory.mktemp("vocabulary") / "vocab.txt"
    vocabulary = train_wordpiece_vocabulary(sample, VOCABULARY_SIZE, output=str(path))
    assert path.read_text(encoding="utf-8").splitlines() == vocabulary
    return vocabulary


def test_special_tokens_come_first_in_bert_order(vocabulary):
    assert vocabulary[:5] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def test_vocabulary_stays_within_the_size_asked_and_has_no_duplicates(vocabulary):
    assert VOCABULARY_SIZE * 0.9 <= len(vocabulary) <= VOCABULARY_SIZE
    assert len(set(vocabulary)) == len(vocabulary)


def test_every_character_is_in_the_vocabulary_alone_and_as_a_continuation(vocabulary, sample):
    words = pre_tokenize(tf.constant(sample)).flat_values.numpy()
    characters = {c for word in words for c in word.decode("utf-8")}
    missing = [c for c in characters if c not in vocabulary or "##" + c not in vocabulary]
    assert missing == []


def test_training_text_round_trips_without_unknown_tokens(vocabulary, sample):
    tokenizer = BertTokenizer(vocabulary)
    ids = tokenizer(sample)
    assert int(tf.reduce_sum(tf.cast(ids.flat_values == tokenizer.unk_id, tf.int32))) == 0
    # Detokenized text is the normalized words joined by spaces.
    words = pre_tokenize(tf.constant(sample))
    expected = tf.strings.reduce_join(words, axis=-1, separator=" ")
    assert tokenizer.detokenize(ids).numpy().tolist() == expected.numpy().tolist()


def test_vocabulary_learns_whole_frequent_words_and_splits_rare_ones(vocabulary):
    assert {"the", "and", "emma", "harriet", "##ing"} <= set(vocabulary)
    tokenizer = BertTokenizer(vocabulary)
    pieces = [tokenizer.id_to_token(i) for i in tokenizer("incomprehensibly").numpy()]
    assert len(pieces) > 1 and all(p.startswith("##") for p in pieces[1:])


def test_hugging_face_tokenizes_unseen_text_with_the_written_file_as_kbert_does(vocabulary, tmp_path):
    path = tmp_path / "vocab.txt"
    path.write_text("\n".join(vocabulary) + "\n", encoding="utf-8")
    unseen = austen_lines(500, skip=20_000)
    hf = BertTokenizerFast(vocab=str(path))
    assert BertTokenizer(str(path))(unseen).to_list() == hf(unseen, add_special_tokens=False)["input_ids"]


def test_files_datasets_and_lists_give_the_same_vocabulary(tmp_path):
    lines = austen_lines(300)
    text_file = tmp_path / "austen.txt"
    text_file.write_text("\n".join(lines) + "\n", encoding="utf-8")
    gz_file = tmp_path / "austen.txt.gz"
    with gzip.open(gz_file, "wt", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    from_list = train_wordpiece_vocabulary(lines, 300)
    assert train_wordpiece_vocabulary([str(text_file)], 300) == from_list
    assert train_wordpiece_vocabulary([gz_file], 300) == from_list
    assert train_wordpiece_vocabulary(tf.data.Dataset.from_tensor_slices(lines), 300) == from_list
    assert train_wordpiece_vocabulary(iter(lines), 300) == from_list


def test_cased_training_keeps_capitals():
    vocabulary = train_wordpiece_vocabulary(austen_lines(300), 400, lowercase=False)
    assert "E" in vocabulary and "e" in vocabulary


def test_too_small_a_size_for_the_alphabet_is_refused_with_a_hint():
    with pytest.raises(ValueError, match="distinct characters.*Raise vocabulary_size"):
        train_wordpiece_vocabulary(["abcdefghij"], 20)


def test_a_single_string_is_refused_with_a_hint():
    with pytest.raises(TypeError, match="pass a list of texts"):
        train_wordpiece_vocabulary("just one text", 100)


def test_a_vocabulary_the_learner_overshoots_is_cut_to_the_size_asked(tmp_path):
    # On 300 lines the learner's threshold search runs out at 430 tokens.
    lines = austen_lines(300)
    vocabulary = train_wordpiece_vocabulary(lines, 400, output=str(tmp_path / "vocab.txt"))
    assert len((tmp_path / "vocab.txt").read_text(encoding="utf-8").splitlines()) == len(vocabulary) == 400
    tokenizer = BertTokenizer(vocabulary)
    assert tokenizer.unk_id not in tokenizer(lines).flat_values.numpy()
