"""Finding a preset's files: a registered name, `hf://owner/name[@revision]`, or a folder.

Every kind of preset resolves to one local folder. Hugging Face's layout is
`config.json`, `model.safetensors` (or `pytorch_model.bin`), `vocab.txt` (or
`tokenizer.json`) and optionally `tokenizer_config.json`; kbert's own layout (written by
`save_to_preset`) is `kbert_config.json`, `model.weights.h5`, `vocab.txt` and
`tokenizer_config.json`.

Downloads go through `huggingface_hub` into the shared Hugging Face cache
(`$HF_HUB_CACHE`, else `$HF_HOME/hub`, else `~/.cache/huggingface/hub`), the
one transformers and KerasHub use: a checkpoint either of them fetched is
reused, files arrive whole or not at all (their size is checked against the
hub's before they are named), `HF_TOKEN` is sent, and progress bars show.
`HF_ENDPOINT` and the cache location are read at each call, not at import.
"""

import inspect
import json
import os
import re
import warnings

import huggingface_hub
from huggingface_hub import constants as hub_constants
from huggingface_hub import errors as hub_errors
from huggingface_hub.file_download import repo_folder_name
from huggingface_hub.utils import validate_repo_id

from kbert import families
from kbert.presets import config_check, download_bounds
from kbert.presets.registry import PRESETS

HF_PREFIX = "hf://"
DEFAULT_ENDPOINT = "https://huggingface.co"
HF_CONFIG = "config.json"
KBERT_CONFIG = "kbert_config.json"
TOKENIZER_CONFIG = "tokenizer_config.json"
VOCABULARY = "vocab.txt"
# The vocabulary of a repository that has no vocab.txt (transformers 5 writes none).
TOKENIZER_JSON = "tokenizer.json"
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
# A download that gets no further for this long is given up (KBERT_DOWNLOAD_TIMEOUT
# overrides it; download_bounds.py). huggingface_hub writes 10 MB at a time, so this is also the
# slowest link that can fetch a file: 10 MB / 300 s, about 35 kB/s.
STALL_TIMEOUT_S = 300
# Git's rules for branch and tag names, narrowed: no `..`, which would also
# escape the cache's refs/ folder, where huggingface_hub records a revision.
_REVISION = re.compile(r"[A-Za-z0-9_.\-]+(/[A-Za-z0-9_.\-]+)*")


def cache_dir():
    """Where kbert keeps its own files (e.g. the bfloat16 probe):
    `$KBERT_HOME`, else `~/.cache/kbert`. Downloads go to `hf_cache_dir()`."""
    return os.environ.get("KBERT_HOME") or os.path.join(os.path.expanduser("~"), ".cache", "kbert")


def hf_cache_dir():
    """The Hugging Face cache, found as huggingface_hub finds it, but now
    rather than when huggingface_hub was imported."""
    if os.environ.get("HF_HUB_CACHE"):
        return os.path.expanduser(os.path.expandvars(os.environ["HF_HUB_CACHE"]))
    home = os.environ.get("HF_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "huggingface"
    )
    return os.path.join(os.path.expanduser(os.path.expandvars(home)), "hub")


