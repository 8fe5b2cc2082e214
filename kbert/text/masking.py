"""Masked-LM masking (BERT §3.1 "Task #1: Masked LM" and §A.1), as TensorFlow ops."""

from kbert.tf_if_present import tf


class MaskedLMMaskGenerator(tf.Module):
    """Chooses tokens to predict and masks them, anew at every call.

    BERT §3.1: 15% of the tokens are chosen for prediction; of those, 80% become
    `[MASK]`, 10% a random token and 10% stay as they are. As in Google's
    `create_pretraining_data.py`, a sequence of `n` selectable tokens has
    `min(max_predictions, max(1, round(n * mask_selection_rate)))` predictions.
    Special tokens and padding are never chosen.

    With `whole_word=True`, all WordPieces of a word are chosen together (a
    `##` piece belongs to the word of the piece before it), in random order of
    words until the count is reached; a word that would overshoot it is
    skipped, as in the reference. Each piece of a chosen word is still
    replaced 80/10/10 on its own.

    Masks are new at each call, so `dataset.map(generator)` masks every epoch
    differently (the paper's data was masked 10 ways, RoBERTa §4.1 calls this
    dynamic masking). With a `seed`, a generator built anew gives the same
    masks in the same order: keep the map sequential (`num_parallel_calls`
    unset) for that, or pass a per-example `seed` to the call yourself.

    Args:
        vocabulary_size: the number of token ids.
        mask_token_id: the id of `[MASK]`.
        max_predictions: the most predictions per sequence; outputs are padded
            to it. `None` means `ceil(mask_selection_rate * sequence_length)`.
        mask_selection_rate: the share of selectable tokens to predict.
        unselectable_token_ids: ids never chosen, and never drawn as random
            replacements (`[CLS]`, `[SEP]`, `[PAD]`).
        mask_token_rate: the share of chosen tokens that become `[MASK]`.
        random_token_rate: the share that become a random token.
        whole_word: choose whole words.
        continuation_token_ids: ids of the `##` pieces; needed for `whole_word`.
        seed: an int for reproducible masks, or `None`.

    Call it on `token_ids` [batch, length] (dense, with an optional
    `padding_mask`, or ragged) or on a dict holding `token_ids` (a packer's
    output). It returns a dict: `token_ids` (masked, same shape and kind as
    given), `mask_positions` and `mask_ids` (the original ids) int32, and
    `mask_weights` float32 (1 for a prediction, 0 for padding), each
    [batch, max_predictions]. Given a dict, the dict's other entries come back too.

    Example:
    >>> generator = MaskedLMMaskGenerator.from_tokenizer(tokenizer, max_predictions=20, seed=1)
    >>> dataset = dataset.map(preprocessor).map(generator)
    """

    def __init__(
        self,
        vocabulary_size,
        mask_token_id,
        max_predictions=None,
        mask_selection_rate=0.15,
        unselectable_token_ids=(),
        mask_token_rate=0.8,
        random_token_rate=0.1,
        whole_word=False,
        continuation_token_ids=None,
        seed=None,
    ):
        super().__init__(name="masked_lm_mask_generator")
        for name, rate in (
            ("mask_selection_rate", mask_selection_rate),
            ("mask_token_rate", mask_token_rate),
            ("random_token_rate", random_token_rate),
        ):
            if not 0 <= rate <= 1:
                raise ValueError(f"{name}={rate} is not a share: it must be between 0 and 1.")
        if mask_token_rate + random_token_rate > 1:
            raise ValueError(
                f"mask_token_rate + random_token_rate = {mask_token_rate + random_token_rate} is over 1; "
                "the rest (BERT: 10%) is the share of chosen tokens kept unchanged."
            )
        if not 0 <= mask_token_id < vocabulary_size:
            raise ValueError(
                f"mask_token_id={mask_token_id} is outside the vocabulary (0 to {vocabulary_size - 1})."
            )
        if max_predictions is not None and max_predictions < 1:
            raise ValueError(f"max_predictions={max_predictions} must be at least 1, or None.")
        if whole_word and continuation_token_ids is None:
            raise ValueError(
                "whole_word=True needs continuation_token_ids (the ids of the ## pieces) to "
                "find words. Build the generator with "
                "MaskedLMMaskGenerator.from_tokenizer(tokenizer, whole_word=True)."
            )
        self.vocabulary_size = int(vocabulary_size)
        self.mask_token_id = int(mask_token_id)
        self.max_predictions = max_predictions
        self.mask_selection_rate = mask_selection_rate
        self.unselectable_token_ids = [int(i) for i in unselectable_token_ids]
        self.mask_token_rate = mask_token_rate
        self.random_token_rate = random_token_rate
        self.whole_word = whole_word
        self.continuation_token_ids = (
            None if continuation_token_ids is None else [int(i) for i in continuation_token_ids]
        )
        self.seed = seed
        excluded = set(self.unselectable_token_ids) | {self.mask_token_id}
        self._random_ids = tf.constant([i for i in range(self.vocabulary_size) if i not in excluded])
        is_continuation = [False] * self.vocabulary_size
        for i in self.continuation_token_ids or ():
            is_continuation[i] = True
        self._is_continuation = tf.constant(is_continuation)
        if seed is None:
            self._generator = tf.random.Generator.from_non_deterministic_state()
        else:
            self._generator = tf.random.Generator.from_seed(seed)

    @classmethod
    def from_tokenizer(cls, tokenizer, **kwargs):
        """A generator for a tokenizer's vocabulary: `[CLS]`, `[SEP]` and
        `[PAD]` unselectable, its `[MASK]`, and the pieces that continue a
        word (WordPiece's `##` pieces; BPE's without `Ġ`, SentencePiece's
        without `▁`) for `whole_word`.

        Args:
            tokenizer: a `kbert.text` tokenizer (`BertTokenizer`, ...).
            **kwargs: the other arguments of `MaskedLMMaskGenerator`.
        """
        kwargs.setdefault("unselectable_token_ids", [tokenizer.cls_id, tokenizer.sep_id, tokenizer.pad_id])
        if kwargs.get("whole_word"):
            kwargs.setdefault("continuation_token_ids", tokenizer.continuation_token_ids)
        return cls(tokenizer.vocabulary_size, tokenizer.mask_id, **kwargs)

    def get_config(self):
        return {
            "vocabulary_size": self.vocabulary_size,
            "mask_token_id": self.mask_token_id,
            "max_predictions": self.max_predictions,
            "mask_selection_rate": self.mask_selection_rate,
            "unselectable_token_ids": self.unselectable_token_ids,
            "mask_token_rate": self.mask_token_rate,
            "random_token_rate": self.random_token_rate,
            "whole_word": self.whole_word,
            "continuation_token_ids": self.continuation_token_ids,
            "seed": self.seed,
        }

    @classmethod
    def from_config(cls, config):
        return cls(**config)

    def __call__(self, token_ids, padding_mask=None, seed=None):
        """Masks a batch.

        Args:
            token_ids: int ids [batch, length] (dense or ragged) or [length],
                or a dict holding `token_ids` and `padding_mask`.
            padding_mask: 1 on real tokens (dense input only; optional when
                the pad id is unselectable).
            seed: an optional stateless seed (a shape [2] int tensor) to use
                instead of the generator's own random state.
        """
        features = None
        if isinstance(token_ids, dict):
            features = token_ids
            token_ids, padding_mask = features["token_ids"], features.get("padding_mask")
        ragged = isinstance(token_ids, tf.RaggedTensor)
        if ragged:
            row_lengths = token_ids.row_lengths()
            padding_mask = tf.sequence_mask(row_lengths)
            token_ids = token_ids.to_tensor()
        token_ids = tf.convert_to_tensor(token_ids)
        unbatched = token_ids.shape.rank == 1
        if unbatched:
            token_ids = token_ids[None]
            padding_mask = None if padding_mask is None else tf.convert_to_tensor(padding_mask)[None]
        if seed is None:
            seed = self._generator.make_seeds(1)[:, 0]
        outputs = self._mask(token_ids, padding_mask, seed)
        if unbatched:
            outputs = {k: v[0] for k, v in outputs.items()}
        if ragged:
            outputs["token_ids"] = tf.RaggedTensor.from_tensor(outputs["token_ids"], lengths=row_lengths)
        return outputs if features is None else {**features, **outputs}

    def _mask(self, token_ids, padding_mask, seed):
        dtype = token_ids.dtype
        ids = tf.cast(token_ids, tf.int32)
        batch_size, length = tf.shape(ids)[0], tf.shape(ids)[1]
        max_predictions = self.max_predictions
        if max_predictions is None:
            share = self.mask_selection_rate * tf.cast(length, "float32")
            max_predictions = tf.cast(tf.math.ceil(share), "int32")
        select_seed, replace_seed, random_seed = tf.unstack(tf.random.experimental.stateless_split(seed, 3))

        selectable = tf.ones_like(ids, tf.bool) if padding_mask is None else tf.cast(padding_mask, tf.bool)
        for special in self.unselectable_token_ids:
            selectable &= ids != special
        # A word starts at every selectable piece that is not a ## continuation
        # of a selectable piece just before it.
        starts = selectable
        if self.whole_word:
            after_selectable = tf.pad(selectable[:, :-1], [[0, 0], [1, 0]])
            starts &= ~(tf.gather(self._is_continuation, ids) & after_selectable)
        # Each selectable token's word, as a row in a flat [batch * length] table.
        word_index = tf.cumsum(tf.cast(starts, tf.int32), axis=1) - 1 + tf.range(batch_size)[:, None] * length
        word_index = tf.where(selectable, word_index, batch_size * length)
        word_sizes = tf.math.unsorted_segment_sum(tf.ones_like(ids), word_index, batch_size * length + 1)

        # BERT §3.1 / create_pretraining_data.py: round(15% of the tokens), at
        # least one, at most max_predictions.
        num_selectable = tf.reduce_sum(tf.cast(selectable, tf.int32), axis=1)
        share = tf.cast(num_selectable, "float32") * self.mask_selection_rate
        num_to_predict = tf.cast(tf.round(share), "int32")
        num_to_predict = tf.minimum(tf.maximum(num_to_predict, 1), max_predictions)

        # Words in random order: word starts get a random score, other tokens sort last.
        scores = tf.random.stateless_uniform(tf.shape(ids), select_seed)
        order = tf.argsort(tf.where(starts, scores, 2.0), axis=1, stable=True)
        ordered_is_word = tf.gather(starts, order, batch_dims=1)
        ordered_sizes = tf.gather(tf.gather(word_sizes, word_index), order, batch_dims=1)
        ordered_sizes = tf.where(ordered_is_word, ordered_sizes, 0)
        if self.whole_word:
            take = _take_words_that_fit(ordered_sizes, num_to_predict, max_predictions)
        else:
            take = ordered_is_word & (tf.cumsum(ordered_sizes, axis=1) <= num_to_predict[:, None])
        # Back from random order to positions, then from word starts to all their pieces.
        taken_words = tf.math.unsorted_segment_max(
            tf.cast(take, tf.int32), tf.gather(word_index, order, batch_dims=1), batch_size * length + 1
        )
        chosen = selectable & (tf.gather(taken_words, word_index) > 0)

        # BERT §3.1: of the chosen tokens, 80% -> [MASK], 10% random, 10% kept.
        replace = tf.random.stateless_uniform(tf.shape(ids), replace_seed)
        to_mask = chosen & (replace < self.mask_token_rate)
        to_random = chosen & ~to_mask & (replace < self.mask_token_rate + self.random_token_rate)
        random_index = tf.random.stateless_uniform(
            tf.shape(ids), random_seed, maxval=tf.size(self._random_ids), dtype=tf.int32
        )
        random_ids = tf.gather(self._random_ids, random_index)
        masked = tf.where(to_mask, self.mask_token_id, tf.where(to_random, random_ids, ids))

        def padded(values, pad):
            values = tf.ragged.boolean_mask(values, chosen)
            padded = values.to_tensor(pad, shape=tf.stack([batch_size, max_predictions]))
            return tf.ensure_shape(padded, [None, self.max_predictions])

        positions = tf.broadcast_to(tf.range(length), tf.shape(ids))
        return {
            "token_ids": tf.cast(masked, dtype),
            "mask_positions": padded(positions, 0),
            "mask_ids": padded(ids, 0),
            "mask_weights": padded(tf.ones_like(ids, "float32"), 0.0),
        }


