"""Exported SavedModel speed: latency at batch 1 and throughput at batch 32.

Exports a kbert MiniLM-L6 classifier (float32 and `dtype="auto"`) with the
tokenizer in the graph, then loads each export the way TF Serving does (a
fresh process with only TensorFlow and tensorflow-text) and times
`serving_default` on raw MR sentences. KerasHub's export takes token ids, so
its column times its own preprocessor (in the client, as its users must) plus
its exported model, on the same sentences.

    python benchmarks/serving.py [--repeats 50]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "examples"))

SERVE = r"""
import json, statistics, sys, time
import tensorflow as tf
import tensorflow_text  # noqa: F401
path, texts, repeats, keras_hub = json.loads(sys.stdin.read())
signature = tf.saved_model.load(path).signatures["serving_default"]
if keras_hub:
    import keras_hub as kh
    preprocessor = kh.models.BertTextClassifierPreprocessor.from_preset(keras_hub)
    specs = signature.structured_input_signature[1]
    call = lambda batch: signature(**{k: tf.cast(v, specs[k].dtype) for k, v in preprocessor(batch).items()})
else:
    call = lambda batch: signature(text=tf.constant(batch))
def timed(batch, n):
    call(batch)
    times = []
    for _ in range(n):
        start = time.perf_counter(); call(batch); times.append(time.perf_counter() - start)
    return statistics.median(times)
latency = [timed(texts[i:i + 1], 1) for i in range(repeats)]
throughput = 32 / timed(texts[:32], max(3, repeats // 10))
print(json.dumps({"latency_ms": 1000 * statistics.median(latency), "throughput": throughput}))
"""


def serve(path, texts, repeats, keras_hub=None):
    out = subprocess.run([sys.executable, "-c", SERVE], input=json.dumps([path, texts, repeats, keras_hub]),
                         capture_output=True, text=True)
    if out.returncode:
        raise RuntimeError(out.stderr[-2000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=50)
    args = parser.parse_args()
    from example_data import minilm_folder, read_mr

    import kbert

    texts = read_mr("test")[0][:max(args.repeats, 32)]
    rows = []
    with tempfile.TemporaryDirectory() as root:
        for dtype in ("auto", "float32"):
            model = kbert.BertClassifier.from_preset(minilm_folder(), num_classes=2, sequence_length=128, dtype=dtype)
            path = model.export(os.path.join(root, dtype))
            name = f"kbert ({model.backbone.token_embedding.dtype_policy.name}, text in)"
            rows.append((name, serve(path, texts, args.repeats)))
        try:
            import keras_hub

            hub = keras_hub.models.BertTextClassifier.from_preset(minilm_folder(), num_classes=2)
            hub.export(os.path.join(root, "keras_hub"))
            rows.append(("KerasHub (float32, ids in + client-side preprocessor)",
                         serve(os.path.join(root, "keras_hub"), texts, args.repeats, minilm_folder())))
        except Exception as error:  # noqa: BLE001  (a missing or failing peer only loses its row)
            print(f"KerasHub skipped: {str(error).strip().splitlines()[-1][:200]}")
    print(f"\nMiniLM-L6 classifier SavedModels on MR test sentences ({args.repeats} at batch 1, medians)")
    print(f"{'export':<56}{'batch 1 ms':>12}{'batch 32 seq/s':>16}")
    for name, r in rows:
        print(f"{name:<56}{r['latency_ms']:>12.1f}{r['throughput']:>16.1f}")


if __name__ == "__main__":
    main()
