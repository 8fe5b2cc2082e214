"""What a training run keeps: backups to resume from, the best weights, logs."""

import importlib.util
import json
import os
import warnings

import keras

from kbert.backend import keras_private
from kbert.tf_if_present import tf

_METADATA = "training_metadata.json"  # keras.callbacks.BackupAndRestore's file


class BackupAndRestore(keras.callbacks.BackupAndRestore):
    """`keras.callbacks.BackupAndRestore` that resumes mid-epoch exactly.

    Keras (3.15) restores the weights and the optimizer from the last backup
    but restarts the interrupted epoch from its first batch, so that with
    `save_freq` in steps the batches trained before the backup are trained
    again, and the epoch runs long. This callback also records how many steps
    of the epoch were done, ends the resumed epoch after the remaining ones,
    and `trained_steps(backup_dir)` tells the input pipeline where to
    restart. A run killed at any point then ends with the weights of an
    uninterrupted one, if the data comes in the same order.

    For that, feed `fit` an endless stream of batches in a fixed order,
    positioned after the trained steps, with `steps_per_epoch`:
    `batches.repeat().skip(trained_steps(backup_dir))`. (A stream that
    reshuffles each pass restarts its shuffling with the program, and
    dropout draws new masks: a resumed run then trains as well, on other
    batches.) Epochs need a known number of steps. (It overrides and sets
    private members of Keras' callback, listed in `kbert.backend.keras_private`.)

    Args:
        backup_dir: the folder of the backup, for this run only.
        save_freq: `"epoch"`, or back up every this many steps.
        delete_checkpoint: delete the backup when `fit` completes, so that
            the next `fit` starts afresh.

    Example:
    >>> backup = kbert.training.BackupAndRestore("run/backup", save_freq=500)
    >>> steps = kbert.training.trained_steps("run/backup")
    >>> model.fit(batches.repeat().skip(steps), epochs=10, steps_per_epoch=1000, callbacks=[backup])
    """

    def __init__(self, backup_dir, save_freq="epoch", delete_checkpoint=True):
        super().__init__(backup_dir, save_freq=save_freq, delete_checkpoint=delete_checkpoint)
        self._resume_at = 0  # steps of the first epoch already trained
        self._epoch_offset = 0
        self._steps_done = 0  # steps of the current epoch done
        self._ended_epoch_early = False

    def on_train_begin(self, logs=None):
        super().on_train_begin(logs)
        metadata = _read_metadata(self.backup_dir)
        self._resume_at = metadata.get("steps_done_in_epoch", 0)
        if self._resume_at and self._resume_at >= (self.params.get("steps") or float("inf")):
            # Backed up after the last step of an epoch, before its end.
            keras_private.set_initial_epoch(self.model, metadata["epoch"] + 1)
            self._resume_at = 0

    def on_epoch_begin(self, epoch, logs=None):
        # Keras counts epochs only at epoch ends, so after a restore its next
        # mid-epoch backup would name epoch 0.
        keras_private.set_current_epoch(self, epoch)
        self._epoch_offset, self._resume_at = self._resume_at, 0
        self._steps_done = self._epoch_offset

    def on_train_batch_end(self, batch, logs=None):
        self._steps_done = self._epoch_offset + batch + 1
        super().on_train_batch_end(batch, logs)
        if self._epoch_offset and self._steps_done >= (self.params.get("steps") or float("inf")):
            # The only way to end an epoch from a callback; undone at its end.
            self.model.stop_training = True
            self._ended_epoch_early = True

    def on_epoch_end(self, epoch, logs=None):
        if self._ended_epoch_early:
            # Only this epoch was to end early, not the run: put this callback
            # before any that stops training (EarlyStopping) so theirs wins.
            self.model.stop_training = False
            self._ended_epoch_early = False
        self._steps_done = 0
        super().on_epoch_end(epoch, logs)

    def _save_model(self):
        super()._save_model()
        metadata = _read_metadata(self.backup_dir)
        steps_per_epoch = self.params.get("steps") or 0
        metadata["steps_done_in_epoch"] = self._steps_done
        metadata["step"] = keras_private.current_epoch(self) * steps_per_epoch + self._steps_done
        with _open(os.path.join(self.backup_dir, _METADATA), "w") as f:
            f.write(json.dumps(metadata))


def trained_steps(backup_dir):
    """How many steps the run backed up in `backup_dir` had trained: where
    its input stream must restart. 0 when there is no backup.

    Args:
        backup_dir: the `backup_dir` of `kbert.training.BackupAndRestore`.

    Example:
    >>> batches.repeat().skip(kbert.training.trained_steps("run/backup"))
    """
    metadata = _read_metadata(backup_dir)
    if metadata and "step" not in metadata:
        raise ValueError(
            f"The backup in {backup_dir} was written by keras.callbacks.BackupAndRestore, which does "
            "not record the step it stopped at. Back up with kbert.training.BackupAndRestore."
        )
    return metadata.get("step", 0)


def _read_metadata(backup_dir):
    path = os.path.join(backup_dir, _METADATA)
    if not (tf.io.gfile.exists(path) if _remote(path) else os.path.exists(path)):
        return {}
    with _open(path) as f:
        return json.load(f)


def _remote(path):
    return "://" in str(path)


def _open(path, mode="r"):
    """A backup's file: through tf.io.gfile where it is on another file
    system (gs://...), as Keras' BackupAndRestore goes, so that no TensorFlow
    is needed for local folders."""
    return tf.io.gfile.GFile(path, mode) if _remote(path) else open(path, mode, encoding="utf-8")


def callbacks(run_dir, monitor="val_accuracy", save_freq="epoch", delete_checkpoint=True):
    """A sensible set of callbacks for a long run, all writing under `run_dir`:

    - `BackupAndRestore` in `run_dir/backup` (kbert's: it resumes mid-epoch),
      so that a run killed or preempted continues where it was when started again;
    - `ModelCheckpoint` keeping the weights with the best `monitor` in
      `run_dir/best.weights.h5` (none when `monitor` is `None`);
    - `TerminateOnNaN`, to stop at once rather than train on NaNs;
    - `TensorBoard` logs in `run_dir/logs` (`tensorboard --logdir run_dir/logs`),
      when the `tensorboard` package is installed (it writes them).

    With several workers, give each worker but the chief its own `run_dir`
    (all of them must back up, but only one should keep the results).

    Args:
        run_dir: the folder of this run.
        monitor: the validation metric to keep the best weights by
            (`"val_loss"` is minimised, accuracies maximised); `None` without
            validation data.
        save_freq: how often to back up: `"epoch"` or every this many steps.
        delete_checkpoint: delete the backup once `fit` completes.

    Returns:
        A list of callbacks for `fit`.

    Example:
    >>> model.fit(train, validation_data=validation, epochs=3,
    ...           callbacks=kbert.training.callbacks("runs/mr", monitor="val_accuracy"))
    """
    chosen = [
        BackupAndRestore(os.path.join(run_dir, "backup"), save_freq=save_freq, delete_checkpoint=delete_checkpoint),
        keras.callbacks.TerminateOnNaN(),
    ]
    if importlib.util.find_spec("tensorboard") is not None:
        chosen.append(keras.callbacks.TensorBoard(os.path.join(run_dir, "logs")))
    else:
        warnings.warn("No TensorBoard logs: the tensorboard package is not installed (pip install tensorboard).")
    if monitor is not None:
        chosen.insert(1, keras.callbacks.ModelCheckpoint(
            os.path.join(run_dir, "best.weights.h5"), monitor=monitor, save_best_only=True, save_weights_only=True,
        ))
    return chosen
