"""SavedModel export for TF Serving, with the preprocessing in the graph."""

from kbert.serving.check import serve_check
from kbert.serving.export import check_new_version, export, in_slices, next_version_path, write
