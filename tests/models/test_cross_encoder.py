"""Cross-encoders (rerankers): sentence-transformers `CrossEncoder` folders
loaded as a one-score `BertClassifier`, ranking as `CrossEncoder.rank` does,
trained pointwise, and written back as a folder `CrossEncoder` loads."""

import json
import os

import numpy as np
import pytest
import torch
import transformers
from sentence_transformers import CrossEncoder

import kbert

QUERY = "who wrote pride and prejudice?"
DOCUMENTS = ["Pride and Prejudice is a novel by Jane Austen, published in 1813.", "Paris is the capital of France.",
             "Jane Austen also wrote Emma.", "The novel follows Elizabeth Bennet.", "", "pride prejudice austen"]


def cross_encoder_folder(folder, minilm_dir, layout, activation=None):
    """A tiny random cross-encoder (weights nudged off their initialisation)
    with MiniLM's tokenizer, saved as sentence-transformers 6 saves it
    ("st6"), or as 4.x-5.x did: a Hugging Face folder whose config.json holds
    the activation ("config_block")."""
    config = transformers.BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                     intermediate_size=48, num_labels=1)
    torch.manual_seed(0)
    model = transformers.BertForSequenceClassification(config).eval()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.05)
    plain = os.path.join(folder, "plain")
    model.save_pretrained(plain)
    transformers.AutoTokenizer.from_pretrained(minilm_dir).save_pretrained(plain)
    encoder = CrossEncoder(plain, activation_fn=activation)
    path = os.path.join(folder, layout)
    encoder.save_pretrained(path)
    if layout == "config_block":
        os.remove(os.path.join(path, "modules.json"))
        os.remove(os.path.join(path, "config_sentence_transformers.json"))
        with open(os.path.join(path, "config.json")) as f:
            hf_config = json.load(f)
        hf_config["sentence_transformers"] = {"activation_fn": type(encoder.activation_fn).__module__ + "." +
                                              type(encoder.activation_fn).__name__}
        with open(os.path.join(path, "config.json"), "w") as f:
            json.dump(hf_config, f)
    return path


@pytest.mark.parametrize("layout, activation, expected", [
    ("st6", None, "sigmoid"),  # CrossEncoder's default for one label
    ("st6", torch.nn.Identity(), None),
    ("config_block", torch.nn.Tanh(), "tanh"),
])
def test_a_cross_encoder_folder_ranks_as_cross_encoder_rank(tmp_path, minilm_dir, layout, activation, expected):
    path = cross_encoder_folder(str(tmp_path), minilm_dir, layout, activation)
    model = kbert.BertClassifier.from_preset(path)
    assert (model.problem_type, model.score_activation) == ("regression", expected)
    theirs = CrossEncoder(path).rank(QUERY, DOCUMENTS)
    ours = model.rank(QUERY, DOCUMENTS)
    assert [r["corpus_id"] for r in ours] == [r["corpus_id"] for r in theirs]
    np.testing.assert_allclose([r["score"] for r in ours], [float(r["score"]) for r in theirs], atol=1e-5)
    assert model.rank(QUERY, DOCUMENTS, top_k=2) == ours[:2]


def test_a_plain_one_label_folder_is_a_regression_model_without_activation(tmp_path, minilm_dir):
    path = cross_encoder_folder(str(tmp_path), minilm_dir, "st6")
    model = kbert.BertClassifier.from_preset(os.path.join(str(tmp_path), "plain"))
    assert (model.problem_type, model.score_activation) == ("regression", None)


def test_an_activation_kbert_cannot_reproduce_is_refused_naming_the_file(tmp_path, minilm_dir):
    path = cross_encoder_folder(str(tmp_path), minilm_dir, "config_block", torch.nn.Softplus())
    with pytest.raises(ValueError, match=r"config.json gives the cross-encoder's activation as .*Softplus"):
        kbert.BertClassifier.from_preset(path)


@pytest.mark.parametrize("activation", ["sigmoid", None])
def test_a_trained_reranker_exports_a_folder_cross_encoder_scores_alike(tmp_path, minilm_dir, activation):
    backbone = kbert.BertBackbone(vocabulary_size=30522, num_layers=2, num_heads=2, hidden_dim=32,
                                  intermediate_dim=64, max_sequence_length=64, dropout=0.0)
    preprocessor = kbert.BertPreprocessor.from_preset(minilm_dir, sequence_length=48)
    model = kbert.BertClassifier(backbone, 1, preprocessor, score_activation=activation)
    # Pointwise: with a sigmoid, binary cross-entropy on the logits, labels in [0, 1].
    relevance = [1.0, 0.0, 0.5, 0.25, 0.0, 0.75]
    history = model.fit(([QUERY] * 6, DOCUMENTS), relevance, batch_size=6, epochs=3, verbose=0).history
    assert np.isfinite(history["loss"]).all()
    model.export_to_transformers(str(tmp_path / "reranker"))
    theirs = CrossEncoder(str(tmp_path / "reranker")).predict([(QUERY, d) for d in DOCUMENTS])
    np.testing.assert_allclose(model.scores(([QUERY] * 6, DOCUMENTS)), theirs, atol=1e-5)


def test_pointwise_loss_equals_sentence_transformers_binary_cross_entropy(tmp_path, minilm_dir):
    from sentence_transformers.cross_encoder.losses import BinaryCrossEntropyLoss

    path = cross_encoder_folder(str(tmp_path), minilm_dir, "st6")
    model = kbert.BertClassifier.from_preset(path)
    labels = np.array([1.0, 0.0, 1.0, 0.0, 0.0, 1.0], "float32")
    model.compile()
    ours = model.evaluate(([QUERY] * 6, DOCUMENTS), labels, batch_size=6, verbose=0, return_dict=True)["loss"]
    encoder = CrossEncoder(path)
    encoder.eval()
    with torch.no_grad():
        theirs = BinaryCrossEntropyLoss(encoder)([[QUERY] * 6, DOCUMENTS], torch.tensor(labels)).item()
    assert ours == pytest.approx(theirs, rel=1e-4)


def test_scores_outside_0_1_are_refused_for_a_sigmoid_cross_encoder(tmp_path, minilm_dir):
    model = kbert.BertClassifier.from_preset(cross_encoder_folder(str(tmp_path), minilm_dir, "st6"))
    with pytest.raises(ValueError, match=r"scores from 0 to 5.*probabilities in \[0, 1\]"):
        model.fit(([QUERY] * 2, DOCUMENTS[:2]), [5.0, 0.0], epochs=1, verbose=0)


def test_a_tanh_cross_encoder_has_no_default_loss(tmp_path, minilm_dir):
    path = cross_encoder_folder(str(tmp_path), minilm_dir, "config_block", torch.nn.Tanh())
    model = kbert.BertClassifier.from_preset(path)
    with pytest.raises(ValueError, match="score_activation='tanh' has no default loss"):
        model.fit(([QUERY] * 2, DOCUMENTS[:2]), [0.5, -0.5], epochs=1, verbose=0)
    # Another num_classes: a new output layer, said as such (not refused for its activation).
    with pytest.warns(UserWarning, match=r"holds a head of 1 class; this TextClassifier has num_classes=3: the "
                                         r"output layer is new"):
        assert kbert.BertClassifier.from_preset(path, num_classes=3).get_layer("logits").kernel.shape[-1] == 3
    with pytest.raises(ValueError, match="threshold=1.5"):
        model.classify([QUERY], threshold=1.5)
