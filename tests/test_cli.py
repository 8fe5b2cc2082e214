"""The `kbert` command on real data: train -> evaluate -> export -> serve-check;
and its answers to bad input: one line naming the file and row, exit code 2."""

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import warnings

import keras
import pytest

from kbert.cli import build_parser, main
from kbert.cli_data import MAX_FIELD_CHARS, UsageError, encode_labels, integer_classes_note

DATA = os.path.join(os.path.dirname(__file__), "..", "examples", "data")
MR = os.path.join(DATA, "mr")

# The command line reads files and arguments, then calls the API that the
# model tests check on every backend: it runs once, in the torch pass (the
# lightest one; its export goes through a TensorFlow process there).
pytestmark = pytest.mark.skipif(keras.backend.backend() != "torch",
                                reason="runs once, in the torch pass: the command line drives the same API on "
                                       "every backend")


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def write(folder, name, content):
    path = folder / name
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    return str(path)


@pytest.fixture(scope="module")
def tiny_preset(tmp_path_factory, minilm_dir):
    """A small random BERT with MiniLM's vocabulary, in kbert's preset layout."""
    import kbert

    folder = str(tmp_path_factory.mktemp("tiny"))
    kbert.BertBackbone(vocabulary_size=30522, num_layers=2, num_heads=2, hidden_dim=32, intermediate_dim=64,
                       max_sequence_length=64).save_to_preset(folder)
    kbert.BertTokenizer.from_preset(minilm_dir).save_to_preset(folder)
    return folder


@pytest.fixture(scope="module")
def saved_classifier(tmp_path_factory, tiny_preset):
    """Folders of untrained tiny classifiers as `kbert train` saves them: one
    with class names, one with integer classes."""
    import kbert

    def save(class_names):
        folder = str(tmp_path_factory.mktemp("classifier"))
        model = kbert.BertClassifier.from_preset(tiny_preset, num_classes=2, class_names=class_names,
                                                 sequence_length=16)
        model.save_to_preset(folder)
        return folder

    return {"named": save(["pos", "neg"]), "integer": save(None)}


def test_train_evaluate_predict_export_serve_check_round_trip(tmp_path, capsys, tiny_preset):
    model = str(tmp_path / "mr")
    common = ["--text-column", "text", "--label-column", "label", "--max-examples", "64"]
    code, out, _ = run(capsys, "train", "--data", f"{MR}/train.tsv", *common, "--output", model,
                       "--preset", tiny_preset, "--epochs", "1", "--sequence-length", "32", "--batch-size", "16")
    assert code == 0 and "Saved the fine-tuned classifier" in out

    code, out, _ = run(capsys, "evaluate", "--model", model, "--data", f"{MR}/test.tsv", *common)
    results = json.loads(out.strip().splitlines()[-1])
    assert code == 0 and 0.0 <= results["accuracy"] <= 1.0

    code, out, _ = run(capsys, "predict", "--model", model, "a moving film", "a boring film")
    predictions = [json.loads(line) for line in out.strip().splitlines()]
    assert [p["text"] for p in predictions] == ["a moving film", "a boring film"]
    assert all(abs(sum(p["probabilities"].values()) - 1) < 1e-3 for p in predictions)

    code, out, _ = run(capsys, "export", "--model", model, "--output", str(tmp_path / "saved" / "mr"))
    assert code == 0 and out.strip().endswith(os.path.join("saved", "mr", "1"))

    code, out, _ = run(capsys, "serve-check", str(tmp_path / "saved" / "mr" / "1"), "--text", "a moving film")
    served = json.loads(out)
    assert code == 0 and served["label"][0] == predictions[0]["label"]
    assert abs(served["probabilities"][0][1] - predictions[0]["probabilities"]["1"]) < 1e-3


def test_the_command_line_knows_the_problem_types_the_classifier_has():
    from kbert.cli_data import PROBLEM_TYPES
    from kbert.text.classifier_labels import PROBLEM_TYPES as CLASSIFIER_PROBLEM_TYPES

    assert PROBLEM_TYPES == CLASSIFIER_PROBLEM_TYPES


