import os

import keras
import numpy as np
from keras import ops

from kbert.aliases import also_named
from kbert import text
from kbert.models import task_answers, task_inputs, task_presets
from kbert.models.task import Task
from kbert.models.task_training import schedule_learning_rate
from kbert.presets import files, reader, tokenizer_files
from kbert.presets import sentence_transformers as st
from kbert.search import semantic_search
from kbert.search import similarity as cosine_similarity
from kbert.text.pipeline import map_batches, text_tensor, without_autotune
from kbert.tf_if_present import tf
from kbert.training import contrastive_fit
from kbert.training.contrastive import CoSENTLoss, MultipleNegativesRankingLoss

POOLING_MODES = st.POOLING_MODES
_DENSE_KEYS = ("units", "activation", "use_bias")


def _pool(mode, sequence_output, mask):
    """One of sentence-transformers' `Pooling` modes, on right-padded input,
    over the tokens where `mask` is 1: `padding_mask`, or that less a
    prompt's tokens (`include_prompt=False`)."""
    weights = ops.cast(mask, sequence_output.dtype)[:, :, None]
    positions = ops.cumsum(ops.ones_like(mask, dtype="int32"), axis=1) - 1
    pooled = ops.cast(mask, "int32")
    if mode == "cls":
        # The first pooled token: [CLS], or the first after a prompt left out
        # (sentence-transformers' argmax of the mask; 0 where none is).
        first = ops.sum(ops.cast(ops.equal(ops.cumsum(pooled, axis=1), 0), "int32"), axis=1)
        first = ops.where(ops.max(pooled, axis=1) > 0, first, 0)
        return ops.take_along_axis(sequence_output, first[:, None, None], axis=1)[:, 0, :]
    if mode == "max":
        return ops.max(ops.where(weights > 0, sequence_output, ops.full_like(sequence_output, -np.inf)), axis=1)
    if mode == "lasttoken":
        # The last pooled token ([SEP] for BERT), zeros where none is.
        last = ops.max(pooled * positions, axis=1)
        return ops.take_along_axis(sequence_output * weights, last[:, None, None], axis=1)[:, 0, :]
    if mode == "weightedmean":
        # Position weights 1, 2, 3, ... from the first token (Muennighoff
        # 2022, SGPT), prompt included.
        weights = weights * ops.cast(positions + 1, weights.dtype)[:, :, None]
    total = ops.sum(sequence_output * weights, axis=1)
    count = ops.maximum(ops.sum(weights, axis=1), 1e-9)
    return total / (ops.sqrt(count) if mode == "mean_sqrt_len_tokens" else count)


