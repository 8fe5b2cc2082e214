"""A preset folder read once: `read_preset` parses each file of kbert's layout
or Hugging Face's a single time, and the backbone, tokenizer, preprocessor and
head are built from what it read (`Preset`), not by opening the files again.
(A sentence-transformers folder is read by `presets.sentence_transformers`,
around the Hugging Face folder it holds.)"""

import os

from kbert.presets import files, huggingface, loading, sentence_transformers, tokenizer_files


class Preset:
    """What a preset folder holds, each file read once.

    Attributes:
        folder: the local folder (downloaded first for `hf://` presets).
        kbert_layout: whether it is kbert's layout (`kbert_config.json`).
        config: the parsed `kbert_config.json` or `config.json`.
        backbone_config: `BertBackbone`'s arguments.
        has_tokenizer: whether it holds a tokenizer (`vocab.txt` or `tokenizer.json`).
        vocabulary: the WordPiece tokens of `vocab.txt` (None without one).
        tokenizer_config: the parsed `tokenizer_config.json` ({} without a tokenizer).
        task: the task a kbert preset was saved from (`{"class", "config"}`,
            {} for a backbone or a Hugging Face folder).
        sequence_length: the preprocessor's length a kbert preset was saved with.
        cross_encoder: a sentence-transformers CrossEncoder folder's settings
            (`{"score_activation"}`; {} for any other folder).
        preprocessor_settings: the other arguments of the preprocessor it was
            saved with (`truncation`, `pad_to`, ...; {} for others).
    """

    def __init__(self, preset, st_modules=False):
        self.preset = preset
        self.folder = files.get_preset_dir(preset, st_modules)
        self.kbert_layout = files.is_kbert_layout(self.folder)
        name = files.KBERT_CONFIG if self.kbert_layout else files.HF_CONFIG
        self.config = files.load_json(self.folder, name)
        self.backbone_config = loading.backbone_config_of(self.config, self.kbert_layout,
                                                          os.path.join(self.folder, name))
        self.has_tokenizer = tokenizer_files.has_tokenizer(self.folder)
        self.vocabulary = loading.read_vocabulary(self.folder, self.backbone_config["vocabulary_size"])
        self.tokenizer_config = (files.load_json(self.folder, files.TOKENIZER_CONFIG, default={})
                                 if self.has_tokenizer else {})
        self.task = (self.config.get("task") or {}) if self.kbert_layout else {}
        self.sequence_length = self.config.get("sequence_length") if self.kbert_layout else None
        self.cross_encoder = ({} if self.kbert_layout else
                              sentence_transformers.cross_encoder_settings(self.folder, self.config))
        self.preprocessor_settings = (self.config.get("preprocessor") or {}) if self.kbert_layout else {}
        self._tensors = None

    def checked_backbone_config(self, overrides):
        """The backbone config with `overrides`, which must leave the
        architecture (fixed by the weights) alone."""
        return loading.with_overrides(self.backbone_config, self.preset, overrides)

    @property
    def weights_path(self):
        return os.path.join(self.folder, loading.KBERT_WEIGHTS) if self.kbert_layout else files.weights_file(self.folder)

    def tensors(self):
        """A Hugging Face checkpoint's tensors by name, read on first use."""
        if self._tensors is None:
            self._tensors = huggingface.read_checkpoint(self.weights_path)
        return self._tensors

    def tokenizer_arguments(self):
        """`BertTokenizer`'s arguments, as `AutoTokenizer` reads the preset's
        tokenizer (`tokenizer_files`: `tokenizer.json` read only where it is
        needed); None where the preset has no tokenizer."""
        if not self.has_tokenizer:
            return None
        return tokenizer_files.tokenizer_settings(self.folder, self.tokenizer_config, self.vocabulary)

    def default_sequence_length(self, max_sequence_length):
        """The preprocessor's length when none is given: the one a kbert
        preset was saved with, or a Hugging Face tokenizer's
        `model_max_length` where it fits the positions; else None."""
        if self.kbert_layout:
            return self.sequence_length
        return tokenizer_files.model_max_length(self.folder, max_sequence_length, self.tokenizer_config)


def read_preset(preset, st_modules=False):
    """The preset (a registered name, `hf://owner/name` or a folder), read
    once (`st_modules`: see `files.get_preset_dir`)."""
    return preset if isinstance(preset, Preset) else Preset(preset, st_modules)
