import keras

from kbert.aliases import also_named
from kbert import families, text
from kbert.layers import MaskedLMHead
from kbert.models import task_answers
from kbert.models.bert_backbone import bert_initializer
from kbert.models.task import Task
from kbert.families.tables import T


@keras.saving.register_keras_serializable(package="kbert")
class MaskedLM(Task):
    """Masked language modelling (BERT §3.1, task #1): predicts the original
    WordPiece at each masked position, with the output projection tied to the
    token embedding.

    Inputs are the backbone's plus `mask_positions` `[batch, num_predictions]`;
    the output is `mlm_logits` `[batch, num_predictions, vocabulary_size]`.
    With a preprocessor, `fit` takes raw strings and masks them anew each
    epoch (15% of tokens; of those 80% [MASK], 10% random, 10% kept).
    `predict` (and `predict_on_batch`, `model(texts)`) on raw texts masks
    them the same way at every call: a text with `[MASK]`s written in it
    is predicted at those, in order (as `fill_mask` reads them); a text
    without is masked as for `fit`, with a seed drawn from its batch's
    tokens, so the same texts in the same batches give the same logits. On a
    backbone with `packing=True` (`from_preset`'s default here, with a
    preprocessor), `fit` and `evaluate` pack texts held in memory into rows
    of the preprocessor's `sequence_length` (Krell et al. 2021), each text
    read as it is read alone, with no padding between them; `batch_size`
    then counts rows.

    Args:
        backbone: a `kbert.BertBackbone`.
        preprocessor: a `kbert.BertMaskedLMPreprocessor` (or a
            `kbert.BertPreprocessor`, read as one), or `None`.
        mask_selection_rate: share of tokens chosen for prediction.
        max_predictions: the most predictions per sequence.
        whole_word: choose all pieces of a word together.

    Example:
    >>> model = kbert.BertMaskedLM.from_preset("base")
    >>> model.fill_mask(["i went to the [MASK] to deposit my paycheck."])
    [[[('bank', 0.93), ...]]]
    """

    preprocessor_cls = text.ByName("BertMaskedLMPreprocessor")
    packs_texts = True

    def __init__(self, backbone, preprocessor=None, mask_selection_rate=0.15, max_predictions=None,
                 whole_word=False, **kwargs):
        inputs = dict(self.backbone_inputs(backbone))
        inputs["mask_positions"] = keras.Input(shape=(None,), dtype="int32", name="mask_positions")
        outputs = self._heads(backbone, inputs, backbone({k: inputs[k] for k in backbone.input}))
        super().__init__(inputs=inputs, outputs=outputs, backbone=backbone, preprocessor=preprocessor, **kwargs)
        self.mlm_head = self.get_layer("mlm_head")
        self.mask_selection_rate = mask_selection_rate
        self.max_predictions = max_predictions
        self.whole_word = whole_word

    def _heads(self, backbone, inputs, backbone_outputs):
        mlm_logits = MaskedLMHead(
            token_embedding=backbone.token_embedding,
            **backbone.prediction_head_arguments(),
            kernel_initializer=bert_initializer(),
            dtype=backbone.dtype_policy,
            name="mlm_head",
        )(backbone_outputs["sequence_output"], mask_positions=inputs["mask_positions"])
        return {"mlm_logits": mlm_logits}

    def task_config(self):
        return {
            "mask_selection_rate": self.mask_selection_rate,
            "max_predictions": self.max_predictions,
            "whole_word": self.whole_word,
        }

    def default_loss(self):
        # BERT's masked-LM loss is the mean over real predictions: padded
        # prediction slots have weight 0 and do not count in the mean.
        return {"mlm_logits": keras.losses.SparseCategoricalCrossentropy(
            from_logits=True, reduction="mean_with_sample_weight")}

    def default_weighted_metrics(self):
        # Accuracy over real predictions, not the padded prediction slots.
        return {"mlm_logits": [keras.metrics.SparseCategoricalAccuracy(name="accuracy")]}

    # transformers' BertForMaskedLM / BertForPreTraining `cls.predictions`, RobertaForMaskedLM's `lm_head`, ...
    def hf_head_table(self):
        return families.get(self.backbone.family).masked_lm_table(self.mlm_head)

    def fill_mask(self, texts, top_k=5, batch_size=32):
        """The `top_k` guesses at each `[MASK]` written in each text, as the
        exported model gives them.

        Args:
            texts: a list of texts, each with at least one `[MASK]`.

        Returns:
            A list, per text, per [MASK], of `top_k` `Guess`es, the most
            likely first: `(token, probability)` pairs with the token's id
            as `token_id`. The token is its text, as transformers'
            fill-mask pipeline gives it (`token_str`): a byte-level BPE's
            "Ġbank" is " bank", a SentencePiece "▁bank" "bank", WordPiece's
            "##s" "##s".

        Example:
        >>> model.fill_mask(["i went to the [MASK] to deposit my paycheck."], top_k=2)
        [[[Guess('bank', 0.93, token_id=2924), Guess('store', 0.01, token_id=3573)]]]
        """
        if isinstance(texts, (str, bytes)):
            raise ValueError("fill_mask takes a list of texts: fill_mask([text]).")
        rows = task_answers.answers_in_slices(self, (list(texts),), batch_size=batch_size, top_k=top_k)
        results = [[[Guess(*guess) for guess in zip(tokens, map(float, p), map(int, ids))] for tokens, p, ids in
                    zip(r["tokens"], r["probabilities"], r["token_ids"]) if ids[0] >= 0] for r in rows]
        missing = [i for i, guesses in enumerate(results) if not guesses]
        if missing:
            tokenizer = self.preprocessor.tokenizer
            mask = tokenizer.id_to_token(tokenizer.mask_id)  # [MASK], or <mask> in RoBERTa's families
            raise ValueError(f"No {mask} token in texts {missing[:5]} (e.g. {texts[missing[0]][:80]!r}); write {mask} "
                             "where a word should be guessed, within the first sequence_length tokens.")
        return results