def hf_endpoint():
    return (os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")


def _offline():
    # huggingface_hub reads HF_HUB_OFFLINE once, at import, and then refuses
    # every request: that counts as offline too.
    return hub_constants.HF_HUB_OFFLINE or any(
        os.environ.get(v, "").lower() in ("1", "true", "yes", "on")
        for v in ("KBERT_OFFLINE", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
    )


def get_preset_dir(preset, st_modules=False):
    """Returns the local folder holding `preset`'s files, downloading if needed.

    Args:
        preset: a registered name (`kbert.presets.list_presets()`), a Hugging
            Face repository as `hf://owner/name` or `hf://owner/name@revision`
            (a branch, tag or commit), or a local folder.
        st_modules: for a task model (which reads an embedder's
            pooling or a CrossEncoder's activation from their modules), a
            cached snapshot with no record of a `modules.json` (as
            transformers leaves the cache) is completed first, online.
    """
    if not isinstance(preset, (str, os.PathLike)):
        raise TypeError(f"A preset is a name, `hf://owner/name` or a folder path; got {preset!r}.")
    preset = os.fspath(preset)
    if os.path.isdir(preset):
        _check_folder(preset)
        return preset
    if preset.startswith(HF_PREFIX):
        return hub_snapshot(*parse_hf_preset(preset), st_modules=st_modules)
    if preset in PRESETS:
        entry = PRESETS[preset]
        folder = hub_snapshot(entry["hf_repo"], name=preset, st_modules=st_modules)
        _check_case(folder, preset, entry)
        return folder
    if os.sep in preset or preset.startswith("."):
        raise FileNotFoundError(f'Preset folder "{preset}" does not exist.')
    raise ValueError(
        f'Unknown preset "{preset}". Known presets: {", ".join(PRESETS)}; '
        'or pass "hf://owner/name" for a Hugging Face repository, or a local folder.'
    )


def parse_hf_preset(preset):
    """`"hf://owner/name@revision"` -> `("owner/name", "revision")`; the
    revision is None when not given. Refuses, before any request or file
    access, names that are not Hugging Face repositories."""
    repo, at, revision = preset[len(HF_PREFIX):].partition("@")
    how = "Write hf://owner/name, or hf://owner/name@revision for a branch, tag or commit."
    try:
        validate_repo_id(repo)
    except (hub_errors.HFValidationError, TypeError) as e:
        raise ValueError(f'"{preset}" does not name a Hugging Face repository: {e} {how}') from None
    if at and not (_REVISION.fullmatch(revision) and ".." not in revision):
        raise ValueError(f'"{preset}" has an invalid revision "{revision}". {how}')
    return repo, revision or None


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
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except json.JSONDecodeError as e:
        raise ValueError(
            f"{path} is not valid JSON ({e.msg} at line {e.lineno}, column {e.colno}). {how_to_replace(path)}"
        ) from None
    except UnicodeDecodeError as e:
        raise ValueError(f"{path} is not UTF-8 text ({e.reason} at byte {e.start}). {how_to_replace(path)}") from None


def write_json(folder, name, value):
    """Writes `value` as `folder/name` (the folder made if need be), as
    Hugging Face's libraries write their JSON files: indented, UTF-8."""
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, name), "w", encoding="utf-8") as f:
        json.dump(value, f, indent=2, ensure_ascii=False)


def check_new_folder(path, writer):
    """Refuses a folder that holds anything: `writer` (`save_to_preset`,
    `export_to_transformers`) writes a whole model, and a file of another
    model left beside it would be read with this one."""
    if os.path.isdir(path) and os.listdir(path):
        raise FileExistsError(
            f"{path} is not empty: {writer} writes a new folder, so that no file of another model (a config.json, "
            "model.safetensors, another tokenizer) is read with this one. Give a new path or empty it first."
        )


def how_to_replace(path):
    """How to get a good copy of a preset file that is damaged."""
    cache = os.path.join(os.path.realpath(hf_cache_dir()), "")
    real = os.path.realpath(path)
    if real.startswith(cache):
        repo_folder = os.path.join(cache, os.path.relpath(real, cache).split(os.sep)[0])
        return f"It was downloaded: delete {repo_folder} to download it again."
    return "Replace it with the file from the checkpoint it belongs to."


def _check_folder(folder):
    if is_kbert_layout(folder):
        return
    if not os.path.exists(os.path.join(folder, HF_CONFIG)):
        raise FileNotFoundError(
            f"Preset folder {folder} has neither config.json (Hugging Face layout) nor "
            f"{KBERT_CONFIG} (kbert layout, written by save_to_preset)."
        )


def _check_case(folder, name, entry):
    # The tokenizer lowercases unless tokenizer_config.json says otherwise, so
    # a cased checkpoint whose tokenizer_config.json went missing would
    # silently tokenize as uncased.
    lowercase = load_json(folder, TOKENIZER_CONFIG, default={}).get("do_lower_case", True)
    if entry["lowercase"] is not None and lowercase != entry["lowercase"]:
        raise ValueError(
            f'Preset "{name}" is {"uncased" if entry["lowercase"] else "cased"}, but its '
            f"{os.path.join(folder, TOKENIZER_CONFIG)} (missing means do_lower_case=true) says "
            f"do_lower_case={str(lowercase).lower()}. {how_to_replace(os.path.join(folder, HF_CONFIG))}"
        )


