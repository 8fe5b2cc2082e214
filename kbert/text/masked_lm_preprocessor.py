"""The masked-LM and pre-training tasks' preprocessors: texts (or
next-sentence pairs) in, masked anew at every batch to train (BERT §3.1),
the same way at every call to predict, and the fill-mask answers out."""

import keras

from kbert.aliases import also_named
from kbert.text.masking import MaskedLMMaskGenerator, top_k_guesses, written_masks
from kbert.text.packed_texts import pack_texts
from kbert.text.preprocessor import BertPreprocessor, serving_text
from kbert.tf_if_present import tf


@keras.saving.register_keras_serializable(package="kbert")
class MaskedLMPreprocessor(BertPreprocessor):
    """`BertPreprocessor` for `BertMaskedLM`: texts in, each batch masked
    anew (the model's `mask_selection_rate`, `max_predictions` and
    `whole_word`; of the chosen tokens 80% [MASK], 10% random, 10% kept),
    with the masked tokens' ids as labels. Answers are the `top_k` guesses
    at each `[MASK]` written in a text.

    To predict, texts are masked the same way at every call (`predicted`):
    a text with `[MASK]`s written in it at those, one without as in
    training, with a seed drawn from its batch's tokens.

    For a model on a packing backbone, `fit` and `evaluate` on texts held in
    memory pack them into rows of `sequence_length` tokens (`pack_texts`),
    each text read as it is read alone; batches then count rows."""

    def training_examples(self, examples, head=None):
        texts = tf.nest.flatten(examples[0])  # one list, or a pair of lists
        # Texts with nothing to mask train nothing: the loss, a mean over no
        # predictions, would read 0.0 at every step.
        if not any(bool(tf.reduce_any(tf.strings.strip(t) != "")) for t in texts):
            raise ValueError(
                f"All {int(texts[0].shape[0])} texts are empty or whitespace: a masked LM learns by guessing "
                "masked tokens of its texts, and these hold none to mask. Pass texts with words."
            )
        if not head.get("packing"):
            return examples
        # Padded one per row, 2,048 Austen paragraphs of up to 128 tokens
        # fill 69% of their rows; packed, nearly all.
        return (pack_texts(self, examples[0]),)

    def label_ids(self, y, head=None):
        if y is not None:
            raise ValueError("A masked LM's labels are the masked tokens themselves: call fit(texts) without y.")
        return y

    def lengths(self, examples):
        return None  # texts keep their order

    def masker(self, head):
        """The mask generator for the model's settings; made once per
        pipeline function, outside its trace (it holds a random generator)."""
        return MaskedLMMaskGenerator.from_tokenizer(
            self.tokenizer, mask_selection_rate=head["mask_selection_rate"],
            max_predictions=head["max_predictions"], whole_word=head["whole_word"],
        )

    def batch_function(self, head=None, pad_to=None, dataset_spec=None, labeled=False):
        preprocessor = self.with_padding(pad_to or self.packer.pad_to)
        masker = self.masker(head)

        def batch(x, *rest):
            # Packed rows (`training_examples`) come tokenized. Fit's and
            # evaluate's batches are masked anew, predict's the same each call.
            features = x if isinstance(x, dict) else preprocessor(x)
            return (masked if labeled else predicted)(masker, features, head)

        return batch

    def answering(self, head=None, pad_to=None, pairs=False, top_k=5):
        preprocessor = self.with_padding(pad_to or self.packer.pad_to)

        def preprocess(*texts):
            features, is_slot = written_masks(
                preprocessor(texts if len(texts) > 1 else texts[0]), preprocessor.tokenizer.mask_id
            )
            return as_packed(features, head), is_slot

        def postprocess(outputs, is_slot):
            answers = top_k_guesses(outputs["mlm_logits"], is_slot, preprocessor.tokenizer, top_k)
            if pairs:
                nsp_logits = outputs["nsp_logits"]
                if head.get("packing"):
                    nsp_logits = nsp_logits[:, 0]  # the row's one sequence
                # Label 0: text_pair follows text.
                answers["next_sentence_probability"] = tf.nn.softmax(tf.cast(nsp_logits, tf.float32))[:, 0]
            return answers

        signature = [serving_text(), serving_text("text_pair")][:2 if pairs else 1]
        return preprocess, postprocess, signature, {"token_ids": -1}


# The name of the first releases (kbert.aliases).
BertMaskedLMPreprocessor = also_named(MaskedLMPreprocessor, "BertMaskedLMPreprocessor")