def _take_words_that_fit(sizes, budget, max_predictions):
    """Greedy choice over words in random order: take a word if it fits in the
    budget, skip it otherwise (create_pretraining_data.py). If no word fits,
    the first one no longer than `max_predictions` is taken, so that every
    sequence with a selectable token has a prediction."""

    def step(state, size):
        count, _ = state
        take = (size > 0) & (count + size <= budget)
        return count + tf.where(take, size, 0), take

    start = (tf.zeros_like(budget), tf.zeros_like(budget, tf.bool))
    _, take = tf.scan(step, tf.transpose(sizes), initializer=start)
    take = tf.transpose(take)
    fallback = (sizes > 0) & (sizes <= max_predictions)
    first = tf.argmax(tf.cast(fallback, tf.int32), axis=1)
    first_fallback = tf.one_hot(first, tf.shape(sizes)[1], on_value=True, off_value=False) & fallback
    nothing_taken = ~tf.reduce_any(take, axis=1, keepdims=True)
    return take | (first_fallback & nothing_taken)


def written_masks(features, mask_id):
    """The `[MASK]`s written in the text, as the masked-LM model's
    `mask_positions` input `[batch, slots]` (at least one slot per row, so a
    batch without [MASK] keeps its shape), and which slots are real."""
    is_mask = tf.equal(features["token_ids"], mask_id)
    positions = tf.ragged.boolean_mask(tf.broadcast_to(tf.range(tf.shape(is_mask)[1]), tf.shape(is_mask)), is_mask)
    num_slots = tf.maximum(tf.reduce_max(tf.concat([positions.row_lengths(), [0]], 0)), 1)
    shape = tf.stack([positions.nrows(), tf.cast(num_slots, tf.int64)])
    features = dict(features, mask_positions=positions.to_tensor(0, shape=shape))
    return features, tf.sequence_mask(positions.row_lengths(), num_slots)


def top_k_guesses(mlm_logits, is_slot, tokenizer, top_k):
    """The `top_k` tokens at each real slot: `tokens`, `token_ids` and
    `probabilities` `[batch, slots, top_k]` ("" / -1 / 0 at padded slots).
    A token is its text, each id detokenized alone, as transformers'
    fill-mask pipeline gives `token_str`: "Ġbank" is " bank", "▁bank"
    "bank", a byte-level piece of part of a character U+FFFD."""
    probabilities, token_ids = tf.math.top_k(tf.nn.softmax(tf.cast(mlm_logits, tf.float32)), top_k)
    is_slot = is_slot[:, :, None]
    tokens = tf.reshape(tokenizer.detokenize(tf.reshape(token_ids, [-1, 1])), tf.shape(token_ids))
    return {
        "tokens": tf.where(is_slot, tokens, ""),
        "token_ids": tf.where(is_slot, token_ids, -1),
        "probabilities": tf.where(is_slot, probabilities, 0.0),
    }
