"""The time of one DeBERTa-v3-base block (`kbert.layers.DisentangledEncoder`:
hidden 768, 12 heads, 3,072 feed-forward, 256 log buckets up to 512) against
one BERT-base block (`kbert.layers.TransformerEncoder`) on the same input,
forward (inference) and forward + backward: the median of `--repeats` calls
after a warm-up, in the backend's compiled form (JAX: `jax.jit`; TensorFlow:
`tf.function`; PyTorch: eager).

    KERAS_BACKEND=jax python benchmarks/disentangled_attention.py --batch 4 --length 512
"""

import argparse
import os
import statistics
import time

os.environ.setdefault("KERAS_BACKEND", "jax")

import keras  # noqa: E402
import numpy as np  # noqa: E402

from kbert.layers import DisentangledEncoder, RelativeEmbedding, TransformerEncoder  # noqa: E402


def compiled(layer, table, backward):
    """`sum(layer(x))` (and its weight gradients) as the backend runs it fastest."""
    backend = keras.backend.backend()
    extra = {} if table is None else {"relative_embeddings": table}
    if backend == "jax":
        import jax

        def loss(values, x, mask):
            with keras.StatelessScope(state_mapping=list(zip(layer.trainable_weights, values))):
                return jax.numpy.sum(layer(x, padding_mask=mask, training=backward, **extra))

        f = jax.jit(jax.grad(loss) if backward else loss)
        values = [w.value for w in layer.trainable_weights]
        return lambda x, mask: jax.block_until_ready(f(values, x, mask))
    if backend == "tensorflow":
        import tensorflow as tf

        @tf.function(jit_compile=False)
        def step(x, mask):
            if not backward:
                return tf.reduce_sum(layer(x, padding_mask=mask, **extra))
            with tf.GradientTape() as tape:
                loss = tf.reduce_sum(layer(x, padding_mask=mask, training=True, **extra))
            return tape.gradient(loss, layer.trainable_weights)

        return lambda x, mask: [t.numpy() for t in tf.nest.flatten(step(x, mask))]
    import torch

    def run(x, mask):
        if not backward:
            with torch.no_grad():
                return layer(x, padding_mask=mask, **extra).sum().item()
        loss = layer(x, padding_mask=mask, training=True, **extra).sum()
        return [g.sum().item() for g in torch.autograd.grad(loss, [w.value for w in layer.trainable_weights])]

    return run


def median_seconds(f, x, mask, repeats):
    f(x, mask)  # compile / warm up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        f(x, mask)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--length", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    x = keras.ops.convert_to_tensor(np.random.default_rng(0).normal(size=(args.batch, args.length, 768)), "float32")
    mask = keras.ops.ones((args.batch, args.length), "int32")
    bert = TransformerEncoder(num_heads=12, intermediate_dim=3072)
    deberta = DisentangledEncoder(num_heads=12, intermediate_dim=3072, position_buckets=256, max_relative_positions=512)
    table = RelativeEmbedding(span=256)(x)
    bert(x, padding_mask=mask)
    deberta(x, relative_embeddings=table, padding_mask=mask)
    for backward in (False, True):
        seconds = {name: median_seconds(compiled(layer, table, backward), x, mask, args.repeats)
                   for name, layer, table in (("bert", bert, None), ("deberta", deberta, table))}
        print(f"{keras.backend.backend()} batch {args.batch} x {args.length} "
              f"{'forward+backward' if backward else 'forward'}: BERT block {seconds['bert'] * 1e3:.0f} ms, "
              f"DeBERTa block {seconds['deberta'] * 1e3:.0f} ms ({seconds['deberta'] / seconds['bert']:.2f}x)")


if __name__ == "__main__":
    main()
