import keras
import pytest

import kbert
from kbert.training import precision


@pytest.mark.parametrize("forced, expected", [("mixed_bfloat16", "mixed_bfloat16"), ("float32", "float32")])
def test_auto_dtype_follows_kbert_precision(monkeypatch, forced, expected):
    monkeypatch.setenv("KBERT_PRECISION", forced)
    assert precision.resolve_dtype("auto") == expected
    backbone = kbert.BertBackbone(vocabulary_size=50, num_layers=1, num_heads=2, hidden_dim=8, intermediate_dim=16,
                                  dtype="auto")
    assert backbone.token_embedding.dtype_policy.name == expected
    assert backbone.get_config()["dtype"]["config"]["name"] == expected  # saved resolved, not "auto"
    assert all(keras.backend.standardize_dtype(v.dtype) == "float32" for v in backbone.weights)


def test_auto_dtype_reads_the_cpu_flags_without_an_accelerator(monkeypatch):
    monkeypatch.delenv("KBERT_PRECISION", raising=False)
    monkeypatch.setattr(precision, "_accelerator_bfloat16", lambda: None)
    monkeypatch.setattr(precision, "_cpu_flags", lambda: {"fpu", "avx2", "avx512_bf16"})
    # XLA's CPU backend gains nothing from bfloat16, so JAX stays in float32.
    expected = "float32" if keras.backend.backend() == "jax" else "mixed_bfloat16"
    assert precision.resolve_dtype("auto") == expected
    monkeypatch.setattr(precision, "_cpu_flags", lambda: {"fpu", "avx2"})
    assert precision.resolve_dtype("auto") == "float32"
    assert precision.resolve_dtype("float32") == "float32"
    assert precision.resolve_dtype(None) is None


def test_auto_dtype_follows_the_accelerator_over_the_cpu(monkeypatch):
    monkeypatch.delenv("KBERT_PRECISION", raising=False)
    monkeypatch.setattr(precision, "_cpu_flags", lambda: {"avx512_bf16", "amx_bf16"})
    monkeypatch.setattr(precision, "_accelerator_bfloat16", lambda: False)  # e.g. a T4 or V100
    assert precision.resolve_dtype("auto") == "float32"
    monkeypatch.setattr(precision, "_accelerator_bfloat16", lambda: True)  # an A100, a TPU
    assert precision.resolve_dtype("auto") == "mixed_bfloat16"


def test_this_machines_accelerator_answer_is_none_true_or_false():
    assert precision._accelerator_bfloat16() in (None, True, False)
