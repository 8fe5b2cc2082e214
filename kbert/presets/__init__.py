"""Presets: the registry of Google's checkpoints, finding and downloading a
preset's files, importing Hugging Face checkpoints and exporting to them,
and uploading presets."""

# `registry` bound as an attribute first: the console script loads registry.py
# before this package (kbert_cli.py), and then `from ... import` below would not bind it.
from kbert.presets import registry
from kbert.presets.files import cache_dir, get_preset_dir
from kbert.presets.registry import PRESETS, format_presets, list_presets
from kbert.presets.upload import upload_preset
