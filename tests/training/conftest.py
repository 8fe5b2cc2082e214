import pytest


@pytest.fixture(scope="module")
def initial_weights(tmp_path_factory):
    """The tiny model's starting weights, saved once: every run loads them."""
    from tests.training import tiny_run

    path = str(tmp_path_factory.mktemp("initial") / "initial.weights.h5")
    tiny_run.build_model().save_weights(path)
    return path