# The name of the first releases (kbert.aliases).
BertMaskedLM = also_named(MaskedLM, "BertMaskedLM")


class Guess(tuple):
    """One of `fill_mask`'s guesses: a `(token, probability)` pair, as it
    unpacks and compares, with the token's id as `token_id` (a token's
    text may stand for several ids: byte-level pieces of part of a
    character all read U+FFFD)."""

    def __new__(cls, token, probability, token_id):
        guess = super().__new__(cls, (token, probability))
        guess.token_id = token_id
        return guess

    token = property(lambda self: self[0])
    probability = property(lambda self: self[1])

    def __reduce__(self):
        return Guess, (*self, self.token_id)

    def __repr__(self):
        return f"Guess({self[0]!r}, {self[1]!r}, token_id={self.token_id})"


@keras.saving.register_keras_serializable(package="kbert")
class BertPretrainer(MaskedLM):
    """BERT's pre-training model (§3.1): masked LM plus next-sentence
    prediction, a 2-way classifier on the pooled output (label 0: B follows
    A, 1: B is random). The loss is the sum of the mean masked-LM loss and the
    next-sentence loss. Outputs `mlm_logits` and `nsp_logits`.

    Args: as `BertMaskedLM`.

    On a backbone with `packing=True`, rows hold several sequences (Krell et
    al. 2021), each with its own [CLS] and next-sentence label: the model
    also takes `cls_positions` `[batch, max_sequences_per_row]` (each
    sequence's [CLS]; 0 in unused slots) and gives `nsp_logits`
    `[batch, max_sequences_per_row, 2]`, from the pooler applied at each
    [CLS]. Labels and weights (0 in unused slots) are then per slot, and the
    next-sentence loss is the mean over real sequences.
    `kbert.text.pretraining_dataset` reads such batches from shards.

    With a preprocessor, `fit` takes a batched dataset of next-sentence pairs
    as made by `kbert.text.next_sentence_dataset`: dicts of `segment_a`,
    `segment_b` (strings, or WordPiece ids batched with `ragged_batch`) and
    `next_sentence_label`; they are packed and masked on the fly.

    Example:
    >>> pairs = kbert.text.next_sentence_dataset("austen.txt.gz", max_seq_length=128, seed=0)
    >>> model = kbert.BertPretrainer(backbone, preprocessor)
    >>> model.fit(pairs.batch(32), epochs=10)
    """

    preprocessor_cls = text.ByName("BertPretrainerPreprocessor")
    takes_pairs = True
    # Its next-sentence pairs fill `max_seq_length` already (but for the
    # short ones drawn on purpose, BERT's `short_seq_prob`).
    packs_texts = False

    def head_settings(self):
        return {**super().head_settings(), "next_sentence": True}

    def _heads(self, backbone, inputs, backbone_outputs):
        if not families.get(backbone.family).next_sentence:
            # RoBERTa, DistilBERT and ELECTRA were pre-trained without it.
            raise ValueError(f"BertPretrainer adds BERT's next-sentence head; a {backbone.family!r} backbone has "
                             "none. Pre-train it with kbert.BertMaskedLM (masked LM alone).")
        outputs = super()._heads(backbone, inputs, backbone_outputs)
        pooled_output = backbone_outputs["pooled_output"]
        if backbone.packing:
            # Each packed sequence's own [CLS] through the pooler (BERT §3).
            cls_positions = keras.Input(shape=(None,), dtype="int32", name="cls_positions")
            inputs["cls_positions"] = cls_positions
            first_tokens = keras.ops.take_along_axis(
                backbone_outputs["sequence_output"], cls_positions[:, :, None], axis=1
            )
            pooled_output = backbone.pooled_dense(first_tokens)
        outputs["nsp_logits"] = keras.layers.Dense(
            2, kernel_initializer=bert_initializer(), dtype="float32", name="nsp_head"
        )(pooled_output)
        return outputs

    def default_loss(self):
        # Packed rows: the mean over real sequences, not over sequence slots.
        reduction = "mean_with_sample_weight" if self.backbone.packing else "sum_over_batch_size"
        return {
            **super().default_loss(),
            "nsp_logits": keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=reduction),
        }

    def default_weighted_metrics(self):
        return {
            **super().default_weighted_metrics(),
            "nsp_logits": [keras.metrics.SparseCategoricalAccuracy(name="accuracy")],
        }

    def hf_head_table(self):
        nsp = self.get_layer("nsp_head")
        return super().hf_head_table() + [
            (nsp.kernel, "cls.seq_relationship.weight", T),
            (nsp.bias, "cls.seq_relationship.bias", None),
        ]