def test_train_a_regression_model_on_a_numeric_column_of_sentence_pairs(tmp_path, capsys, tiny_preset):
    model = str(tmp_path / "stsb")
    common = ["--text-column", "sentence1", "--text-pair-column", "sentence2", "--label-column", "score",
              "--max-examples", "48"]
    code, out, _ = run(capsys, "train", "--data", f"{DATA}/stsb/train_subset.tsv", *common, "--output", model,
                       "--preset", tiny_preset, "--epochs", "1", "--sequence-length", "32", "--batch-size", "16")
    assert code == 0 and "Training a regression model on 48 examples" in out  # scores such as 3.800
    code, out, _ = run(capsys, "evaluate", "--model", model, "--data", f"{DATA}/stsb/test.tsv", *common)
    assert code == 0 and set(json.loads(out.strip().splitlines()[-1])) == {"loss", "mae"}
    code, out, _ = run(capsys, "predict", "--model", model, "--data", f"{DATA}/stsb/test.tsv", *common[:4],
                       "--max-examples", "3")
    assert code == 0 and [set(json.loads(line)) for line in out.strip().splitlines()] == [{"text", "score"}] * 3


def test_train_a_multi_label_model_on_a_column_of_joined_names(tmp_path, capsys, tiny_preset):
    model = str(tmp_path / "emotions")
    common = ["--text-column", "text", "--label-column", "labels", "--max-examples", "64"]
    # GoEmotions joins names with commas; evaluate reads the separator the model was trained with.
    code, out, _ = run(capsys, "train", "--data", f"{DATA}/goemotions/train_subset.tsv", *common, "--output", model,
                       "--label-separator", ",",
                       "--preset", tiny_preset, "--epochs", "1", "--sequence-length", "32", "--batch-size", "16")
    assert code == 0 and "Training a multi label classification model" in out
    # (The classes are the names found in training: evaluated on those examples.)
    code, out, _ = run(capsys, "evaluate", "--model", model, "--data", f"{DATA}/goemotions/train_subset.tsv", *common)
    assert code == 0 and 0 <= json.loads(out.strip().splitlines()[-1])["accuracy"] <= 1
    code, out, _ = run(capsys, "predict", "--model", model, "so happy for you", "that is awful")
    answers = [json.loads(line) for line in out.strip().splitlines()]
    assert code == 0 and all(isinstance(a["labels"], list) and len(a["probabilities"]) > 1 for a in answers)


def test_train_from_a_bare_checkpoint_does_not_warn_that_the_head_is_untrained(tmp_path, capsys, minilm_dir):
    from tests.presets.test_huggingface_import import save_random_checkpoint

    checkpoint = tmp_path / "bare"
    save_random_checkpoint(checkpoint, vocab_size=30522)
    shutil.copy(os.path.join(minilm_dir, "vocab.txt"), checkpoint)
    data = write(tmp_path, "train.csv", "text,label\na fine film,pos\na dull film,neg\n")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        code, out, _ = run(capsys, "train", "--data", data, "--preset", str(checkpoint), "--output",
                           str(tmp_path / "m"), "--epochs", "1", "--sequence-length", "8", "--dtype", "float32")
    assert code == 0 and "Saved the fine-tuned classifier" in out
    assert not [w for w in caught if "head" in str(w.message)], [str(w.message) for w in caught]


def test_unknown_columns_are_named_with_the_ones_that_exist(tmp_path, capsys):
    code, _, err = run(capsys, "train", "--data", f"{MR}/train.tsv", "--text-column", "review",
                       "--output", str(tmp_path / "m"))
    assert code == 2 and "no column 'review'" in err and "'text', 'label'" in err


def test_empty_data_and_missing_files_are_reported(tmp_path, capsys):
    empty = write(tmp_path, "empty.csv", "text,label\n")
    code, _, err = run(capsys, "train", "--data", empty, "--output", str(tmp_path / "m"))
    assert code == 2 and "no rows" in err
    code, _, err = run(capsys, "evaluate", "--model", str(tmp_path), "--data", str(tmp_path / "nope.csv"))
    assert code == 2 and "not a model saved by `kbert train`" in err


def test_bytes_that_are_not_utf8_are_reported_by_line_and_column(tmp_path, capsys):
    data = write(tmp_path, "latin1.csv", "text,label\nfine,1\ncaf\u00e9 noir,0\n".encode("latin-1"))
    code, _, err = run(capsys, "train", "--data", data, "--output", str(tmp_path / "m"))
    assert code == 2 and "latin1.csv, line 3, column 4: byte b'\\xe9' is not UTF-8" in err


