import json
import os
import zipfile

import keras
import numpy as np
import pytest
import tensorflow as tf
import torch
import transformers

import kbert
from kbert.models import task_inputs
from kbert.metrics import bio_spans, entity_f1
from kbert.models import BertTokenClassifier
from kbert.text.conll import read_conll
from kbert.text.token_classification import bio_entities as grouped, pack_words, token_labels
from kbert.text import BertPreprocessor
from tests.helpers import random_inputs, rebuilt_from_config, to_numpy
from tests.presets.test_huggingface_import import save_random_checkpoint

WNUT = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "data", "wnut16", "train.conll")
TAGS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]


def read_wnut(limit):
    sentences = read_conll(WNUT, limit)
    return [words for words, _ in sentences], [tags for _, tags in sentences]


@pytest.fixture(scope="module")
def preprocessor(minilm_dir):
    return BertPreprocessor.from_preset(minilm_dir, sequence_length=48)


def tiny_backbone():
    return kbert.BertBackbone(vocabulary_size=30522, num_layers=2, num_heads=2, hidden_dim=32,
                              intermediate_dim=64, max_sequence_length=128, dropout=0.0)


def tiny_tagger(preprocessor, num_classes=len(TAGS), class_names=TAGS):
    return BertTokenClassifier(tiny_backbone(), num_classes=num_classes, preprocessor=preprocessor,
                               class_names=class_names)


def test_logits_match_transformers_token_classification(tmp_path):
    hf_model = save_random_checkpoint(
        tmp_path, transformers.BertForTokenClassification, num_labels=5,
        id2label=dict(enumerate(TAGS)), label2id={t: i for i, t in enumerate(TAGS)},
    )
    model = BertTokenClassifier.from_preset(str(tmp_path))
    assert model.num_classes == 5 and model.class_names == TAGS
    inputs = random_inputs(3, 12, 120)
    with torch.no_grad():
        expected = hf_model(
            input_ids=torch.tensor(inputs["token_ids"]).long(),
            token_type_ids=torch.tensor(inputs["segment_ids"]).long(),
            attention_mask=torch.tensor(inputs["padding_mask"]).long(),
        ).logits.numpy()
    # Padding positions are never read, and the two libraries mask them differently.
    real = inputs["padding_mask"][:, :, None].astype(bool)
    np.testing.assert_allclose(np.where(real, to_numpy(model(inputs)), 0), np.where(real, expected, 0), atol=1e-4)


def test_first_piece_of_each_word_carries_its_tag_like_transformers_word_ids(minilm_dir, preprocessor):
    sentences, tags = read_wnut(200)
    tag_ids = [[i % 7 + 1 for i in range(len(t))] for t in tags]  # where each lands is what counts
    features, first_pieces = pack_words(preprocessor, tf.ragged.constant(sentences, tf.string, ragged_rank=1))
    labels, weights = token_labels(first_pieces, tf.ragged.constant(tag_ids), tf.shape(features["token_ids"]))
    hf_tokenizer = transformers.BertTokenizerFast.from_pretrained(minilm_dir)
    encoded = hf_tokenizer(sentences, is_split_into_words=True, truncation=True, max_length=48,
                           padding="max_length")
    truncated = 0
    for row, (words, word_tags) in enumerate(zip(sentences, tag_ids)):
        word_ids = encoded.word_ids(row)
        expected_labels, expected_weights = np.zeros(48, "int32"), np.zeros(48, "float32")
        for position, word in enumerate(word_ids):
            if word is not None and (position == 0 or word_ids[position - 1] != word):
                expected_labels[position], expected_weights[position] = word_tags[word], 1.0
        np.testing.assert_array_equal(features["token_ids"][row], encoded["input_ids"][row])
        np.testing.assert_array_equal(labels[row], expected_labels)
        np.testing.assert_array_equal(weights[row], expected_weights)
        truncated += expected_weights.sum() < len(words)
    assert truncated > 0  # some tweets are longer than 48 tokens: truncation was tested too


