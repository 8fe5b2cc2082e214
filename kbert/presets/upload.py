"""Uploading a preset folder to the Hugging Face hub (KerasHub's `upload_preset`)."""

import os

import huggingface_hub

from kbert.presets import files

# What marks a folder as a preset kbert (or transformers, or sentence-transformers) reads.
_PRESET_FILES = (files.HF_CONFIG, files.KBERT_CONFIG)


def upload_preset(uri, folder, private=None, commit_message=None):
    """Uploads the preset `folder` (`save_to_preset`'s or
    `export_to_transformers`'s) to the Hugging Face repository `uri`,
    creating the repository if it does not exist.

    The token is `HF_TOKEN`, else the one `hf auth login` saved; the hub is
    `HF_ENDPOINT`, else huggingface.co.

    Args:
        uri: `"hf://owner/name"`, or `"hf://owner/name@branch"`.
        folder: the preset folder.
        private: whether a repository created now is private (`None`: the
            account's default).
        commit_message: of the commit (default: "Upload kbert preset").

    Returns:
        The URL of the commit.

    Example:
    >>> model.export_to_transformers("exported/mr")
    >>> kbert.presets.upload_preset("hf://me/bert-mr", "exported/mr")
    """
    if not isinstance(uri, str) or not uri.startswith(files.HF_PREFIX):
        raise ValueError(f'upload_preset uploads to a Hugging Face repository, "hf://owner/name"; got {uri!r}.')
    repo, revision = files.parse_hf_preset(uri)
    folder = os.fspath(folder)
    if not any(os.path.exists(os.path.join(folder, name)) for name in _PRESET_FILES):
        raise FileNotFoundError(
            f"{folder} is not a preset folder: it has neither {files.HF_CONFIG} nor {files.KBERT_CONFIG}. Write one "
            "with model.export_to_transformers(folder) or model.save_to_preset(folder) first."
        )
    api = huggingface_hub.HfApi(endpoint=files.hf_endpoint(), token=os.environ.get("HF_TOKEN") or None,
                                library_name="kbert")
    api.create_repo(repo, private=private, exist_ok=True)
    info = api.upload_folder(repo_id=repo, folder_path=folder, revision=revision,
                             commit_message=commit_message or "Upload kbert preset")
    return info.commit_url
