"""`import kbert` turns TensorFlow's oneDNN kernels on unless the user chose,
each case in a fresh interpreter (TensorFlow reads the switch as it loads)."""

import json
import os
import subprocess
import sys

import keras
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

REPORT = """
import json, os, warnings
{before}
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import kbert
from kbert.backend.onednn import tensorflow_runs_onednn
print(json.dumps({{"switch": os.environ.get("TF_ENABLE_ONEDNN_OPTS"), "tensorflow_runs_onednn": tensorflow_runs_onednn(),
                  "warnings": [str(w.message) for w in caught if "oneDNN" in str(w.message)]}}))
"""


def imported(before="", **env):
    """What `import kbert` left, after running `before`, in a fresh interpreter
    whose environment has no TF_ENABLE_ONEDNN_OPTS but the given one."""
    environment = {k: v for k, v in os.environ.items() if k != "TF_ENABLE_ONEDNN_OPTS"}
    environment.update(env, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="3")
    result = subprocess.run([sys.executable, "-c", REPORT.format(before=before)], env=environment,
                            capture_output=True, text=True, check=True)
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_import_kbert_before_tensorflow_turns_onednn_on():
    report = imported()
    assert report["switch"] == "1"
    assert report["tensorflow_runs_onednn"] is True
    assert report["warnings"] == []


def test_the_users_choice_to_keep_onednn_off_wins():
    report = imported(TF_ENABLE_ONEDNN_OPTS="0")
    assert report["switch"] == "0"
    assert report["tensorflow_runs_onednn"] is False
    assert report["warnings"] == []


@pytest.mark.skipif(keras.backend.backend() != "tensorflow", reason="TensorFlow only preprocesses on other backends")
def test_tensorflow_loaded_first_without_onednn_gets_one_warning_saying_how():
    # TensorFlow loaded with the kernels off (as on CPUs where that is its
    # default), and no choice left in the environment.
    before = "os.environ['TF_ENABLE_ONEDNN_OPTS'] = '0'; import tensorflow; del os.environ['TF_ENABLE_ONEDNN_OPTS']"
    report = imported(before)
    assert report["tensorflow_runs_onednn"] is False
    (warning,) = report["warnings"]
    assert "TF_ENABLE_ONEDNN_OPTS=1" in warning and "import kbert before TensorFlow" in warning
