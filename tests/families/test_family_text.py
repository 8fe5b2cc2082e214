"""The families past BERT on raw text: each with its own tokenizer in-graph,
pairs packed as the family packs them, against transformers' tokenizer and
model on the same folder; out again to transformers, to a SavedModel, and from
a sentence-transformers folder (multilingual-e5's layout: XLM-R, mean pooling)."""

import csv
import json
import shutil

import numpy as np
import tensorflow as tf
import pytest
import sentencepiece
import torch
import transformers

import kbert
from tests.families.test_families import CONFIGS, SIZES
from tests.serving.test_export import once, serve
from tests.text.test_tokenizer import DATA

LENGTH = 32
TEXTS_A = ["A slow, quiet film.", "Ein wunderbares Buch über das Meer!", "Un livre ennuyeux", "北京欢迎你", ""]
TEXTS_B = ["It moved me.", "Ich habe es zweimal gelesen", "vraiment", "很好", "only the second"]


def polarity_lines():
    with open(DATA / "multilingual_polarity" / "subset.tsv", encoding="utf-8") as f:
        rows = csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
        next(rows)
        return [row[0] for row in rows]


def nudged(model):
    torch.manual_seed(1)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(0.05 * torch.randn_like(parameter))
    return model.eval()


@pytest.fixture(scope="module")
def xlmr_folder(tmp_path_factory):
    """A tiny XLM-R classifier with a unigram tokenizer trained here on the
    German, French and Dutch reviews, as the hub lays it out."""
    folder = tmp_path_factory.mktemp("xlmr")
    sentencepiece.set_random_generator_seed(0)
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(polarity_lines()), model_prefix=str(folder / "spm"), vocab_size=800,
        model_type="unigram", character_coverage=0.9995, num_threads=1,
    )
    (folder / "spm.model").rename(folder / "sentencepiece.bpe.model")
    (folder / "tokenizer_config.json").write_text('{"tokenizer_class": "XLMRobertaTokenizer"}')
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    config_class, sizes = CONFIGS["xlm-roberta"]
    config = config_class(**{**sizes, "vocab_size": len(tokenizer)}, num_labels=3)
    nudged(transformers.XLMRobertaForSequenceClassification(config)).save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def roberta_folder(tmp_path_factory):
    """A tiny RoBERTa classifier with a byte-level BPE trained here on MR."""
    from tokenizers import ByteLevelBPETokenizer

    folder = tmp_path_factory.mktemp("roberta")
    with open(DATA / "mr" / "train.tsv", encoding="utf-8") as f:
        lines = [line.split("\t")[0] for line in f.read().splitlines()[1:]]
    trainer = ByteLevelBPETokenizer()
    trainer.train_from_iterator(lines, vocab_size=600, special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"],
                                show_progress=False)
    trainer.save_model(str(folder))
    tokenizer = transformers.RobertaTokenizerFast.from_pretrained(str(folder))
    tokenizer.save_pretrained(folder)
    config_class, sizes = CONFIGS["roberta"]
    config = config_class(**{**sizes, "vocab_size": len(tokenizer)}, num_labels=3)
    nudged(transformers.RobertaForSequenceClassification(config)).save_pretrained(folder)
    return folder


@pytest.mark.parametrize("family", ["roberta", "xlm-roberta"])
def test_classifiers_on_texts_and_pairs_equal_transformers(family, request, tmp_path):
    folder = request.getfixturevalue({"roberta": "roberta_folder", "xlm-roberta": "xlmr_folder"}[family])
    model = kbert.BertClassifier.from_preset(str(folder), sequence_length=LENGTH)
    np.testing.assert_allclose(model.predict(TEXTS_A, verbose=0), hf_logits(folder, TEXTS_A), atol=1e-4)
    pairs = model.predict((TEXTS_A, TEXTS_B), verbose=0)
    np.testing.assert_allclose(pairs, hf_logits(folder, TEXTS_A, TEXTS_B), atol=1e-4)
    # Out to transformers, tokenizer and all.
    model.export_to_transformers(str(tmp_path / "hf"))
    np.testing.assert_allclose(hf_logits(tmp_path / "hf", TEXTS_A, TEXTS_B), pairs, atol=1e-4)