def test_a_byte_order_mark_is_not_read_into_the_first_column(tmp_path, capsys, saved_classifier):
    data = write(tmp_path, "excel.csv", b"\xef\xbb\xbftext,label\r\na fine film,pos\r\n")
    code, out, _ = run(capsys, "predict", "--model", saved_classifier["named"], "--data", data)
    assert code == 0 and json.loads(out)["text"] == "a fine film"


def test_fields_past_csvs_default_limit_are_read_up_to_a_bound(tmp_path, capsys, saved_classifier):
    long_text = "word " * 40_000  # 200,000 characters; csv's default limit is 131,072
    data = write(tmp_path, "long.csv", f'text\n"{long_text}"\n')
    code, out, _ = run(capsys, "predict", "--model", saved_classifier["named"], "--data", data)
    assert code == 0 and json.loads(out)["text"] == long_text

    unclosed = write(tmp_path, "unclosed.csv", 'text,label\nfine,1\n"' + "x" * MAX_FIELD_CHARS + ",0\n")
    code, _, err = run(capsys, "train", "--data", unclosed, "--output", str(tmp_path / "m"))
    assert code == 2 and "line 3: the row starting there has a field longer than 4,194,304 characters" in err
    assert "unclosed quote" in err


def test_a_row_without_a_label_is_named(tmp_path, capsys):
    short = write(tmp_path, "short.csv", "text,label\na fine film,1\na dull film\n")
    code, _, err = run(capsys, "train", "--data", short, "--output", str(tmp_path / "m"))
    assert code == 2 and "short.csv, line 3: the row has 1 field, but the header has 2 (text, label): no value " \
                         "for column 'label'" in err
    blank = write(tmp_path, "blank.csv", "text,label\na fine film,1\na dull film, \n")
    code, _, err = run(capsys, "train", "--data", blank, "--output", str(tmp_path / "m"))
    assert code == 2 and "blank.csv, line 3: the label (column 'label') is empty" in err


@pytest.mark.parametrize("name, row, hint", [
    ("extra.tsv", "a\tb\t1", "a tab inside a text splits it"),
    ("extra.csv", "a,b,1", "Put that text in double quotes"),
    ("extra_unused.csv", "a,1,", "Put that text in double quotes"),
])
def test_a_row_with_more_fields_than_the_header_is_refused_by_its_line(tmp_path, capsys, name, row, hint):
    # Read by name, `a<TAB>b<TAB>1` used to train with "b" as its label.
    sep = "\t" if name.endswith(".tsv") else ","
    data = write(tmp_path, name, f"text{sep}label\na fine film{sep}1\n\n{row}\na dull film{sep}0\n")
    code, _, err = run(capsys, "train", "--data", data, "--output", str(tmp_path / "m"))
    assert code == 2 and f"{name}, line 4: the row has 3 fields, but the header has 2 (text, label)" in err
    assert hint in err and not os.path.exists(tmp_path / "m")


def test_an_unclosed_quote_is_named_by_the_line_it_opens_on(tmp_path, capsys):
    lines = ["text,label", '"a fine film,1'] + [f"film {i},{i % 2}" for i in range(16)]
    data = write(tmp_path, "quote.csv", "\n".join(lines) + "\n")
    code, _, err = run(capsys, "train", "--data", data, "--output", str(tmp_path / "m"))
    assert code == 2 and "quote.csv, line 2: the row has 1 field" in err
    assert "The row runs from line 2 to line 18: a quote (\") opened on line 2 is not closed" in err

    # A quoted text may hold line breaks; the next row is named by its own line.
    data = write(tmp_path, "multiline.csv", 'text,label\n"two\nlines",1\nb,0,x\n')
    code, _, err = run(capsys, "train", "--data", data, "--output", str(tmp_path / "m"))
    assert code == 2 and "multiline.csv, line 4: the row has 3 fields" in err


def test_a_header_that_repeats_a_column_is_refused_naming_it(tmp_path, capsys):
    # Read by name, the second "text" column used to replace the first.
    data = write(tmp_path, "twice.tsv", "text\ttext\tlabel\na\tb\t1\nc\td\t0\n")
    code, _, err = run(capsys, "train", "--data", data, "--output", str(tmp_path / "m"))
    assert code == 2 and "twice.tsv: the header names column 'text' 2 times (columns 1, 2)" in err
    assert not os.path.exists(tmp_path / "m")


