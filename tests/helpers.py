"""Shared test helpers."""

import keras
import numpy as np


def to_numpy(x):
    return keras.ops.convert_to_numpy(x)


def random_inputs(batch, length, vocabulary_size, num_segments=2, seed=0):
    """A padded batch in BertBackbone's input format, rows of varying length."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(min(2, length), length + 1, size=batch)
    lengths[0] = length
    padding_mask = (np.arange(length)[None, :] < lengths[:, None]).astype("int32")
    token_ids = rng.integers(1, vocabulary_size, size=(batch, length)).astype("int32") * padding_mask
    segment_ids = (rng.integers(0, num_segments, size=(batch, length)) * padding_mask).astype("int32")
    return {"token_ids": token_ids, "segment_ids": segment_ids, "padding_mask": padding_mask}


# kbert's input names -> transformers'.
TRANSFORMERS_INPUTS = {"token_ids": "input_ids", "segment_ids": "token_type_ids", "padding_mask": "attention_mask"}


def transformers_outputs(model, inputs, **kwargs):
    """A transformers (PyTorch) model's outputs on kbert's inputs, without
    gradients: `token_ids`, `segment_ids` and `padding_mask`, those that
    `inputs` holds, as `input_ids`, `token_type_ids` and `attention_mask`.
    `kwargs` (`labels=...`) go to the model as they are."""
    import torch

    features = {name: torch.as_tensor(np.asarray(inputs[key])).long()
                for key, name in TRANSFORMERS_INPUTS.items() if key in inputs}
    with torch.no_grad():
        return model(**features, **kwargs)


def dataset_ops(dataset):
    """The ops of every function in a `tf.data` pipeline's graph."""
    import tensorflow as tf

    graph = tf.compat.v1.GraphDef.FromString(dataset._as_serialized_graph().numpy())
    return [node.op for function in graph.library.function for node in function.node_def]


def rebuilt_from_config(obj):
    """`obj` rebuilt from its config both ways Keras does it: `from_config`,
    and `serialize_keras_object` -> `deserialize_keras_object` (what saving
    writes and loading reads). Compare what the copies DO with what `obj`
    does: comparing configs passes when both lack the same key."""
    return [
        type(obj).from_config(obj.get_config()),
        keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(obj)),
    ]


def output_and_weight_gradients(fn, variables):
    """`fn()`'s output and the gradients, with respect to `variables`, of a
    fixed projection of it (every element weighted differently), on the
    current backend, as float32 arrays."""
    ops = keras.ops

    def project(out):
        weights = ops.reshape(ops.cos(ops.arange(np.prod(out.shape), dtype="float32")), out.shape)
        return ops.sum(ops.cast(out, "float32") * weights)

    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        with tf.GradientTape() as tape:
            out = fn()
            loss = project(out)
        grads = tape.gradient(loss, variables)
    elif backend == "jax":
        import jax

        def loss(values):
            with keras.StatelessScope(state_mapping=list(zip(variables, values))):
                out = fn()
            return project(out), out

        (_, out), grads = jax.value_and_grad(loss, has_aux=True)([v.value for v in variables])
    else:
        import torch

        out = fn()
        grads = torch.autograd.grad(project(out), [v.value for v in variables])
    return to_numpy(ops.cast(out, "float32")), [to_numpy(ops.cast(g, "float32")) for g in grads]


# The pass that runs a test once where the backend cannot change its answer
# (the lightest of `make test`'s three: the text tests run there too).
ONCE_IN = "torch"


def once_unless(values, every_backend):
    """`parametrize` values: those in `every_backend` run in every backend's
    pass, the others in the torch pass alone (what they add to the ones that
    run everywhere is the same code on any backend: weight names, a head's
    wiring, a task's saved config)."""
    import pytest

    skip = pytest.mark.skipif(keras.backend.backend() != ONCE_IN,
                              reason=f"runs once, in the {ONCE_IN} pass: the others run "
                                     f"{', '.join(map(str, every_backend))} on their backend")
    return [value if value in every_backend else pytest.param(value, marks=skip) for value in values]


# A family's tiny checkpoints against transformers (tests/families): shared
# by the ModernBERT and DeBERTa-v3 tests.


def nudge_and_save(model, folder):
    """`model` (transformers', built under a fixed seed by the caller) with
    its weights nudged, so that unit LayerNorm scales and zero biases test
    nothing, saved to `folder` as safetensors."""
    import torch

    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(0.05 * torch.randn_like(parameter))
    model.save_pretrained(folder)
    return model


def padded_ids(vocabulary_size, length=40, batch=3, seed=0):
    """Right-padded rows of ids from 3 up: the whole length, 60% of it, 3 tokens."""
    rng = np.random.default_rng(seed)
    lengths = np.array([length, int(0.6 * length), 3][:batch])
    padding_mask = (np.arange(length)[None, :] < lengths[:, None]).astype("int32")
    token_ids = np.where(padding_mask > 0, rng.integers(3, vocabulary_size, size=(batch, length)), 0).astype("int32")
    return {"token_ids": token_ids, "segment_ids": np.zeros_like(token_ids), "padding_mask": padding_mask}


def hf_head_outputs(model, inputs):
    """A transformers model's output on kbert's inputs: hidden states, logits,
    or start and end logits stacked `[batch, length, 2]`."""
    out = transformers_outputs(model, {k: inputs[k] for k in ("token_ids", "padding_mask")})
    if hasattr(out, "start_logits"):
        return np.stack([out.start_logits.numpy(), out.end_logits.numpy()], axis=-1)
    return out.last_hidden_state.numpy() if hasattr(out, "last_hidden_state") else out.logits.numpy()


def kbert_head_outputs(model, inputs):
    """kbert's model's output laid out as `hf_head_outputs`'."""
    import kbert

    if isinstance(model, kbert.MaskedLM):  # kbert's masked LM scores chosen positions: every position here
        positions = np.tile(np.arange(inputs["token_ids"].shape[1], dtype="int32"), (len(inputs["token_ids"]), 1))
        return to_numpy(model({**inputs, "mask_positions": positions})["mlm_logits"])
    out = model(inputs)
    if isinstance(model, kbert.QuestionAnswerer):
        return np.stack([to_numpy(out["start_logits"]), to_numpy(out["end_logits"])], axis=-1)
    return to_numpy(out["sequence_output"] if isinstance(out, dict) else out)


def assert_close_on_real_tokens(got, expected, padding_mask):
    if got.ndim == 3:  # per position: padding positions differ
        real = padding_mask.astype(bool)
        got, expected = got[real], expected[real]
    np.testing.assert_allclose(got, expected, atol=1e-4)
