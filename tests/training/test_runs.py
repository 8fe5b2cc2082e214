import os
import warnings

import numpy as np
import pytest

import kbert
from tests.training import tiny_run


def test_run_killed_mid_epoch_resumes_to_the_weights_of_an_uninterrupted_one(initial_weights, tmp_path):
    # 3 epochs of 4 steps, backups every 2 steps: SIGKILL after step 7 (epoch
    # 1, batch 2) loses step 7; the restart restores step 6 and trains 7-12.
    # Only the killed run needs a process of its own; the others run here.
    killed = tiny_run.start_tiny_run("resume", initial_weights, tmp_path / "unused.npz", tmp_path / "backup", 7)
    uninterrupted = tmp_path / "uninterrupted.npz"
    tiny_run.resume(initial_weights, uninterrupted, str(tmp_path / "backup_uninterrupted"))  # meanwhile, here
    returncode, output = tiny_run.finish(killed)
    assert returncode == -9, output[-4000:]
    assert kbert.training.trained_steps(str(tmp_path / "backup")) == 6

    resumed = tmp_path / "resumed.npz"
    tiny_run.resume(initial_weights, resumed, str(tmp_path / "backup"))
    expected, got = np.load(uninterrupted), np.load(resumed)
    assert got["steps_0"] == expected["steps_0"] == 12
    for name in expected:
        np.testing.assert_allclose(got[name], expected[name], atol=1e-6, err_msg=name)


def test_trained_steps_without_a_backup_is_zero(tmp_path):
    assert kbert.training.trained_steps(str(tmp_path / "none")) == 0


def test_callbacks_keep_the_best_weights_and_logs_and_drop_the_backup(initial_weights, tmp_path):
    pytest.importorskip("tensorboard", reason="TensorBoard writes the logs")
    model = tiny_run.build_model()
    model.load_weights(initial_weights)
    tiny_run.compile_model(model, epochs=1)
    run = str(tmp_path / "run")
    data = tiny_run.batches()
    model.fit(data, validation_data=data.take(1), epochs=1, verbose=0,
              callbacks=kbert.training.callbacks(run, monitor="val_loss", save_freq=2))
    assert os.path.exists(os.path.join(run, "best.weights.h5"))
    assert os.listdir(os.path.join(run, "logs"))
    assert not os.path.exists(os.path.join(run, "backup"))  # deleted once fit completes


def test_callbacks_without_tensorboard_still_back_up_and_keep_the_best(tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        chosen = kbert.training.callbacks(str(tmp_path), monitor="val_loss")
    assert [type(c).__name__ for c in chosen][:3] == ["BackupAndRestore", "ModelCheckpoint", "TerminateOnNaN"]