def test_data_that_is_a_directory_is_named_a_directory(tmp_path, capsys):
    write(tmp_path, "train.tsv", "text\tlabel\na\t1\n")
    code, _, err = run(capsys, "train", "--data", str(tmp_path), "--output", str(tmp_path / "m"))
    assert code == 2 and f"{tmp_path} is a directory; give a CSV or TSV file (it holds train.tsv)" in err


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-be", "utf-32"])
def test_a_utf16_file_is_named_with_how_to_convert_it(tmp_path, capsys, encoding):
    # Excel's "Unicode Text" and PowerShell's `>` write UTF-16 with a byte order mark.
    bom = {"utf-16-be": "\ufeff"}.get(encoding, "")
    data = write(tmp_path, "unicode.csv", (bom + "text,label\na fine film,1\n").encode(encoding))
    code, _, err = run(capsys, "train", "--data", data, "--output", str(tmp_path / "m"))
    name = encoding[:6].upper()
    assert code == 2 and f"unicode.csv is {name} text (it starts with a {name} byte order mark)" in err
    assert f"iconv -f {name.lower()} -t utf-8" in err


def test_train_refuses_a_folder_that_is_not_empty_unless_told_to_overwrite(tmp_path, capsys, tiny_preset):
    def train(labels, *more):
        rows = "".join(f"film {i},{label}\n" for i, label in enumerate(labels))
        data = write(tmp_path, "train.csv", "text,label\n" + rows)
        return run(capsys, "train", "--data", data, "--preset", tiny_preset, "--output", str(tmp_path / "m"),
                   "--epochs", "1", "--sequence-length", "8", "--dtype", "float32", *more)

    def class_names():
        with open(tmp_path / "m" / "kbert_config.json") as f:
            return json.load(f)["task"]["config"]["class_names"]

    assert train(["neg", "pos"])[0] == 0
    code, _, err = train(["bad", "good"])
    assert code == 2 and "--output " in err and "is not empty: give a new folder, or --overwrite" in err
    assert class_names() == ["neg", "pos"]  # the first model, untouched
    assert train(["bad", "good"], "--overwrite")[0] == 0
    assert class_names() == ["bad", "good"] and sorted(os.listdir(tmp_path)) == ["m", "train.csv"]

    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("not a model")
    code, _, err = run(capsys, "train", "--data", str(tmp_path / "train.csv"), "--output", str(other), "--overwrite")
    assert code == 2 and "holds files that are not a kbert model" in err
    assert os.listdir(other) == ["notes.txt"]


def test_integer_labels_must_be_every_class_id_unless_num_classes_is_given(tmp_path, capsys):
    with pytest.raises(UsageError, match="1, 2, 3, 4, 5, 6 never occur.*--num-classes 8"):
        encode_labels(["0", "7", "0"])
    assert encode_labels(["0", "7", "0"], num_classes=8) == ([0, 7, 0], None)
    with pytest.raises(UsageError, match="a.csv, line 4: label 7 is outside 0..2"):
        encode_labels(["0", "1", "7"], num_classes=3, places=["a.csv, line 2", "a.csv, line 3", "a.csv, line 4"])
    data = write(tmp_path, "gap.csv", "text,label\na,0\nb,7\n")
    code, _, err = run(capsys, "train", "--data", data, "--output", str(tmp_path / "m"))
    assert code == 2 and "never occur" in err and not os.path.exists(tmp_path / "m")


def test_string_labels_become_class_names():
    assert encode_labels(["pos", "neg", "pos"]) == ([1, 0, 1], ["neg", "pos"])
    assert encode_labels(["0", "1"]) == ([0, 1], None)


def test_evaluate_maps_labels_through_the_models_own_class_names(tmp_path, capsys, saved_classifier):
    names = write(tmp_path, "names.csv", "text,label\na fine film,pos\na dull film,neg\n")
    code, _, err = run(capsys, "evaluate", "--model", saved_classifier["integer"], "--data", names)
    assert code == 2 and "names.csv, line 2: label 'pos': The labels are strings (e.g. 'pos'); give the model class_names" in err
    other = write(tmp_path, "other.csv", "text,label\na fine film,pos\na dull film,negative\n")
    code, _, err = run(capsys, "evaluate", "--model", saved_classifier["named"], "--data", other)
    assert code == 2 and "other.csv, line 3: label 'negative': Labels ['negative'] are not among class_names ['pos', 'neg']" in err


