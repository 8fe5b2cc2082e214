import json
import os
import warnings

import keras
import pytest

import kbert
from kbert.presets.files import cache_dir
from kbert.training import precision
from tests.helpers import rebuilt_from_config


@pytest.mark.parametrize("forced, expected", [("mixed_bfloat16", "mixed_bfloat16"), ("float32", "float32")])
def test_auto_dtype_follows_kbert_precision(monkeypatch, forced, expected):
    monkeypatch.setenv("KBERT_PRECISION", forced)
    monkeypatch.setattr(precision, "bfloat16_crash", lambda: None)  # the choice, not the kernels
    assert precision.resolve_dtype("auto") == expected
    backbone = kbert.BertBackbone(vocabulary_size=50, num_layers=1, num_heads=2, hidden_dim=8, intermediate_dim=16,
                                  dtype=precision.resolve_dtype("auto"))
    assert backbone.token_embedding.dtype_policy.name == expected
    assert backbone.get_config()["dtype"]["config"]["name"] == expected  # saved resolved, not "auto"
    assert all(keras.backend.standardize_dtype(v.dtype) == "float32" for v in backbone.weights)


def test_auto_dtype_reads_the_cpu_flags_without_an_accelerator(monkeypatch):
    monkeypatch.delenv("KBERT_PRECISION", raising=False)
    monkeypatch.setattr(precision, "_accelerator_bfloat16", lambda: None)
    monkeypatch.setattr(precision, "_cpu_flags", lambda: {"fpu", "avx2", "avx512_bf16"})
    monkeypatch.setattr(precision, "bfloat16_crash", lambda: None)
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


def test_where_bfloat16_would_crash_auto_picks_float32_and_an_explicit_policy_says_why(monkeypatch):
    crash = "TensorFlow's bfloat16 kernels crash on this CPU (killed by SIGSEGV)"
    monkeypatch.setattr(precision, "fast_bfloat16", lambda: True)
    monkeypatch.setattr(precision, "bfloat16_crash", lambda: crash)
    with pytest.warns(UserWarning, match="chose float32"):
        assert precision.resolve_dtype("auto") == "float32"
    for dtype in ["mixed_bfloat16", "bfloat16", keras.DTypePolicy("mixed_bfloat16")]:
        with pytest.raises(ValueError, match=r"can't run here: TensorFlow's bfloat16 kernels crash.*dtype='float32'"):
            precision.resolve_dtype(dtype)
    assert precision.resolve_dtype("float32") == "float32"


def test_from_preset_resolves_and_checks_the_dtype_before_building(monkeypatch, tmp_path):
    kbert.BertBackbone(vocabulary_size=50, num_layers=1, num_heads=2, hidden_dim=8,
                       intermediate_dim=16).save_to_preset(str(tmp_path))
    monkeypatch.setenv("KBERT_PRECISION", "float32")
    assert kbert.BertBackbone.from_preset(str(tmp_path), dtype="auto").dtype_policy.name == "float32"
    monkeypatch.setattr(precision, "bfloat16_crash", lambda: "TensorFlow's bfloat16 kernels crash (killed by SIGSEGV)")
    with pytest.raises(ValueError, match="killed by SIGSEGV"):
        kbert.BertBackbone.from_preset(str(tmp_path), dtype="mixed_bfloat16")


def test_the_constructor_refuses_auto_and_says_where_it_is_resolved():
    with pytest.raises(ValueError, match=r'from_preset\(\.\.\., dtype="auto"\)'):
        kbert.BertBackbone(vocabulary_size=50, num_layers=1, num_heads=2, hidden_dim=8, intermediate_dim=16,
                           dtype="auto")


def test_the_probe_reports_how_a_child_process_died():
    assert precision.run_probe("print('fine')") is None
    assert precision.run_probe("import os; os.abort()") == "killed by SIGABRT"
    assert precision.run_probe("raise SystemExit('no tensorflow-text')") == "exit status 1: no tensorflow-text"


def test_the_bfloat16_probe_runs_once_per_machine_on_tensorflow_without_an_accelerator():
    answer = precision.bfloat16_crash()
    if keras.backend.backend() != "tensorflow" or precision._accelerator_bfloat16() is not None:
        assert answer is None  # PyTorch, JAX and accelerators need no probe
        return
    assert answer is None or answer.startswith("TensorFlow's bfloat16 kernels crash on this CPU (killed by")
    with open(os.path.join(cache_dir(), "bfloat16_probe.json"), encoding="utf-8") as f:
        assert list(json.load(f).values()) == [answer]  # kept for the next process


def test_auto_dtype_is_the_policy_the_model_and_its_backbone_report(monkeypatch, tmp_path):
    kbert.BertBackbone(vocabulary_size=50, num_layers=1, num_heads=2, hidden_dim=8,
                       intermediate_dim=16).save_to_preset(str(tmp_path))
    monkeypatch.setenv("KBERT_PRECISION", "mixed_bfloat16")
    monkeypatch.setattr(precision, "bfloat16_crash", lambda: None)  # the policy, not the kernels
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the head starts from its initialisation
        model = kbert.BertClassifier.from_preset(str(tmp_path), num_classes=2, preprocessor=None, dtype="auto")
    for copy in [model, *rebuilt_from_config(model)]:
        assert copy.dtype_policy.name == copy.backbone.dtype_policy.name == "mixed_bfloat16"
        assert copy.backbone.transformer_layers[0].dtype_policy.name == "mixed_bfloat16"  # what runs
    monkeypatch.setenv("KBERT_PRECISION", "float32")
    assert kbert.BertBackbone.from_preset(str(tmp_path), dtype="auto").dtype_policy.name == "float32"
