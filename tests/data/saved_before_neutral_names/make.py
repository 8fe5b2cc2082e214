"""Writes, with kbert as it was before the neutral names (commit bb00567),
a tiny preset and a `.keras` file of each task, for tests that load them."""
import os, sys
import keras, numpy as np
import kbert

out = sys.argv[1]
vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "cat", "dog", "the", "sat", "ran", "##s", "on", "mat"]
tok = kbert.BertTokenizer(vocabulary=vocab, lowercase=True)
kw = dict(vocabulary_size=len(vocab), num_layers=1, num_heads=2, hidden_dim=8, intermediate_dim=16, max_sequence_length=16)
keras.utils.set_random_seed(0)
models = {
    "classifier": kbert.BertClassifier(kbert.BertBackbone(**kw), num_classes=3,
                                       preprocessor=kbert.BertClassifierPreprocessor(tok, sequence_length=16)),
    "token_classifier": kbert.BertTokenClassifier(kbert.BertBackbone(**kw), num_classes=3,
                                                  preprocessor=kbert.BertTokenClassifierPreprocessor(tok, sequence_length=16)),
    "question_answerer": kbert.BertQuestionAnswerer(kbert.BertBackbone(**kw),
                                                    preprocessor=kbert.BertQuestionAnswererPreprocessor(tok, sequence_length=16), max_question_length=6, stride=4),
    "masked_lm": kbert.BertMaskedLM(kbert.BertBackbone(**kw),
                                    preprocessor=kbert.BertMaskedLMPreprocessor(tok, sequence_length=16)),
    "text_embedder": kbert.BertTextEmbedder(kbert.BertBackbone(**kw),
                                            preprocessor=kbert.BertTextEmbedderPreprocessor(tok, sequence_length=16)),
}
texts = ["the cat sat on the mat", "a dog ran"]
for name, model in models.items():
    model.save_to_preset(os.path.join(out, name))
    model.save(os.path.join(out, name + ".keras"))
weights = {f"{name}/{v.path}": keras.ops.convert_to_numpy(v) for name, model in models.items() for v in model.weights}
np.savez_compressed(os.path.join(out, "weights.npz"), **weights)
np.save(os.path.join(out, "classifier_logits.npy"), models["classifier"].predict(texts, verbose=0))
