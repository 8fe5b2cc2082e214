"""Text processing in TensorFlow ops (tensorflow-text): tokenizers,
preprocessors, masking, packing and pre-training data.

Each name below, and each module (`kbert.text.task_preprocessors`), is
imported at its first use (PEP 562), and TensorFlow with it: the model path,
which imports this package, runs without TensorFlow on JAX and PyTorch
(`kbert.tf_if_present`).
"""

import importlib
import importlib.util

from kbert.tf_if_present import MISSING

# Family-neutral names first; the `Bert*` names of the first releases are the
# same classes (`kbert.aliases`).
_MODULES = {
    "WordPieceTokenizer": "tokenizer",
    "BertTokenizer": "tokenizer",
    "SentencePieceTokenizer": "sentencepiece_tokenizer",
    "BytePairTokenizer": "byte_pair_tokenizer",
    "train_wordpiece_vocabulary": "vocabulary",
    "SegmentPacker": "packing",
    "truncate_segments": "packing",
    "Preprocessor": "preprocessor",
    "TextClassifierPreprocessor": "task_preprocessors",
    "QuestionAnswererPreprocessor": "task_preprocessors",
    "TextEmbedderPreprocessor": "task_preprocessors",
    "TokenClassifierPreprocessor": "task_preprocessors",
    "MaskedLMPreprocessor": "masked_lm_preprocessor",
    "BertPreprocessor": "preprocessor",
    "BertClassifierPreprocessor": "task_preprocessors",
    "BertQuestionAnswererPreprocessor": "task_preprocessors",
    "BertTextEmbedderPreprocessor": "task_preprocessors",
    "BertTokenClassifierPreprocessor": "task_preprocessors",
    "BertMaskedLMPreprocessor": "masked_lm_preprocessor",
    "BertPretrainerPreprocessor": "masked_lm_preprocessor",
    "MaskedLMMaskGenerator": "masking",
    "next_sentence_dataset": "next_sentence",
    "next_sentence_pairs": "next_sentence",
    "read_documents": "next_sentence",
    "pack_sequences": "sequence_packing",
    "pretraining_data_metadata": "pretraining_data",
    "pretraining_dataset": "pretraining_data",
    "write_pretraining_data": "pretraining_data",
}
__all__ = list(_MODULES)


def __getattr__(name):
    if name in _MODULES:
        try:
            module = importlib.import_module(f"{__name__}.{_MODULES[name]}")
        except ModuleNotFoundError as e:  # a module that imports tensorflow-text's own tools
            if (e.name or "").split(".")[0] not in ("tensorflow", "tensorflow_text"):
                raise
            raise ImportError(MISSING) from e
        value = getattr(module, name)
        globals()[name] = value
        return value
    if not name.startswith("_") and importlib.util.find_spec(f"{__name__}.{name}") is not None:
        return importlib.import_module(f"{__name__}.{name}")  # (which binds it here)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted({*globals(), *_MODULES})


class ByName:
    """A class attribute that is the `kbert.text` class of this name, read
    (and TensorFlow loaded) at its first use: how a task model names its
    preprocessor class, so that a model on token ids needs no TensorFlow."""

    def __init__(self, name):
        self.name = name

    def __get__(self, instance, owner):
        return __getattr__(self.name)
