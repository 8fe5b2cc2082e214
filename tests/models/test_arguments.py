"""A misspelt argument is refused: Keras' functional models drop keyword
arguments they do not know, so a backbone or task would otherwise be built
without it."""

import pytest

import kbert


def test_a_misspelt_argument_of_a_backbone_or_task_is_refused_with_the_closest_name():
    backbone = kbert.BertBackbone(vocabulary_size=50, num_layers=1, num_heads=2, hidden_dim=8, intermediate_dim=16)
    with pytest.raises(TypeError, match='"nmu_classes" \\(did you mean "num_classes"\\?\\)'):
        kbert.TextClassifier(backbone, num_classes=2, preprocessor=None, nmu_classes=3)
    with pytest.raises(TypeError, match='"hiden_dim" \\(did you mean "hidden_dim"\\?\\)'):
        kbert.BertBackbone(vocabulary_size=50, num_layers=1, num_heads=2, hidden_dim=8, intermediate_dim=16,
                           hiden_dim=4)
    named = kbert.TextClassifier(backbone, num_classes=2, preprocessor=None, name="sentiment", trainable=False)
    assert named.name == "sentiment" and not named.trainable
