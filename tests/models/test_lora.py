"""LoRA on the backbone (KerasHub's `enable_lora`): only the adapters and the
head train, the adapters save and load alone, and every way out of kbert
(predict, weights, Hugging Face, `.keras`) gives the merged model."""

import os

import keras
import numpy as np
import pytest
import torch
import transformers

import kbert
from tests.helpers import random_inputs, to_numpy


def tiny_classifier(seed=0):
    keras.utils.set_random_seed(seed)
    backbone = kbert.BertBackbone(vocabulary_size=120, num_layers=2, num_heads=2, hidden_dim=32,
                                  intermediate_dim=64, max_sequence_length=40, dropout=0.0)
    return kbert.BertClassifier(backbone, 3)


def trained_with_lora(rank=2, **kwargs):
    model = tiny_classifier()
    base = [to_numpy(w) for w in model.weights]
    model.backbone.enable_lora(rank, **kwargs)
    model.compile(optimizer=keras.optimizers.Adam(1e-2))
    inputs = random_inputs(8, 12, 120)
    model.fit(inputs, np.arange(8) % 3, batch_size=4, epochs=2, verbose=0)
    return model, base, inputs


def test_only_the_adapters_and_the_head_train():
    model, base, _ = trained_with_lora()
    trainable = sorted(v.path for v in model.trainable_variables)
    assert trainable == sorted([f"transformer_layer_{i}/{name}/lora_kernel_{ab}" for i in range(2)
                                for name in ("query", "value") for ab in "ab"] + ["logits/kernel", "logits/bias"])
    after = {v.path: to_numpy(v) for v in model.weights}
    before = dict(zip([v.path for v in model.weights if "lora" not in v.path], base))
    for path, value in before.items():
        if not path.startswith("logits"):
            np.testing.assert_array_equal(after[path], value, err_msg=path)  # frozen
    assert np.abs(after["transformer_layer_0/query/lora_kernel_b"]).max() > 0  # trained from zero


def test_weights_saved_with_lora_are_the_merged_model(tmp_path):
    model, _, inputs = trained_with_lora()
    model.save_weights(str(tmp_path / "merged.weights.h5"))
    plain = tiny_classifier(seed=1)
    plain.load_weights(str(tmp_path / "merged.weights.h5"))
    np.testing.assert_allclose(to_numpy(plain(inputs)), to_numpy(model(inputs)), atol=1e-5)


def test_export_to_transformers_writes_the_merged_kernels(tmp_path):
    model, _, inputs = trained_with_lora(target_layer_names=("query", "value", "intermediate"))
    model.export_to_transformers(str(tmp_path))
    hf = transformers.AutoModelForSequenceClassification.from_pretrained(str(tmp_path)).eval()
    with torch.no_grad():
        theirs = hf(input_ids=torch.tensor(inputs["token_ids"]).long(), token_type_ids=torch.tensor(
            inputs["segment_ids"]).long(), attention_mask=torch.tensor(inputs["padding_mask"]).long()).logits
    np.testing.assert_allclose(to_numpy(model(inputs)), theirs.numpy(), atol=1e-4)


def test_adapters_save_and_load_alone(tmp_path):
    model, base, inputs = trained_with_lora()
    path = str(tmp_path / "adapters.lora.safetensors")
    model.backbone.save_lora_weights(path)
    assert os.path.getsize(path) < 10_000  # 8 adapters of 32 x 2, not the model
    other = tiny_classifier(seed=1)
    for variable, value in zip(other.weights, base):
        variable.assign(value)
    other.get_layer("logits").set_weights(model.get_layer("logits").get_weights())
    other.backbone.load_lora_weights(path)  # enables LoRA with the file's rank and layers
    assert (other.backbone.lora_rank, other.backbone.lora_layer_names) == (2, ("query", "value"))
    np.testing.assert_allclose(to_numpy(other(inputs)), to_numpy(model(inputs)), atol=1e-5)
    wrong = tiny_classifier()
    wrong.backbone.enable_lora(4)
    with pytest.raises(ValueError, match=r"rank-2 adapters of \['query', 'value'\]; this backbone has rank 4"):
        wrong.backbone.load_lora_weights(path)