def test_predict_honours_max_examples(tmp_path, capsys, saved_classifier):
    data = write(tmp_path, "three.csv", "text\none\ntwo\nthree\n")
    code, out, _ = run(capsys, "predict", "--model", saved_classifier["named"], "--data", data,
                       "--max-examples", "2")
    assert code == 0 and [json.loads(line)["text"] for line in out.splitlines()] == ["one", "two"]
    code, out, _ = run(capsys, "predict", "--model", saved_classifier["named"], "a", "b", "--max-examples", "1")
    assert code == 0 and len(out.splitlines()) == 1


def test_counts_below_one_are_refused_before_anything_runs(tmp_path, capsys):
    for option in ("--epochs", "--batch-size", "--max-examples"):
        with pytest.raises(SystemExit) as exit:
            main(["train", "--data", f"{MR}/train.tsv", "--output", str(tmp_path / "m"), option, "0"])
        assert exit.value.code == 2 and f"argument {option}: 0 is less than 1" in capsys.readouterr().err
    assert not os.path.exists(tmp_path / "m")


def test_an_unknown_dtype_is_refused_with_the_choices(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit:
        main(["train", "--data", f"{MR}/train.tsv", "--output", str(tmp_path / "m"), "--dtype", "float8"])
    assert exit.value.code == 2 and "invalid choice: 'float8'" in capsys.readouterr().err


def test_kbert_errors_are_one_line_on_stderr_and_debug_shows_the_traceback(tmp_path, capsys, saved_classifier):
    version = tmp_path / "saved" / "1"
    version.mkdir(parents=True)
    (version / "saved_model.pb").write_bytes(b"")
    code, out, err = run(capsys, "export", "--model", saved_classifier["named"], "--output", str(version))
    assert code == 2 and out == "" and err.startswith("kbert export: error: FileExistsError: ")
    assert len(err.strip().splitlines()) == 1

    data = write(tmp_path, "train.csv", "text,label\na,0\nb,1\n")
    with pytest.raises(FileNotFoundError, match=r'Preset folder ".*nope" does not exist'):
        main(["train", "--data", data, "--output", str(tmp_path / "m"), "--preset", str(tmp_path / "nope"),
              "--debug"])

    # Offline (as tests are), a repository that is not in the cache.
    code, _, err = run(capsys, "train", "--data", data, "--output", str(tmp_path / "m"),
                       "--preset", "hf://nobody/no-such-model")
    assert code == 2 and err.startswith("kbert train: error: ") and len(err.strip().splitlines()) == 1

    code, _, err = run(capsys, "train", "--data", data, "--output", str(tmp_path / "m"),
                       "--preset", saved_classifier["named"], "--sequence-length", "100")
    assert code == 2 and "ValueError: sequence_length=100 is longer than this model's maximum, 64" in err


def test_presets_lists_trains_default_preset(capsys):
    default = build_parser().parse_args(["train", "--data", "d.csv", "--output", "m"]).preset
    code, out, _ = run(capsys, "presets")
    assert code == 0 and f"\n{default}: " in out


def modules_loaded_after(statements, modules):
    """Runs `statements` after `import sys, kbert_cli` in a fresh interpreter;
    its last stderr line lists which of `modules` were then loaded."""
    code = ("import sys, kbert_cli\n" + statements
            + f"print(sorted(m for m in {tuple(modules)!r} if m in sys.modules), file=sys.stderr)\n")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)


def test_presets_loads_neither_kbert_nor_tensorflow():
    # Through the console script's entry point, in a fresh interpreter: the
    # table is fixed, so it must not wait for TensorFlow (8 s) to print it.
    result = modules_loaded_after("assert kbert_cli.main(['presets']) == 0\n",
                                  ("kbert", "keras", "tensorflow", "numpy", "huggingface_hub"))
    assert result.stderr.strip().splitlines()[-1] == "[]", result.stderr[-2000:]
    assert "bert-base-uncased" in result.stdout and "\nminilm: " in result.stdout


