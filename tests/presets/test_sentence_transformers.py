"""BertTextEmbedder.from_preset on sentence-transformers folders equals
SentenceTransformer(folder).encode: folders written by sentence-transformers
itself (tiny random BERTs with each pooling mode, Dense, Normalize, prompts)
and the real all-MiniLM-L6-v2 folder with its Pooling and modules edited."""

import json
import os
import shutil

import keras
import numpy as np
import pytest
import tensorflow as tf

import kbert
from tests.helpers import to_numpy

TEXTS = [
    "A man is eating food.",
    "Ein Mann isst Essen — Café, naïve, 東京 and emoji 🙂!",
    "short",
    "This sentence is quite a bit longer than the others, so that the batch is padded and pooling "
    "has to skip the padding tokens to come out right.",
]


@pytest.fixture(scope="module")
def tiny_bert(minilm_dir, tmp_path_factory):
    """A random 2-layer BERT, 32 wide, with MiniLM's tokenizer, saved by transformers."""
    import torch
    import transformers

    folder = str(tmp_path_factory.mktemp("tiny_bert"))
    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                     intermediate_size=64, max_position_embeddings=64)
    transformers.BertModel(config).save_pretrained(folder)
    transformers.AutoTokenizer.from_pretrained(minilm_dir).save_pretrained(folder)
    return folder


def st_folder(tiny_bert, path, pooling="mean", dense=(), normalize=False, safe=True, include_prompt=True,
              **model_kwargs):
    """A folder saved by `SentenceTransformer(modules=[...]).save`."""
    import torch
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.base.modules import Dense, Normalize, Transformer
    from sentence_transformers.sentence_transformer.modules import Pooling

    torch.manual_seed(1)
    modules = [Transformer(tiny_bert, max_seq_length=model_kwargs.pop("max_seq_length", None),
                           do_lower_case=model_kwargs.pop("do_lower_case", False))]
    modules.append(Pooling(32, pooling_mode=pooling, include_prompt=include_prompt))
    width = modules[-1].get_embedding_dimension()
    for units, activation in dense:
        modules.append(Dense(width, units, activation_function=activation))
        width = units
    if normalize:
        modules.append(Normalize())
    model = SentenceTransformer(modules=modules, device="cpu", **model_kwargs)
    model.save(str(path), safe_serialization=safe)
    return str(path)


def assert_encodes_as_sentence_transformers(folder, *encode_kwargs):
    """kbert's `encode` equals sentence-transformers' with each of `encode_kwargs` (default: none)."""
    from sentence_transformers import SentenceTransformer

    reference = SentenceTransformer(folder, device="cpu")
    embedder = kbert.BertTextEmbedder.from_preset(folder)
    for kwargs in encode_kwargs or ({},):
        expected = reference.encode(TEXTS, convert_to_numpy=True, **kwargs)
        np.testing.assert_allclose(embedder.encode(TEXTS, **kwargs), expected, atol=1e-4)
    return embedder


def test_every_pooling_mode_concatenated_equals_sentence_transformers(tiny_bert, tmp_path):
    # One folder pools every way at once: each mode is its own slice of the embedding.
    modes = ("lasttoken", "cls", "max", "mean", "mean_sqrt_len_tokens", "weightedmean")
    embedder = assert_encodes_as_sentence_transformers(st_folder(tiny_bert, tmp_path, pooling=modes))
    assert embedder.pooling == list(modes) and embedder.output.shape[-1] == 32 * len(modes)


def test_dense_modules_and_normalize_equal_sentence_transformers(tiny_bert, tmp_path):
    import torch

    folder = st_folder(tiny_bert, tmp_path, pooling=("mean", "cls"),
                       dense=[(48, torch.nn.Tanh()), (16, torch.nn.GELU())], normalize=True, safe=False)
    assert os.path.exists(os.path.join(folder, "2_Dense", "pytorch_model.bin"))  # read with weights_only=True
    embedder = assert_encodes_as_sentence_transformers(folder)
    assert embedder.dense == [{"units": 48, "activation": "tanh", "use_bias": True},
                              {"units": 16, "activation": "gelu", "use_bias": True}]
    np.testing.assert_allclose(np.linalg.norm(embedder.encode(TEXTS[:2]), axis=1), 1.0, atol=1e-5)


def test_prompts_length_and_lowercasing_equal_sentence_transformers(tiny_bert, tmp_path):
    folder = st_folder(tiny_bert, tmp_path, pooling="mean", normalize=True, max_seq_length=12, do_lower_case=True,
                       prompts={"query": "query: ", "passage": "passage: "}, default_prompt_name="query")
    # The default prompt, then another; texts cut at 12 tokens, prompt included.
    embedder = assert_encodes_as_sentence_transformers(folder, {}, {"prompt_name": "passage"})
    assert embedder.preprocessor.sequence_length == 12
    with pytest.raises(ValueError, match="No prompt named 'qeury'.*'passage', 'query'"):
        embedder.encode(TEXTS, prompt_name="qeury")


