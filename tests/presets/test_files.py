"""Finding presets: names, hf://, folders, and the errors around them."""

import time

import pytest

import kbert
from kbert.presets import get_preset_dir


def test_unknown_name_lists_the_known_presets():
    with pytest.raises(ValueError, match=r'Unknown preset "bse"\. Known presets: tiny, mini, small, medium, base, large'):
        get_preset_dir("bse")


@pytest.mark.parametrize("preset", ["base", "hf://google-bert/bert-base-cased"])
def test_offline_preset_not_in_cache_fails_at_once_saying_where_it_looked(preset, tmp_path, monkeypatch):
    monkeypatch.setenv("KBERT_HOME", str(tmp_path))
    start = time.monotonic()
    with pytest.raises(ConnectionError, match="not in the cache") as error:
        kbert.BertBackbone.from_preset(preset)
    assert time.monotonic() - start < 5
    assert str(tmp_path) in str(error.value) and "model.safetensors" in str(error.value)


def test_cached_registered_preset_is_loaded_from_the_cache(tmp_path, monkeypatch, minilm_dir):
    import shutil

    monkeypatch.setenv("KBERT_HOME", str(tmp_path))
    cached = tmp_path / "hf" / "google--bert_uncased_L-2_H-128_A-2"
    shutil.copytree(minilm_dir, cached)
    assert get_preset_dir("tiny") == str(cached)


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
