"""Wrong input to a task model fails at once, in Python, saying what to fix:
before any tracing or training, alike on every backend."""

import re

import numpy as np
import pytest

import kbert
from kbert.models import task_inputs
from tests.models.test_bert_classifier import tiny_classifier
from tests.presets.test_huggingface_import import save_random_checkpoint

TEXTS = ["a fine film", "a dull film", "great acting", "too long"]


def refused(model, method, texts, labels, match):
    with pytest.raises(ValueError, match=match):
        getattr(model, method)(texts, labels, verbose=0)
    # Refused before Keras built a step: nothing was traced or trained.
    assert model.train_function is None and model.test_function is None


@pytest.mark.parametrize("method", ["fit", "evaluate"])
@pytest.mark.parametrize("label", [2, -1])
def test_labels_outside_the_classes_are_refused(minilm_dir, method, label):
    refused(tiny_classifier(minilm_dir), method, TEXTS, [0, 1, label, 1],
            match=rf"Got labels {label} \(1 of 4\), outside \[0, 2\) for num_classes=2")


@pytest.mark.parametrize("method", ["fit", "evaluate"])
def test_fractional_labels_are_refused(minilm_dir, method):
    refused(tiny_classifier(minilm_dir), method, TEXTS, [0.3, 1, 0, 1],
            match=r"Got labels 0.3 \(1 of 4\): labels are class ids, whole numbers")


def test_whole_float_labels_are_class_ids(minilm_dir):
    _, labels = next(iter(task_inputs.dataset(tiny_classifier(minilm_dir), TEXTS, [0.0, 1.0, 1.0, 0.0])))
    assert labels.dtype.name == "int32" and labels.numpy().tolist() == [0, 1, 1, 0]


def test_one_hot_labels_are_refused_with_the_fix(minilm_dir):
    refused(tiny_classifier(minilm_dir), "fit", TEXTS, np.eye(2)[[0, 1, 0, 1]],
            match=r"shape \(4, 2\): rows of 2 values.*labels.argmax\(axis=-1\).*multi_label_classification")


@pytest.mark.parametrize("method", ["fit", "evaluate"])
def test_texts_and_labels_of_different_lengths_name_both_counts(minilm_dir, method):
    refused(tiny_classifier(minilm_dir), method, TEXTS, [0, 1, 0], match=r"Got 4 texts but 3 labels")


def test_validation_data_of_different_lengths_is_refused(minilm_dir):
    with pytest.raises(ValueError, match=r"Got 2 texts but 1 labels"):
        tiny_classifier(minilm_dir).fit(TEXTS, [0, 1, 0, 1], validation_data=(TEXTS[:2], [0]), verbose=0)


@pytest.mark.parametrize("method", ["fit", "evaluate"])
@pytest.mark.parametrize("text, found", [(None, r"None \(NoneType\)"), (3, r"3 \(int\)")])
def test_a_text_that_is_not_a_string_is_named_by_index(minilm_dir, method, text, found):
    refused(tiny_classifier(minilm_dir), method, ["a", text, "b", "c"], [0, 1, 0, 1],
            match=rf"texts\[1\] is {found}, not a string")


def test_predict_names_the_text_that_is_not_a_string(minilm_dir):
    with pytest.raises(ValueError, match=r"texts\[2\] is None"):
        tiny_classifier(minilm_dir).predict(["a", "b", None], verbose=0)


@pytest.mark.parametrize("method", ["fit", "evaluate"])
def test_pairs_of_unequal_length_name_both_counts(minilm_dir, method):
    refused(tiny_classifier(minilm_dir), method, (TEXTS, TEXTS[:3]), [0, 1, 0, 1],
            match=r"Got 4 texts_a but 3 texts_b")


@pytest.mark.parametrize("num_classes", ["2", 0, 2.0, True])
def test_num_classes_must_be_a_positive_int(minilm_dir, num_classes):
    with pytest.raises(ValueError, match=r"give the number of classes as a positive int"):
        tiny_classifier(minilm_dir, num_classes=num_classes)



@pytest.mark.parametrize("cls, args", [(kbert.BertClassifier, (2,)), (kbert.BertQuestionAnswerer, ()),
                                       (kbert.BertMaskedLM, ()), (kbert.BertTextEmbedder, ())])
def test_a_task_built_on_something_else_than_a_backbone_says_what_to_pass(cls, args):
    # e.g. a preset name where the backbone goes: before, an AttributeError from inside the head.
    with pytest.raises(ValueError, match=rf"{cls.__name__} is built on a BertBackbone; got str\. Pass "
                                         rf"kbert\.BertBackbone\(\.\.\.\).*{cls.__name__}\.from_preset"):
        cls("base", *args)

@pytest.fixture
def tiny_preset(tmp_path):
    """A 2-layer Hugging Face checkpoint with a 120-token vocab.txt."""
    save_random_checkpoint(tmp_path)
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"token{i}" for i in range(115)]
    (tmp_path / "vocab.txt").write_text("".join(t + "\n" for t in tokens))
    return str(tmp_path)


