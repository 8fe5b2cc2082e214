"""Next-sentence prediction pairs (BERT §3.1 "Task #2: NSP"), as in Google's
`create_pretraining_data.py`, but streaming: the corpus is read once and only
a bounded buffer of documents is held in memory.

BERT §3.1: for each pre-training example, 50% of the time B is the actual
next "sentence" after A (labelled IsNext, 0), and 50% of the time a random
span of the corpus (NotNext, 1). A "sentence" is any span of contiguous text
(§3.1, footnote), so a line of a file serves as one.
"""

import gzip
import random

from kbert.tf_if_present import tf

IS_NEXT, NOT_NEXT = 0, 1


def read_documents(path):
    """Reads documents from a text file, lazily: one document per block of
    lines, blocks separated by blank lines, each line a sentence (the format of
    `create_pretraining_data.py`). A `.gz` file is decompressed on the fly.

    Args:
        path: the file.

    Yields:
        Each document as a list of its non-empty lines, stripped.

    Example:
    >>> documents = read_documents("examples/data/austen.txt.gz")
    >>> next(documents)
    ['EMMA']
    """
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        document = []
        for line in f:
            line = line.strip()
            if line:
                document.append(line)
            elif document:
                yield document
                document = []
        if document:
            yield document


def next_sentence_pairs(
    documents,
    max_seq_length=128,
    short_seq_prob=0.1,
    buffer_size=1000,
    seed=None,
    tokenize=None,
):
    """Makes next-sentence pairs from a stream of documents.

    Each document goes through `create_pretraining_data.py`'s
    `create_instances_from_document`: sentences are gathered into a chunk
    until it reaches the target length (`max_seq_length - 3`, or with
    probability `short_seq_prob` a random length in [2, target], to lessen the
    mismatch with short fine-tuning inputs, §A.2), the chunk is split at a
    random sentence into A and B, and half of the time B is replaced by a span
    of another document, the unused sentences going back to the document.
    The pair is then trimmed to `max_seq_length - 3` units, a unit at a time
    from the longer segment, from its front or back at random.

    Documents pass through a buffer of `buffer_size` documents: a document is
    processed when a random one leaves the buffer (which shuffles documents,
    as the reference does), and random B spans come from the documents in the
    buffer. Memory holds `buffer_size` documents, never the corpus.

    Args:
        documents: an iterable of documents, each a list of sentences; a
            sentence is a string (split into whitespace-separated words) or a
            list of token ids.
        max_seq_length: the packed length the pairs are for; A and B get at
            most `max_seq_length - 3` units together ([CLS] and two [SEP]).
        short_seq_prob: the share of documents with a shorter random target.
        buffer_size: how many documents to hold for shuffling and random B spans.
        seed: an int for reproducible pairs, or `None`.
        tokenize: an optional function from a list of sentence strings to a
            list of token lists (e.g. WordPiece ids), so that lengths are
            counted in those tokens.

    Yields:
        `(segment_a, segment_b, is_random_next)`: segments are strings (words
        joined by spaces) for text documents, lists of ids otherwise;
        `is_random_next` is 1 for NotNext, 0 for IsNext.

    Example:
    >>> pairs = next_sentence_pairs(read_documents("examples/data/austen.txt.gz"), seed=0)
    >>> a, b, is_random_next = next(pairs)
    """
    if max_seq_length < 5:
        raise ValueError(
            f"max_seq_length={max_seq_length} leaves no room for A and B: it must be at least 5."
        )
    if buffer_size < 1:
        raise ValueError(f"buffer_size={buffer_size} must be at least 1.")
    rng = random.Random(seed)
    buffer, previous = [], None
    for document in documents:
        document = _units(document, tokenize)
        if not document:
            continue
        if len(buffer) < buffer_size:
            buffer.append(document)
            continue
        index = rng.randrange(len(buffer))
        current, buffer[index] = buffer[index], document
        yield from _pairs_from_document(current, buffer, max_seq_length, short_seq_prob, rng)
        previous = current
    rng.shuffle(buffer)
    while buffer:
        current = buffer.pop()
        # The last document has no other left in the buffer: take B spans from
        # the one before it, or (a corpus of one document) from itself.
        others = buffer or [previous or current]
        yield from _pairs_from_document(current, others, max_seq_length, short_seq_prob, rng)
        previous = current


def _units(document, tokenize):
    sentences = [s for s in document if len(s)]
    if not sentences or not isinstance(sentences[0], str):
        return [list(s) for s in sentences]
    if tokenize is None:
        return [s.split() for s in sentences]
    return [list(ids) for ids in tokenize(sentences) if len(ids)]


