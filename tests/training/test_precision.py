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


def test_auto_dtype_reads_the_cpu_flags(monkeypatch):
    monkeypatch.delenv("KBERT_PRECISION", raising=False)
    monkeypatch.setattr(precision, "_has_fast_bfloat16_accelerator", lambda: False)
    monkeypatch.setattr(precision, "_cpu_flags", lambda: {"fpu", "avx2", "avx512_bf16"})
    assert precision.resolve_dtype("auto") == "mixed_bfloat16"
    monkeypatch.setattr(precision, "_cpu_flags", lambda: {"fpu", "avx2"})
    assert precision.resolve_dtype("auto") == "float32"
    assert precision.resolve_dtype("float32") == "float32"
    assert precision.resolve_dtype(None) is None
