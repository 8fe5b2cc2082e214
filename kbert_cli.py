"""The `kbert` console script's entry point.

It lives outside the `kbert` package on purpose. Importing `kbert` imports
Keras and TensorFlow (seconds, and TensorFlow's start-up log lines), and
Python runs `kbert/__init__.py` before any module inside the package. The
command itself is `kbert/cli.py`, which imports only the standard library and
two kbert modules that do too (`cli_data.py`, `presets/registry.py`): loaded
from here on their own, `kbert --help`, `kbert presets` and a mistyped option
answer at once, and kbert loads when a subcommand needs it.
"""

import importlib.util
import os
import sys

# The modules the command needs before kbert loads, each after those it imports.
_STANDARD_LIBRARY_ONLY = ("presets.registry", "cli_data", "cli")


def _load_on_its_own(folder, name):
    """kbert.<name> from its file, without running kbert/__init__.py."""
    spec = importlib.util.spec_from_file_location(f"kbert.{name}", os.path.join(folder, *name.split(".")) + ".py")
    module = importlib.util.module_from_spec(spec)
    # Registered under its own name, so that `from kbert.<name> import ...`
    # in the modules loaded after it, and a later import, find this module.
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def main(argv=None):
    if "kbert" in sys.modules:  # loaded already: nothing to save
        import kbert.cli

        return kbert.cli.main(argv)
    # find_spec of a top-level package locates it without running its __init__.
    folder = importlib.util.find_spec("kbert").submodule_search_locations[0]
    for name in _STANDARD_LIBRARY_ONLY:
        if f"kbert.{name}" not in sys.modules:
            _load_on_its_own(folder, name)
    return sys.modules["kbert.cli"].main(argv)


if __name__ == "__main__":
    sys.exit(main())
