"""The `kbert` command's input files: CSV/TSV tables of texts and labels,
read with each row's line so that every error names the line to fix.

Only the standard library is imported here (see kbert/cli.py)."""

import collections
import csv
import math
import os

# Python's csv module refuses fields over 131,072 characters, which a long
# article can exceed (the tokenizer truncates it anyway). Fields of megabytes
# are nearly always an unclosed quote that swallowed the rest of the file.
MAX_FIELD_CHARS = 4 * 1024 * 1024


class UsageError(Exception):
    """A mistake in the command's input, reported without a traceback."""


# `places`: each row's "file, line N", for errors about a row.
Table = collections.namedtuple("Table", ["texts", "labels", "places"])


# Byte order marks of the encodings that are not UTF-8, UTF-32's first:
# UTF-32-LE's begins with UTF-16-LE's.
_OTHER_BOMS = ((b"\xff\xfe\x00\x00", "UTF-32"), (b"\x00\x00\xfe\xff", "UTF-32"),
               (b"\xff\xfe", "UTF-16"), (b"\xfe\xff", "UTF-16"))


def _utf8_lines(file, path):
    """The lines of a file opened in binary, as text. Decoding line by line
    lets a byte that is not UTF-8 be reported by line and column; the BOM
    that Excel and Notepad write is dropped rather than read into the first
    column's name, and a UTF-16 or UTF-32 one (Excel's "Unicode Text",
    PowerShell's `>`) is named, with how to convert the file."""
    for number, line in enumerate(file, 1):
        encoding = next((name for bom, name in _OTHER_BOMS if line.startswith(bom)), None) if number == 1 else None
        if encoding:
            raise UsageError(
                f"{path} is {encoding} text (it starts with a {encoding} byte order mark); kbert reads UTF-8. "
                f"Save it as UTF-8 (e.g. `iconv -f {encoding.lower()} -t utf-8 in.csv > out.csv`, or Excel's "
                "\"CSV UTF-8\")."
            )
        try:
            yield line.decode("utf-8-sig" if number == 1 else "utf-8")
        except UnicodeDecodeError as e:
            column = len(line[:e.start].decode("utf-8", errors="replace")) + 1
            raise UsageError(
                f"{path}, line {number}, column {column}: byte {line[e.start:e.start + 1]!r} is not UTF-8 "
                "text. Save the file as UTF-8 (e.g. `iconv -f latin1 -t utf-8 in.csv > out.csv`)."
            ) from None


def read_table(path, text_column, label_column=None, text_pair_column=None, max_examples=None):
    """Texts (or pairs), labels (or None) and each row's place in a CSV or
    TSV file with a header row; at most `max_examples` rows. Every row must
    have as many fields as the header: a row with more or fewer fields is
    refused, naming the line it starts on."""
    if os.path.isdir(path):
        inside = sorted(name for name in os.listdir(path) if name.endswith((".csv", ".tsv", ".tab")))
        raise UsageError(f"{path} is a directory; give a CSV or TSV file "
                         + (f"(it holds {_listing(inside)})." if inside else "(it holds none)."))
    if not os.path.isfile(path):
        raise UsageError(f"No such data file: {path}")
    tsv = path.endswith((".tsv", ".tab"))
    wanted = [c for c in (text_column, text_pair_column, label_column) if c]
    rows, places = [], []
    previous_limit = csv.field_size_limit(MAX_FIELD_CHARS)
    try:
        with open(path, "rb") as f:
            reader = csv.reader(_utf8_lines(f, path), delimiter="\t" if tsv else ",",
                                quoting=csv.QUOTE_NONE if tsv else csv.QUOTE_MINIMAL)
            end = 0  # the last line of the last row read
            try:
                header = next(reader, [])
                end = reader.line_num
                _check_unique(path, header)
                missing = [c for c in wanted if c not in header]
                if missing:
                    raise UsageError(
                        f"{path} has no column {', '.join(repr(c) for c in missing)}; its columns are "
                        f"{', '.join(repr(c) for c in header) or 'none (is the header row missing?)'}. "
                        "Name the right ones with --text-column / --text-pair-column / --label-column."
                    )
                for fields in reader:
                    # A quoted field may run over many lines: a row is named
                    # by the line it starts on, where a stray quote opened.
                    start, end = end + 1, reader.line_num
                    if not fields:  # a blank line
                        continue
                    if len(fields) != len(header):
                        raise UsageError(_field_count_error(path, start, end, fields, header, tsv))
                    rows.append(dict(zip(header, fields)))
                    places.append(f"{path}, line {start}")
                    if len(rows) == max_examples:
                        break
            except csv.Error as e:
                start = end + 1
                if "field limit" in str(e):
                    raise UsageError(
                        f"{path}, line {start}: the row starting there has a field longer than "
                        f"{MAX_FIELD_CHARS:,} characters. Look for an unclosed quote (\"), which makes the "
                        "rest of the file one field; or shorten the text (BERT reads at most 512 tokens)."
                    ) from None
                raise UsageError(f"{path}, line {start}: {e}.") from None
    finally:
        csv.field_size_limit(previous_limit)
    if not rows:
        raise UsageError(f"{path} has a header but no rows.")
    texts = [row[text_column] for row in rows]
    if text_pair_column:
        texts = (texts, [row[text_pair_column] for row in rows])
    labels = None
    if label_column:
        labels = [row[label_column].strip() for row in rows]
        for label, place in zip(labels, places):
            if not label:
                raise UsageError(f"{place}: the label (column {label_column!r}) is empty. "
                                 "Every row needs a label: fill it in or remove the row.")
    return Table(texts, labels, places)


