"""The `kbert` command on real data: train -> evaluate -> export -> serve-check."""

import json
import os
import subprocess
import sys

import pytest

from kbert.cli import main

MR = os.path.join(os.path.dirname(__file__), "..", "examples", "data", "mr")


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def tiny_preset(tmp_path, minilm_dir):
    """A small random BERT with MiniLM's vocabulary, in kbert's preset layout."""
    import kbert

    folder = str(tmp_path / "tiny")
    kbert.BertBackbone(vocabulary_size=30522, num_layers=2, num_heads=2, hidden_dim=32, intermediate_dim=64,
                       max_sequence_length=64).save_to_preset(folder)
    kbert.BertTokenizer.from_preset(minilm_dir).save_to_preset(folder)
    return folder


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


def test_unknown_columns_are_named_with_the_ones_that_exist(tmp_path, capsys):
    code, _, err = run(capsys, "train", "--data", f"{MR}/train.tsv", "--text-column", "review",
                       "--output", str(tmp_path / "m"))
    assert code == 2 and "no column 'review'" in err and "'text', 'label'" in err


def test_empty_data_and_missing_files_are_reported(tmp_path, capsys):
    empty = tmp_path / "empty.csv"
    empty.write_text("text,label\n")
    code, _, err = run(capsys, "train", "--data", str(empty), "--output", str(tmp_path / "m"))
    assert code == 2 and "no rows" in err
    code, _, err = run(capsys, "evaluate", "--model", str(tmp_path), "--data", str(tmp_path / "nope.csv"))
    assert code == 2 and "not a model saved by `kbert train`" in err


def test_string_labels_become_class_names():
    from kbert.cli import encode_labels

    assert encode_labels(["pos", "neg", "pos"]) == ([1, 0, 1], ["neg", "pos"])
    assert encode_labels(["0", "1"]) == ([0, 1], None)


def test_console_script_is_installed_and_every_subcommand_has_help():
    from kbert.cli import build_parser

    script = os.path.join(os.path.dirname(sys.executable), "kbert")
    listed = subprocess.run([script, "--help"], capture_output=True, text=True).stdout
    commands = ("presets", "train", "evaluate", "predict", "export", "serve-check")
    assert all(c in listed for c in commands)
    for command in commands:
        with pytest.raises(SystemExit) as exit:
            build_parser().parse_args([command, "--help"])
        assert exit.value.code == 0