def bio_entities(tags):
    """(first word, end word, type) of one sentence's entities."""
    labels = tf.ragged.constant([[t or "" for t in tags]], tf.string, ragged_rank=1)
    entities = grouped(labels, tf.ones_like(labels, tf.float32))
    return [(int(a), int(b) + 1, k.decode()) for a, b, k in zip(
        *(entities[k].flat_values.numpy() for k in ("first_word", "last_word", "label")))]


def test_bio_tags_group_into_entities():
    assert bio_entities(["B-PER", "I-PER", "O", "B-LOC"]) == [(0, 2, "PER"), (3, 4, "LOC")]


def test_b_tag_starts_a_new_entity_even_after_the_same_type():
    assert bio_entities(["B-PER", "B-PER", "I-PER"]) == [(0, 1, "PER"), (1, 3, "PER")]


def test_stray_i_tag_starts_an_entity():
    assert bio_entities(["O", "I-LOC", "I-LOC", "I-PER"]) == [(1, 3, "LOC"), (3, 4, "PER")]


def test_words_without_a_tag_are_outside_entities():
    assert bio_entities(["B-PER", None, "I-PER", "O"]) == [(0, 1, "PER"), (2, 3, "PER")]


def test_entity_f1_counts_only_exact_spans_of_the_right_type():
    true = [["B-PER", "I-PER", "O", "B-LOC"], ["B-ORG", "O"]]
    predicted = [["B-PER", "I-PER", "O", "B-PER"], ["B-ORG", "I-ORG"]]
    scores = entity_f1(true, predicted)
    assert scores["precision"] == pytest.approx(1 / 3) and scores["recall"] == pytest.approx(1 / 3)
    assert entity_f1(true, true)["f1"] == 1.0



def test_entity_f1_groups_tags_as_the_models_own_entities_do():
    # metrics.bio_spans (Python, no TensorFlow) against the in-graph grouping
    # that `entities` and the served model use, on random tag sequences.
    rng = np.random.default_rng(0)
    choices = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC", "I-", "B", None, "", "I-PER-X", "X-PER"]
    for _ in range(200):
        tags = [choices[i] for i in rng.integers(0, len(choices), rng.integers(0, 12))]
        assert [(a, b + 1, k) for a, b, k in bio_spans(tags)] == bio_entities(tags), tags

def test_fit_on_word_lists_with_tag_names_lowers_the_loss(preprocessor):
    sentences, tags = read_wnut(32)
    tags = [[t if t in TAGS else "O" for t in sentence] for sentence in tags]
    tags = [["B-PER" if w[0].isupper() else t for w, t in zip(s, ts)] for s, ts in zip(sentences, tags)]
    model = tiny_tagger(preprocessor)
    model.compile(optimizer=keras.optimizers.Adam(3e-3))
    history = model.fit(sentences, tags, batch_size=8, epochs=2, verbose=0).history
    assert history["loss"][1] < history["loss"][0] and history["accuracy"][1] > history["accuracy"][0]


def test_accuracy_counts_tagged_words_only(preprocessor):
    model = tiny_tagger(preprocessor)
    outputs_everywhere(model, "B-PER")
    # 3 words, 2 of them B-PER; the padding and special tokens (also B-PER) do not count.
    scores = model.evaluate([["Jane", "Austen", "wrote"]], [["B-PER", "B-PER", "O"]], verbose=0, return_dict=True)
    assert scores["accuracy"] == pytest.approx(2 / 3)