def hf_logits(folder, texts_a, texts_b=None):
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    model = transformers.AutoModelForSequenceClassification.from_pretrained(folder).eval()
    encoded = tokenizer(texts_a, texts_b, padding=True, truncation=True, max_length=LENGTH, return_tensors="pt")
    with torch.no_grad():
        return model(**encoded).logits.numpy()


def test_xlmr_classifier_reloads_from_transformers_and_kbert_folders(xlmr_folder, tmp_path):
    model = kbert.BertClassifier.from_preset(str(xlmr_folder), sequence_length=LENGTH)
    assert type(model.preprocessor.tokenizer).__name__ == "SentencePieceTokenizer"
    preprocessor = kbert.BertPreprocessor.from_preset(str(xlmr_folder), sequence_length=LENGTH)
    assert type(preprocessor.tokenizer).__name__ == "SentencePieceTokenizer"
    pairs = model.predict((TEXTS_A, TEXTS_B), verbose=0)
    model.export_to_transformers(str(tmp_path / "hf"))
    again = kbert.BertClassifier.from_preset(str(tmp_path / "hf"))
    np.testing.assert_allclose(again.predict((TEXTS_A, TEXTS_B), verbose=0), pairs, atol=1e-5)
    # kbert's own layout, settings and tokenizer included.
    model.save_to_preset(str(tmp_path / "kbert"))
    loaded = kbert.BertClassifier.from_preset(str(tmp_path / "kbert"))
    np.testing.assert_allclose(loaded.predict((TEXTS_A, TEXTS_B), verbose=0), pairs, atol=1e-5)


@once
def test_saved_models_answer_like_predict(xlmr_folder, roberta_folder, tmp_path):
    models = {name: kbert.BertClassifier.from_preset(str(folder), sequence_length=LENGTH)
              for name, folder in (("xlmr", xlmr_folder), ("roberta", roberta_folder))}
    answers = serve({name: (model.export(str(tmp_path / name / "1"), pairs=True),
                            {"text": TEXTS_A, "text_pair": TEXTS_B}) for name, model in models.items()})
    for name, model in models.items():
        np.testing.assert_allclose(answers[name]["logits"], model.predict((TEXTS_A, TEXTS_B), verbose=0), atol=1e-4)


@once
def test_saved_models_of_the_newest_families_answer_like_predict(tmp_path):
    # ModernBERT's lineage with mmBERT's byte-fallback BPE, and DeBERTa-v3
    # with its spm.model: the served graph holds their tokenizers and layers.
    from tests.families.test_deberta_v2 import classifier_with_spm_model
    from tests.families.test_modernbert import mmbert_classifier

    (tmp_path / "deberta").mkdir()
    classifier_with_spm_model(tmp_path / "deberta")
    folders = {"mmbert": mmbert_classifier(tmp_path)[0], "deberta": tmp_path / "deberta"}
    models = {name: kbert.TextClassifier.from_preset(str(folder), sequence_length=LENGTH)
              for name, folder in folders.items()}
    texts = ["It is a truth universally acknowledged.", "Straße, café 北京 😀", ""]
    answers = serve({name: (model.export(str(tmp_path / "served" / name / "1"), pairs=True),
                            {"text": texts, "text_pair": texts[::-1]}) for name, model in models.items()})
    for name, model in models.items():
        np.testing.assert_allclose(answers[name]["logits"], model.predict((texts, texts[::-1]), verbose=0),
                                   atol=1e-4, err_msg=name)


