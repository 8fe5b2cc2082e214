"""Pre-training data at scale, as Google's `create_pretraining_data.py` makes
it, but in parallel and reproducibly: text files in, TFRecord shards of
tokenized next-sentence pairs out (one shard per input file, one process per
file), then fixed-shape batches out of the shards in `tf.data`.

    write_pretraining_data(["wiki-00.txt.gz", ...], "shards/", "vocab.txt", sequence_length=128)
    dataset = pretraining_dataset("shards/", batch_size=256)  # (inputs, labels, weights)
    model.fit(dataset.repeat(), steps_per_epoch=..., epochs=...)

With `packing=True` (the default) a shard row holds several pairs (Krell et
al. 2021): the model's backbone needs `packing=True`, and batches carry the
`sequence_ids` and `cls_positions` it reads.

Masks (BERT §3.1) are either drawn anew in `tf.data` for every epoch
(`masks="dynamic"`, RoBERTa §4.1) or written into the shards
(`masks="precomputed"`, `dupe_factor` differently masked copies, as the
reference does).
"""

import json
import math
import os


from kbert.text.masking import MaskedLMMaskGenerator
# Writing the shards: `write_pretraining_data` and the format's file names,
# importable from here too.
from kbert.text.pretraining_shards import METADATA, VOCABULARY, write_pretraining_data  # noqa: F401
from kbert.text.tokenizer import BertTokenizer
from kbert.tf_if_present import tf

# The int64 features of a shard's rows, as `write_pretraining_data` writes them.
_FEATURES = ("token_ids", "segment_ids", "cls_positions", "next_sentence_labels")
_MASK_FEATURES = ("mask_positions", "mask_ids")


def pretraining_data_metadata(directory):
    """The settings and counts `write_pretraining_data` wrote with the shards."""
    path = os.path.join(directory, METADATA)
    if not os.path.isfile(path):
        raise FileNotFoundError(
            f"{path} is missing: {directory!r} holds no shards of write_pretraining_data (or "
            "`kbert pretraining-data`); write them first."
        )
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def pretraining_dataset(
    directory,
    batch_size,
    shuffle_buffer=10000,
    seed=None,
    max_predictions=None,
    drop_remainder=True,
    input_context=None,
    cycle_length=8,
):
    """Fixed-shape batches of BertPretrainer inputs, labels and weights from
    the shards of `write_pretraining_data`.

    Shards are read interleaved (`cycle_length` at a time, in a shuffled
    order), rows shuffled in a `shuffle_buffer`, batched to `batch_size`
    (`drop_remainder` keeps every batch one shape, as TPUs and compiled steps
    want) and parsed batch by batch. Dynamic masks are drawn per batch.

    Under a `tf.distribute` strategy each worker reads its own shards: the
    dataset asks for file-level auto-sharding (Keras' `fit` distributes it so),
    or pass `input_context` (from `distribute_datasets_from_function`) to
    shard here. Give each worker at least one shard (more: even shares).
    One pass of the dataset is one epoch: every row once.

    Args:
        directory: the shards' folder.
        batch_size: rows per batch (the global batch under a strategy).
        shuffle_buffer: rows in the shuffle buffer (0: no shuffling).
        seed: an int for a reproducible order and masks, or `None`.
        max_predictions: prediction slots per row (dynamic masks); default
            `ceil(mask_selection_rate * sequence_length)`.
        drop_remainder: drop the last, partial batch.
        input_context: a `tf.distribute.InputContext`: shard by file here.
        cycle_length: shards read at once.

    Returns:
        A `tf.data.Dataset` of `(inputs, labels, sample_weights)`: inputs
        `token_ids`, `segment_ids`, `padding_mask` `[batch, sequence_length]`
        and `mask_positions` `[batch, max_predictions]`, plus for packed shards
        `sequence_ids` `[batch, sequence_length]` and `cls_positions`
        `[batch, max_sequences_per_row]`; labels and weights keyed by
        `mlm_logits` and `nsp_logits` (per packed sequence for packed shards).

    Example:
    >>> dataset = pretraining_dataset("shards", batch_size=256, seed=0)
    >>> model = kbert.BertPretrainer(kbert.BertBackbone(..., packing=True))
    >>> model.fit(dataset.repeat(), steps_per_epoch=1000, epochs=10)
    """
    metadata = pretraining_data_metadata(directory)
    files = [os.path.join(directory, shard["file"]) for shard in metadata["shards"]]
    files_dataset = tf.data.Dataset.from_tensor_slices(files)
    if input_context is not None and input_context.num_input_pipelines > 1:
        if len(files) < input_context.num_input_pipelines:
            raise ValueError(
                f"{len(files)} shard(s) in {directory!r} for {input_context.num_input_pipelines} workers: each "
                "worker reads whole shards. Write at least one shard per worker (one input file each)."
            )
        files_dataset = files_dataset.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
    # The same seed on every worker: the same file order, so that a
    # file-level shard of it is a disjoint share.
    files_dataset = files_dataset.shuffle(len(files), seed=0 if seed is None else seed)
    dataset = files_dataset.interleave(
        tf.data.TFRecordDataset, cycle_length=min(cycle_length, len(files)),
        num_parallel_calls=tf.data.AUTOTUNE, deterministic=seed is not None,
    )
    if shuffle_buffer:
        dataset = dataset.shuffle(shuffle_buffer, seed=seed)
    dataset = dataset.batch(batch_size, drop_remainder=drop_remainder)
    masker = None
    if metadata["masks"] == "dynamic":
        tokenizer = BertTokenizer(os.path.join(directory, VOCABULARY), lowercase=metadata["lowercase"])
        max_predictions = max_predictions or math.ceil(metadata["mask_selection_rate"] * metadata["sequence_length"])
        masker = MaskedLMMaskGenerator.from_tokenizer(
            tokenizer, max_predictions=max_predictions, mask_selection_rate=metadata["mask_selection_rate"],
            whole_word=metadata["whole_word"], seed=seed,
        )
    else:
        max_predictions = metadata["max_predictions_per_row"]
    shapes = (metadata["sequence_length"], metadata["max_sequences_per_row"], max_predictions)
    dataset = dataset.map(lambda records: _batch(records, shapes, metadata["packing"], masker),
                          num_parallel_calls=None if masker is not None else tf.data.AUTOTUNE)
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = (
        tf.data.experimental.AutoShardPolicy.OFF if input_context is not None
        else tf.data.experimental.AutoShardPolicy.FILE
    )
    return dataset.with_options(options).prefetch(tf.data.AUTOTUNE)


