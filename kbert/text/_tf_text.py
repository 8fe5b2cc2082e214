"""tensorflow-text, with an error that says how to fix a missing or mismatched install."""

import tensorflow as tf

try:
    import tensorflow_text as tf_text  # noqa: F401
except Exception as e:  # a wrong version fails with undefined symbols, not ImportError
    major_minor = ".".join(tf.__version__.split(".")[:2])
    raise ImportError(
        f"kbert's text processing needs tensorflow-text built for TensorFlow {major_minor} "
        f"(TensorFlow {tf.__version__} is installed); importing it failed with: {e}. "
        f'Fix: pip install "tensorflow-text=={major_minor}.*"'
    ) from e
