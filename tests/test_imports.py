"""kbert's packages depend on each other one way, read from the source itself;
and `import kbert` needs none of the optional pieces."""

import ast
import pathlib
import subprocess
import sys

import keras
import pytest

from kbert import tf_if_present

ROOT = pathlib.Path(__file__).resolve().parent.parent / "kbert"

# Each piece of kbert may import only pieces of a lower rank (and itself).
RANKS = {
    "tf_if_present": 0,
    "backend": 0,
    "families": 0,  # what differs between encoder families: names and settings, no code above it
    "aliases": 0,  # the names of the first releases, registered with Keras
    "presets": 1,
    "layers": 1,
    "search": 1,
    "text": 2,
    "training": 2,
    "serving": 3,
    "metrics": 3,
    "models": 4,
    "plots": 4,
    "cli": 5,
    "cli_data": 4,  # the command's input files, read by cli alone
    "__main__": 6,  # `python -m kbert`, an entry point of the command
}


def piece(path):
    """`models` for kbert/models/task.py, `cli` for kbert/cli.py."""
    relative = path.relative_to(ROOT)
    return relative.parts[0] if len(relative.parts) > 1 else relative.stem


def kbert_imports(path):
    """(line, imported piece, inside a function) of every `kbert.<piece>` import."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    in_function = {id(node) for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
                   for node in ast.walk(f)}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module] if node.module != "kbert" else [f"kbert.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        for name in names:
            parts = name.split(".")
            if parts[0] == "kbert" and len(parts) > 1:
                found.append((node.lineno, parts[1], id(node) in in_function))
    return found


MODULES = sorted(p for p in ROOT.rglob("*.py") if p.name != "__init__.py" or p.parent != ROOT)


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(ROOT)))
def test_imports_point_down_the_package_order(path):
    source = piece(path)
    assert source in RANKS, f"{path} is a new piece of kbert: give it a rank in RANKS"
    for line, target, _ in kbert_imports(path):
        if target != source:
            assert RANKS[target] < RANKS[source], (
                f"{path.relative_to(ROOT.parent)}:{line} imports kbert.{target} (rank {RANKS[target]}) into "
                f"{source} (rank {RANKS[source]}): move the shared piece down instead."
            )


@pytest.mark.parametrize("path", [p for p in MODULES if piece(p) != "cli"], ids=lambda p: str(p.relative_to(ROOT)))
def test_no_kbert_import_hides_inside_a_function(path):
    # The command line imports lazily so that `kbert --help` starts fast;
    # everywhere else an import inside a function would hide a cycle.
    hidden = [(line, target) for line, target, inside in kbert_imports(path) if inside]
    assert not hidden, f"{path.relative_to(ROOT.parent)} imports kbert inside functions at {hidden}"


def test_kbert_imports_without_matplotlib_and_the_plots_say_how_to_get_it():
    # As on Colab's TPU runtime: the plots are the only part that needs it.
    code = (
        "import sys\n"
        "sys.modules['matplotlib'] = None  # makes `import matplotlib` fail\n"
        "import kbert\n"
        "try:\n"
        "    kbert.plot_history({'loss': [0.7, 0.5]})\n"
        "except ModuleNotFoundError as e:\n"
        "    print(e)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "kbert's plots draw with matplotlib, which is not installed: `pip install matplotlib`."


@pytest.mark.skipif(keras.backend.backend() == "tensorflow", reason="Keras' TensorFlow backend loads TensorFlow itself")
@pytest.mark.skipif(not tf_if_present.installed(), reason="TensorFlow is not installed here")
def test_on_jax_and_torch_tensorflow_loads_only_when_text_needs_it(minilm_dir):
    # Where TensorFlow is installed: the model path does not pay its start-up.
    code = (
        "import sys\n"
        "import kbert\n"
        f"kbert.BertBackbone.from_preset({minilm_dir!r})\n"
        "print('tensorflow' in sys.modules)\n"
        f"kbert.BertTokenizer.from_preset({minilm_dir!r})\n"
        "print('tensorflow' in sys.modules)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split() == ["False", "True"]


def test_kbert_metrics_is_an_attribute_after_import_kbert():
    # As `kbert.text`: `kbert.metrics.squad_metrics(...)` after `import kbert`, with no import of its own.
    code = "import kbert\nprint(kbert.metrics.normalize_answer('The Paris!'), kbert.search.__name__)\n"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split() == ["paris", "kbert.search"]
