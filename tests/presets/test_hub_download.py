"""Downloading `hf://` presets through huggingface_hub, against a local
hub-like server: the cache, cut and stalled downloads, tokens, revisions."""

import inspect
import json
import os
import time

import huggingface_hub
import numpy as np
import pytest
import torch
import transformers

import kbert
from kbert.presets import download_bounds, get_preset_dir
from tests.helpers import to_numpy
from tests.presets.hub_server import COMMIT, HubServer

REPO = "hf://owner/tiny-bert"
VOCABULARY = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "a", "film", "good", "bad", "##ly", "beautiful"]


@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory):
    """A random tiny BERT's files in Hugging Face's layout, and the model."""
    folder = tmp_path_factory.mktemp("tiny_bert")
    config = transformers.BertConfig(
        vocab_size=len(VOCABULARY), hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=32, max_position_embeddings=32,
    )
    torch.manual_seed(0)
    model = transformers.BertModel(config).eval()
    model.save_pretrained(folder)
    (folder / "vocab.txt").write_text("".join(token + "\n" for token in VOCABULARY))
    files = {name: (folder / name).read_bytes() for name in ("config.json", "model.safetensors", "vocab.txt")}
    return files, model


@pytest.fixture
def hf_cache(tmp_path, monkeypatch):
    """Online, with an empty Hugging Face cache of its own and no token."""
    for name in ("KBERT_OFFLINE", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_TOKEN", "HF_HUB_CACHE"):
        monkeypatch.delenv(name, raising=False)
    # huggingface_hub read these when imported; a developer's offline setting
    # or saved token must not leak into these tests.
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_TOKEN_PATH", str(tmp_path / "no_token"))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf_home"))
    return tmp_path / "hf_home" / "hub"


@pytest.fixture
def hub(tiny_bert, hf_cache, monkeypatch):
    files, _ = tiny_bert
    no_vocabulary = {k: v for k, v in files.items() if k != "vocab.txt"}
    with HubServer({"owner/tiny-bert": dict(files), "owner/no-vocab": no_vocabulary}, revisions=["v1"]) as server:
        monkeypatch.setenv("HF_ENDPOINT", server.url)
        yield server


def test_first_call_downloads_with_progress_bars_and_the_second_makes_no_request(hub, tiny_bert, capfd, monkeypatch):
    monkeypatch.setenv("TQDM_POSITION", "-1")  # progress bars, though stderr is no terminal here
    backbone = kbert.BertBackbone.from_preset(REPO)
    assert "model.safetensors" in capfd.readouterr().err
    assert ("GET", f"/owner/tiny-bert/resolve/{COMMIT}/model.safetensors") in hub.requests
    requests = len(hub.requests)

    again = kbert.BertBackbone.from_preset(REPO)
    assert len(hub.requests) == requests
    expected = tiny_bert[1].embeddings.word_embeddings.weight.detach().numpy()
    for model in (backbone, again):
        np.testing.assert_array_equal(to_numpy(model.token_embedding.embeddings), expected)