def test_prompts_left_out_of_the_pooling_equal_sentence_transformers(tiny_bert, tmp_path):
    # INSTRUCTOR-style (include_prompt=false): [CLS] and the prompt's pieces
    # are not pooled; "cls" pools the first token after the prompt.
    modes = ("lasttoken", "cls", "max", "mean", "mean_sqrt_len_tokens", "weightedmean")
    folder = st_folder(tiny_bert, tmp_path, pooling=modes, normalize=True, include_prompt=False, max_seq_length=16,
                       prompts={"query": "Represent the question for retrieval: ", "none": ""},
                       default_prompt_name="query")
    # The default prompt, one given, one longer than the sequence (its
    # [SEP] still pooled), and an empty one (nothing left out).
    embedder = assert_encodes_as_sentence_transformers(
        folder, {}, {"prompt": "passage: "}, {"prompt": "a long instruction, " * 6}, {"prompt_name": "none"})
    assert not embedder.include_prompt and "pooling_mask" in embedder.input
    with_prompt = kbert.BertTextEmbedder.from_preset(folder, include_prompt=True).encode(TEXTS)
    assert np.abs(with_prompt - embedder.encode(TEXTS)).max() > 1e-2
    # The exported model's function leaves the prompt out as encode does.
    if keras.backend.backend() == "tensorflow":
        serve, _, _ = embedder.serving_function()
        np.testing.assert_allclose(serve(tf.constant(TEXTS))["embedding"].numpy(), embedder.encode(TEXTS), atol=1e-5)
    # Saved as a kbert preset, it keeps leaving the prompt out.
    embedder.save_to_preset(str(tmp_path / "kbert"))
    restored = kbert.BertTextEmbedder.from_preset(str(tmp_path / "kbert"))
    np.testing.assert_allclose(restored.encode(TEXTS), embedder.encode(TEXTS), atol=1e-6)


def minilm_variant(minilm_dir, path, pooling, normalize, max_seq_length=None):
    """The real MiniLM folder (weights linked, not copied) with its
    1_Pooling/config.json (sentence-transformers 2's flags) and modules.json edited."""
    os.makedirs(path / "1_Pooling")
    for name in os.listdir(minilm_dir):
        if os.path.isfile(os.path.join(minilm_dir, name)):
            os.symlink(os.path.join(minilm_dir, name), path / name)
    flags = {f"pooling_mode_{m}": m in pooling for m in ("cls_token", "max_tokens", "mean_tokens",
                                                          "mean_sqrt_len_tokens")}
    (path / "1_Pooling" / "config.json").write_text(json.dumps({"word_embedding_dimension": 384, **flags}))
    modules = json.load(open(os.path.join(minilm_dir, "modules.json")))
    (path / "modules.json").unlink()
    (path / "modules.json").write_text(json.dumps(modules if normalize else modules[:2]))
    if max_seq_length:
        (path / "sentence_bert_config.json").unlink()
        (path / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": max_seq_length,
                                                                    "do_lower_case": False}))
    return str(path)


def test_real_minilm_with_cls_and_max_pooling_without_normalize(minilm_dir, tmp_path):
    # The bge-style [CLS] switch and the dropped Normalize of issue 16 (0.74 and 0.97 off before),
    # with max pooling concatenated after [CLS], as sentence-transformers orders its flags.
    folder = minilm_variant(minilm_dir, tmp_path, ("max_tokens", "cls_token"), normalize=False, max_seq_length=16)
    embedder = assert_encodes_as_sentence_transformers(folder)
    assert embedder.pooling == ["cls", "max"] and not embedder.normalize


def test_explicit_arguments_override_the_folder(tiny_bert, tmp_path):
    folder = st_folder(tiny_bert, tmp_path, pooling="cls", normalize=True)
    embedder = kbert.BertTextEmbedder.from_preset(folder, pooling="mean", normalize=False, sequence_length=16)
    assert (embedder.pooling, embedder.normalize, embedder.preprocessor.sequence_length) == ("mean", False, 16)
    inputs = embedder.preprocessor(TEXTS[:2])
    sequence = to_numpy(kbert.BertTextEmbedder(embedder.backbone, pooling="mean", normalize=False)(inputs))
    np.testing.assert_allclose(embedder.encode(TEXTS[:2]), sequence, atol=1e-5)


def test_a_module_kbert_cannot_reproduce_is_refused(tiny_bert, tmp_path):
    import torch

    folder = st_folder(tiny_bert, tmp_path / "layer_norm", normalize=True)
    modules = json.load(open(os.path.join(folder, "modules.json")))
    modules.insert(2, {"idx": 2, "name": "2", "path": "2_LayerNorm",
                       "type": "sentence_transformers.sentence_transformer.modules.layer_norm.LayerNorm"})
    for i, m in enumerate(modules):
        m["idx"] = i
    json.dump(modules, open(os.path.join(folder, "modules.json"), "w"))
    with pytest.raises(ValueError, match="LayerNorm.*reproduces sentence-transformers' Transformer, Pooling, Dense"):
        kbert.BertTextEmbedder.from_preset(folder)

    folder = st_folder(tiny_bert, tmp_path / "softplus", dense=[(8, torch.nn.Softplus())])
    with pytest.raises(ValueError, match="Softplus.*kbert reproduces torch's Identity, Tanh"):
        kbert.BertTextEmbedder.from_preset(folder)
    shutil.rmtree(folder)


def test_truncate_dim_is_read_from_and_written_to_sentence_transformers_folders(tiny_bert, tmp_path):
    from sentence_transformers import SentenceTransformer

    folder = st_folder(tiny_bert, tmp_path / "st", normalize=True, truncate_dim=16)
    embedder = assert_encodes_as_sentence_transformers(folder)
    assert embedder.truncate_dim == 16 and embedder.encode(TEXTS).shape == (len(TEXTS), 16)
    # And out: sentence-transformers reads the kbert folder at 16 dimensions too.
    embedder.export_to_transformers(str(tmp_path / "out"))
    reference = SentenceTransformer(str(tmp_path / "out"), device="cpu")
    assert reference.truncate_dim == 16
    np.testing.assert_allclose(reference.encode(TEXTS, convert_to_numpy=True), embedder.encode(TEXTS), atol=1e-4)
