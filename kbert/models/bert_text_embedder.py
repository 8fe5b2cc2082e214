import contextlib
import numbers
import os

import keras
import numpy as np
import tensorflow as tf
from keras import ops

from kbert import backend
from kbert.models.task import Task
from kbert.models.task_answers import serving_text
from kbert.presets import files
from kbert.presets import sentence_transformers as st
from kbert.text import BertPreprocessor, BertTokenizer
from kbert.text.pipeline import map_batches, text_tensor, without_autotune
from kbert.training.contrastive import (
    CoSENTLoss,
    MultipleNegativesRankingLoss,
    batches_without_duplicates,
)
from kbert.training.distribution import DistributedTraining

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
class BertTextEmbedder(Task):
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
        preprocessor: a `kbert.BertPreprocessor` for raw strings, or `None`.
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

    Example:
    >>> embedder = kbert.BertTextEmbedder.from_preset(minilm_folder)
    >>> embedder.encode(["A man is eating food."]).shape
    (1, 384)
    >>> embedder.fit((questions, passages), epochs=1, batch_size=32)
    """

    def __init__(self, backbone, preprocessor=None, pooling="mean", normalize=True, dense=(), prompts=None,
                 default_prompt_name=None, include_prompt=True, **kwargs):
        modes = [pooling] if isinstance(pooling, str) else list(pooling)
        if not modes or any(m not in POOLING_MODES for m in modes):
            raise ValueError(f"pooling={pooling!r}: use one of {', '.join(POOLING_MODES)}, or a list of them.")
        dense = [self._dense_config(d) for d in dense]
        prompts = dict(prompts or {})
        if default_prompt_name is not None and default_prompt_name not in prompts:
            raise ValueError(f"default_prompt_name={default_prompt_name!r} is not among prompts {list(prompts)}.")
        inputs = dict(backbone.input)
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
        super().__init__(inputs=inputs, outputs=embedding, **kwargs)
        self._finish_init(backbone, preprocessor)
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
                "include_prompt": self.include_prompt}

    def default_loss(self):
        return MultipleNegativesRankingLoss()

    def compile(self, optimizer="auto", loss="auto", **kwargs):
        """`Task.compile`; the default loss is in-batch negatives
        (`MultipleNegativesRankingLoss`), or `CoSENTLoss` when `fit` is given
        scores."""
        self._default_loss = loss == "auto"
        super().compile(optimizer=optimizer, loss=loss, **kwargs)

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

    def encode(self, texts, prompt_name=None, prompt=None, batch_size=32):
        """Embeddings of `texts` as `SentenceTransformer.encode` gives them:
        the prompt (see `prompt`) put before each text. Returns float32 numpy
        `[len(texts), dim]`."""
        if isinstance(texts, str):
            raise ValueError("encode takes a list of texts; pass [text].")
        text = self.prompt(prompt_name, prompt)
        texts = [text + t for t in texts] if text else list(texts)
        if self.include_prompt or not text:
            return np.asarray(self.predict(texts, batch_size=batch_size, verbose=0), dtype="float32")
        # The prompt left out of the pooling: one trace for every prompt,
        # whose length is an input.
        traced = self._traced("prompted", lambda: self._padded_to_longest(
            lambda texts, skip: self._features(self._batch_preprocessor(), texts, skip)))
        skip = tf.constant(self._prompt_length(text))
        embeddings = self._in_length_order(
            texts, lambda texts: self._predict_raw((text_tensor(texts),), batch_size, 0, lambda t: traced(t, skip)))
        return np.asarray(embeddings, dtype="float32")

    @staticmethod
    def similarity(a, b):
        """Cosine similarities of two sets of embeddings, `[len(a), len(b)]`."""
        a, b = (np.asarray(v, "float32") for v in (a, b))
        a = a / np.maximum(np.linalg.norm(a, axis=-1, keepdims=True), 1e-12)
        b = b / np.maximum(np.linalg.norm(b, axis=-1, keepdims=True), 1e-12)
        return a @ b.T

    def search(self, queries, corpus_embeddings, top_k=10, prompt_name=None, prompt=None, batch_size=32):
        """The `top_k` nearest of `corpus_embeddings` to each query text:
        `(scores, ids)`, `[len(queries), top_k]` each (see `semantic_search`)."""
        return semantic_search(self.encode(queries, prompt_name, prompt, batch_size), corpus_embeddings, top_k)

    # === Export ===

    def export(self, filepath, prompt_name=None, prompt=None, **kwargs):
        """`Task.export`: raw text in, `embedding` out. The prompt (`prompt`,
        `prompt_name`, else the default prompt, as `encode`) is put before
        every text inside the exported graph."""
        saved = self.prompts, self.default_prompt_name
        if prompt is not None:
            self.prompts, self.default_prompt_name = {**self.prompts, "exported": prompt}, "exported"
        elif prompt_name is not None:
            self.prompt(prompt_name)  # refuses an unknown name
            self.default_prompt_name = prompt_name
        try:
            return super().export(filepath, **kwargs)
        finally:
            self.prompts, self.default_prompt_name = saved

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

    def _prompt_length(self, prompt):
        """The tokens sentence-transformers leaves out of the pooling for
        `prompt`: [CLS] and the prompt's pieces, the prompt tokenized alone
        and cut to the sequence length, less its [SEP]."""
        pieces = int(self.preprocessor.tokenizer(tf.constant([prompt])).row_lengths()[0])
        return min(1 + pieces, self.preprocessor.sequence_length - 1)

    def _features(self, preprocessor, texts, skip=0):
        """The model's features of `texts`; with `include_prompt=False`, a
        `pooling_mask`: the padding mask less the first `skip` tokens (a
        prompt's, see `_prompt_length`)."""
        features = preprocessor(texts)
        if self.include_prompt:
            return features
        mask = features["padding_mask"]
        mask = mask * tf.cast(tf.range(tf.shape(mask)[1]) >= skip, mask.dtype)[None, :]
        return {**features, "pooling_mask": mask}

    def _preprocess(self, x, *rest):
        return (self._features(self._batch_preprocessor(), x), *rest)

    def _answering(self, pairs=False, top_k=5):
        preprocessor = self._batch_preprocessor()
        text = self.prompt()
        skip = self._prompt_length(text) if text and not self.include_prompt else 0

        def preprocess(texts):
            return self._features(preprocessor, tf.strings.join([text, texts]) if text else texts, skip), None

        return (preprocess, lambda embedding, _: {"embedding": tf.cast(embedding, tf.float32)},
                [serving_text()], None)

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
                (`benchmarks/grad_cache.py` measures both).
        """
        if mini_batch_size is not None and (isinstance(mini_batch_size, bool) or
                                            not isinstance(mini_batch_size, numbers.Integral) or mini_batch_size < 1):
            raise ValueError(f"mini_batch_size={mini_batch_size!r}: give a positive number of examples, or None.")
        if not (self.preprocessor is not None and isinstance(x, tuple) and not isinstance(x, tf.data.Dataset)):
            if mini_batch_size is not None:
                raise ValueError("mini_batch_size (GradCache) works on a tuple of lists of texts, e.g. "
                                 "(anchors, positives); this input goes to Keras' fit as it is.")
            if self._is_raw(x) and (not self.compiled or getattr(self, "_default_loss", False)):
                raise ValueError(
                    "BertTextEmbedder.fit takes a tuple of lists of texts: (anchors, positives) or (anchors, "
                    "positives, negatives), or (texts_a, texts_b) with scores. To fit texts to target embeddings, "
                    "compile with a loss of your own first, e.g. compile(loss=keras.losses.CosineSimilarity())."
                )
            return super().fit(x, y, batch_size=batch_size, epochs=epochs, **kwargs)
        columns = text_tensor(x, names=("anchors", "positives") + tuple(f"negatives_{i}" for i in range(1, 9)))
        if len(columns) < 2:
            raise ValueError(f"Got {len(columns)} list of texts; fit takes (anchors, positives[, negatives]).")
        n = int(columns[0].shape[0])
        if y is not None and len(y) != n:
            raise ValueError(f"Got {n} pairs but {len(y)} scores; pass one score per pair.")
        if not self.compiled:
            self.compile()
        loss = self.loss
        if y is not None and getattr(self, "_default_loss", False):
            loss = CoSENTLoss()
        batch_size = batch_size or 32
        texts = [[t.decode("utf-8", "replace") for t in c.numpy()] for c in columns] if no_duplicates else None
        per_epoch = []
        for epoch in range(epochs):
            epoch_seed = None if seed is None else seed + epoch
            if no_duplicates:
                per_epoch.append(batches_without_duplicates(texts, batch_size, epoch_seed))
            else:
                order = np.random.default_rng(epoch_seed).permutation(n)
                per_epoch.append([order[i:i + batch_size] for i in range(0, n, batch_size)])
        steps = min(len(b) for b in per_epoch)
        batches = [batch for epoch in per_epoch for batch in epoch[:steps]]
        dataset = self._pair_dataset(columns, y, batches)
        if self._compiled_by_default:
            self._schedule_learning_rate(steps, epochs)
        # Made in the strategy this embedder was built in (if any), so that
        # fit runs on its replicas.
        strategy = getattr(self, "_distribute_strategy", None)
        # The pooler ([CLS] dense + tanh) is no part of an embedding: frozen
        # while fitting, Keras does not warn that it gets no gradient.
        pooler, pooler_trainable = self.backbone.pooled_dense, self.backbone.pooled_dense.trainable
        pooler.trainable = False
        try:
            with strategy.scope() if strategy is not None else contextlib.nullcontext():
                model = self._training_model(len(columns))
                # Under a tf.distribute strategy each replica runs its share
                # of the global batch, in as many mini-batches as that needs.
                replicas = strategy.num_replicas_in_sync if strategy is not None else 1
                per_replica = -(-batch_size // replicas)
                if mini_batch_size is not None and mini_batch_size < per_replica:
                    model = _CachedColumnsModel(model, mini_batch_size, -(-per_replica // mini_batch_size))
                model.compile(optimizer=self.optimizer, loss=loss, jit_compile=self.jit_compile)
            kwargs.pop("shuffle", None)  # done above, per epoch
            return model.fit(dataset, epochs=epochs, steps_per_epoch=steps, shuffle=False, **kwargs)
        finally:
            pooler.trainable = pooler_trainable

    def _pair_dataset(self, columns, y, batches):
        """Batches `[(features of each column), y]`, each column padded to its
        own length."""
        y = np.zeros(len(columns[0]), "float32") if y is None else np.asarray(y, "float32")
        rows = tf.RaggedTensor.from_row_lengths(np.concatenate(batches).astype("int64"),
                                                [len(b) for b in batches])
        with self._longest_padding():
            preprocessor = self._batch_preprocessor()
        y = tf.constant(y)

        def gather(batch):
            return tuple(self._features(preprocessor, tf.gather(c, batch)) for c in columns), tf.gather(y, batch)

        return without_autotune(map_batches(tf.data.Dataset.from_tensor_slices(rows), gather))

    def _training_model(self, num_columns):
        """A model of this embedder's weights that embeds each column of a
        batch: `[batch, columns, dim]`, what the contrastive losses take."""
        inputs = tuple(
            {name: keras.Input(shape=(None,), dtype="int32", name=f"{name}_{i}") for name in self.input}
            for i in range(num_columns)
        )
        outputs = ops.stack([self(features) for features in inputs], axis=1)
        return _ColumnsModel(inputs, outputs, name=f"{self.name}_columns")

    # === Presets ===

    @classmethod
    def from_preset(cls, preset, sequence_length=None, **kwargs):
        """`Task.from_preset`; on a sentence-transformers folder, with the
        folder's pooling, Dense modules, Normalize, length, lowercasing and
        prompts (see the class). Arguments given override the folder's; a
        `dense=` of your own starts from its initialisation."""
        folder = files.get_preset_dir(preset)
        if files.is_kbert_layout(folder) or not st.is_sentence_transformers_folder(folder):
            return super().from_preset(preset, sequence_length, **kwargs)
        settings = st.read_folder(folder)
        head = {k: settings[k] for k in ("pooling", "normalize", "prompts", "default_prompt_name", "include_prompt")}
        head["dense"] = [{k: d[k] for k in _DENSE_KEYS} for d in settings["dense"]]
        transformer = settings["transformer_folder"]
        if "preprocessor" not in kwargs:
            positions = files.load_json(transformer, files.HF_CONFIG).get("max_position_embeddings", 512)
            kwargs["preprocessor"] = cls._sentence_transformers_preprocessor(settings, sequence_length, positions)
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
    def _sentence_transformers_preprocessor(settings, sequence_length, positions):
        folder = settings["transformer_folder"]
        tokenizer = st.tokenizer_settings(folder, settings["do_lower_case"])
        length = sequence_length or st.max_seq_length(folder, settings, positions)
        if length > positions:
            raise ValueError(f"sequence_length={length} is longer than this model's {positions} positions.")
        return BertPreprocessor(BertTokenizer(**tokenizer), sequence_length=length)

    @classmethod
    def preset_preprocessor(cls, folder, sequence_length, backbone):
        # sentence-transformers folders say how long a text they embed.
        if sequence_length is None and os.path.exists(os.path.join(folder, st.SENTENCE_BERT_CONFIG)):
            sequence_length = files.load_json(folder, st.SENTENCE_BERT_CONFIG).get("max_seq_length")
        return super().preset_preprocessor(folder, sequence_length, backbone)


def semantic_search(query_embeddings, corpus_embeddings, top_k=10, corpus_chunk_size=50_000, query_chunk_size=100):
    """The `top_k` corpus entries nearest (by cosine similarity) to each
    query, computed chunk by chunk so that memory stays bounded by
    `query_chunk_size * corpus_chunk_size` scores whatever the corpus size
    (sentence-transformers' `util.semantic_search`).

    Returns:
        `(scores, ids)`: float32 and int64 numpy `[queries, min(top_k, corpus)]`,
        best first.
    """
    queries = np.asarray(query_embeddings, "float32")
    corpus = np.asarray(corpus_embeddings, "float32")
    if queries.ndim != 2 or corpus.ndim != 2 or queries.shape[1] != corpus.shape[1]:
        raise ValueError(f"semantic_search takes [queries, dim] and [corpus, dim] embeddings; got shapes "
                         f"{queries.shape} and {corpus.shape}.")
    k = min(int(top_k), len(corpus))
    queries = queries / np.maximum(np.linalg.norm(queries, axis=1, keepdims=True), 1e-12)
    norms = np.maximum(np.linalg.norm(corpus, axis=1, keepdims=True), 1e-12)
    scores = np.full((len(queries), k), -np.inf, "float32")
    ids = np.zeros((len(queries), k), "int64")
    for q in range(0, len(queries), query_chunk_size):
        best, best_ids = scores[q:q + query_chunk_size], ids[q:q + query_chunk_size]
        for c in range(0, len(corpus), corpus_chunk_size):
            rows = slice(c, c + corpus_chunk_size)
            chunk = queries[q:q + query_chunk_size] @ (corpus[rows] / norms[rows]).T
            merged = np.concatenate([best, chunk], axis=1)
            merged_ids = np.concatenate([best_ids, np.arange(c, c + chunk.shape[1])[None].repeat(len(chunk), 0)], 1)
            top = np.argsort(-merged, axis=1, kind="stable")[:, :k]
            best, best_ids = np.take_along_axis(merged, top, 1), np.take_along_axis(merged_ids, top, 1)
        scores[q:q + query_chunk_size], ids[q:q + query_chunk_size] = best, best_ids
    return scores, ids


class _ColumnsModel(DistributedTraining, keras.Model):
    """`BertTextEmbedder.fit`'s model of the embedder on each column: a plain
    functional model with the fixes that let Keras train it under any
    `tf.distribute` strategy."""


class _CachedColumnsModel(DistributedTraining, keras.Model):
    """`fit(..., mini_batch_size=m)`'s model: GradCache (Gao et al. 2021,
    "Scaling Deep Contrastive Learning Batch Size under Memory Limited
    Setup"). The columns model runs on `m` examples at a time, each run
    rematerialised (`kbert.backend.remat_in_turn`): the forward pass keeps
    only the batch's embeddings, and the backward pass computes each
    mini-batch's again, with its share of the loss' gradient, one at a time.
    The loss itself sees the whole batch.

    The recomputation draws the same dropout masks as the first pass: each
    mini-batch sets every seed generator's state from the step's seed and
    its own index, and the model's own seed generator moves on once per
    step.
    """

    # Seed counters of two mini-batches lie this far apart. Keras on PyTorch
    # seeds with the sum of a state's two words, so generator j's draws
    # (base + j, then one more per call) must stay below the next
    # mini-batch's; and the counter runs through its 2**32 values in
    # 2**32 / (_SPACING * mini-batches) steps before masks repeat.
    _SPACING = 2**10

    def __init__(self, columns, mini_batch_size, max_chunks, **kwargs):
        super().__init__(name=f"{columns.name}_cached", **kwargs)
        self.columns = columns
        self.mini_batch_size = int(mini_batch_size)
        self.max_chunks = int(max_chunks)  # of a batch of unknown size (a TensorFlow graph)
        self._seed_states = [v for v in columns.non_trainable_variables if v.name == "seed_generator_state"]
        if 2 * len(self._seed_states) > self._SPACING:
            raise ValueError(f"{len(self._seed_states)} dropout layers: GradCache replays at most "
                             f"{self._SPACING // 2}.")
        self.chunk_seeds = keras.random.SeedGenerator()

    def call(self, inputs, training=False):
        size = ops.shape(keras.tree.flatten(inputs)[0])[0]
        chunks = -(-size // self.mini_batch_size) if isinstance(size, int) else self.max_chunks
        # A copy: on TensorFlow `.value` is the variable itself, which the
        # recomputation would read after it has moved on below.
        base = ops.copy(self.chunk_seeds.state.value)
        dtype = base.dtype

        def run(i):  # (`i` a number, or on TensorFlow a scalar tensor)
            # Generator j of mini-batch i: seed word base + j, counter from
            # base + i * _SPACING.
            counter = ops.cast(i, dtype) * self._SPACING
            for j, variable in enumerate(self._seed_states):
                variable.assign(base + ops.stack([ops.convert_to_tensor(j, dtype), counter]))
            start = i * self.mini_batch_size
            part = keras.tree.map_structure(lambda t: t[start:start + self.mini_batch_size], inputs)
            return self.columns(part, training=training)

        outputs = backend.remat_in_turn(run, chunks)
        moved = base + ops.convert_to_tensor([0, chunks * self._SPACING], dtype=dtype)
        self.chunk_seeds.state.assign(moved)
        for variable in self._seed_states:
            variable.assign(moved)  # (under JAX: no value of the remat trace is left behind)
        return ops.concatenate(outputs, axis=0)