def test_multilingual_e5_layout_embeds_like_sentence_transformers(xlmr_folder, tmp_path):
    # multilingual-e5: an XLM-R backbone, mean pooling, normalized.
    from sentence_transformers import SentenceTransformer, models

    transformer = models.Transformer(str(xlmr_folder), max_seq_length=LENGTH)
    pooling = models.Pooling(transformer.get_word_embedding_dimension(), pooling_mode="mean")
    reference = SentenceTransformer(modules=[transformer, pooling, models.Normalize()], device="cpu")
    reference.save(str(tmp_path / "e5"))
    embedder = kbert.BertTextEmbedder.from_preset(str(tmp_path / "e5"))
    texts = ["query: wie geht es dir", "passage: Ein wunderbares Buch über das Meer!", "北京欢迎你"]
    np.testing.assert_allclose(embedder.encode(texts), reference.encode(texts), atol=1e-4)


@pytest.mark.parametrize("family", ["distilbert", "electra"])
def test_wordpiece_families_classify_pairs_like_transformers(family, minilm_dir, tmp_path):
    # DistilBERT and ELECTRA with the MiniLM checkpoint's WordPiece vocabulary.
    for name in ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        shutil.copy(f"{minilm_dir}/{name}", tmp_path / name)
    config_class, sizes = CONFIGS[family]
    config = config_class(**{**sizes, "vocab_size": 30522}, num_labels=2)
    model_class = getattr(transformers, config_class.__name__.replace("Config", "ForSequenceClassification"))
    nudged(model_class(config)).save_pretrained(tmp_path)
    model = kbert.BertClassifier.from_preset(str(tmp_path), sequence_length=LENGTH)
    np.testing.assert_allclose(model.predict((TEXTS_A, TEXTS_B), verbose=0),
                               hf_logits(tmp_path, TEXTS_A, TEXTS_B), atol=1e-4)


@pytest.fixture(scope="module")
def xlmr_task_folder(xlmr_folder, tmp_path_factory):
    """`xlmr_folder`'s tokenizer with a question answerer's and a masked LM's heads."""
    def folder(suffix, **config):
        path = tmp_path_factory.mktemp(suffix)
        for name in ("sentencepiece.bpe.model", "tokenizer.json", "tokenizer_config.json"):
            if (xlmr_folder / name).exists():
                shutil.copy(xlmr_folder / name, path / name)
        config_class, sizes = CONFIGS["xlm-roberta"]
        vocabulary = transformers.AutoConfig.from_pretrained(xlmr_folder).vocab_size
        model = getattr(transformers, "XLMRoberta" + suffix)(config_class(**{**sizes, "vocab_size": vocabulary},
                                                                          **config))
        nudged(model).save_pretrained(path)
        return path
    return folder


def test_xlmr_answers_and_fills_masks_on_text(xlmr_task_folder):
    answerer = kbert.BertQuestionAnswerer.from_preset(str(xlmr_task_folder("ForQuestionAnswering")),
                                                      sequence_length=LENGTH, max_question_length=8)
    contexts = ["Das Buch erzählt vom Meer und von einem alten Fischer in Kuba.", "Un livre ennuyeux sur Paris."]
    for answer, context in zip(answerer.answer(["Wovon erzählt das Buch?", "Où?"], contexts), contexts):
        # An untrained head's span, but one cut from the context at its pieces' offsets.
        assert answer["answer"] == context[answer["start"]:answer["end"]]
    masked_lm = kbert.BertMaskedLM.from_preset(str(xlmr_task_folder("ForMaskedLM")), sequence_length=LENGTH)
    (guesses,) = masked_lm.fill_mask(["Ein wunderbares <mask> über das Meer"], top_k=3)
    assert len(guesses) == 1 and len(guesses[0]) == 3
    with pytest.raises(ValueError, match="No <mask> token in texts"):
        masked_lm.fill_mask(["kein Platzhalter"])


