"""ModernBERT against transformers on the same weights: the backbone (local
and global layers, inputs longer than the window, 2,048 tokens) and every
task head, from tiny random checkpoints saved by transformers' own classes
(weights nudged off their initialisation), and back out with
`export_to_transformers`."""

import dataclasses
import json

import keras
import numpy as np
import pytest
import torch
import transformers

import kbert
from tests.helpers import (assert_close_on_real_tokens, hf_head_outputs, kbert_head_outputs, nudge_and_save, padded_ids,
                           rebuilt_from_config, to_numpy, transformers_outputs)

VOCABULARY = 100
# Three layers, 0 and 2 global, 1 local over +-8 tokens: inputs of 40 tokens
# read past the window, in blocks (kbert.layers.local_attention).
SIZES = dict(vocab_size=VOCABULARY, hidden_size=32, intermediate_size=48, num_hidden_layers=3,
             num_attention_heads=2, local_attention=16, global_attn_every_n_layers=2, max_position_embeddings=4096,
             pad_token_id=0, bos_token_id=1, eos_token_id=2, cls_token_id=1, sep_token_id=2)
# (kbert task, transformers class suffix)
TASKS = {
    "backbone": (kbert.ModernBertBackbone, "Model"),
    "classifier": (kbert.TextClassifier, "ForSequenceClassification"),
    "masked_lm": (kbert.MaskedLM, "ForMaskedLM"),
    "token_classifier": (kbert.TokenClassifier, "ForTokenClassification"),
    "question_answerer": (kbert.QuestionAnswerer, "ForQuestionAnswering"),
}


def tiny_backbone(**settings):
    """SIZES as a kbert backbone."""
    return kbert.ModernBertBackbone(vocabulary_size=VOCABULARY, num_layers=3, num_heads=2, hidden_dim=32,
                                    intermediate_dim=48, local_attention=16, global_attention_every=2, **settings)


def random_ids(**settings):
    return padded_ids(VOCABULARY, **settings)


def save_checkpoint(folder, suffix, **config):
    """A tiny random ModernBERT of transformers' class `ModernBert{suffix}`,
    weights nudged (so that unit LayerNorm scales and zero biases test
    nothing), saved to `folder` as safetensors."""
    num_labels = 2 if suffix == "ForQuestionAnswering" else 3
    hf_config = transformers.ModernBertConfig(**{**SIZES, **config}, num_labels=num_labels, attn_implementation="sdpa")
    torch.manual_seed(0)
    return nudge_and_save(getattr(transformers, "ModernBert" + suffix)(hf_config).eval(), folder)










@pytest.mark.parametrize("task, config", [("backbone", {}), ("classifier", {"classifier_pooling": "cls"}),
                                          ("classifier", {"classifier_pooling": "mean"}), ("masked_lm", {}),
                                          ("token_classifier", {}), ("question_answerer", {})])
def test_every_task_matches_transformers_and_exports_back(tmp_path, task, config):
    cls, suffix = TASKS[task]
    hf_model = save_checkpoint(tmp_path / "hf", suffix, **config)
    model = cls.from_preset(str(tmp_path / "hf"), **({} if task == "backbone" else {"preprocessor": None}))
    inputs = random_ids()
    outputs = kbert_head_outputs(model, inputs)
    assert_close_on_real_tokens(outputs, hf_head_outputs(hf_model, inputs), inputs["padding_mask"])

    model.export_to_transformers(str(tmp_path / "out"))
    exported = transformers.AutoConfig.from_pretrained(str(tmp_path / "out"))
    assert exported.model_type == "modernbert" and exported.architectures == [type(hf_model).__name__]
    assert exported.layer_types == hf_model.config.layer_types
    back = type(hf_model).from_pretrained(str(tmp_path / "out"), attn_implementation="sdpa").eval()
    assert_close_on_real_tokens(outputs, hf_head_outputs(back, inputs), inputs["padding_mask"])


