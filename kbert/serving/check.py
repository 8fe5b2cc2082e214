"""Load a SavedModel as TF Serving would and answer a request."""

import json
import subprocess
import sys

_SERVER = r"""
import json, sys
import tensorflow as tf
import tensorflow_text  # noqa: F401  (registers the text ops the graph uses)
request = json.loads(sys.stdin.read())
signature = tf.saved_model.load(request["path"]).signatures["serving_default"]
outputs = signature(**{k: tf.constant(v, tf.string) for k, v in request["inputs"].items()})


def decode(value):
    # Outputs of any rank (a tagger's words are [texts, words], a masked LM's
    # tokens [texts, masks, top_k]): strings are bytes at any depth.
    if isinstance(value, list):
        return [decode(v) for v in value]
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


print(json.dumps({k: decode(v.numpy().tolist()) for k, v in outputs.items()}))
"""


def serve_check(path, **inputs):
    """Calls the `serving_default` signature of the SavedModel at `path` in a
    fresh process that imports only TensorFlow and tensorflow-text, as TF
    Serving runs it, and returns its outputs as Python lists.

    Example:
    >>> serve_check("saved_models/sentiment/1", text=["a fine film"])
    {'label': ['positive'], 'probabilities': [[0.1, 0.9]], ...}
    """
    request = json.dumps({"path": str(path), "inputs": {k: list(v) for k, v in inputs.items()}})
    result = subprocess.run([sys.executable, "-c", _SERVER], input=request, capture_output=True, text=True)
    if result.returncode:
        raise RuntimeError(f"The SavedModel at {path} did not answer:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])