def test_a_bert_with_xlmr_sentencepiece_reads_its_tokenizer_from_its_files(xlmr_folder, tmp_path):
    # multilingual-e5-small's layout: model_type "bert", XLM-R's tokenizer.
    tokenizer = transformers.AutoTokenizer.from_pretrained(xlmr_folder)
    tokenizer.save_pretrained(tmp_path)
    config = transformers.BertConfig(**{**SIZES, "vocab_size": len(tokenizer)}, num_labels=2)
    nudged(transformers.BertForSequenceClassification(config)).save_pretrained(tmp_path)
    model = kbert.BertClassifier.from_preset(str(tmp_path), sequence_length=LENGTH)
    assert type(model.preprocessor.tokenizer).__name__ == "SentencePieceTokenizer"
    np.testing.assert_allclose(model.predict(TEXTS_A, verbose=0), hf_logits(tmp_path, TEXTS_A), atol=1e-4)

    # Another model's (larger) tokenizer is refused, not run into ids past the embeddings.
    config.vocab_size = 100
    nudged(transformers.BertForSequenceClassification(config)).save_pretrained(tmp_path)
    with pytest.raises(ValueError, match=r"has \d+ tokens, but the model has 100 token embeddings"):
        kbert.BertClassifier.from_preset(str(tmp_path))


@pytest.mark.parametrize("family", ["roberta", "xlm-roberta"])
def test_words_for_token_classification_get_the_ids_transformers_gives_split_words(family, request):
    # Each word as a word of a text (RoBERTa's "Ġ" pieces), as transformers
    # tokenizes words with is_split_into_words (add_prefix_space=True).
    from kbert.text.token_classification import pack_words

    folder = request.getfixturevalue({"roberta": "roberta_folder", "xlm-roberta": "xlmr_folder"}[family])
    preprocessor = kbert.BertPreprocessor.from_preset(str(folder), sequence_length=LENGTH)
    words = [["Jane", "Austen", "lived", "in", "Bath", "."], ["Ein", "wunderbares", "Buch"]]
    features, _ = pack_words(preprocessor, tf.ragged.constant(words))
    hf = transformers.AutoTokenizer.from_pretrained(folder, add_prefix_space=True)
    for row, expected in zip(features["token_ids"].numpy(), hf(words, is_split_into_words=True)["input_ids"]):
        assert row[:len(expected)].tolist() == expected


def test_a_config_whose_pad_token_id_is_not_its_tokenizers_is_refused(roberta_folder, tmp_path):
    # RoBERTa's positions start after pad_token_id: another padding id would shift them all, silently.
    folder = tmp_path / "roberta"
    shutil.copytree(roberta_folder, folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "pad_token_id": 0}))
    with pytest.raises(ValueError, match=r"config\.json has pad_token_id=0, but its tokenizer pads with id 1; this "
                                         r"roberta model's positions start after the padding id"):
        kbert.TextClassifier.from_preset(str(folder))


def test_a_byte_level_bpe_without_its_merges_is_named(roberta_folder, tmp_path):
    folder = tmp_path / "roberta"
    shutil.copytree(roberta_folder, folder)
    for name in ("merges.txt", "tokenizer.json"):
        (folder / name).unlink()
    with pytest.warns(UserWarning, match=r"has vocab\.json but not merges\.txt, which its tokenizer needs too.*Copy "
                                         r"the checkpoint's merges\.txt into the folder"):
        model = kbert.TextClassifier.from_preset(str(folder))
    assert model.preprocessor is None


TAGS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
TAGGED_TEXTS = ["A slow, quiet film about Jane Austen.", "Ein wunderbares Buch über das Meer!",
                "  Un livre ennuyeux  sur Paris", "北京欢迎你", "Kbert's <mask> tokens: (hello)"]


@pytest.fixture(scope="module", params=["roberta", "xlm-roberta"])
def tagger_folder(request, tmp_path_factory):
    """`roberta_folder`'s or `xlmr_folder`'s tokenizer with a token classifier's head."""
    family = request.param
    source = request.getfixturevalue({"roberta": "roberta_folder", "xlm-roberta": "xlmr_folder"}[family])
    folder = tmp_path_factory.mktemp(family + "_tagger")
    transformers.AutoTokenizer.from_pretrained(source).save_pretrained(folder)
    config_class, sizes = CONFIGS[family]
    config = config_class(**{**sizes, "vocab_size": transformers.AutoConfig.from_pretrained(source).vocab_size},
                          id2label=dict(enumerate(TAGS)), label2id={t: i for i, t in enumerate(TAGS)})
    nudged(transformers.AutoModelForTokenClassification.from_config(config)).save_pretrained(folder)
    return folder