def test_hidden_states_and_2048_tokens_match_transformers(tmp_path):
    hf_model = save_checkpoint(tmp_path, "Model")
    backbone = kbert.ModernBertBackbone.from_preset(str(tmp_path))
    inputs = random_ids(length=2048, batch=2)
    got = backbone.with_hidden_states()(inputs)
    expected = transformers_outputs(hf_model, {k: inputs[k] for k in ("token_ids", "padding_mask")},
                                    output_hidden_states=True)
    # transformers' last hidden state is the final norm's output, as kbert's.
    assert len(got["hidden_states"]) == len(expected.hidden_states) == 4
    for mine, theirs in zip(got["hidden_states"], expected.hidden_states):
        assert_close_on_real_tokens(to_numpy(mine), theirs.numpy(), inputs["padding_mask"])
    assert_close_on_real_tokens(to_numpy(got["sequence_output"]), expected.last_hidden_state.numpy(), inputs["padding_mask"])


def test_local_layers_see_only_their_window_and_global_ones_everything():
    backbone = tiny_backbone()
    assert [layer.local_attention for layer in backbone.transformer_layers] == [None, 16, None]
    assert backbone.transformer_layers[0].attention_layer_norm is None
    inputs = random_ids()
    changed = {**inputs, "token_ids": inputs["token_ids"].copy()}
    changed["token_ids"][0, 39] = 3 if inputs["token_ids"][0, 39] != 3 else 4
    hidden = backbone.with_hidden_states()
    first, again = (to_numpy(hidden(x)["hidden_states"][1]) for x in (inputs, changed))
    assert np.abs(again[0, 0] - first[0, 0]).max() > 1e-4  # the global layer 0 reads the last token
    scores = to_numpy(backbone.attention_scores(inputs, layer_index=1))
    assert scores[0, :, 0, 9:].max() == 0 and scores[0, :, 20, 12:29].min() > 0  # within +-8 only


def test_a_classifier_saves_and_loads_as_keras_file_and_preset(tmp_path):
    backbone = tiny_backbone(pooling="mean", norm_bias=True)
    for copy in rebuilt_from_config(backbone):
        assert copy.get_config() == backbone.get_config()
    model = kbert.TextClassifier(backbone, num_classes=2)
    inputs = random_ids()
    expected = to_numpy(model(inputs))
    model.save(str(tmp_path / "classifier.keras"))
    loaded = keras.saving.load_model(str(tmp_path / "classifier.keras"))
    assert isinstance(loaded.backbone, kbert.ModernBertBackbone)
    np.testing.assert_allclose(to_numpy(loaded(inputs)), expected, atol=1e-6)
    model.save_to_preset(str(tmp_path / "preset"))
    np.testing.assert_allclose(to_numpy(kbert.TextClassifier.from_preset(str(tmp_path / "preset"))(inputs)), expected,
                               atol=1e-6)
    again = kbert.Backbone.from_preset(str(tmp_path / "preset"))  # the family's class, from any backbone class
    assert isinstance(again, kbert.ModernBertBackbone)
    assert {**again.get_config(), "name": None} == {**backbone.get_config(), "name": None}


def test_a_packed_row_gives_each_sequence_its_outputs_alone(tmp_path):
    # Positions restart at each sequence, and attention (global and local) stays within it.
    save_checkpoint(tmp_path, "Model")
    packed = kbert.ModernBertBackbone.from_preset(str(tmp_path), packing=True)
    alone = kbert.ModernBertBackbone.from_preset(str(tmp_path))
    # Two sequences of 20 tokens, each alone (padded to 40) and packed in one row of 40: the local
    # layer reads past +-8, in blocks. (Batches of 3 x 40, the shapes of the other tests.)
    first, second = np.random.default_rng(1).integers(3, VOCABULARY, size=(2, 20)).astype("int32")
    padding = np.zeros(20, "int32")
    alone_ids = np.stack([np.concatenate([first, padding]), np.concatenate([second, padding])] * 2)[:3]
    halves = (np.arange(40) < 20).astype("int32")
    expected = to_numpy(alone({"token_ids": alone_ids, "segment_ids": np.zeros_like(alone_ids),
                               "padding_mask": np.stack([halves] * 3)})["sequence_output"])
    packed_ids = np.stack([np.concatenate([first, second])] * 3)
    sequence_ids = np.stack([np.repeat(np.array([1, 2], "int32"), 20)] * 3)
    out = to_numpy(packed({"token_ids": packed_ids, "segment_ids": np.zeros_like(packed_ids),
                           "sequence_ids": sequence_ids, "padding_mask": np.ones_like(packed_ids)})["sequence_output"])
    np.testing.assert_allclose(out[0], np.concatenate([expected[0, :20], expected[1, :20]]), atol=1e-5)
    with pytest.raises(ValueError, match="Cannot change local_attention"):
        kbert.ModernBertBackbone.from_preset(str(tmp_path), local_attention=32)


