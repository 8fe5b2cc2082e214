"""Finding a preset's files: a registered name, `hf://owner/name`, or a folder.

Every kind of preset resolves to one local folder. Hugging Face's layout is
`config.json`, `model.safetensors` (or `pytorch_model.bin`), `vocab.txt` and
optionally `tokenizer_config.json`; kbert's own layout (written by
`save_to_preset`) is `kbert_config.json`, `model.weights.h5`, `vocab.txt` and
`tokenizer_config.json`.
"""

import json
import os
import shutil
import tempfile
import urllib.error
import urllib.request

from kbert.presets.registry import PRESETS

HF_PREFIX = "hf://"
HF_ENDPOINT = os.environ.get("HF_ENDPOINT", "https://huggingface.co")
KBERT_CONFIG = "kbert_config.json"
TOKENIZER_CONFIG = "tokenizer_config.json"
VOCABULARY = "vocab.txt"
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
DOWNLOAD_TIMEOUT_S = 20


def cache_dir():
    """Where downloaded presets live: `$KBERT_HOME`, else `~/.cache/kbert`."""
    return os.environ.get("KBERT_HOME") or os.path.join(os.path.expanduser("~"), ".cache", "kbert")


def _offline():
    return any(
        os.environ.get(v, "").lower() in ("1", "true", "yes")
        for v in ("KBERT_OFFLINE", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
    )


def get_preset_dir(preset):
    """Returns the local folder holding `preset`'s files, downloading if needed.

    Args:
        preset: a registered name (`kbert.presets.list_presets()`), a Hugging
            Face repository as `hf://owner/name`, or a local folder.
    """
    if not isinstance(preset, (str, os.PathLike)):
        raise TypeError(f"A preset is a name, `hf://owner/name` or a folder path; got {preset!r}.")
    preset = os.fspath(preset)
    if os.path.isdir(preset):
        _check_folder(preset)
        return preset
    if preset.startswith(HF_PREFIX):
        return _download(preset[len(HF_PREFIX):], lowercase=None)
    if preset in PRESETS:
        entry = PRESETS[preset]
        return _download(entry["hf_repo"], lowercase=entry["lowercase"], name=preset)
    if os.sep in preset or preset.startswith("."):
        raise FileNotFoundError(f'Preset folder "{preset}" does not exist.')
    raise ValueError(
        f'Unknown preset "{preset}". Known presets: {", ".join(PRESETS)}; '
        'or pass "hf://owner/name" for a Hugging Face repository, or a local folder.'
    )


def is_kbert_layout(folder):
    return os.path.exists(os.path.join(folder, KBERT_CONFIG))


def weights_file(folder):
    for name in WEIGHT_FILES:
        path = os.path.join(folder, name)
        if os.path.exists(path):
            return path
    raise FileNotFoundError(
        f"No weights in preset folder {folder}: expected one of {', '.join(WEIGHT_FILES)} "
        f"(Hugging Face layout) or model.weights.h5 with {KBERT_CONFIG} (kbert layout)."
    )


def load_json(folder, name, default=None):
    path = os.path.join(folder, name)
    if not os.path.exists(path):
        if default is not None:
            return default
        raise FileNotFoundError(f"Preset folder {folder} has no {name}.")
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def _check_folder(folder):
    if is_kbert_layout(folder):
        return
    if not os.path.exists(os.path.join(folder, "config.json")):
        raise FileNotFoundError(
            f"Preset folder {folder} has neither config.json (Hugging Face layout) nor "
            f"{KBERT_CONFIG} (kbert layout, written by save_to_preset)."
        )


def _repo_cache(repo):
    return os.path.join(cache_dir(), "hf", repo.replace("/", "--"))


def _complete(folder):
    return (
        os.path.exists(os.path.join(folder, "config.json"))
        and os.path.exists(os.path.join(folder, VOCABULARY))
        and any(os.path.exists(os.path.join(folder, w)) for w in WEIGHT_FILES)
    )


def _download(repo, lowercase, name=None):
    folder = _repo_cache(repo)
    if _complete(folder):
        return folder
    what = f'preset "{name}" ({repo})' if name else f"hf://{repo}"
    how = (
        f"To use it offline, download config.json, vocab.txt and model.safetensors "
        f"(or pytorch_model.bin) from {HF_ENDPOINT}/{repo} into {folder}, "
        "or pass the path of a folder holding them as the preset."
    )
    if _offline():
        raise ConnectionError(f"Offline mode is on and {what} is not in the cache ({folder}). {how}")
    os.makedirs(os.path.dirname(folder), exist_ok=True)
    staging = tempfile.mkdtemp(prefix=".download-", dir=os.path.dirname(folder))
    try:
        for filename in ("config.json", VOCABULARY):
            _fetch(repo, filename, staging, what, how)
        _fetch(repo, TOKENIZER_CONFIG, staging, what, how, optional=True)
        if not _fetch(repo, WEIGHT_FILES[0], staging, what, how, optional=True):
            _fetch(repo, WEIGHT_FILES[1], staging, what, how)
        if lowercase is not None and not os.path.exists(os.path.join(staging, TOKENIZER_CONFIG)):
            with open(os.path.join(staging, TOKENIZER_CONFIG), "w") as f:
                json.dump({"do_lower_case": lowercase}, f)
        # A folder appears in the cache only once every file is in it, so an
        # interrupted download is never mistaken for a complete one.
        shutil.rmtree(folder, ignore_errors=True)
        os.replace(staging, folder)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return folder


def _fetch(repo, filename, folder, what, how, optional=False):
    url = f"{HF_ENDPOINT}/{repo}/resolve/main/{filename}"
    try:
        with urllib.request.urlopen(url, timeout=DOWNLOAD_TIMEOUT_S) as response:
            with open(os.path.join(folder, filename), "wb") as f:
                shutil.copyfileobj(response, f, length=1 << 20)
        return True
    except urllib.error.HTTPError as e:
        if optional and e.code == 404:
            return False
        raise ConnectionError(f"Downloading {what}: {url} answered HTTP {e.code}. {how}") from e
    except (urllib.error.URLError, OSError) as e:
        raise ConnectionError(f"Could not download {what} from {url} ({e}). {how}") from e