def test_truncated_body_is_never_cached_and_the_next_call_downloads_it_whole(hub, hf_cache, tiny_bert):
    hub.truncate.add("model.safetensors")
    with pytest.raises(ConnectionError, match=r"Downloading model\.safetensors of hf://owner/tiny-bert .*run it again"):
        get_preset_dir(REPO)
    assert not list(hf_cache.rglob("model.safetensors"))
    assert not [p for p in hf_cache.rglob("blobs/*") if p.stat().st_size == len(tiny_bert[0]["model.safetensors"]) // 2]

    hub.truncate.clear()
    folder = get_preset_dir(REPO)
    with open(os.path.join(folder, "model.safetensors"), "rb") as f:
        assert f.read() == tiny_bert[0]["model.safetensors"]


@pytest.mark.parametrize(("preset", "message"), [
    ("hf://owner/nothing", r"hf://owner/nothing does not exist: .* has no repository owner/nothing \(HTTP 404\)"),
    ("hf://owner/no-vocab", r"hf://owner/no-vocab has no vocab\.txt"),
])
def test_missing_repository_or_file_says_what_does_not_exist(hub, preset, message):
    with pytest.raises(FileNotFoundError, match=message):
        get_preset_dir(preset)


@pytest.mark.parametrize("how", ["stall", "trickle"])
def test_stalled_download_fails_within_the_timeout(hub, monkeypatch, how):
    monkeypatch.setenv("KBERT_DOWNLOAD_TIMEOUT", "1")
    getattr(hub, how).add("model.safetensors")
    start = time.monotonic()
    with pytest.raises(TimeoutError, match=r"Downloading model\.safetensors .* no progress for 1 s.*KBERT_DOWNLOAD_TIMEOUT"):
        get_preset_dir(REPO)
    assert time.monotonic() - start < 4


def test_an_absurd_config_is_refused_before_any_other_file_is_downloaded(hub, tiny_bert):
    files, _ = tiny_bert
    config = json.loads(files["config.json"])
    hub.repos["owner/absurd"] = {**files, "config.json": json.dumps({**config, "vocab_size": 10**11}).encode()}
    with pytest.raises(ValueError, match=r"The config\.json of hf://owner/absurd describes a model of [\d,]+ "
                                         r"parameters \(vocab_size=100,000,000,000, .* needs about [\d,.]+ GB"):
        kbert.BertBackbone.from_preset("hf://owner/absurd")
    fetched = {path.rsplit("/", 1)[-1] for method, path in hub.requests if method == "GET"}
    assert fetched == {"config.json"}



def test_an_absurd_distilbert_config_is_refused_by_its_own_names_before_any_other_file(hub, tiny_bert):
    # DistilBERT's config.json names its sizes n_layers, dim, hidden_dim (the feed-forward's).
    files, _ = tiny_bert
    config = {"model_type": "distilbert", "vocab_size": 100, "n_layers": 100_000, "n_heads": 2, "dim": 4096,
              "hidden_dim": 64, "max_position_embeddings": 64}
    hub.repos["owner/absurd-distilbert"] = {**files, "config.json": json.dumps(config).encode()}
    with pytest.raises(ValueError, match=r"The config\.json of hf://owner/absurd-distilbert describes a model of "
                                         r"[\d,]+ parameters \(vocab_size=100, n_layers=100,000, n_heads=2, dim=4,096"):
        kbert.BertBackbone.from_preset("hf://owner/absurd-distilbert")
    fetched = {path.rsplit("/", 1)[-1] for method, path in hub.requests if method == "GET"}
    assert fetched == {"config.json"}


def weight_gets(hub):
    return sum(1 for method, path in hub.requests if method == "GET" and path.endswith("/model.safetensors"))


@pytest.fixture
def in_pieces(monkeypatch):
    # As a large file arrives: in pieces, several before a cut (huggingface_hub
    # reads 10 MB at a time, more than these tests' files).
    monkeypatch.setattr(huggingface_hub.constants, "DOWNLOAD_CHUNK_SIZE", 1024)


@pytest.mark.skipif("tqdm_class" not in inspect.signature(huggingface_hub.hf_hub_download).parameters,
                    reason="huggingface_hub before 1.2 takes no progress bar to count restarts with")
def test_a_server_that_cuts_at_the_same_place_and_ignores_range_is_given_up_after_a_few_attempts(hub, in_pieces):
    hub.truncate.add("model.safetensors")
    with pytest.raises(ConnectionError, match=(
            rf"model\.safetensors of hf://owner/tiny-bert .* was cut short {download_bounds.MAX_RESTARTS + 1} times, "
            r"and each time the server sent it again from its first byte \(it ignores the Range request to resume\), "
            rf"so it was given up after {download_bounds.MAX_RESTARTS + 2} attempts")):
        get_preset_dir(REPO)
    assert weight_gets(hub) == download_bounds.MAX_RESTARTS + 2
    time.sleep(1.5)  # huggingface_hub waits 1 s before a retry: none comes
    assert weight_gets(hub) == download_bounds.MAX_RESTARTS + 2


def test_a_download_that_starts_over_and_gets_no_further_is_given_up_after_the_timeout(hub, in_pieces, monkeypatch):
    monkeypatch.setenv("KBERT_DOWNLOAD_TIMEOUT", "1")
    monkeypatch.setattr(download_bounds, "MAX_RESTARTS", 10**6)  # the bound by time alone
    hub.truncate.add("model.safetensors")
    start = time.monotonic()
    with pytest.raises(TimeoutError, match=r"model\.safetensors .* no progress for 1 s \(it got no further than "
                                            r"[\d,]+ bytes\)"):
        get_preset_dir(REPO)
    assert time.monotonic() - start < 5 and weight_gets(hub) < 6


def test_a_download_cut_each_time_but_resumed_where_it_was_cut_completes(hub, in_pieces, tiny_bert):
    hub.cut_resumable.add("model.safetensors")
    folder = get_preset_dir(REPO)
    with open(os.path.join(folder, "model.safetensors"), "rb") as f:
        assert f.read() == tiny_bert[0]["model.safetensors"]
    assert weight_gets(hub) > download_bounds.MAX_RESTARTS + 1  # each GET gets further: no bound is met


def test_401_names_hf_token_and_the_token_is_sent(hub, monkeypatch):
    hub.token = "hf_secret"
    with pytest.raises(PermissionError, match=r"HTTP 401.*Set HF_TOKEN"):
        get_preset_dir(REPO)
    monkeypatch.setenv("HF_TOKEN", "hf_secret")
    assert os.path.exists(os.path.join(get_preset_dir(REPO), "model.safetensors"))


def test_checkpoint_already_in_the_hf_cache_is_reused_without_a_request(hub, hf_cache, monkeypatch):
    # As transformers' BertModel and BertTokenizer leave the cache.
    for name in ("config.json", "vocab.txt", "tokenizer_config.json", "model.safetensors"):
        try:
            huggingface_hub.hf_hub_download("owner/tiny-bert", name, cache_dir=hf_cache, endpoint=hub.url)
        except huggingface_hub.errors.EntryNotFoundError:
            pass  # recorded in the cache as absent, as transformers leaves it
    hub.requests.clear()
    folder = get_preset_dir(REPO)
    assert hub.requests == [] and os.path.basename(folder) == COMMIT
    monkeypatch.setenv("KBERT_OFFLINE", "1")
    assert get_preset_dir(REPO) == folder


@pytest.mark.parametrize("preset", ["hf://.", "hf://..", "hf://../x", "hf://owner/../..", "hf://", "hf://owner/name@../../x"])
def test_invalid_repository_names_are_refused_before_any_request_and_nothing_is_deleted(hub, hf_cache, preset):
    kept = [hf_cache / "models--owner--name" / "kept", hf_cache / "kept", hf_cache.parent / "kept"]
    for path in kept:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("kept")
    with pytest.raises(ValueError, match=r"Write hf://owner/name, or hf://owner/name@revision"):
        get_preset_dir(preset)
    assert hub.requests == []
    assert all(path.read_text() == "kept" for path in kept)


def test_revision_is_passed_through_and_a_missing_one_is_named(hub):
    folder = get_preset_dir(REPO + "@v1")
    assert ("HEAD", "/owner/tiny-bert/resolve/v1/config.json") in hub.requests
    assert os.path.basename(folder) == COMMIT
    hub.requests.clear()
    assert get_preset_dir(f"{REPO}@{COMMIT}") == folder and hub.requests == []
    with pytest.raises(FileNotFoundError, match=r'has no revision "v2"'):
        get_preset_dir(REPO + "@v2")


def test_upload_preset_sends_the_folder_with_the_token_and_a_download_reads_it_back(hub, hf_cache, tmp_path, monkeypatch):
    backbone = kbert.BertBackbone(vocabulary_size=len(VOCABULARY), num_layers=1, num_heads=2, hidden_dim=8,
                                  intermediate_dim=16, max_sequence_length=16)
    tokenizer = kbert.BertTokenizer(VOCABULARY)
    folder = tmp_path / "exported"
    classifier = kbert.BertClassifier(backbone, 2, kbert.BertPreprocessor(tokenizer, sequence_length=16),
                                      class_names=["bad", "good"])
    classifier.export_to_transformers(str(folder))
    hub.token = "hf_secret"
    monkeypatch.setenv("HF_TOKEN", "hf_secret")

    url = kbert.presets.upload_preset("hf://me/uploaded", str(folder))
    assert url == f"{hub.url}/me/uploaded/commit/{COMMIT}"
    assert ("POST", "/api/repos/create") in hub.requests
    assert {name: (folder / name).read_bytes() for name in os.listdir(folder)} == hub.repos["me/uploaded"]

    restored = kbert.BertClassifier.from_preset("hf://me/uploaded")
    assert restored.class_names == ["bad", "good"]
    for ours, back in zip(classifier.weights, restored.weights):
        np.testing.assert_array_equal(to_numpy(back), to_numpy(ours))
    # Again into the repository that now exists.
    kbert.presets.upload_preset("hf://me/uploaded", str(folder))


def test_upload_of_a_folder_that_is_no_preset_is_refused_before_any_request(hub, tmp_path):
    with pytest.raises(FileNotFoundError, match=r"not a preset folder.*export_to_transformers"):
        kbert.presets.upload_preset("hf://me/uploaded", str(tmp_path))
    assert hub.requests == []


def test_repository_with_tokenizer_json_and_no_vocab_txt_downloads_and_tokenizes(tiny_bert, hf_cache, tmp_path,
                                                                                 monkeypatch):
    # As transformers 5 saves a tokenizer: tokenizer.json and tokenizer_config.json.
    (tmp_path / "vocab.txt").write_text("".join(token + "\n" for token in VOCABULARY))
    transformers.BertTokenizerFast(vocab=str(tmp_path / "vocab.txt")).save_pretrained(str(tmp_path / "tokenizer"))
    files = {name: (tmp_path / "tokenizer" / name).read_bytes() for name in ("tokenizer.json", "tokenizer_config.json")}
    files.update({k: v for k, v in tiny_bert[0].items() if k != "vocab.txt"})
    with HubServer({"owner/new-layout": files}) as server:
        monkeypatch.setenv("HF_ENDPOINT", server.url)
        model = kbert.BertClassifier.from_preset("hf://owner/new-layout", num_classes=2, sequence_length=8)
        assert model.preprocessor.tokenizer(["the good film"]).to_list() == [[5, 8, 7]]
        server.requests.clear()
        assert kbert.BertTokenizer.from_preset("hf://owner/new-layout").vocabulary == VOCABULARY
        assert server.requests == []


def test_a_sentence_transformers_repository_downloads_its_modules(hf_cache, minilm_dir, monkeypatch):
    # all-MiniLM-L6-v2 as the hub holds it: mean pooling and normalization
    # come from modules.json and 1_Pooling/config.json, fetched with the model.
    names = ["config.json", "model.safetensors", "vocab.txt", "tokenizer_config.json", "modules.json",
             "sentence_bert_config.json", "config_sentence_transformers.json", "1_Pooling/config.json"]
    files = {name: open(os.path.join(minilm_dir, name), "rb").read() for name in names}
    with HubServer({"owner/minilm": files}) as server:
        monkeypatch.setenv("HF_ENDPOINT", server.url)
        downloaded = kbert.BertTextEmbedder.from_preset("hf://owner/minilm")
    local = kbert.BertTextEmbedder.from_preset(minilm_dir)
    assert downloaded.pooling == local.pooling == "mean" and downloaded.normalize
    texts = ["a download of every module", "the same embeddings"]
    np.testing.assert_allclose(downloaded.encode(texts), local.encode(texts), atol=1e-6)



def test_a_cache_filled_by_transformers_gets_the_modules_before_a_task_reads_it(hf_cache, minilm_dir, monkeypatch):
    # transformers leaves the model's files in the cache, and no record of
    # modules.json: read as complete, this CLS-pooling embedder would pool
    # by the default (mean), and a CrossEncoder would lose its activation.
    names = ["config.json", "model.safetensors", "vocab.txt", "tokenizer_config.json", "modules.json",
             "sentence_bert_config.json", "config_sentence_transformers.json"]
    files = {name: open(os.path.join(minilm_dir, name), "rb").read() for name in names}
    files["1_Pooling/config.json"] = json.dumps({"word_embedding_dimension": 384, "pooling_mode_cls_token": True,
                                                 "pooling_mode_mean_tokens": False}).encode()
    with HubServer({"owner/cls-minilm": files}) as server:
        monkeypatch.setenv("HF_ENDPOINT", server.url)
        for name in ("config.json", "vocab.txt", "tokenizer_config.json", "model.safetensors"):
            huggingface_hub.hf_hub_download("owner/cls-minilm", name, cache_dir=hf_cache, endpoint=server.url)
        server.requests.clear()
        get_preset_dir("hf://owner/cls-minilm")  # a backbone or tokenizer reads no modules: no request
        assert server.requests == []
        assert kbert.BertTextEmbedder.from_preset("hf://owner/cls-minilm").pooling == "cls"
    monkeypatch.setenv("KBERT_OFFLINE", "1")  # now all in the cache
    assert kbert.BertTextEmbedder.from_preset("hf://owner/cls-minilm").pooling == "cls"

def test_a_roberta_repository_downloads_its_byte_pair_files(hf_cache, tmp_path, monkeypatch):
    # Which tokenizer files a repository is asked for follows its config's
    # model_type: here vocab.json and merges.txt, not vocab.txt.
    config = transformers.RobertaConfig(vocab_size=60, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                        intermediate_size=32, max_position_embeddings=34)
    transformers.RobertaModel(config).save_pretrained(tmp_path)
    files = {name: (tmp_path / name).read_bytes() for name in ("config.json", "model.safetensors")}
    files.update({"vocab.json": b"{}", "merges.txt": b"#version: 0.2\n"})
    with HubServer({"owner/tiny-roberta": files}) as server:
        monkeypatch.setenv("HF_ENDPOINT", server.url)
        folder = get_preset_dir("hf://owner/tiny-roberta")
        asked = [path.rsplit("/", 1)[-1] for method, path in server.requests if method == "GET"]
    assert {"vocab.json", "merges.txt"} <= set(os.listdir(folder)) and "vocab.txt" not in asked