def _pairs_from_document(document, others, max_seq_length, short_seq_prob, rng):
    """`create_instances_from_document` of create_pretraining_data.py, with
    random B spans drawn from `others` (documents other than this one)."""
    max_num_tokens = max_seq_length - 3
    # The reference draws the short target once per document.
    target_seq_length = max_num_tokens
    if rng.random() < short_seq_prob:
        target_seq_length = rng.randint(2, max_num_tokens)
    chunk, chunk_length, i = [], 0, 0
    while i < len(document):
        chunk.append(document[i])
        chunk_length += len(document[i])
        if i == len(document) - 1 or chunk_length >= target_seq_length:
            a_end = rng.randint(1, len(chunk) - 1) if len(chunk) >= 2 else 1
            tokens_a = [t for sentence in chunk[:a_end] for t in sentence]
            tokens_b = []
            # BERT §3.1: 50% of the time B is a random span (NotNext).
            is_random_next = len(chunk) == 1 or rng.random() < 0.5
            if is_random_next:
                target_b_length = target_seq_length - len(tokens_a)
                other = rng.choice(others)
                for sentence in other[rng.randrange(len(other)):]:
                    tokens_b.extend(sentence)
                    if len(tokens_b) >= target_b_length:
                        break
                # The sentences of the chunk that B did not use are not
                # wasted: the next chunk starts with them.
                i -= len(chunk) - a_end
            else:
                tokens_b = [t for sentence in chunk[a_end:] for t in sentence]
            _truncate_pair(tokens_a, tokens_b, max_num_tokens, rng)
            yield _join(tokens_a), _join(tokens_b), NOT_NEXT if is_random_next else IS_NEXT
            chunk, chunk_length = [], 0
        i += 1


def _truncate_pair(tokens_a, tokens_b, max_num_tokens, rng):
    """`truncate_seq_pair`: drops a unit of the longer segment, from its front
    or its back at random (more randomness than always cutting the end)."""
    while len(tokens_a) + len(tokens_b) > max_num_tokens:
        longer = tokens_a if len(tokens_a) > len(tokens_b) else tokens_b
        if rng.random() < 0.5:
            del longer[0]
        else:
            longer.pop()


def _join(tokens):
    return " ".join(tokens) if tokens and isinstance(tokens[0], str) else tokens


def next_sentence_dataset(
    documents,
    max_seq_length=128,
    short_seq_prob=0.1,
    buffer_size=1000,
    seed=None,
    tokenizer=None,
):
    """A `tf.data.Dataset` of next-sentence pairs, new pairs each epoch.

    Elements are dicts: `segment_a`, `segment_b` (strings, or int32 id
    vectors when a `tokenizer` is given or documents hold ids) and
    `next_sentence_label` (int32: 0 IsNext, 1 NotNext). With a seed, epoch `k`
    is the same every time the dataset is built.

    Args:
        documents: a path (read with `read_documents`), a list of documents,
            or a function returning an iterable of documents (called each
            epoch). Documents are as in `next_sentence_pairs`.
        max_seq_length, short_seq_prob, buffer_size, seed: as in `next_sentence_pairs`.
        tokenizer: an optional `kbert.text.BertTokenizer`: segments are then
            WordPiece ids, with lengths counted in WordPieces, as in the reference.

    Example:
    >>> pairs = next_sentence_dataset("examples/data/austen.txt.gz", tokenizer=tokenizer, seed=0)
    >>> packer = SegmentPacker(tokenizer.cls_id, tokenizer.sep_id, tokenizer.pad_id, 128)
    >>> masker = MaskedLMMaskGenerator.from_tokenizer(tokenizer, max_predictions=20, seed=0)
    >>> dataset = pairs.ragged_batch(32).map(
    ...     lambda x: ({**masker(packer((x["segment_a"], x["segment_b"]))),
    ...                 "next_sentence_label": x["next_sentence_label"]}))
    """
    if isinstance(documents, str):
        path = documents
        documents = lambda: read_documents(path)  # noqa: E731
    elif not callable(documents):
        if iter(documents) is documents:
            raise TypeError(
                "next_sentence_dataset reads the documents once per epoch, so it needs a list, a "
                "path, or a function that returns a new iterator; got a one-shot iterator. Wrap "
                "it: next_sentence_dataset(lambda: my_documents(), ...)."
            )
        documents = (lambda items: lambda: items)(documents)
    tokenize = None if tokenizer is None else (lambda sentences: tokenizer(sentences).to_list())
    first = next((s for d in documents() for s in d if len(s)), None)
    if first is None:
        raise ValueError("next_sentence_dataset got no documents with any text.")
    as_text = isinstance(first, str) and tokenizer is None
    segment = tf.TensorSpec([], tf.string) if as_text else tf.TensorSpec([None], tf.int32)
    epochs = iter(range(1 << 62))

    def generate():
        epoch = next(epochs)
        epoch_seed = None if seed is None else seed * 1_000_003 + epoch
        pairs = next_sentence_pairs(
            documents(), max_seq_length, short_seq_prob, buffer_size, epoch_seed, tokenize
        )
        for a, b, label in pairs:
            yield {"segment_a": a, "segment_b": b, "next_sentence_label": label}

    return tf.data.Dataset.from_generator(
        generate,
        output_signature={
            "segment_a": segment,
            "segment_b": segment,
            "next_sentence_label": tf.TensorSpec([], tf.int32),
        },
    )
