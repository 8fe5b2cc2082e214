"""The `kbert` console script's entry point.

It lives outside the `kbert` package on purpose. Importing `kbert` imports
Keras and TensorFlow (seconds, and TensorFlow's start-up log lines), and
Python runs `kbert/__init__.py` before any module inside the package. The
command itself is `kbert/cli.py`, which imports only the standard library:
loaded from here on its own, `kbert --help` and a mistyped option answer at
once, and kbert loads when a subcommand runs.
"""

import importlib.util
import os
import sys


def main(argv=None):
    # find_spec of a top-level package locates it without running its __init__.
    package = importlib.util.find_spec("kbert")
    path = os.path.join(package.submodule_search_locations[0], "cli.py")
    spec = importlib.util.spec_from_file_location("kbert.cli", path)
    cli = importlib.util.module_from_spec(spec)
    # Registered under its own name, so that a later `import kbert.cli` is this module.
    sys.modules["kbert.cli"] = cli
    spec.loader.exec_module(cli)
    return cli.main(argv)


if __name__ == "__main__":
    sys.exit(main())