@pytest.mark.skipif(keras.backend.backend() != "torch", reason="runs once, in the torch pass: reading config.json")
def test_configs_of_earlier_transformers_and_other_patterns(tmp_path):
    save_checkpoint(tmp_path, "Model")
    config = json.loads((tmp_path / "config.json").read_text())
    # transformers 4's keys: no layer_types, no rope_parameters.
    earlier = {k: v for k, v in config.items() if k not in ("layer_types", "rope_parameters")}
    (tmp_path / "config.json").write_text(json.dumps({**earlier, "global_rope_theta": 80_000.0}))
    backbone = kbert.ModernBertBackbone.from_preset(str(tmp_path))
    assert backbone.global_attention_every == 2 and backbone.global_rope_theta == 80_000.0
    assert backbone.local_rope_theta == 10_000.0
    (tmp_path / "config.json").write_text(json.dumps({**config, "layer_types": ["sliding_attention"] * 3}))
    with pytest.raises(ValueError, match=r"layer_types=\['sliding_attention'.*a global layer every n layers"):
        kbert.ModernBertBackbone.from_preset(str(tmp_path))


def test_the_family_record_keeps_the_contract():
    from kbert import families

    family = families.get("modernbert")
    assert family.problems() == [] and family.backbone == "ModernBertBackbone" and family.prediction_head == "head"
    broken = dataclasses.replace(family, backbone="", prediction_head=None, question_answerer_output="")
    assert broken.problems() == ['prediction_head must name a checkpoint layer ("head"), or be "" for none',
                                 'question_answerer_output must name a checkpoint layer ("qa_outputs")',
                                 'backbone must name kbert\'s backbone class ("BertBackbone")']


def test_a_modernbert_preset_is_not_a_bert_backbone(tmp_path):
    sizes = dict(vocabulary_size=VOCABULARY, num_layers=1, num_heads=2, hidden_dim=8, intermediate_dim=16)
    with pytest.raises(ValueError, match="A 'modernbert' backbone is a kbert.ModernBertBackbone, not a BertBackbone"):
        kbert.BertBackbone(**sizes, num_segments=0, family="modernbert")
    with pytest.raises(ValueError, match="A 'bert' backbone is a kbert.BertBackbone; ModernBertBackbone builds"):
        kbert.ModernBertBackbone(**sizes, family="bert")
    kbert.BertBackbone(**sizes).save_to_preset(str(tmp_path / "bert"))
    with pytest.raises(ValueError, match="holds a BERT model, a kbert.BertBackbone; ModernBertBackbone cannot build"):
        kbert.ModernBertBackbone.from_preset(str(tmp_path / "bert"))


@pytest.mark.skipif(keras.backend.backend() != "torch", reason="runs once, in the torch pass: the model on ids is "
                    "checked on every backend above; this adds the tokenizer, which is TensorFlow's on all")