def test_a_dataset_of_words_and_tag_ids_is_packed_like_lists(preprocessor):
    sentences, tags = read_wnut(4)
    tags = [[TAGS.index(t) if t in TAGS else 0 for t in sentence] for sentence in tags]
    model = tiny_tagger(preprocessor)
    dataset = tf.data.Dataset.from_tensor_slices(
        (tf.ragged.constant(sentences, tf.string, ragged_rank=1), tf.ragged.constant(tags))).batch(4)
    assert model.preprocessor.is_raw(dataset)
    (features, labels, weights), = task_inputs.dataset(model, dataset)
    (expected_features, expected_labels, expected_weights), = task_inputs.dataset(model, sentences, tags)
    np.testing.assert_array_equal(features["token_ids"], expected_features["token_ids"])
    np.testing.assert_array_equal(labels, expected_labels)
    np.testing.assert_array_equal(weights, expected_weights)
    # kbert's own pipeline runs without tf.data's autotuning (see the
    # classifier's test); the user's keeps its options.
    assert task_inputs.dataset(model, sentences, tags).options().autotune.enabled is False
    assert task_inputs.dataset(model, dataset).options().autotune.enabled is not False


def outputs_everywhere(model, tag):
    """Makes the model give `tag` to every token, whatever the text."""
    dense = model.get_layer("logits")
    dense.kernel.assign(np.zeros(dense.kernel.shape, "float32"))
    dense.bias.assign(np.where(np.arange(model.num_classes) == model.class_names.index(tag), 5.0, 0.0))


def test_entities_of_a_text_keep_its_original_characters(preprocessor):
    model = tiny_tagger(preprocessor)
    outputs_everywhere(model, "I-LOC")  # a stray I-LOC, then I-LOC: one entity of every word
    text = "Zoë flew to  Zürich (Switzerland)."
    [entities] = model.entities([text])
    [entity] = entities
    assert (entity["start"], entity["end"]) == (0, len(text)) and entity["text"] == text
    assert entity["label"] == "LOC" and 0 < entity["score"] <= 1


def test_tags_of_a_text_split_where_berts_pre_tokenizer_splits(preprocessor):
    model = tiny_tagger(preprocessor)
    outputs_everywhere(model, "B-PER")
    [tagged] = model.tags(["Jane lived in Bath."])
    assert [w for w, _, _ in tagged] == ["Jane", "lived", "in", "Bath", "."]
    assert model.tags([["Jane", "Austen"]])[0] == [("Jane", "B-PER", tagged[0][2]), ("Austen", "B-PER", tagged[0][2])]


def test_a_token_classifier_has_none_of_the_text_classifiers_answers(preprocessor):
    model = tiny_tagger(preprocessor)
    for name in ("classify", "scores", "rank"):
        assert not hasattr(model, name), name  # tags and entities answer per word
    assert not isinstance(model, kbert.BertClassifier)


@pytest.mark.parametrize("argument", [dict(threshold=0.9), dict(problem_type="multi_label_classification"),
                                      dict(score_activation="sigmoid")], ids=lambda a: next(iter(a)))
def test_the_text_classifiers_settings_are_refused_naming_them(argument, minilm_dir):
    [name] = argument
    with pytest.raises(TypeError, match=rf"got {name}=.*one tag.*Leave out {name}\."):
        kbert.BertTokenClassifier(tiny_backbone(), 5, **argument)
    with pytest.raises(TypeError, match=rf"unexpected keyword argument\(s\): {name}\."):
        BertTokenClassifier.from_preset(minilm_dir, num_classes=5, **argument)


def test_get_config_holds_the_constructors_arguments_and_rebuilds_the_model():
    model = BertTokenClassifier(tiny_backbone(), 5, dropout=0.2, class_names=TAGS, length_groups=3)
    config = model.get_config()
    assert {k for k in config if k not in ("name", "trainable", "backbone", "preprocessor")} == {
        "num_classes", "dropout", "class_names", "input_padding", "length_groups"}
    inputs = random_inputs(2, 6, 120)
    for rebuilt in rebuilt_from_config(model):
        rebuilt.set_weights(model.get_weights())
        assert rebuilt.get_config() == config
        np.testing.assert_allclose(to_numpy(rebuilt(inputs)), to_numpy(model(inputs)), atol=1e-6)