def hub_snapshot(repo, revision=None, name=None, st_modules=False):
    """The folder in the Hugging Face cache holding `repo`'s config.json,
    tokenizer files, tokenizer_config.json (if the repository has one),
    weights and sentence-transformers modules (if it has them), all from one
    commit; downloaded if they are not all there already (see
    `get_preset_dir` for `st_modules`)."""
    revision = revision or "main"
    cache = hf_cache_dir()
    folder = _cached_snapshot(repo, revision, cache, modules_checked=st_modules and not _offline())
    if folder:
        return folder
    what = f'preset "{name}" (hf://{repo})' if name else f"hf://{repo}" + (f"@{revision}" if revision != "main" else "")
    how = _how_to_fetch(repo, revision, cache)
    if _offline():
        folder = _cached_snapshot(repo, revision, cache, tokenizer_config_checked=False)
        if folder:
            warnings.warn(
                f"Offline, {what} is loaded from {folder}, but whether the repository has a "
                f"{TOKENIZER_CONFIG} is not in the cache (`hf download` of several files does not record a "
                "missing one): without it the tokenizer lowercases. If the model is cased, put its "
                f"{TOKENIZER_CONFIG} in that folder."
            )
            return folder
        raise ConnectionError(f"Offline mode is on and {what} is not in the Hugging Face cache ({cache}). {how}")
    storage = os.path.join(cache, repo_folder_name(repo_id=repo, repo_type="model"))
    etag_timeout = _seconds("HF_HUB_ETAG_TIMEOUT", 10)
    return download_bounds.without_stalls(
        lambda progress: _download(repo, revision, cache, etag_timeout, what, how, progress), storage,
        _seconds("KBERT_DOWNLOAD_TIMEOUT", STALL_TIMEOUT_S), what, how, hf_endpoint(),
    )


def _cached_snapshot(repo, revision, cache, tokenizer_config_checked=True, modules_checked=False):
    """The snapshot folder if it already holds every file kbert reads, found
    without a request from huggingface_hub's records (refs/, snapshots/, and
    .no_exist/ for files the repository does not have); else None.
    `tokenizer_config_checked=False` accepts a snapshot with no record of a
    tokenizer_config.json, `modules_checked=True` refuses one without that of a modules.json."""
    def cached(name):
        return huggingface_hub.try_to_load_from_cache(repo, name, cache_dir=cache, revision=revision)

    found = {name: cached(name) for name in (HF_CONFIG, TOKENIZER_CONFIG, *WEIGHT_FILES)}
    tokenizer = _tokenizer_files(found[HF_CONFIG]) if isinstance(found[HF_CONFIG], str) else ()
    complete = (
        isinstance(found[HF_CONFIG], str)
        and any(all(isinstance(cached(name), str) for name in names) for names in tokenizer)
        and (found[TOKENIZER_CONFIG] is not None or not tokenizer_config_checked)  # None: never looked for
        and (not modules_checked or cached("modules.json") is not None)
        and any(isinstance(found[w], str) for w in WEIGHT_FILES)
    )
    return os.path.dirname(found[HF_CONFIG]) if complete else None


def _how_to_fetch(repo, revision, cache):
    at = f" --revision {revision}" if revision != "main" else ""
    tokenizers = " or ".join(" + ".join(names) for names in families.all_tokenizer_files())
    return (
        f"To use it offline, download config.json, the tokenizer's files ({tokenizers}), tokenizer_config.json "
        f"(where the repository has one: without it a WordPiece tokenizer lowercases) and model.safetensors (or "
        f"pytorch_model.bin) from {hf_endpoint()}/{repo} into one folder and pass that folder as the preset; or, "
        f"online, fill the Hugging Face cache ({cache}) with `hf download {repo} --include '*.json' '*.txt' '*.model' "
        f"model.safetensors{at}` and copy it over."
    )


def _seconds(variable, default):
    value = os.environ.get(variable) or default
    try:
        seconds = float(value)
    except ValueError:
        seconds = 0
    if not seconds > 0:
        raise ValueError(f"{variable}={value!r}: expected a number of seconds above 0, e.g. {variable}={default}.")
    return seconds