def test_raw_text_gives_transformers_logits_and_fill_mask_guesses(tmp_path):
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    texts = ["the film was fine and warm", "a dull, long film with no heart at all", "warm light", "no"]
    # A byte-level BPE with BERT's specials and template, as ModernBERT's tokenizer.json has them.
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer, bpe.decoder = pre_tokenizers.ByteLevel(add_prefix_space=False), decoders.ByteLevel()
    bpe.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=300, show_progress=False,
                                                       initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    bpe.add_special_tokens([AddedToken(t, normalized=False, special=True, lstrip=t == "[MASK]")
                            for t in ("[UNK]", "[CLS]", "[SEP]", "[PAD]", "[MASK]")])
    ids = bpe.get_vocab()
    bpe.post_processor = processors.TemplateProcessing(
        single="[CLS]:0 $A:0 [SEP]:0", pair="[CLS]:0 $A:0 [SEP]:0 $B:0 [SEP]:0",
        special_tokens=[("[CLS]", ids["[CLS]"]), ("[SEP]", ids["[SEP]"])])
    auto = transformers.PreTrainedTokenizerFast(tokenizer_object=bpe, cls_token="[CLS]", sep_token="[SEP]",
                                                pad_token="[PAD]", unk_token="[UNK]", mask_token="[MASK]",
                                                model_input_names=["input_ids", "attention_mask"])
    specials = dict(vocab_size=len(auto), pad_token_id=ids["[PAD]"], cls_token_id=ids["[CLS]"],
                    sep_token_id=ids["[SEP]"], bos_token_id=ids["[CLS]"], eos_token_id=ids["[SEP]"])
    hf_models = {suffix: save_checkpoint(tmp_path / suffix, suffix, **specials)
                 for suffix in ("ForSequenceClassification", "ForMaskedLM")}
    for suffix in hf_models:
        auto.save_pretrained(str(tmp_path / suffix))
    classifier = kbert.TextClassifier.from_preset(str(tmp_path / "ForSequenceClassification"), sequence_length=64)
    with torch.no_grad():
        expected = hf_models["ForSequenceClassification"](**auto(texts, padding=True, return_tensors="pt")).logits
    np.testing.assert_allclose(classifier.predict(texts, verbose=0), expected.numpy(), atol=1e-4)

    masked_lm = kbert.MaskedLM.from_preset(str(tmp_path / "ForMaskedLM"), sequence_length=64)
    guesses = masked_lm.fill_mask(["the film was [MASK] and warm"], top_k=3)[0][0]
    features = auto(["the film was [MASK] and warm"], return_tensors="pt")
    with torch.no_grad():
        logits = hf_models["ForMaskedLM"](**features).logits[0, features["input_ids"][0].tolist().index(ids["[MASK]"])]
    top = torch.softmax(logits, -1).topk(3)
    assert [g.token_id for g in guesses] == top.indices.tolist()
    np.testing.assert_allclose([g.probability for g in guesses], top.values.numpy(), atol=1e-5)


def mmbert_classifier(tmp_path):
    """A tiny ModernBERT classifier in `tmp_path / "mmbert"` with Gemma's
    byte-fallback BPE trained here, as mmBERT's folder holds it
    (tokenizer.json alone, specials from its post-processor): (the folder,
    transformers' model, its AutoTokenizer)."""
    import gzip
    import random
    from pathlib import Path

    import sentencepiece

    # mmBERT: ModernBERT's layers, Gemma's SentencePiece BPE with byte
    # fallback, tokenizer.json alone, specials from its post-processor.
    data = Path(__file__).resolve().parents[2] / "examples" / "data"
    with gzip.open(data / "austen.txt.gz", "rt", encoding="utf-8") as f:
        lines = random.Random(0).sample([line.strip() for line in f if line.strip()], 2000)
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(lines), model_prefix=str(tmp_path / "tokenizer"), vocab_size=600, model_type="bpe",
        character_coverage=0.99, num_threads=1, byte_fallback=True, pad_id=0, eos_id=1, bos_id=2, unk_id=3,
        pad_piece="<pad>", eos_piece="<eos>", bos_piece="<bos>", unk_piece="<unk>", control_symbols=["<mask>"],
        add_dummy_prefix=False, normalization_rule_name="identity", remove_extra_whitespaces=False,
        allow_whitespace_only_pieces=True, split_digits=True)
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "GemmaTokenizer"}))
    folder = tmp_path / "mmbert"
    transformers.AutoTokenizer.from_pretrained(tmp_path).save_pretrained(folder)
    config = json.loads((folder / "tokenizer.json").read_text())
    first = [{"SpecialToken": {"id": "<bos>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
             {"SpecialToken": {"id": "<eos>", "type_id": 0}}]
    config["post_processor"] = {
        "type": "TemplateProcessing", "single": first,
        "pair": first + [{"Sequence": {"id": "B", "type_id": 0}}, {"SpecialToken": {"id": "<eos>", "type_id": 0}}],
        "special_tokens": {t: {"id": t, "ids": [i], "tokens": [t]} for t, i in (("<bos>", 2), ("<eos>", 1))}}
    (folder / "tokenizer.json").write_text(json.dumps(config, ensure_ascii=False))
    (folder / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "cls_token": "<bos>", "sep_token": "<eos>",
        "pad_token": "<pad>", "unk_token": "<unk>", "mask_token": "<mask>"}))
    auto = transformers.AutoTokenizer.from_pretrained(folder)
    hf_model = save_checkpoint(folder, "ForSequenceClassification", vocab_size=len(auto), pad_token_id=0,
                               cls_token_id=2, sep_token_id=1, bos_token_id=2, eos_token_id=1)
    return folder, hf_model, auto


