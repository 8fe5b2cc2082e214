"""Presets: the registry of Google's checkpoints, finding and downloading a
preset's files, and importing Hugging Face checkpoints."""

from kbert.presets.files import cache_dir, get_preset_dir
from kbert.presets.registry import PRESETS, format_presets, list_presets

# Bound as an attribute as well: the console script loads registry.py before
# this package (kbert_cli.py), and then the line above does not bind it.
from kbert.presets import registry
