"""Reading CoNLL-style files: one `word<TAB>tag` a line, a blank line between sentences."""


def read_conll(path, limit=None):
    """Sentences as `(words, tags)` from a CoNLL-style file: one
    `word<TAB>tag` a line, a blank line between sentences.

    Args:
        path: the file.
        limit: read at most this many sentences.
    """
    sentences, words, tags = [], [], []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                word, tag = line.rstrip("\n").split("\t")
                words.append(word)
                tags.append(tag)
            elif words:
                sentences.append((words, tags))
                words, tags = [], []
                if len(sentences) == limit:
                    return sentences
    if words:
        sentences.append((words, tags))
    return sentences