@pytest.mark.skipif(keras.backend.backend() != "torch", reason="runs once, in the torch pass: the model on ids is "
                    "checked on every backend above; this adds the tokenizer, which is TensorFlow's on all")
def test_an_mmbert_style_model_reads_raw_text_through_gemmas_byte_fallback_bpe(tmp_path):
    folder, hf_model, auto = mmbert_classifier(tmp_path)
    texts = ["It is a truth universally acknowledged", "Straße, café 北京 😀 ✓", "no"]
    pairs = (texts, texts[::-1])
    classifier = kbert.TextClassifier.from_preset(str(folder), sequence_length=64)
    assert type(classifier.preprocessor.tokenizer).__name__ == "SentencePieceTokenizer"
    with torch.no_grad():
        single = hf_model(**auto(texts, padding=True, return_tensors="pt")).logits.numpy()
        pair = hf_model(**auto(*pairs, padding=True, return_tensors="pt")).logits.numpy()
    np.testing.assert_allclose(classifier.predict(texts, verbose=0), single, atol=1e-4)
    np.testing.assert_allclose(classifier.predict(pairs, verbose=0), pair, atol=1e-4)


@pytest.mark.skipif(keras.backend.backend() != "torch", reason="runs once, in the torch pass: the model on ids is "
                    "checked on every backend above; this adds the sentence-transformers folder and tokenizer")
def test_a_sentence_transformers_folder_embeds_like_sentence_transformers_with_its_prompts(tmp_path):
    # modernbert-embed's layout: mean pooling, normalized, with query and document prompts.
    from sentence_transformers import SentenceTransformer, models

    folder = mmbert_classifier(tmp_path)[0]
    transformer = models.Transformer(str(folder), max_seq_length=64)
    pooling = models.Pooling(transformer.get_word_embedding_dimension(), pooling_mode="mean")
    reference = SentenceTransformer(modules=[transformer, pooling, models.Normalize()], device="cpu",
                                    prompts={"query": "search_query: ", "document": "search_document: "})
    reference.save(str(tmp_path / "embedder"))
    embedder = kbert.TextEmbedder.from_preset(str(tmp_path / "embedder"))
    texts = ["What is a truth universally acknowledged?", "Straße, café 北京 😀"]
    for prompt_name in ("query", "document"):
        np.testing.assert_allclose(embedder.encode(texts, prompt_name=prompt_name),
                                   reference.encode(texts, prompt_name=prompt_name), atol=1e-4)


@pytest.mark.skipif(keras.backend.backend() != "torch", reason="runs once, in the torch pass: fit on every backend "
                    "is BERT's masked LM (tests/models), this adds ModernBERT's tokenizer and head")
def test_masked_lm_pre_training_at_thirty_percent_on_raw_text_lowers_the_loss(tmp_path):
    # ModernBERT pre-trains with 30% of the tokens masked (Warner et al. 2024, §2.2).
    folder = mmbert_classifier(tmp_path)[0]
    keras.utils.set_random_seed(0)
    model = kbert.MaskedLM.from_preset(str(folder), mask_selection_rate=0.3, sequence_length=32)
    texts = ["It is a truth universally acknowledged that a single man in possession of a good fortune",
             "must be in want of a wife", "However little known the feelings or views of such a man may be"] * 4
    model.compile(learning_rate=3e-3)
    history = model.fit(texts, epochs=12, batch_size=4, verbose=0)
    assert history.history["loss"][-1] < 0.8 * history.history["loss"][0]
