"""SavedModel export for TF Serving, with the preprocessing in the graph:
`export` (what a task model's `export` does) and `serve_check` (a request
answered as TF Serving answers it). The writer itself, `saved_model`, is the
task models'."""

from kbert.serving.check import serve_check


def export(model, path, **kwargs):
    """`model.export(path, **kwargs)`: a task model as a SavedModel taking raw
    strings (see the task model's `export`). Returns the version folder written."""
    return model.export(path, **kwargs)
