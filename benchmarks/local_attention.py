"""The memory of one ModernBERT-base local block (`kbert.layers.RotaryEncoder`:
hidden 768, 12 heads, a window of 128 tokens) with its local attention in
blocks (`kbert.layers.local_attention.banded_attention`) and as the full
window mask, at several lengths: the temporary memory XLA allocates for the
compiled forward pass and for a training step's forward and backward (JAX's
`memory_analysis`, batch 1, float32). Compiling only: no kernel runs.

    KERAS_BACKEND=jax python benchmarks/local_attention.py --lengths 1024 8192
"""

import argparse
import os

os.environ.setdefault("KERAS_BACKEND", "jax")

import jax  # noqa: E402
import keras  # noqa: E402

from kbert.layers import RotaryEncoder  # noqa: E402


def temp_mib(layer, length, in_blocks, backward):
    RotaryEncoder._in_blocks = staticmethod(lambda *_: in_blocks)
    x, mask = jax.numpy.zeros((1, length, 768), "float32"), jax.numpy.ones((1, length), "int32")

    def forward(values, x, mask):
        with keras.StatelessScope(state_mapping=list(zip(layer.weights, values))):
            return jax.numpy.sum(layer(x, padding_mask=mask, training=backward))

    f = jax.grad(forward) if backward else forward
    compiled = jax.jit(f).lower([w.value for w in layer.weights], x, mask).compile()
    return compiled.memory_analysis().temp_size_in_bytes / 2**20


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[1024, 8192])
    args = parser.parse_args()
    layer = RotaryEncoder(num_heads=12, intermediate_dim=1152, local_attention=128)
    layer.build((None, None, 768))
    print("| length | pass | in blocks (MiB) | full window mask (MiB) |\n|---|---|---|---|")
    for length in args.lengths:
        for backward in (False, True):
            blocks, full = (temp_mib(layer, length, in_blocks, backward) for in_blocks in (True, False))
            print(f"| {length:,} | {'forward and backward' if backward else 'forward'} | {blocks:,.0f} | {full:,.0f} |")


if __name__ == "__main__":
    main()