def test_a_reader_that_stops_reading_ends_the_command_quietly():
    # `kbert presets | head -1`: here the pipe is closed before anything is written.
    read, written = os.pipe()
    os.close(read)
    result = subprocess.run([sys.executable, "-m", "kbert_cli", "presets"], stdout=written, stderr=subprocess.PIPE,
                            text=True, timeout=60)
    os.close(written)
    assert result.stderr == "" and result.returncode == 141


def test_python_m_kbert_runs_the_command():
    result = subprocess.run([sys.executable, "-m", "kbert", "--help"], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0 and result.stdout.startswith("usage: kbert"), result.stderr[-2000:]


def test_every_option_has_help_text_and_shows_its_default():
    parser = build_parser()
    subcommands = next(a for a in parser._actions if a.dest == "command").choices
    for name, subparser in subcommands.items():
        text = " ".join(subparser.format_help().split())
        for action in subparser._actions:
            assert action.help, f"kbert {name} {action.dest} has no help"
            if action.default not in (None, False) and action.default != argparse.SUPPRESS and not action.required:
                assert f"(default: {action.default})" in text, f"kbert {name} {action.dest}"


def test_help_and_argument_mistakes_import_neither_kbert_nor_tensorflow():
    # Through the console script's own entry point (kbert_cli.main), in a
    # fresh interpreter: `kbert --help` must not pay for `import kbert`.
    result = modules_loaded_after(
        "for argv in (['--help'], ['train', '--help'], ['predict', '--help'], ['train', '--epochs', 'x']):\n"
        "    try: kbert_cli.main(argv)\n"
        "    except SystemExit: pass\n",
        ("kbert", "keras", "tensorflow", "numpy"))
    assert result.stderr.strip().splitlines()[-1] == "[]", result.stderr[-2000:]
    assert "usage: kbert predict" in result.stdout
    assert "kbert train: error: argument --epochs: 'x' is not an integer" in result.stderr


@pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"),
                    reason="TensorFlow's x86 builds are the ones with oneDNN kernels to turn on")
@pytest.mark.parametrize("setting, enabled", [(None, "True"), ("0", "False")])
def test_the_command_turns_tensorflow_onednn_kernels_on_unless_told_otherwise(setting, enabled):
    # What TensorFlow itself reports once a subcommand has loaded it (it
    # reads the variable once, at import).
    code = (
        "import sys, kbert_cli\n"
        "kbert_cli.main(['presets'])\n"
        "from tensorflow.python.util import _pywrap_util_port\n"
        "print(_pywrap_util_port.IsMklEnabled(), file=sys.stderr)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "TF_ENABLE_ONEDNN_OPTS"}
    if setting is not None:
        env["TF_ENABLE_ONEDNN_OPTS"] = setting
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert result.stderr.strip().splitlines()[-1] == enabled, result.stderr[-2000:]


def test_console_script_is_installed_and_every_subcommand_has_help():
    script = os.path.join(os.path.dirname(sys.executable), "kbert")
    listed = subprocess.run([script, "--help"], capture_output=True, text=True).stdout
    commands = ("presets", "train", "evaluate", "predict", "export", "serve-check")
    assert all(c in listed for c in commands)
    for command in commands:
        with pytest.raises(SystemExit) as exit:
            build_parser().parse_args([command, "--help"])
        assert exit.value.code == 0


def test_a_subcommand_prints_no_tensorflow_startup_lines(tmp_path):
    # serve-check loads kbert, and with it TensorFlow, before it looks at its folder.
    script = os.path.join(os.path.dirname(sys.executable), "kbert")
    missing = str(tmp_path / "missing")
    result = subprocess.run([script, "serve-check", missing, "--text", "a"], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 2
    assert result.stderr == f"kbert serve-check: error: No SavedModel folder at {missing}\n", result.stderr[-2000:]


def test_whole_number_labels_read_as_classes_say_how_to_ask_for_regression():
    # A 0-5 similarity score (Chinese STS-B) is a number to predict, not six classes.
    note = integer_classes_note(["0", "3", "5", "2", "1", "4"], "auto")
    assert note == ("The labels are whole numbers (0, 1, 2, 3, 4, 5): read as 6 classes. If they are scores or "
                    "ratings to predict as numbers, pass --problem-type regression.")
    assert integer_classes_note(["0", "1", "1"], "auto") is None  # binary labels
    assert integer_classes_note(["0", "3", "5"], "single_label_classification") is None  # chosen
    assert integer_classes_note(["neg", "pos", "neutral"], "auto") is None
