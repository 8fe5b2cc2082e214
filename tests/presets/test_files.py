"""Finding presets: names, hf://, folders, and the errors around them."""

import json
import os
import shutil
import time

import h5py
import numpy as np
import pytest

import kbert
from kbert.presets import get_preset_dir


def test_unknown_name_lists_the_known_presets():
    with pytest.raises(ValueError, match=r'Unknown preset "bse"\. Known presets: tiny, mini, small, medium, base, large'):
        get_preset_dir("bse")


@pytest.mark.parametrize("preset", ["base", "hf://google-bert/bert-base-cased"])
def test_offline_preset_not_in_cache_fails_at_once_naming_every_file_and_where(preset, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    start = time.monotonic()
    with pytest.raises(ConnectionError, match="not in the Hugging Face cache") as error:
        kbert.BertBackbone.from_preset(preset)
    assert time.monotonic() - start < 5
    message = str(error.value)
    assert str(tmp_path / "hub") in message and "pass that folder as the preset" in message
    assert all(name in message for name in ("config.json", "vocab.txt", "tokenizer_config.json", "model.safetensors"))


def write_hf_cache_entry(cache, repo, folder, names, absent=()):
    """Puts `folder`'s files in a Hugging Face cache as huggingface_hub lays
    it out: refs/main -> a commit, snapshots/<commit>/, .no_exist/<commit>/."""
    commit = "0" * 40
    entry = cache / ("models--" + repo.replace("/", "--"))
    (entry / "refs").mkdir(parents=True)
    (entry / "refs" / "main").write_text(commit)
    (entry / "snapshots" / commit).mkdir(parents=True)
    for name in names:
        shutil.copy(os.path.join(folder, name), entry / "snapshots" / commit / name)
    (entry / ".no_exist" / commit).mkdir(parents=True)
    for name in absent:
        (entry / ".no_exist" / commit / name).touch()
    return str(entry / "snapshots" / commit)


def test_registered_preset_in_the_hf_cache_is_loaded_from_it_offline(tmp_path, monkeypatch, minilm_dir):
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    snapshot = write_hf_cache_entry(
        tmp_path / "hub", "google/bert_uncased_L-2_H-128_A-2", minilm_dir,
        ["config.json", "vocab.txt", "tokenizer_config.json", "model.safetensors"],
    )
    assert get_preset_dir("tiny") == snapshot


def test_offline_cache_without_a_record_of_tokenizer_config_warns_that_the_tokenizer_lowercases(
        tmp_path, monkeypatch, minilm_dir):
    # What `hf download owner/name config.json vocab.txt tokenizer_config.json
    # model.safetensors` leaves for a repository without tokenizer_config.json.
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    snapshot = write_hf_cache_entry(tmp_path / "hub", "owner/name", minilm_dir,
                                    ["config.json", "vocab.txt", "model.safetensors"])
    with pytest.warns(UserWarning, match="without it the tokenizer lowercases"):
        assert get_preset_dir("hf://owner/name") == snapshot


def test_cased_preset_whose_files_say_uncased_is_refused(tmp_path, monkeypatch, minilm_dir):
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    write_hf_cache_entry(tmp_path / "hub", "google-bert/bert-base-cased", minilm_dir,
                         ["config.json", "vocab.txt", "model.safetensors"], absent=["tokenizer_config.json"])
    with pytest.raises(ValueError, match=r'Preset "base_cased" is cased, but .* says do_lower_case=true'):
        get_preset_dir("base_cased")


def test_missing_folder_is_reported_as_missing(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        get_preset_dir(str(tmp_path / "nowhere"))


def test_folder_without_config_says_what_it_expected(tmp_path):
    with pytest.raises(FileNotFoundError, match="neither config.json"):
        get_preset_dir(str(tmp_path))


def test_presets_table_lists_every_size_with_parameter_counts():
    presets = {p["name"]: p for p in kbert.presets.list_presets()}
    assert {"tiny", "mini", "small", "medium", "base", "large", "base_cased", "base_multilingual"} <= set(presets)
    # BERT-Base is "110M" in the paper: 109.5M with the pooler.
    assert 109e6 < presets["base"]["parameters"] < 110e6
    assert 334e6 < presets["large"]["parameters"] < 336e6
    assert "google/bert_uncased_L-2_H-128_A-2" in kbert.presets.format_presets()
    # The ModernBERT lineage, at the sizes its model cards give.
    assert round(presets["modernbert_base"]["parameters"] / 1e6) == 149
    assert round(presets["mmbert_base"]["parameters"] / 1e6) == 307
    assert round(presets["ettin_encoder_17m"]["parameters"] / 1e6) == 17


@pytest.fixture
def checkpoint(tmp_path):
    """A random Hugging Face checkpoint (vocab_size 120) with a 120-token vocab.txt."""
    from tests.presets.test_huggingface_import import save_random_checkpoint

    save_random_checkpoint(tmp_path)
    (tmp_path / "vocab.txt").write_text("".join(f"token{i}\n" for i in range(120)))
    return tmp_path


def test_vocabulary_cut_short_is_refused_naming_both_sizes(checkpoint):
    lines = (checkpoint / "vocab.txt").read_text().splitlines()[:60]
    (checkpoint / "vocab.txt").write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=r"vocab\.txt has 60 tokens \(lines\), but .*config\.json says the model has 120"):
        kbert.BertBackbone.from_preset(str(checkpoint))


def test_config_that_is_not_json_names_the_file(checkpoint):
    (checkpoint / "config.json").write_text('{"hidden_size": 32,')
    with pytest.raises(ValueError, match=r"config\.json is not valid JSON .* at line 1.*Replace it"):
        kbert.BertBackbone.from_preset(str(checkpoint))


def test_config_without_hidden_size_names_the_key(checkpoint):
    config = json.loads((checkpoint / "config.json").read_text())
    del config["hidden_size"]
    (checkpoint / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match=r"config\.json lacks hidden_size: a BERT config\.json sets"):
        kbert.BertBackbone.from_preset(str(checkpoint))


def test_corrupt_safetensors_names_the_file_and_how_to_fix_it(checkpoint):
    weights = checkpoint / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    with pytest.raises(ValueError, match=r"model\.safetensors is not a readable safetensors file .*Replace it"):
        kbert.BertBackbone.from_preset(str(checkpoint))


def edit_config(folder, name="config.json", **changes):
    path = folder / name
    config = json.loads(path.read_text())
    (config["backbone"] if "backbone" in config else config).update(changes)
    path.write_text(json.dumps(config))


def test_a_config_too_large_for_memory_is_refused_with_its_numbers_before_building(checkpoint):
    import transformers

    # The size of 100,000 layers, from transformers' own models of 1 and 2 layers.
    config = json.loads((checkpoint / "config.json").read_text())
    one, two = (transformers.BertModel(transformers.BertConfig(**{**config, "num_hidden_layers": n})).num_parameters()
                for n in (1, 2))
    expected = one + (100_000 - 1) * (two - one)
    edit_config(checkpoint, num_hidden_layers=100_000)
    start = time.monotonic()
    with pytest.raises(ValueError, match=(
        rf"config\.json describes a model of {expected:,} parameters \(vocab_size=120, num_hidden_layers=100,000, "
        r"num_attention_heads=4, hidden_size=32, .*\)\. Building it and loading its weights needs about [\d,.]+ GB "
        r"of memory, and this machine has [\d,.]+ GB\.")):
        kbert.BertBackbone.from_preset(str(checkpoint))
    assert time.monotonic() - start < 5  # refused, not built


@pytest.mark.parametrize("changes, message", [
    ({"hidden_size": 30}, r"hidden_size=30 and num_attention_heads=4: the hidden size must split evenly into the "
                          r"attention heads \(30 / 4 = 7\.5\)"),
    ({"num_hidden_layers": 0}, r"num_hidden_layers=0: the model's sizes are positive integers"),
    ({"intermediate_size": -48}, r"intermediate_size=-48: the model's sizes are positive integers"),
    ({"vocab_size": 120.5}, r"vocab_size=120\.5: the model's sizes are positive integers"),
    ({"num_attention_heads": True}, r"num_attention_heads=True: the model's sizes are positive integers"),
])
def test_sizes_must_be_positive_integers_and_the_hidden_size_split_into_the_heads(checkpoint, changes, message):
    edit_config(checkpoint, **changes)
    with pytest.raises(ValueError, match=r"config\.json says " + message):
        kbert.BertBackbone.from_preset(str(checkpoint))


def test_kbert_layout_configs_are_checked_too(tmp_path):
    kbert.BertBackbone(vocabulary_size=30, num_layers=1, num_heads=2, hidden_dim=8, intermediate_dim=16,
                       max_sequence_length=16).save_to_preset(str(tmp_path))
    edit_config(tmp_path, "kbert_config.json", num_layers=100_000, hidden_dim=768)
    with pytest.raises(ValueError, match=r"kbert_config\.json describes a model of [\d,]+ parameters .*num_layers=100,000"):
        kbert.BertBackbone.from_preset(str(tmp_path))


def test_hugging_face_weights_not_floating_point_or_not_finite_are_refused_naming_each(checkpoint):
    from safetensors.numpy import load_file, save_file

    tensors = {name: value.copy() for name, value in load_file(checkpoint / "model.safetensors").items()}
    query = "encoder.layer.0.attention.self.query.weight"
    tensors[query] = tensors[query].astype("int32")
    tensors["encoder.layer.1.output.dense.bias"][:] = np.nan
    tensors["embeddings.LayerNorm.weight"][3] = np.inf
    save_file(tensors, checkpoint / "model.safetensors")
    with pytest.raises(ValueError) as error:
        kbert.BertBackbone.from_preset(str(checkpoint))
    message = str(error.value)
    assert f"The weights in {checkpoint / 'model.safetensors'} cannot be used" in message
    assert f"tensor {query} holds int32 values; weights are floating point" in message
    assert "tensor encoder.layer.1.output.dense.bias holds 32 NaN or infinite values (of 32)" in message
    assert "tensor embeddings.LayerNorm.weight holds 1 NaN or infinite values (of 32)" in message


def spoil(path, shape, how):
    """Makes the one weight of `shape` in the Keras weights file at `path`
    int32 (`how="int32"`) or NaN at one value; returns its name there."""
    with h5py.File(path, "r+") as f:
        names = []
        f.visititems(lambda name, item: names.append(name) if getattr(item, "shape", None) == shape else None)
        [name] = names
        if how == "int32":
            value = f[name][()]
            del f[name]
            f[name] = value.astype("int32")
        else:
            f[name][(0,) * len(shape)] = np.nan
    return name


@pytest.mark.parametrize("how, problem", [("int32", "holds int32 values"), ("nan", "holds 1 NaN or infinite values")])
def test_kbert_preset_weights_not_floating_point_or_not_finite_are_refused_naming_them(tmp_path, minilm_dir, how,
                                                                                          problem):
    backbone = kbert.BertBackbone(vocabulary_size=30522, num_layers=1, num_heads=2, hidden_dim=8, intermediate_dim=16,
                                  max_sequence_length=16)
    backbone.save_to_preset(str(tmp_path / "backbone"))
    name = spoil(tmp_path / "backbone" / "model.weights.h5", (8, 16), how)  # the intermediate kernel
    with pytest.raises(ValueError, match=rf"model\.weights\.h5 cannot be used:\n  tensor {name} {problem}"):
        kbert.BertBackbone.from_preset(str(tmp_path / "backbone"))
    preprocessor = kbert.BertPreprocessor.from_preset(minilm_dir, sequence_length=8)
    kbert.BertClassifier(backbone, 3, preprocessor).save_to_preset(str(tmp_path / "classifier"))
    name = spoil(tmp_path / "classifier" / "task.weights.h5", (8, 3), how)  # the head's kernel
    with pytest.raises(ValueError, match=rf"task\.weights\.h5 cannot be used:\n  tensor {name}\b.* {problem}"):
        kbert.BertClassifier.from_preset(str(tmp_path / "classifier"))
