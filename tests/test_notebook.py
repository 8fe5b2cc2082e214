"""examples/quickstart.ipynb runs top to bottom, on a small checkpoint and slice."""

import json
import os
import pathlib
import sys

import keras
import pytest

NOTEBOOK = pathlib.Path(__file__).resolve().parents[1] / "examples" / "quickstart.ipynb"


@pytest.mark.skipif(
    keras.backend.backend() != "torch",
    reason="the notebook runs once, in the torch pass (the lightest): it starts its own kernel, on TensorFlow",
)
def test_quickstart_notebook_runs_top_to_bottom(tmp_path, monkeypatch):
    nbclient = pytest.importorskip("nbclient")
    nbformat = pytest.importorskip("nbformat")
    pytest.importorskip("ipykernel")
    # A kernel spec of this very interpreter, found first (JUPYTER_PATH comes
    # before the user's and the system's), so that a "python3" spec elsewhere
    # cannot start some other Python without kbert.
    spec = tmp_path / "jupyter" / "kernels" / "kbert-test"
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "kbert tests", "language": "python",
    }))
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    workdir = tmp_path / "work"
    workdir.mkdir()

    # The kernel inherits this environment: the small MiniLM checkpoint, a few
    # dozen sentences, one epoch. It runs in a temporary folder, so its export
    # lands there, not in the repository's saved_models/.
    settings = {
        "KBERT_QUICKSTART_PRESET": "minilm",
        "KBERT_QUICKSTART_ROWS": "64",
        "KBERT_QUICKSTART_EPOCHS": "1",
        "KBERT_QUICKSTART_SEQUENCE_LENGTH": "32",
        "KBERT_QUICKSTART_TOY_EPOCHS": "2",
        "KBERT_QUICKSTART_DATA": str(NOTEBOOK.parent / "data" / "mr"),
        "KERAS_BACKEND": "tensorflow",
        "TF_CPP_MIN_LOG_LEVEL": "2",
    }
    for name, value in settings.items():
        monkeypatch.setenv(name, value)

    notebook = nbformat.read(NOTEBOOK, as_version=4)
    assert all(not cell.get("outputs") for cell in notebook.cells if cell.cell_type == "code"), (
        "examples/quickstart.ipynb is committed with outputs; clear them (Edit > Clear all outputs)."
    )
    nbclient.NotebookClient(
        notebook, timeout=300, kernel_name="kbert-test", resources={"metadata": {"path": str(workdir)}}
    ).execute()

    outputs = {i: cell.outputs for i, cell in enumerate(notebook.cells) if cell.cell_type == "code"}
    images = [o for cell in outputs.values() for o in cell if "image/png" in o.get("data", {})]
    assert len(images) == 3  # history, confusion matrix, attention
    exported = list((workdir / "saved_models" / "quickstart").iterdir())
    assert [p.name for p in exported] == ["1"]
    assert os.path.exists(exported[0] / "saved_model.pb")