@keras.saving.register_keras_serializable(package="kbert")
class BertPretrainerPreprocessor(BertMaskedLMPreprocessor):
    """`BertMaskedLMPreprocessor` for `BertPretrainer`: a batched dataset of
    next-sentence pairs as `kbert.text.next_sentence_dataset` makes them
    (dicts of `segment_a`, `segment_b`, strings or WordPiece ids batched with
    `ragged_batch`, and `next_sentence_label`), packed and masked on the fly."""

    batched_rank = None  # segments of strings, or of WordPiece ids

    def training_examples(self, examples, head=None):
        return examples  # pairs, one a row: they fill the sequence length already

    def is_raw(self, x):
        if isinstance(x, tf.data.Dataset) and isinstance(x.element_spec, dict):
            return "segment_a" in x.element_spec
        return super().is_raw(x)

    def batch_function(self, head=None, pad_to=None, dataset_spec=None, labeled=False):
        preprocessor = self.with_padding(pad_to or self.packer.pad_to)
        masker = self.masker(head)

        def batch(pairs, *rest):
            segments = (pairs["segment_a"], pairs["segment_b"])
            if segments[0].dtype == tf.string:
                features = preprocessor(segments)
            else:
                features = preprocessor.packer(segments)
            inputs, labels, weights = (masked if labeled else predicted)(masker, features, head)
            next_sentence = pairs["next_sentence_label"]
            if head.get("packing"):
                next_sentence = next_sentence[:, None]
            return (inputs, {**labels, "nsp_logits": next_sentence},
                    {**weights, "nsp_logits": tf.ones_like(next_sentence, dtype=tf.float32)})

        return batch


_INPUTS = ("token_ids", "segment_ids", "padding_mask", "sequence_ids", "mask_positions")


def masked(masker, features, head):
    """BERT §3.1: new masks at every call, so each epoch sees new ones.
    Returns `(inputs, labels, weights)` for the masked-LM head."""
    masked = masker(features)
    inputs = {k: masked[k] for k in _INPUTS if k in masked}
    return as_packed(inputs, head), {"mlm_logits": masked["mask_ids"]}, {"mlm_logits": masked["mask_weights"]}


def predicted(masker, features, head):
    """`masked` for predict, the same at every call: a row with `[MASK]`s
    written in it predicts at those (as `fill_mask` reads them), its tokens
    kept, with label and weight 0 (the words are unknown); a row without is
    masked as in training, with a stateless seed drawn from the batch's
    token ids. The rows' predictions are padded with 0 to the widest."""
    written, has_slot = written_masks(features, masker.mask_token_id)
    token_ids = features["token_ids"]
    # The same batch gives the same masks; other batches, other ones (not one
    # pattern repeated batch after batch, as a constant seed would give).
    seed = tf.bitcast(tf.reshape(tf.fingerprint(tf.reshape(token_ids, [1, -1])), [2, 4]), tf.int32)
    drawn = masker(features, seed=seed)
    has_written = tf.reduce_any(has_slot, axis=1, keepdims=True)
    width = tf.maximum(tf.shape(written["mask_positions"])[1], tf.shape(drawn["mask_positions"])[1])

    def per_row(if_written, if_drawn):
        if_written, if_drawn = (tf.pad(v, [[0, 0], [0, width - tf.shape(v)[1]]]) for v in (if_written, if_drawn))
        return tf.where(has_written, if_written, if_drawn)

    positions = written["mask_positions"]
    inputs = dict(features, token_ids=tf.where(has_written, token_ids, drawn["token_ids"]),
                  mask_positions=per_row(positions, drawn["mask_positions"]))
    labels = per_row(tf.zeros_like(positions), drawn["mask_ids"])
    weights = per_row(tf.zeros_like(positions, tf.float32), drawn["mask_weights"])
    return as_packed({k: inputs[k] for k in _INPUTS if k in inputs}, head), {"mlm_logits": labels}, \
        {"mlm_logits": weights}


def as_packed(features, head):
    """Features of one sequence per row, for a model on a packing backbone
    (whose rows come packed from `kbert.text` shards in training): sequence
    id 1 on real tokens, 0 on padding, and for a pre-trainer the one [CLS]
    at position 0. Rows packed already keep their sequence ids."""
    if not head.get("packing") or "sequence_ids" in features:
        return features
    features = {**features, "sequence_ids": tf.cast(features["padding_mask"], tf.int32)}
    if head.get("next_sentence"):
        features["cls_positions"] = tf.zeros_like(features["token_ids"][:, :1])
    return features