# A bare backbone checkpoint: the classifier's head starts fresh (and warns so).
fresh_head = pytest.mark.filterwarnings("ignore:.*head starts from its initialisation")


@fresh_head
def test_from_preset_refuses_a_different_architecture(tiny_preset):
    with pytest.raises(ValueError, match=r"Cannot change num_layers .* the weights fix the architecture"):
        kbert.BertClassifier.from_preset(tiny_preset, num_classes=2, num_layers=3)
    # Repeating the preset's architecture changes nothing.
    model = kbert.BertClassifier.from_preset(tiny_preset, num_classes=2, num_layers=2)
    assert model.backbone.num_layers == 2


@pytest.mark.parametrize("argument, hint", [
    ("dropuot", r"did you mean dropout\?"),
    ("learning_rate", r"learning_rate is a compile\(\) argument"),
])
def test_from_preset_refuses_unknown_arguments_naming_them(tiny_preset, argument, hint):
    with pytest.raises(TypeError, match=rf"unexpected keyword argument\(s\): {argument}\. .*{hint}.*"
                                        r"It accepts: class_names, dropout, dtype, .*num_classes"):
        kbert.BertClassifier.from_preset(tiny_preset, num_classes=2, **{argument: 0.5})


@fresh_head
def test_from_preset_without_a_preprocessor_takes_token_ids(tiny_preset):
    model = kbert.BertClassifier.from_preset(tiny_preset, num_classes=2, preprocessor=None)
    assert model.preprocessor is None
    features = {"token_ids": np.array([[2, 7, 3]]), "segment_ids": np.zeros((1, 3), "int32"),
                "padding_mask": np.ones((1, 3), "int32")}
    assert model.predict(features, verbose=0).shape == (1, 2)


@fresh_head
def test_from_preset_uses_a_given_preprocessor_as_is(tiny_preset):
    preprocessor = kbert.BertClassifierPreprocessor.from_preset(tiny_preset, sequence_length=8)
    model = kbert.BertClassifier.from_preset(tiny_preset, num_classes=2, preprocessor=preprocessor)
    assert model.preprocessor is preprocessor
    # A plain BertPreprocessor is read as the task's: the same tokenizer and length.
    plain = kbert.BertPreprocessor.from_preset(tiny_preset, sequence_length=8)
    model = kbert.BertClassifier.from_preset(tiny_preset, num_classes=2, preprocessor=plain)
    assert type(model.preprocessor) is kbert.BertClassifierPreprocessor
    assert model.preprocessor.tokenizer is plain.tokenizer and model.preprocessor.sequence_length == 8
    with pytest.raises(ValueError, match=r"Got both preprocessor= and sequence_length=16"):
        kbert.BertClassifier.from_preset(tiny_preset, num_classes=2, preprocessor=preprocessor, sequence_length=16)


def test_a_tuple_of_strings_says_it_is_read_as_a_pair(minilm_dir):
    model = tiny_classifier(minilm_dir)
    for call in (lambda: model.predict(("a fine film", "a dull film"), verbose=0),
                 lambda: model.fit(("a fine film", "a dull film"), [0, 1], verbose=0),
                 lambda: model(("a fine film", "a dull film"))):
        with pytest.raises(ValueError, match=r"tuple of 2 strings.*read as a pair of lists.*pass a list: \["):
            call()


@pytest.mark.parametrize("method", ["fit", "evaluate", "predict", "classify"])
def test_a_batch_size_that_is_not_a_whole_number_of_at_least_1_is_refused(minilm_dir, method):
    model = tiny_classifier(minilm_dir)
    args = (TEXTS,) if method in ("predict", "classify") else (TEXTS, [0, 1, 0, 1])
    for batch_size in (0, -3, 2.5, "8", True):
        with pytest.raises(ValueError, match=rf"batch_size={re.escape(repr(batch_size))}: give the number of "
                                             r"examples in a batch, a whole number of at least 1"):
            getattr(model, method)(*args, batch_size=batch_size)
    assert model.train_function is None and model.test_function is None and model.predict_function is None
    getattr(model, method)(*args, batch_size=np.int64(3))  # numpy's ints are whole numbers too


@pytest.mark.parametrize("sentences, tags, match", [
    ([["Jane", "Austen"], []], [[1, 2], []], r"Sentence 1 has no words \(and so no tags to learn\); drop it"),
    ([["Jane", "", "Austen"]], [[1, 0, 2]], r"Sentence 0, word 1 is '': a word needs characters to get a token for "
                                            r"its tag\. Drop the word and its tag\."),
])
def test_a_sentence_or_word_without_text_is_refused_naming_it(minilm_dir, sentences, tags, match):
    backbone = kbert.Backbone(vocabulary_size=30522, num_layers=1, num_heads=2, hidden_dim=8, intermediate_dim=16,
                              max_sequence_length=32)
    model = kbert.TokenClassifier(backbone, num_classes=3,
                                  preprocessor=kbert.TokenClassifierPreprocessor.from_preset(minilm_dir,
                                                                                             sequence_length=16))
    refused(model, "fit", sentences, tags, match)