def _download(repo, revision, cache, etag_timeout, what, how, progress):
    endpoint = hf_endpoint()
    # The progress bar reports each piece to `progress`, which counts restarts (huggingface_hub 1.2+).
    takes_bar = "tqdm_class" in inspect.signature(huggingface_hub.hf_hub_download).parameters
    bar = {"tqdm_class": download_bounds.progress_bar(progress)} if takes_bar else {}

    def fetch(filename, revision, optional=False):
        progress.start(filename)
        try:
            return huggingface_hub.hf_hub_download(
                repo, filename, revision=revision, cache_dir=cache, endpoint=endpoint,
                etag_timeout=etag_timeout, library_name="kbert", **bar,
            )
        except Exception as e:
            if e is progress.error:
                raise
            if optional and _is_missing_file(e):
                return None
            explained = _explain(e, repo, revision, filename, endpoint, what, how)
            if explained is e:
                raise
            raise explained from e

    folder = os.path.dirname(fetch(HF_CONFIG, revision))
    # Before the other files: a config that cannot be built is refused before its weights' download.
    config_check.check_hf_config(load_json(folder, HF_CONFIG), f"The config.json of {what}")
    # The rest from the commit config.json came from, even if the branch moves meanwhile.
    commit = os.path.basename(folder)
    # The tokenizer: the first of its family's sets of files that the repository has.
    choices = _tokenizer_files(os.path.join(folder, HF_CONFIG))
    if not any(all([fetch(name, commit, optional=True) is not None for name in names]) for names in choices):
        fetch(choices[0][0], commit)  # says that the repository has no tokenizer
    fetch(TOKENIZER_CONFIG, commit, optional=True)
    if fetch(WEIGHT_FILES[0], commit, optional=True) is None:
        fetch(WEIGHT_FILES[1], commit)
    # A sentence-transformers model's modules (pooling, dense layers) and a
    # CrossEncoder's activation, where the repository has them.
    fetch("config_sentence_transformers.json", commit, optional=True)
    if fetch("modules.json", commit, optional=True) is not None:
        fetch("sentence_bert_config.json", commit, optional=True)
        modules = load_json(folder, "modules.json", default=[])
        for entry in modules if isinstance(modules, list) else []:
            path = entry.get("path") if isinstance(entry, dict) else None
            if path and isinstance(path, str):
                fetch(f"{path}/config.json", commit, optional=True)
                if str(entry.get("type", "")).endswith("Dense") and fetch(f"{path}/{WEIGHT_FILES[0]}", commit,
                                                                          optional=True) is None:
                    fetch(f"{path}/{WEIGHT_FILES[1]}", commit, optional=True)
    return folder


def model_type(folder):
    """The `model_type` of a preset folder's model (its family): config.json's,
    or the backbone's `family` in kbert's layout; "bert" where neither says."""
    if is_kbert_layout(folder):
        return (load_json(folder, KBERT_CONFIG).get("backbone") or {}).get("family", "bert")
    config = load_json(folder, HF_CONFIG, default={})
    return config.get("model_type", "bert") if isinstance(config, dict) else "bert"


def _tokenizer_files(config_path):
    """The sets of files the tokenizer of the model of `config_path` may be in."""
    try:
        with open(config_path, encoding="utf-8") as f:
            model_type = json.load(f).get("model_type", "bert")
    except (OSError, ValueError, AttributeError):  # read again, and explained, when the preset is loaded
        model_type = "bert"
    return families.tokenizer_files(model_type)


def _is_missing_file(error):
    return isinstance(error, hub_errors.EntryNotFoundError) and not isinstance(
        error, hub_errors.LocalEntryNotFoundError
    )


def _explain(error, repo, revision, filename, endpoint, what, how):
    """A kbert error saying what went wrong with huggingface_hub's `error`
    and what to do about it; `error` itself if it is not about the download."""
    status = getattr(getattr(error, "response", None), "status_code", None)
    page = f"{endpoint}/{repo}"
    if isinstance(error, hub_errors.GatedRepoError):
        return PermissionError(
            f"{what} is gated: accept its conditions at {page} while logged in, then set HF_TOKEN to an "
            "access token of that account (https://huggingface.co/settings/tokens)."
        )
    if status == 401:
        return PermissionError(
            f"{endpoint} refused {what} (HTTP 401): the repository is private or gated and needs a token, "
            "or it does not exist. Set HF_TOKEN to an access token that can read it "
            f"(https://huggingface.co/settings/tokens), and check the name at {page}."
        )
    if isinstance(error, hub_errors.RepositoryNotFoundError):
        return FileNotFoundError(f"{what} does not exist: {endpoint} has no repository {repo} (HTTP {status}).")
    if isinstance(error, hub_errors.RevisionNotFoundError):
        return FileNotFoundError(
            f'{what}: repository {repo} has no revision "{revision}" (a branch, tag or commit); see {page}/tree.'
        )
    if _is_missing_file(error):
        return FileNotFoundError(
            f"{what} has no {filename}{' (nor tokenizer.json)' if filename == VOCABULARY else ''} at revision "
            f"{revision}: kbert reads checkpoints in Hugging Face's layout (config.json, the tokenizer's files, "
            f"model.safetensors or pytorch_model.bin); see {page}."
        )
    if isinstance(error, (OSError, hub_errors.HfHubHTTPError)) or type(error).__module__.split(".")[0] in (
        "httpx", "httpx2", "requests", "urllib3", "huggingface_hub",
    ):
        return ConnectionError(
            f"Downloading {filename} of {what} from {endpoint} failed ({type(error).__name__}: {error}). "
            f"Nothing partial was kept: run it again to retry. {how}"
        )
    return error
