"""Training with dropout on, kbert against `transformers`, by expectation: the
same weights (all-MiniLM-L6-v2 with one question-answering head, written by
`transformers` and loaded by kbert), the same batch, many dropout draws.

A step-by-step comparison (tests/training/test_finetune_fidelity.py) needs
dropout off, since the two libraries draw different masks. With dropout on,
what must agree is the expectation over the draws: the training-mode loss
and the loss' gradient. A dropout missing, added, or at another rate or place
moves the mean loss; one that is wrong in the backward pass moves the mean
gradient. For each weight compared, the script prints the mean gradients'
difference in units of its standard error, as a root mean square over the
weight's elements (about 1 where the two agree, well above 1 where they do
not), and the ratio of the mean gradient norms.

Usage:
    KERAS_BACKEND=tensorflow python benchmarks/dropout_expectation.py --draws 150 --gradient-draws 60
"""

import argparse
import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
from example_data import minilm_folder  # noqa: E402

SEQUENCE_LENGTH, BATCH = 128, 8


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--draws", type=int, default=150, help="training-mode forward passes per side")
    parser.add_argument("--gradient-draws", type=int, default=60, help="gradients per side")
    args = parser.parse_args()

    import keras
    import torch
    import transformers

    import kbert

    torch.manual_seed(0)
    folder = tempfile.mkdtemp()
    reference = transformers.BertForQuestionAnswering.from_pretrained(minilm_folder())
    reference.save_pretrained(folder)
    tokenizer = transformers.BertTokenizerFast.from_pretrained(minilm_folder())
    tokenizer.save_pretrained(folder)
    model = kbert.BertQuestionAnswerer.from_preset(folder)

    rng = np.random.default_rng(0)
    context = "The quick brown fox jumps over the lazy dog near the river bank in the morning light. " * 4
    questions = [f"What does the fox do, question {i}?" for i in range(BATCH)]
    encoded = tokenizer(questions, [context] * BATCH, padding="max_length", max_length=SEQUENCE_LENGTH,
                        truncation="only_second", return_tensors="np")
    starts = rng.integers(20, 100, BATCH)
    ends = starts + rng.integers(0, 5, BATCH)
    features = {"token_ids": encoded["input_ids"].astype("int32"),
                "segment_ids": encoded["token_type_ids"].astype("int32"),
                "padding_mask": encoded["attention_mask"].astype("int32")}
    torch_inputs = {"input_ids": torch.tensor(encoded["input_ids"]),
                    "token_type_ids": torch.tensor(encoded["token_type_ids"]),
                    "attention_mask": torch.tensor(encoded["attention_mask"]),
                    "start_positions": torch.tensor(starts), "end_positions": torch.tensor(ends)}
    # The loss transformers' BertForQuestionAnswering takes: the mean of the
    # start and end positions' cross-entropies.
    cross_entropy = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    def kbert_loss(training):
        outputs = model(features, training=training)
        return (cross_entropy(starts, outputs["start_logits"]) + cross_entropy(ends, outputs["end_logits"])) / 2

    def reference_loss(training):
        reference.train(training)
        return reference(**torch_inputs).loss

    with torch.no_grad():
        print(f"dropout off: kbert {float(kbert_loss(False)):.6f}, transformers {float(reference_loss(False)):.6f}")
        ours = np.array([float(kbert_loss(True)) for _ in range(args.draws)])
        theirs = np.array([float(reference_loss(True)) for _ in range(args.draws)])
    n = args.draws
    print(f"dropout on, mean loss over {n} draws: kbert {ours.mean():.4f} ± {ours.std() / n**0.5:.4f} "
          f"(sd {ours.std():.4f}), transformers {theirs.mean():.4f} ± {theirs.std() / n**0.5:.4f} (sd {theirs.std():.4f})")

    # Gradients of the first layer's query kernel and of the head's kernel,
    # in kbert's layout ([in, out]).
    weights = {w.path: w for w in model.trainable_weights}
    query = weights["transformer_layer_0/query/kernel"]
    head = next(w for path, w in weights.items() if path.endswith("kernel") and path.startswith("span_logits"))

    def kbert_gradients():
        return [keras.ops.convert_to_numpy(g) for g in _gradients(lambda: kbert_loss(True), [query, head])]

    def reference_gradients():
        reference.zero_grad()
        reference_loss(True).backward()
        return [reference.bert.encoder.layer[0].attention.self.query.weight.grad.numpy().T.copy(),
                reference.qa_outputs.weight.grad.numpy().T.copy()]

    m = args.gradient_draws
    ours = [np.stack(g) for g in zip(*(kbert_gradients() for _ in range(m)))]
    theirs = [np.stack(g) for g in zip(*(reference_gradients() for _ in range(m)))]
    print(f"dropout on, mean gradient over {m} draws:")
    for name, a, b in zip(("layer 0 query kernel", "head kernel"), ours, theirs):
        standard_error = np.sqrt(a.var(0) / m + b.var(0) / m)
        z = (a.mean(0) - b.mean(0)) / np.maximum(standard_error, 1e-12)
        norms = np.linalg.norm(a.reshape(m, -1), axis=1).mean() / np.linalg.norm(b.reshape(m, -1), axis=1).mean()
        print(f"  {name}: difference / standard error, rms {np.sqrt(np.mean(z ** 2)):.2f}; "
              f"mean gradient norm kbert / transformers {norms:.3f}")


def _gradients(value, variables):
    """Gradients of `value()` with respect to `variables` on the current Keras backend."""
    import keras

    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        with tf.GradientTape() as tape:
            result = value()
        return tape.gradient(result, variables)
    if backend == "torch":
        import torch

        leaves = [v.value for v in variables]
        return torch.autograd.grad(value(), leaves)
    raise SystemExit("run under KERAS_BACKEND=tensorflow or torch")


if __name__ == "__main__":
    main()