def test_a_file_saved_with_the_classifiers_settings_in_its_config_loads(tmp_path):
    # kbert of 2026-12-06 (eca07f2 to 4ab4bb9) wrote BertClassifier's settings,
    # at their defaults, into a token classifier's config.
    model = BertTokenClassifier(tiny_backbone(), 5, class_names=TAGS)
    path = str(tmp_path / "tagger.keras")
    model.save(path)
    with zipfile.ZipFile(path) as f:
        files = {name: f.read(name) for name in f.namelist()}
    saved = json.loads(files["config.json"])
    saved["config"].update(problem_type="single_label_classification", threshold=0.5, score_activation=None)
    files["config.json"] = json.dumps(saved).encode()
    with zipfile.ZipFile(path, "w") as f:
        for name, data in files.items():
            f.writestr(name, data)
    loaded = keras.saving.load_model(path)
    assert loaded.get_config() == model.get_config()
    inputs = random_inputs(2, 6, 120)
    np.testing.assert_allclose(to_numpy(loaded(inputs)), to_numpy(model(inputs)), atol=1e-6)


def test_predict_returns_the_logits_of_every_token(preprocessor):
    model = tiny_tagger(preprocessor)
    logits = model.predict(["Jane lived in Bath.", "Bath"], verbose=0)
    assert logits.shape[0] == 2 and logits.shape[2] == len(TAGS)
    # Padded batch by batch, each to its longest text (under JAX, which
    # compiles every shape, to its length bucket): all at the longer batch's
    # length, 0 past the shorter one's.
    texts = ["Bath", "Jane lived in Bath with her sister and her mother for many long years."]
    alone = [to_numpy(model(model.preprocessor.with_padding("longest")([text])))[0] for text in texts]
    assert [len(a) for a in alone] == [3, 17]
    widths = (16, 24) if keras.backend.backend() == "jax" else (3, 17)
    padded = model.predict(texts, batch_size=1, verbose=0)
    assert padded.shape[:2] == (2, widths[1])
    for i, text in enumerate(texts):
        np.testing.assert_allclose(padded[i, :len(alone[i])], alone[i], atol=1e-5)
    assert not padded[0, widths[0]:].any()


def test_tags_follow_class_names_changed_after_a_first_call(preprocessor):
    # The helpers' traced preprocessing and postprocessing are traced anew.
    model = tiny_tagger(preprocessor)
    [before] = model.tags(["Jane lived in Bath."])
    model.class_names = [name.lower() for name in TAGS]
    [after] = model.tags(["Jane lived in Bath."])
    assert [tag for _, tag, _ in after] == [tag.lower() for _, tag, _ in before]


def test_words_past_the_sequence_length_get_no_tag(preprocessor):
    model = tiny_tagger(preprocessor)
    [tagged] = model.tags([["word"] * 60])
    assert all(tag in TAGS for _, tag, _ in tagged[:46])
    assert tagged[46:] == [("word", None, 0.0)] * 14  # 48 tokens: [CLS] 46 words [SEP]


def test_tags_not_one_per_word_are_refused_with_the_sentence(preprocessor):
    model = tiny_tagger(preprocessor)
    with pytest.raises(ValueError, match="Sentence 1 has 2 words but 1 tags"):
        model.fit([["a"], ["b", "c"]], [["O"], ["O"]], verbose=0)
    with pytest.raises(ValueError, match='Unknown tag "B-ORG".*Known tags'):
        model.fit([["a"]], [["B-ORG"]], verbose=0)


def test_save_to_preset_round_trips_bit_for_bit(preprocessor, tmp_path):
    model = tiny_tagger(preprocessor)
    model.save_to_preset(str(tmp_path))
    restored = BertTokenClassifier.from_preset(str(tmp_path))
    assert restored.class_names == TAGS and restored.preprocessor.sequence_length == 48
    sentences = [["Jane", "Austen", "lived", "in", "Bath"]]
    assert restored.tags(sentences) == model.tags(sentences)
