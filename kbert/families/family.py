"""The family contract: what a family module tells the rest of kbert, as one
typed, frozen record (`Family`), checked when the registry loads it.

A family is what differs between encoders that share kbert's backbone and
tasks: its `config.json` and weight names, its heads, its tokenizer files.
Each family module builds one `Family` and names it `FAMILY`; layers, text,
presets and models read these records through `kbert.families`, never a
family module's loose names. This package imports nothing else of kbert's.
"""

import dataclasses
from collections.abc import Callable, Mapping


# The kbert tokenizer classes a family may name (`kbert.text`).
TOKENIZER_CLASSES = ("WordPieceTokenizer", "BytePairTokenizer", "SentencePieceTokenizer")


def _refuse(*_):
    raise NotImplementedError


@dataclasses.dataclass(frozen=True)
class Family:
    """One encoder family's facts. Fields without a default are what every
    family must give; the others default to BERT's.

    Args:
        name: the family's name in messages (`"RoBERTa"`).
        model_types: the config.json `model_type`s it reads; a backbone's
            `family` argument is one of them.
        class_prefix: transformers' class-name prefix per model type
            (`"Bert"` + `"ForSequenceClassification"`).
        prefix: the backbone's weights in a task checkpoint (`"bert."`);
            bare in the base model's.
        backbone_parts: the first part of every backbone weight's name in a
            checkpoint (`"embeddings."`, `"encoder."`): a checkpoint tensor
            that starts so but that `backbone_table` does not read means
            the config describes a smaller model than the weights.
        backbone_config: `(hf_config, source) -> BertBackbone arguments`.
        hf_config: `BertBackbone config -> config.json settings`.
        config_table: `(kbert argument, config.json key, default)` rows,
            the mapping `backbone_config` and `hf_config` run both ways
            (`config_names`, read off it, names the file's own keys in
            errors).
        backbone_table, classifier_table, masked_lm_table: the weight-name
            tables (rows of `kbert.families.tables`) of the backbone, of
            the sequence classifier's head and of the masked-LM head.
        classifier_output: the classifier's output layer in a checkpoint
            (the number of classes is read off it).
        classifier_head: None: dropout and a dense layer on the pooled
            first token (BERT's); else the dense layer and activation of a
            head on the first token: `{"activation", "dropout_first"}`.
        prediction_head: the checkpoint name of the head that every
            fine-tuning head (sequence and token classifier, question
            answerer) reads its features through: dense -> activation ->
            LayerNorm, as the backbone's `prediction_head_arguments()` say
            (ModernBERT's `"head"`); `""` for none.
        question_answerer_output: the question answerer's output layer in a
            checkpoint.
        backbone: kbert's backbone class for the family (its Keras
            registered name), which `from_preset` builds.
        pooled: transformers' classes that hold the pooler.
        token_types: whether the model has token type (segment) embeddings.
        positions_after_padding: whether positions start after the padding
            index (RoBERTa's `position_offset`).
        next_sentence: whether its pre-training checkpoints hold BERT's
            next-sentence head (`BertPretrainer` builds on those only).
        legacy_names: head names of an older checkpoint layout -> the names
            the tables read, by prefix (DeBERTa-v2's `cls.predictions.` ->
            `lm_predictions.lm_head.`): a head is read under either.
        tokenizers: kbert's tokenizer class per model type (the tokenizer
            says how pairs are packed: its `pair_layout`).
        tokenizer_files: per model type, the sets of files a hub repository
            may hold its tokenizer in, preferred first.
        tokenizer_classes: transformers' tokenizer class-name prefix (what
            `tokenizer_config.json` names) -> kbert's tokenizer class.
        sentencepiece_vocabularies: transformers' tokenizer class-name
            prefix -> how its vocabulary lays out a SentencePiece model's
            pieces (`kbert.text.sentencepiece_model.VOCABULARY_LAYOUTS`).
    """

    name: str
    model_types: tuple
    class_prefix: Mapping
    prefix: str
    backbone_config: Callable
    hf_config: Callable
    config_table: tuple
    backbone_table: Callable
    tokenizers: Mapping
    tokenizer_files: Mapping
    backbone_parts: tuple = ("embeddings.", "encoder.", "pooler.")
    classifier_table: Callable = _refuse
    masked_lm_table: Callable = _refuse
    classifier_output: str = "classifier"
    classifier_head: Mapping = None
    prediction_head: str = ""
    question_answerer_output: str = "qa_outputs"
    backbone: str = "BertBackbone"
    pooled: tuple = ()
    token_types: bool = True
    positions_after_padding: bool = False
    next_sentence: bool = False
    legacy_names: Mapping = dataclasses.field(default_factory=dict)
    tokenizer_classes: Mapping = dataclasses.field(default_factory=dict)
    sentencepiece_vocabularies: Mapping = dataclasses.field(default_factory=dict)

    def problems(self):
        """What this record lacks or gets wrong, as sentences (none: it
        keeps the contract)."""
        found = []
        if not self.model_types or not all(isinstance(t, str) and t for t in self.model_types):
            found.append("model_types must name at least one config.json model_type")
        for field in ("class_prefix", "tokenizers", "tokenizer_files"):
            missing = [t for t in self.model_types if t not in getattr(self, field)]
            if missing:
                found.append(f"{field} lacks {', '.join(missing)}")
        unknown = sorted((set(self.tokenizers.values()) | set(self.tokenizer_classes.values()))
                         - set(TOKENIZER_CLASSES))
        if unknown:
            found.append(f"tokenizers name {', '.join(unknown)}; kbert's are {', '.join(TOKENIZER_CLASSES)}")
        if not self.prefix.endswith("."):
            found.append(f'prefix "{self.prefix}" must end with "."')
        if not self.backbone_parts or not all(part.endswith(".") for part in self.backbone_parts):
            found.append('backbone_parts must name the first parts of the weight names, each ending with "."')
        for field in ("backbone_config", "hf_config", "backbone_table", "classifier_table", "masked_lm_table"):
            if not callable(getattr(self, field)):
                found.append(f"{field} must be a function")
        if self.classifier_head is not None and set(self.classifier_head) != {"activation", "dropout_first"}:
            found.append('classifier_head must be None or {"activation": ..., "dropout_first": ...}')
        if not isinstance(self.prediction_head, str):
            found.append('prediction_head must name a checkpoint layer ("head"), or be "" for none')
        if not isinstance(self.question_answerer_output, str) or not self.question_answerer_output:
            found.append('question_answerer_output must name a checkpoint layer ("qa_outputs")')
        if not isinstance(self.backbone, str) or not self.backbone.endswith("Backbone"):
            found.append('backbone must name kbert\'s backbone class ("BertBackbone")')
        return found

    @property
    def config_names(self):
        """`{kbert argument: config.json key}`."""
        return {kbert: hf for kbert, hf, _ in self.config_table}

    def current_names(self, tensors):
        """A checkpoint's `{name: tensor}` with the names of older layouts
        (`legacy_names`) read as the current ones, where those are absent."""
        renamed = dict(tensors)
        for name, tensor in tensors.items():
            for old, new in self.legacy_names.items():
                if name.startswith(old):
                    renamed.setdefault(new + name[len(old):], tensor)
        return renamed

    def reads(self, name, prefix=""):
        """Whether a checkpoint tensor's `name` is one of this family's
        backbone weights, under the task `prefix` (`""` or `self.prefix`)."""
        return name.startswith(tuple(prefix + part for part in self.backbone_parts))