def _check_unique(path, header):
    """Refuses a header that names a column twice: rows are read by name, so
    all but the last of those columns would be dropped without a word."""
    repeated = [name for i, name in enumerate(header) if name in header[:i]]
    if repeated:
        name = repeated[0]
        places = [str(i + 1) for i, c in enumerate(header) if c == name]
        raise UsageError(
            f"{path}: the header names column {name!r} {len(places)} times (columns {', '.join(places)}), "
            "so it is unclear which one to read. Rename the columns so that each name is unique."
        )


def _field_count_error(path, start, end, fields, header, tsv):
    """Why a row with more or fewer fields than the header is refused: read
    by position, its text or label would be the wrong field, silently."""
    n = len(fields)
    said = (f"{path}, line {start}: the row has {n} field{'s' * (n != 1)}, but the header has "
            f"{len(header)} ({', '.join(header)})")
    if end > start:
        return (f"{said}. The row runs from line {start} to line {end}: a quote (\") opened on line {start} "
                "is not closed where the text ends. Close it, or double a quote inside a quoted text (\"\").")
    if n < len(header):
        return f"{said}: no value for column {header[n]!r}. Fill it in or remove the row."
    if tsv:
        return (f"{said}: a tab inside a text splits it, since TSV has no quoting. Replace the tabs in "
                "the texts with spaces, or write a CSV file and quote the texts.")
    return f"{said}: a comma inside a text splits it. Put that text in double quotes (\"...\")."


def _is_integer(label):
    return (label[1:] if label.startswith("-") else label).isdecimal()


def _first(labels, bad, places):
    """The first label for which `bad(label)` holds, and where it is."""
    i = next(i for i, v in enumerate(labels) if bad(v))
    return labels[i], (places[i] if places else f"row {i + 1}")


def _listing(values, most=6):
    shown = ", ".join(str(v) for v in values[:most])
    return shown + (f" and {len(values) - most} more" if len(values) > most else "")


