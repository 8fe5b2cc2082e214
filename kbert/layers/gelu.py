"""BERT's GELU, exact (erf) or the tanh approximation, by config name."""

import keras

GELU_KINDS = ("gelu", "gelu_approximate")


def check_gelu(layer_name, activation):
    if activation not in GELU_KINDS:
        raise ValueError(f'{layer_name} activation must be "gelu" or "gelu_approximate", got "{activation}".')


def gelu(x, activation):
    return keras.activations.gelu(x, approximate=activation == "gelu_approximate")