def test_token_classifier_on_texts_gives_transformers_logits(tagger_folder):
    # The whole text tokenized, as transformers tokenizes it (not word by word).
    model = kbert.TokenClassifier.from_preset(str(tagger_folder), sequence_length=LENGTH)
    tokenizer = transformers.AutoTokenizer.from_pretrained(tagger_folder)
    hf = transformers.AutoModelForTokenClassification.from_pretrained(tagger_folder).eval()
    encoded = tokenizer(TAGGED_TEXTS, padding="max_length", truncation=True, max_length=LENGTH,
                        return_tensors="pt")
    with torch.no_grad():
        expected = hf(**encoded).logits.numpy()
    logits = model.predict(TAGGED_TEXTS, verbose=0)
    features = model.preprocessor(TAGGED_TEXTS)
    np.testing.assert_array_equal(features["token_ids"], encoded["input_ids"].numpy())
    # predict pads to the longest text; transformers and features to LENGTH.
    length = logits.shape[1]
    real = encoded["attention_mask"].numpy().astype(bool)
    assert not real[:, length:].any()
    np.testing.assert_allclose(logits[real[:, :length]], expected[:, :length][real[:, :length]], atol=1e-4)
    np.testing.assert_allclose(logits[real[:, :length]],
                               model.predict(features, verbose=0)[:, :length][real[:, :length]], atol=1e-5)


def test_token_classifier_entities_equal_transformers_pipeline(tagger_folder):
    # Texts of words of one token each: there the pipeline's tokens are
    # kbert's words, and its "simple" grouping is kbert's.
    tokenizer = transformers.AutoTokenizer.from_pretrained(tagger_folder)
    words = [w for w in ("the", "film", "is", "a", "and", "of", "to", "it", "in", "that", "this", "for", "with",
                         "on", "but", "not", "as", "you", "an", "be", "die", "der", "und", "de", "la", "le", "het")
             if len(tokenizer(" " + w, add_special_tokens=False)["input_ids"]) == 1
             and len(tokenizer(w, add_special_tokens=False)["input_ids"]) == 1]
    assert len(words) >= 6
    texts = [" ".join(words[i:] + words[:i]) + "." for i in range(len(words))]
    for text in texts:  # each word, and the full stop, one token
        assert len(tokenizer(text, add_special_tokens=False)["input_ids"]) == len(words) + 1
    model = kbert.TokenClassifier.from_preset(str(tagger_folder), sequence_length=LENGTH)
    ours = model.entities(texts)
    theirs = transformers.pipeline("token-classification", model=str(tagger_folder),
                                   aggregation_strategy="simple")(texts)
    assert sum(map(len, ours)) > 0
    for text, mine, hf in zip(texts, ours, theirs):
        assert [(e["label"], e["start"], e["end"], e["text"]) for e in mine] == [
            (e["entity_group"], e["start"], e["end"], text[e["start"]:e["end"]]) for e in hf]
        np.testing.assert_allclose([e["score"] for e in mine], [e["score"] for e in hf], atol=1e-4)


@once
def test_served_token_classifier_tags_texts_like_predict(tagger_folder, tmp_path):
    model = kbert.TokenClassifier.from_preset(str(tagger_folder), sequence_length=LENGTH)
    served = serve({"tagger": (model.export(str(tmp_path / "tagger" / "1")), {"text": TAGGED_TEXTS})})["tagger"]
    for row, (sentence, entities) in enumerate(zip(model.tags(TAGGED_TEXTS), model.entities(TAGGED_TEXTS))):
        assert served["strings"]["words"][row][:len(sentence)] == [w for w, _, _ in sentence]
        assert served["strings"]["label"][row][:len(sentence)] == [t or "" for _, t, _ in sentence]
        assert list(zip(served["strings"]["entity"][row], served["entity_start"][row],
                        served["entity_end"][row]))[:len(entities)] == [(e["text"], e["start"], e["end"])
                                                                         for e in entities]