def test_a_saved_lora_model_reloads_merged_and_trains_new_adapters(tmp_path):
    model, _, inputs = trained_with_lora()
    model.save(str(tmp_path / "model.keras"))
    restored = keras.models.load_model(str(tmp_path / "model.keras"))
    assert restored.backbone.lora_rank is None  # the merged model, as KerasHub's
    np.testing.assert_allclose(to_numpy(restored(inputs)), to_numpy(model(inputs)), atol=1e-5)
    restored.backbone.enable_lora(2)
    np.testing.assert_allclose(to_numpy(restored(inputs)), to_numpy(model(inputs)), atol=1e-5)
    restored.compile(optimizer=keras.optimizers.Adam(1e-2))
    restored.fit(inputs, np.arange(8) % 3, batch_size=4, epochs=1, verbose=0)
    assert np.abs(to_numpy(restored.backbone.lora_weights()["transformer_layer_0/query/lora_kernel_b"])).max() > 0


def test_bad_lora_settings_are_refused():
    backbone = tiny_classifier().backbone
    with pytest.raises(ValueError, match="a positive int"):
        backbone.enable_lora(0)
    with pytest.raises(ValueError, match=r"among \['attention_output', 'intermediate', 'key', 'output', 'query'"):
        backbone.enable_lora(4, target_layer_names=("query_dense",))
    backbone.enable_lora(4)
    with pytest.raises(ValueError, match="enabled already"):
        backbone.enable_lora(4)


def fresh_base(base, seed=1):
    """A classifier with the base weights that `trained_with_lora` started from."""
    model = tiny_classifier(seed=seed)
    for variable, value in zip(model.weights, base):
        variable.assign(value)
    return model


def test_a_task_saves_and_loads_its_head_with_the_adapters(tmp_path):
    model, base, inputs = trained_with_lora()
    path = str(tmp_path / "sentiment.lora.safetensors")
    model.save_lora_weights(path)
    assert os.path.getsize(path) < 10_000  # the adapters and the head, not the model
    other = fresh_base(base)
    other.load_lora_weights(path)  # no head of its own to set
    np.testing.assert_allclose(to_numpy(other(inputs)), to_numpy(model(inputs)), atol=1e-5)


def test_lora_files_that_do_not_hold_what_the_model_trains_are_refused(tmp_path):
    model, base, _ = trained_with_lora()
    adapters, trained = str(tmp_path / "adapters.safetensors"), str(tmp_path / "trained.safetensors")
    model.backbone.save_lora_weights(adapters)
    model.save_lora_weights(trained)
    with pytest.raises(ValueError, match=r"LoRA adapters alone .* \(logits/bias, logits/kernel\)"):
        fresh_base(base).load_lora_weights(adapters)
    with pytest.raises(ValueError, match=r"weights this backbone does not have \(logits/bias, logits/kernel\)"):
        fresh_base(base).backbone.load_lora_weights(trained)


def test_files_of_adapters_written_before_the_merge_record_still_load(tmp_path):
    from safetensors.numpy import save_file

    model, base, inputs = trained_with_lora()
    path = str(tmp_path / "old.lora.safetensors")
    save_file({k: to_numpy(v) for k, v in model.backbone.lora_weights().items()}, path,
              metadata={"lora_rank": "2", "lora_layer_names": "query,value"})  # as kbert wrote them before
    other = fresh_base(base)
    other.get_layer("logits").set_weights(model.get_layer("logits").get_weights())
    other.backbone.load_lora_weights(path)
    np.testing.assert_allclose(to_numpy(other(inputs)), to_numpy(model(inputs)), atol=1e-5)


def test_adapters_merged_into_a_backbone_are_not_applied_again(tmp_path):
    model, _, _ = trained_with_lora()
    path = str(tmp_path / "adapters.safetensors")
    model.save_lora_weights(path)
    # The config of a backbone saved with LoRA on records the merge.
    merged = kbert.BertBackbone.from_config({**model.backbone.get_config(), **model.backbone.lora_config()})
    assert merged.lora_merged == tuple(model.backbone.lora_config()["lora_merged"])
    with pytest.raises(ValueError, match="merged into this backbone's kernels already"):
        merged.load_lora_weights(path)
    # Adapters trained on the base kernels do not load on merged ones either.
    other = tiny_classifier()
    other.backbone.enable_lora(2)
    other.backbone.save_lora_weights(str(tmp_path / "other.safetensors"))
    with pytest.raises(ValueError, match=r"trained on kernels with the adapters \[\] merged in"):
        merged.load_lora_weights(str(tmp_path / "other.safetensors"))


def test_a_preset_saved_with_lora_on_refuses_its_adapters_again(tmp_path):
    model, _, _ = trained_with_lora()
    model.save_lora_weights(str(tmp_path / "adapters.safetensors"))
    model.save_to_preset(str(tmp_path / "merged"))
    merged = kbert.BertClassifier.from_preset(str(tmp_path / "merged"))
    with pytest.raises(ValueError, match="merged into this backbone's kernels already"):
        merged.load_lora_weights(str(tmp_path / "adapters.safetensors"))