def _batch(records, shapes, packing, masker):
    """Parses and pads a batch of serialized rows to fixed shapes."""
    length, max_sequences, max_predictions = shapes
    spec = {name: tf.io.RaggedFeature(tf.int64) for name in _FEATURES}
    if masker is None:
        spec.update({name: tf.io.RaggedFeature(tf.int64) for name in _MASK_FEATURES})
    rows = {k: tf.cast(v, tf.int32) for k, v in tf.io.parse_example(records, spec).items()}

    def dense(name, width):
        return rows[name].to_tensor(0, shape=[None, width])

    features = {
        "token_ids": dense("token_ids", length),
        "segment_ids": dense("segment_ids", length),
        "padding_mask": tf.sequence_mask(rows["token_ids"].row_lengths(), length, tf.int32),
    }
    if masker is not None:
        masked = masker(features)
        features["token_ids"] = masked["token_ids"]
        mask_positions, mask_ids, mask_weights = (masked[k] for k in ("mask_positions", "mask_ids", "mask_weights"))
    else:
        mask_positions, mask_ids = dense("mask_positions", max_predictions), dense("mask_ids", max_predictions)
        mask_weights = tf.sequence_mask(rows["mask_ids"].row_lengths(), max_predictions, tf.float32)
    features["mask_positions"] = mask_positions
    labels = dense("next_sentence_labels", max_sequences)
    nsp_weights = tf.sequence_mask(rows["cls_positions"].row_lengths(), max_sequences, tf.float32)
    if packing:
        starts = rows["cls_positions"].to_tensor(length, shape=[None, max_sequences])
        # 1, 2, ... on each sequence in turn: how many starts are at or before a token.
        sequence_ids = tf.reduce_sum(tf.cast(starts[:, :, None] <= tf.range(length)[None, None, :], tf.int32), 1)
        features["sequence_ids"] = sequence_ids * features["padding_mask"]
        features["cls_positions"] = dense("cls_positions", max_sequences)
    else:
        labels, nsp_weights = labels[:, 0], nsp_weights[:, 0]
    batch = (features, {"mlm_logits": mask_ids, "nsp_logits": labels},
             {"mlm_logits": mask_weights, "nsp_logits": nsp_weights})
    # Static shapes (the batch size too, with drop_remainder): one trace, one XLA program.
    return tf.nest.map_structure(lambda t: tf.ensure_shape(t, records.shape[:1] + t.shape[1:]), batch)
