"""The names kbert's classes had before the family-neutral names: each is the
same class under its first name (`kbert.BertClassifier` is
`kbert.TextClassifier`), registered with Keras under both, so that presets
and `.keras` files saved under either name load under both."""

import keras


def also_named(cls, name):
    """Registers `cls` with Keras as `kbert>{name}` too, and returns it."""
    keras.saving.get_custom_objects()[f"kbert>{name}"] = cls
    return cls
