"""`python -m kbert`: the `kbert` command (kbert/cli.py)."""

import sys

from kbert.cli import main

sys.exit(main())