def encode_labels(labels, num_classes=None, places=None):
    """Label ids and class names to train on. Integer labels are the ids
    0, ..., n-1 themselves, where n is `num_classes`, or else the number of
    labels seen, all of which must then occur (so that {0, 7} can't make an
    8-class model); any other labels are class names, in alphabetical order."""
    if not all(_is_integer(label) for label in labels):
        names = sorted(set(labels))
        if num_classes is not None and num_classes != len(names):
            raise UsageError(
                f"--num-classes {num_classes}, but the labels are {len(names)} names ({_listing(names)}); "
                "with named labels the classes are the names found: leave --num-classes out."
            )
        index = {name: i for i, name in enumerate(names)}
        return [index[label] for label in labels], names
    ids = [int(label) for label in labels]
    if num_classes is not None:
        if not all(0 <= i < num_classes for i in ids):
            label, where = _first(ids, lambda i: not 0 <= i < num_classes, places)
            raise UsageError(f"{where}: label {label} is outside 0..{num_classes - 1} (--num-classes {num_classes}).")
        return ids, None
    if min(ids) < 0:
        label, where = _first(ids, lambda i: i < 0, places)
        raise UsageError(f"{where}: label {label} is negative; integer labels are the class ids 0, 1, 2, ...")
    absent = sorted(set(range(max(ids) + 1)) - set(ids))
    if absent:
        raise UsageError(
            f"The integer labels go up to {max(ids)}, but {_listing(absent)} never occur: integer labels are "
            f"the class ids 0..n-1, every one present. If the missing classes are real, pass "
            f"--num-classes {max(ids) + 1}; otherwise renumber the labels 0..{len(set(ids)) - 1}, or use names."
        )
    return ids, None


# kbert.text.classifier_labels.PROBLEM_TYPES, written out: this module
# imports only the standard library (tests/test_cli.py checks the two agree).
PROBLEM_TYPES = ("single_label_classification", "multi_label_classification", "regression")


def problem_type(labels, chosen, separator):
    """The problem type of a label column: `chosen`, or with "auto",
    multi-label where a label holds `separator`, regression where every
    label is a number and one is not whole, else single-label."""
    if chosen != "auto":
        return chosen
    if any(separator in label for label in labels):
        return "multi_label_classification"
    if all(_is_number(label) for label in labels) and not all(_is_integer(label) for label in labels):
        return "regression"
    return "single_label_classification"


def integer_classes_note(labels, chosen):
    """Where "auto" read a column of whole numbers as class ids, a line that
    says so and how to train on them as scores instead (a 0-5 similarity
    score is a number, not six classes); None otherwise."""
    if chosen != "auto" or not labels or not all(_is_integer(label) for label in labels):
        return None
    values = sorted({int(float(label)) for label in labels})
    if len(values) < 3:  # 0/1: the classes of nearly every binary data set
        return None
    return (f"The labels are whole numbers ({_listing([str(v) for v in values])}): read as {len(values)} classes. "
            "If they are scores or ratings to predict as numbers, pass --problem-type regression.")


def _is_number(label):
    try:
        return math.isfinite(float(label))
    except ValueError:
        return False


def scores(labels, places=None):
    """A regression column as float32 numbers, a label that is not one named."""
    import numpy as np

    if not all(_is_number(label) for label in labels):
        label, where = _first(labels, lambda v: not _is_number(v), places)
        raise UsageError(f"{where}: label {label!r} is not a number; a regression column holds numbers, "
                         "e.g. similarity scores 0.0-5.0.")
    return np.array([float(label) for label in labels], "float32")


def label_lists(labels, separator):
    """A multi-label column (names joined by `separator`) as lists of names,
    and the class names found, in alphabetical order."""
    lists = [[name.strip() for name in label.split(separator) if name.strip()] for label in labels]
    return lists, sorted({name for names in lists for name in names})


def model_label_ids(labels, model, places=None, separator="|"):
    """Label ids for a trained classifier, mapped by the model's own
    preprocessor as `fit` and `evaluate` map them (names through its
    `class_names`, never re-sorted; ids checked against `num_classes`); a
    label it refuses is named by its place in the file."""
    import numpy as np

    head = model.head_settings()
    if model.problem_type == "regression":
        return scores(labels, places)
    if model.problem_type == "multi_label_classification":
        lists, _ = label_lists(labels, separator)
        try:
            return model.preprocessor.label_ids(lists, head)
        except ValueError as error:
            raise UsageError(f"{error} Labels are class names joined by {separator!r}.") from None
    # A file's ids are text: numbers for a model without class names.
    labels = [int(v) if not model.class_names and _is_integer(v) else v for v in labels]

    def refused(label):
        try:
            model.preprocessor.label_ids(np.asarray([label]), head)
        except ValueError as error:
            return error
        return None

    try:
        return model.preprocessor.label_ids(np.asarray(labels), head).tolist()
    except ValueError:
        label, where = _first(labels, lambda v: refused(v) is not None, places)
        raise UsageError(f"{where}: label {label!r}: {refused(label)}") from None
