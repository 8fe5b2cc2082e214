"""SavedModel export for TF Serving, with the preprocessing in the graph."""

from kbert.serving.check import serve_check
from kbert.serving.export import export, next_version_path