@keras.saving.register_keras_serializable(package="kbert")
class TextEmbedder(Task):
    """Sentence embeddings, as sentence-transformers computes them: BERT's
    final hidden states pooled (Reimers & Gurevych 2019), then any dense
    layers, then optionally L2-normalised.

    `from_preset` on a sentence-transformers folder (`modules.json`) reads
    all of that from the folder (pooling, Dense modules and their weights,
    Normalize, the length, lowercasing, prompts), so that `encode` equals
    `SentenceTransformer(folder).encode`; a module it cannot reproduce is an
    error. Arguments given to `from_preset` override the folder's.

    `fit` trains on pairs or triplets of texts with in-batch negatives
    (`kbert.training.contrastive.MultipleNegativesRankingLoss`), or on scored pairs with
    `CoSENTLoss`.

    Args:
        backbone: a `kbert.BertBackbone`.
        preprocessor: a `kbert.BertTextEmbedderPreprocessor` (or a `kbert.BertPreprocessor`,
            read as one) for raw strings, or `None`.
        pooling: one of `"mean"` (over tokens where `padding_mask` is 1),
            `"cls"`, `"max"`, `"mean_sqrt_len_tokens"`, `"weightedmean"`,
            `"lasttoken"`, or a list of them, concatenated in that order.
        normalize: whether to scale each embedding to unit L2 norm.
        dense: dense layers after the pooling, a list of `{"units",
            "activation", "use_bias"}` (sentence-transformers' `Dense`).
        prompts: named texts put before a text (e5's `{"query": "query: "}`).
        default_prompt_name: the prompt `encode` and the exported model put
            before every text when not told otherwise.
        include_prompt: whether the pooling takes the prompt's tokens
            (sentence-transformers' `Pooling(include_prompt=...)`). With
            `False` (INSTRUCTOR-style), the model takes a `pooling_mask`
            input besides BERT's, the tokens pooled: where `encode` or the
            exported model put a prompt before the texts, [CLS] and the
            prompt's pieces are left out, as sentence-transformers counts
            them; `predict` and `fit` pool the texts as given.
        truncate_dim: `encode` and the exported model give the first
            `truncate_dim` values of each embedding (after any
            normalization, as sentence-transformers' `truncate_dim`), for a
            model trained with `MatryoshkaLoss`; `None`: all of them.

    Example:
    >>> embedder = kbert.BertTextEmbedder.from_preset(minilm_folder)
    >>> embedder.encode(["A man is eating food."]).shape
    (1, 384)
    >>> embedder.fit((questions, passages), epochs=1, batch_size=32)
    """

    preprocessor_cls = text.ByName("BertTextEmbedderPreprocessor")
    reads_pooler = False  # the pooler ([CLS] dense + tanh) is no part of an embedding: `fit` never trains it

    def __init__(self, backbone, preprocessor=None, pooling="mean", normalize=True, dense=(), prompts=None,
                 default_prompt_name=None, include_prompt=True, truncate_dim=None, **kwargs):
        modes = [pooling] if isinstance(pooling, str) else list(pooling)
        if not modes or any(m not in POOLING_MODES for m in modes):
            raise ValueError(f"pooling={pooling!r}: use one of {', '.join(POOLING_MODES)}, or a list of them.")
        dense = [self._dense_config(d) for d in dense]
        prompts = dict(prompts or {})
        if default_prompt_name is not None and default_prompt_name not in prompts:
            raise ValueError(f"default_prompt_name={default_prompt_name!r} is not among prompts {list(prompts)}.")
        inputs = dict(self.backbone_inputs(backbone))
        sequence_output = backbone(backbone.input)["sequence_output"]
        if include_prompt:
            mask = inputs["padding_mask"]
        else:
            mask = inputs["pooling_mask"] = keras.Input(shape=(None,), dtype="int32", name="pooling_mask")
        pooled = [_pool(m, sequence_output, mask) for m in modes]
        embedding = ops.cast(pooled[0] if len(pooled) == 1 else ops.concatenate(pooled, axis=-1), "float32")
        for i, layer in enumerate(dense):
            embedding = keras.layers.Dense(**layer, dtype="float32", name=f"dense_{i}")(embedding)
        if normalize:
            # (ops.norm breaks under JAX jit in a functional graph: its axis
            # comes back as an unhashable list.)
            norm = ops.sqrt(ops.sum(ops.square(embedding), axis=-1, keepdims=True))
            embedding = embedding / ops.maximum(norm, 1e-12)
        _check_truncate_dim(truncate_dim, embedding.shape[-1])
        super().__init__(inputs=inputs, outputs=embedding, backbone=backbone, preprocessor=preprocessor, **kwargs)
        self.truncate_dim = truncate_dim
        self.pooling = pooling if isinstance(pooling, str) else modes
        self.normalize = normalize
        self.dense = dense
        self.prompts = prompts
        self.default_prompt_name = default_prompt_name

    @staticmethod
    def _dense_config(layer):
        if not isinstance(layer, dict) or "units" not in layer or set(layer) - set(_DENSE_KEYS):
            raise ValueError(f"A dense layer is a dict with units (and activation, use_bias); got {layer!r}.")
        return {"units": int(layer["units"]), "activation": layer.get("activation") or "linear",
                "use_bias": bool(layer.get("use_bias", True))}

    def task_config(self):
        return {"pooling": self.pooling, "normalize": self.normalize, "dense": self.dense,
                "prompts": self.prompts, "default_prompt_name": self.default_prompt_name,
                "include_prompt": self.include_prompt, "truncate_dim": self.truncate_dim}

    def head_settings(self):
        # With the default prompt, which the exported model puts before each text.
        return {**super().head_settings(), "prompt": self.prompt()}

    def default_loss(self):
        return MultipleNegativesRankingLoss()

    def compile(self, optimizer="auto", loss="auto", **kwargs):
        """`Task.compile`; the default loss is in-batch negatives
        (`MultipleNegativesRankingLoss`), or `CoSENTLoss` when `fit` is given
        scores."""
        super().compile(optimizer=optimizer, loss=loss, **kwargs)
        self._default_loss = isinstance(loss, str) and loss == "auto"

    def get_compile_config(self):
        # The default loss is saved as "auto", the choice itself, so that a
        # model loaded back (`compile_from_config`) trains scored pairs with
        # CoSENTLoss as this one does, not with the loss object that stood in.
        config = super().get_compile_config()
        if config and self._default_loss:
            config["loss"] = "auto"
        return config

    # === Prompts ===

    def prompt(self, prompt_name=None, prompt=None):
        """The text put before each text: `prompt` itself, the prompt named
        `prompt_name`, or the default prompt (sentence-transformers' order)."""
        if prompt is not None:
            return prompt
        name = self.default_prompt_name if prompt_name is None else prompt_name
        if name is None:
            return ""
        if name not in self.prompts:
            raise ValueError(f"No prompt named {name!r}; this embedder's prompts are "
                             f"{', '.join(map(repr, self.prompts)) or 'none'} (or pass prompt=\"...\").")
        return self.prompts[name]

    # === Embedding and search ===

    def encode(self, texts, prompt_name=None, prompt=None, batch_size=32, truncate_dim=None):
        """Embeddings of `texts` as `SentenceTransformer.encode` gives them:
        the prompt (see `prompt`) put before each text, cut to
        `truncate_dim` values (default: the model's `truncate_dim`). Returns
        float32 numpy `[len(texts), dim]`."""
        if isinstance(texts, str):
            raise ValueError("encode takes a list of texts; pass [text].")
        _check_truncate_dim(truncate_dim, self.output.shape[-1])
        return self._encode(texts, prompt_name, prompt, batch_size)[:, :truncate_dim or self.truncate_dim]

    def _encode(self, texts, prompt_name, prompt, batch_size):
        text = self.prompt(prompt_name, prompt)
        texts = [text + t for t in texts] if text else list(texts)
        if self.include_prompt or not text:
            return np.asarray(self.predict(texts, batch_size=batch_size, verbose=0), dtype="float32")
        # The prompt left out of the pooling: one trace for every prompt,
        # whose length is an input.
        preprocessor, head, pad_to = self.preprocessor, self.head_settings(), task_inputs.padding(self)
        traced = task_inputs.traced(preprocessor, ("prompted", pad_to, task_inputs.frozen(head)),
                                    lambda p: p.prompted_function(head, pad_to))
        skip = tf.constant(preprocessor.prompt_length(text))
        embeddings = task_inputs.predict_in_memory(self, texts, batch_size, 0, lambda t: traced(t, skip))
        return np.asarray(embeddings, dtype="float32")

    @staticmethod
    def similarity(a, b):
        """Cosine similarities of two sets of embeddings, `[len(a), len(b)]`
        (`kbert.search.similarity`)."""
        return cosine_similarity(a, b)

    def search(self, queries, corpus_embeddings, top_k=10, prompt_name=None, prompt=None, batch_size=32):
        """The `top_k` nearest of `corpus_embeddings` to each query text:
        `(scores, ids)`, `[len(queries), top_k]` each (`kbert.search.semantic_search`)."""
        return semantic_search(self.encode(queries, prompt_name, prompt, batch_size), corpus_embeddings, top_k)

    # === Export ===

    def export(self, filepath, prompt_name=None, prompt=None, **kwargs):
        """`Task.export`: raw text in, `embedding` out. The prompt (`prompt`,
        `prompt_name`, else the default prompt, as `encode`) is put before
        every text inside the exported graph."""
        if self.preprocessor is None or kwargs.get("format", "tf_saved_model") != "tf_saved_model":
            return super().export(filepath, **kwargs)
        text = self.prompt(prompt_name, prompt)  # refuses an unknown name
        return task_answers.export(self, filepath, head={**self.head_settings(), "prompt": text}, prompt=text)

    def export_to_transformers(self, path, dtype="float32"):
        """Writes a sentence-transformers folder that `SentenceTransformer(path)`
        loads (`kbert.presets.sentence_transformers.write_folder`)."""
        return st.write_folder(self, path, dtype)

    @property
    def include_prompt(self):
        """Whether the pooling takes a prompt's tokens (see the class); fixed
        when the model is built: without it, the model has a `pooling_mask`
        input."""
        return "pooling_mask" not in self.input

    # === Training ===

    def fit(self, x=None, y=None, batch_size=None, epochs=1, no_duplicates=False, seed=None, mini_batch_size=None,
            **kwargs):
        """Trains on a tuple of lists of texts: `(anchors, positives)` or
        `(anchors, positives, negatives, ...)` with in-batch negatives (the
        default loss, `MultipleNegativesRankingLoss`), or `(texts_a, texts_b)`
        with scores `y` (`CoSENTLoss` by default). Prompts go into the texts
        themselves. Other input goes to `Task.fit` as it is (ids, or texts
        and target embeddings with a loss of your choice).

        Args:
            no_duplicates: batches in which no text appears twice
                (`kbert.training.contrastive.batches_without_duplicates`).
            seed: of the shuffles (one per epoch).
            mini_batch_size: GradCache (Gao et al. 2021; sentence-transformers'
                `CachedMultipleNegativesRankingLoss`): the embedder runs on this
                many examples at a time, and only one such mini-batch's
                activations are held, while the loss still takes the whole
                `batch_size` as negatives. The same loss and gradients as
                without it, for a batch larger than fits in memory, at the
                cost of a second forward pass of each mini-batch
                (`benchmarks/grad_cache.py` measures both;
                `kbert.training.contrastive_fit.CachedColumnsModel`).
        """
        task_inputs.check_batch_size(batch_size)
        contrastive_fit.check_mini_batch_size(mini_batch_size)
        if not (self.preprocessor is not None and isinstance(x, tuple) and not isinstance(x, tf.data.Dataset)):
            if mini_batch_size is not None:
                raise ValueError("mini_batch_size (GradCache) works on a tuple of lists of texts, e.g. "
                                 "(anchors, positives); this input goes to Keras' fit as it is.")
            if task_inputs.is_raw(self, x) and (not self.compiled or self._default_loss):
                raise ValueError(
                    "BertTextEmbedder.fit takes a tuple of lists of texts: (anchors, positives) or (anchors, "
                    "positives, negatives), or (texts_a, texts_b) with scores. To fit texts to target embeddings, "
                    "compile with a loss of your own first, e.g. compile(loss=keras.losses.CosineSimilarity())."
                )
            return super().fit(x, y, batch_size=batch_size, epochs=epochs, **kwargs)
        columns = text_tensor(x, names=("anchors", "positives") + tuple(f"negatives_{i}" for i in range(1, 9)))
        batch_size = batch_size or 32
        texts, steps = contrastive_fit.column_batches(columns, y, batch_size, epochs, seed, no_duplicates)
        if not self.compiled:
            self.compile()
        loss = CoSENTLoss() if y is not None and self._default_loss else self.loss
        preprocessor, head, pad_to = self.preprocessor, self.head_settings(), task_inputs.padding(self)
        dataset = without_autotune(map_batches(texts, lambda texts, scores: (
            tuple(preprocessor.features(t, head, pad_to=pad_to) for t in texts), scores)))
        if self._compiled_by_default:
            schedule_learning_rate(self, steps, epochs)
        self._build_optimizer()
        # It trains what this model trains (`trainable_variables`: not the pooler, nor weights frozen by LoRA).
        return contrastive_fit.fit_columns(self, dataset, steps, len(columns), loss, batch_size, epochs,
                                           mini_batch_size, **kwargs)

    # === Presets ===

    @classmethod
    def from_preset(cls, preset, sequence_length=None, **kwargs):
        """`Task.from_preset`; on a sentence-transformers folder, with the
        folder's pooling, Dense modules, Normalize, length, lowercasing and
        prompts (see the class). Arguments given override the folder's; a
        `dense=` of your own starts from its initialisation."""
        folder = preset.folder if isinstance(preset, reader.Preset) else files.get_preset_dir(preset, True)
        if files.is_kbert_layout(folder) or not st.is_sentence_transformers_folder(folder):
            return super().from_preset(preset, sequence_length, **kwargs)
        settings = st.read_folder(folder)
        head = {k: settings[k] for k in ("pooling", "normalize", "prompts", "default_prompt_name", "include_prompt",
                                         "truncate_dim")}
        head["dense"] = [{k: d[k] for k in _DENSE_KEYS} for d in settings["dense"]]
        transformer = reader.read_preset(settings["transformer_folder"])
        if "preprocessor" not in kwargs and task_presets.tokenizer_runs(folder):
            positions = transformer.backbone_config["max_sequence_length"]
            kwargs["preprocessor"] = cls._sentence_transformers_preprocessor(settings, sequence_length, positions,
                                                                             transformer)
        elif sequence_length is not None:
            raise ValueError("Got both preprocessor= and sequence_length=: the sequence length is the preprocessor's.")
        model = super().from_preset(transformer, **{**head, **kwargs})
        if "dense" not in kwargs:
            for i, layer in enumerate(settings["dense"]):
                weights = model.get_layer(f"dense_{i}")
                weights.kernel.assign(layer["kernel"])
                if layer["use_bias"]:
                    weights.bias.assign(layer["bias"])
        return model

    @staticmethod
    def _sentence_transformers_preprocessor(settings, sequence_length, positions, transformer):
        folder = settings["transformer_folder"]
        family = transformer.backbone_config.get("family", "bert")
        if tokenizer_files.tokenizer_class_name(folder, family) == "WordPieceTokenizer":
            tokenizer = text.BertTokenizer(**st.tokenizer_settings(folder, settings["do_lower_case"]))
        else:
            tokenizer = task_presets.preset_tokenizer(transformer, family)
        length = sequence_length or st.max_seq_length(folder, settings, positions)
        if length > positions:
            raise ValueError(f"sequence_length={length} is longer than this model's {positions} positions.")
        return text.BertTextEmbedderPreprocessor(tokenizer, sequence_length=length)

    @classmethod
    def preset_preprocessor(cls, preset, sequence_length, backbone):
        # sentence-transformers folders say how long a text they embed.
        if sequence_length is None and os.path.exists(os.path.join(preset.folder, st.SENTENCE_BERT_CONFIG)):
            sequence_length = files.load_json(preset.folder, st.SENTENCE_BERT_CONFIG).get("max_seq_length")
        return super().preset_preprocessor(preset, sequence_length, backbone)


# The name of the first releases (kbert.aliases).
BertTextEmbedder = also_named(TextEmbedder, "BertTextEmbedder")


def _check_truncate_dim(truncate_dim, dim):
    if truncate_dim is not None and (isinstance(truncate_dim, bool) or not isinstance(truncate_dim, int)
                                     or not 0 < truncate_dim <= dim):
        raise ValueError(f"truncate_dim={truncate_dim!r}: the embedding has {dim} values; keep from 1 to {dim}.")
