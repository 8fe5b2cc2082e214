import keras
import numpy as np
import pytest
import tensorflow as tf
import torch
import transformers

import kbert
from kbert.models import task_inputs
from tests.helpers import random_inputs, to_numpy
from tests.presets.test_huggingface_import import save_random_checkpoint


def test_logits_match_transformers_sequence_classification(tmp_path):
    hf_model = save_random_checkpoint(
        tmp_path, transformers.BertForSequenceClassification, num_labels=3,
        id2label={0: "neg", 1: "neutral", 2: "pos"}, label2id={"neg": 0, "neutral": 1, "pos": 2},
    )
    model = kbert.BertClassifier.from_preset(str(tmp_path))
    assert model.num_classes == 3 and model.class_names == ["neg", "neutral", "pos"]
    inputs = random_inputs(3, 12, 120)
    with torch.no_grad():
        expected = hf_model(
            input_ids=torch.tensor(inputs["token_ids"]).long(),
            token_type_ids=torch.tensor(inputs["segment_ids"]).long(),
            attention_mask=torch.tensor(inputs["padding_mask"]).long(),
        ).logits.numpy()
    np.testing.assert_allclose(to_numpy(model(inputs)), expected, atol=1e-4)


def test_bare_checkpoint_gets_a_fresh_head_of_the_requested_size(tmp_path):
    save_random_checkpoint(tmp_path)
    with pytest.warns(UserWarning, match="head starts from its initialisation"):
        model = kbert.BertClassifier.from_preset(str(tmp_path), num_classes=4)
    assert tuple(model(random_inputs(2, 5, 120)).shape) == (2, 4)


def test_repeated_class_names_are_refused():
    # "a" would map to one class only, and the other would never be trained.
    backbone = kbert.BertBackbone(vocabulary_size=60, num_layers=1, num_heads=2, hidden_dim=8, intermediate_dim=16)
    for cls in (kbert.BertClassifier, kbert.BertTokenClassifier):
        with pytest.raises(ValueError, match=r"class_names=\['a', 'a', 'b'\] names 'a' more than once"):
            cls(backbone, 3, class_names=["a", "a", "b"])


def test_fresh_heads_are_drawn_as_transformers_draws_them():
    # transformers' `_init_weights`: normal(0, 0.02), untruncated, zero bias.
    # BERT's truncated normal (no draw beyond 2 standard deviations, a
    # standard deviation of 0.0176) trained WNUT NER worse in short runs.
    hidden, classes = 128, 64
    torch.manual_seed(0)
    keras.utils.set_random_seed(0)
    hf_config = transformers.BertConfig(vocab_size=60, hidden_size=hidden, num_hidden_layers=1, num_attention_heads=2,
                                        intermediate_size=32, num_labels=classes)
    reference = transformers.BertForTokenClassification(hf_config).classifier.weight.detach().numpy()
    backbone = kbert.BertBackbone(vocabulary_size=60, num_layers=1, num_heads=2, hidden_dim=hidden,
                                  intermediate_dim=32)
    heads = [kbert.BertClassifier(backbone, classes), kbert.BertTokenClassifier(backbone, classes)]
    kernels = [to_numpy(head.get_layer("logits").kernel) for head in heads]
    for draws in [reference, *kernels]:
        # 8,192 draws: the standard deviation within 3%, about 4.6% beyond 2 of them.
        np.testing.assert_allclose(np.std(draws), 0.02, rtol=0.03)
        assert 0.035 < np.mean(np.abs(draws) > 0.04) < 0.057
    for head in heads:
        np.testing.assert_array_equal(to_numpy(head.get_layer("logits").bias), 0.0)
    spans = kbert.BertQuestionAnswerer(backbone).get_layer("span_logits")
    assert isinstance(spans.kernel_initializer, keras.initializers.RandomNormal)
    assert spans.kernel_initializer.stddev == 0.02


def test_weight_files_match_a_classifier_on_the_whole_backbone(tmp_path):
    # The classifier runs its last block at [CLS] only (pooled_output_model);
    # its weight files must keep the layout of a classifier calling the whole
    # backbone (what kbert built before), in both directions.
    def backbone():
        return kbert.BertBackbone(vocabulary_size=60, num_layers=2, num_heads=2, hidden_dim=16,
                                  intermediate_dim=32, max_sequence_length=16, dropout=0.0)

    whole = backbone()
    logits = keras.layers.Dense(3)(keras.layers.Dropout(0.1)(whole(whole.input)["pooled_output"]))
    plain = keras.Model(whole.input, logits)
    inputs = random_inputs(2, 7, 60)
    plain.save_weights(tmp_path / "plain.weights.h5")
    classifier = kbert.BertClassifier(backbone(), num_classes=3)
    classifier.load_weights(tmp_path / "plain.weights.h5")
    np.testing.assert_allclose(to_numpy(classifier(inputs)), to_numpy(plain(inputs)), atol=1e-5)

    fresh = kbert.BertClassifier(backbone(), num_classes=3)
    fresh.save_weights(tmp_path / "classifier.weights.h5")
    plain.load_weights(tmp_path / "classifier.weights.h5")
    np.testing.assert_allclose(to_numpy(plain(inputs)), to_numpy(fresh(inputs)), atol=1e-5)


def tiny_classifier(minilm_dir, num_classes=2, **kwargs):
    backbone = kbert.BertBackbone(vocabulary_size=30522, num_layers=2, num_heads=2, hidden_dim=32,
                                  intermediate_dim=64, max_sequence_length=64, dropout=0.0)
    preprocessor = kbert.BertPreprocessor.from_preset(minilm_dir, sequence_length=32)
    model = kbert.BertClassifier(backbone, num_classes=num_classes, preprocessor=preprocessor, **kwargs)
    # A randomly initialised tiny model learns visibly in a few steps only
    # with a higher peak than BERT's fine-tuning rate for pre-trained weights.
    model.compile(learning_rate=1e-3)
    return model


TEXTS = ["a wonderful, moving film", "dull and far too long", "great acting and a clever plot",
         "i walked out after an hour", "a joy from start to finish", "the worst script of the year"] * 4
LABELS = [1, 0, 1, 0, 1, 0] * 4


@pytest.fixture(scope="module")
def fitted(minilm_dir):
    """One tiny classifier fitted on raw strings, without a compile() call."""
    keras.utils.set_random_seed(0)
    model = tiny_classifier(minilm_dir, class_names=["negative", "positive"])
    loss_before = model.evaluate(TEXTS, LABELS, verbose=0)[0]
    history = model.fit(TEXTS, LABELS, batch_size=4, epochs=2, verbose=0)
    return model, history, loss_before


def test_fit_evaluate_predict_take_raw_strings_without_compile(fitted):
    model, history, loss_before = fitted
    assert np.isfinite(history.history["loss"]).all()
    loss, accuracy = model.evaluate(TEXTS, LABELS, verbose=0)
    assert loss < loss_before and 0.0 <= accuracy <= 1.0
    assert model.predict(["a fine film", "a bad film"], verbose=0).shape == (2, 2)


MIXED_LENGTHS = [" ".join(["word"] * n) for n in (1, 25, 3, 12, 2, 28, 7, 5, 20, 1, 9, 14)]


def traced(model):
    """The preprocessing functions traced for the model's batches of examples
    (traces are shared by preprocessors of equal settings: these are the
    ones of this model's head)."""
    head = task_inputs.frozen(model.head_settings())
    return [f for key, f in task_inputs.traced_functions(model.preprocessor).items()
            if key[0] == "batches" and key[2] == head]


def test_fit_batches_hold_similar_lengths_padded_to_their_longest_or_a_bucket(minilm_dir):
    model = tiny_classifier(minilm_dir)
    model.length_groups = 2
    batches = list(task_inputs.dataset(model, MIXED_LENGTHS, [0, 1] * 6, batch_size=3, shuffle=True))
    assert len(batches) == 4 and sum(len(labels) for _, labels in batches) == 12
    for features, _ in batches:
        lengths = features["padding_mask"].numpy().sum(1)
        width = features["token_ids"].shape[1]
        if keras.backend.backend() == "jax":  # compiles each shape: the buckets bound them
            # The smallest of 16, 24, 32 (= sequence_length) that holds the longest.
            assert width == min(b for b in (16, 24, 32) if b >= lengths.max())
        else:
            assert width == lengths.max()
    # Steps compiled by XLA compile each shape: buckets again.
    model.compile(jit_compile=True)
    for features, _ in task_inputs.dataset(model, MIXED_LENGTHS, [0, 1] * 6, batch_size=3, shuffle=True):
        assert features["token_ids"].shape[1] in (16, 24, 32)
    # Sorted within each group of 2 batches: the 6 shortest texts never
    # share a batch with the 6 longest of their group more than once.
    spreads = [np.ptp(f["padding_mask"].numpy().sum(1)) for f, _ in batches]
    assert np.mean(spreads) < 12


def test_pipelines_over_text_in_memory_run_without_autotuning(minilm_dir):
    # Deleting a tf.data iterator waits for its autotuning thread, which
    # wakes at periods that grow to seconds: a fit on text in memory stalled
    # 5-9 s at its end in 6 runs of 15. kbert's own pipelines turn
    # autotuning off; a user's dataset keeps its options.
    model = tiny_classifier(minilm_dir)
    for shuffle in (True, False):
        dataset = task_inputs.dataset(model, MIXED_LENGTHS, [0, 1] * 6, batch_size=3, shuffle=shuffle)
        assert dataset.options().autotune.enabled is False
    users = tf.data.Dataset.from_tensor_slices((MIXED_LENGTHS, [0, 1] * 6)).batch(3)
    assert task_inputs.dataset(model, users).options().autotune.enabled is not False
    # The pipeline still yields every example.
    assert sum(len(labels) for _, labels in task_inputs.dataset(model, MIXED_LENGTHS, [0, 1] * 6, batch_size=5)) == 12


def test_predict_and_evaluate_sorted_by_length_give_the_input_order(minilm_dir):
    model = tiny_classifier(minilm_dir)
    model.compile()
    labels = np.array([0, 1] * 6)
    bucketed = model.predict(MIXED_LENGTHS, batch_size=4, verbose=0)
    bucketed_loss = model.evaluate(MIXED_LENGTHS, labels, batch_size=4, verbose=0)
    # Each evaluate builds a new pipeline, on preprocessing traced once per model.
    functions = traced(model)
    traces = [f.experimental_get_tracing_count() for f in functions]
    assert model.evaluate(MIXED_LENGTHS, labels, batch_size=4, verbose=0) == pytest.approx(bucketed_loss, abs=1e-6)
    assert traced(model) == functions and [f.experimental_get_tracing_count() for f in functions] == traces
    model.input_padding = "sequence_length"
    fixed = model.predict(MIXED_LENGTHS, batch_size=4, verbose=0)
    fixed_loss = model.evaluate(MIXED_LENGTHS, labels, batch_size=4, verbose=0)
    direct = to_numpy(model(model.preprocessor(MIXED_LENGTHS)))
    np.testing.assert_allclose(bucketed, direct, atol=1e-5)
    np.testing.assert_allclose(fixed, direct, atol=1e-5)
    np.testing.assert_allclose(bucketed_loss, fixed_loss, atol=1e-5)


def test_default_schedule_warms_up_then_decays_to_zero(fitted):
    schedule = fitted[0].optimizer._learning_rate
    assert isinstance(schedule, kbert.training.WarmupLinearDecay)
    # 10% of 12 steps, rounded up as transformers' Trainer rounds it.
    assert schedule.total_steps == 12 and schedule.warmup_steps == 2 and float(schedule(12)) == 0.0
    assert float(schedule(0)) == 0.0 and float(schedule(schedule.warmup_steps)) == pytest.approx(1e-3)


def test_a_second_fit_gets_its_own_schedule(fitted):
    model = fitted[0]
    before = [to_numpy(w).copy() for w in model.trainable_weights]
    # (Only on TensorFlow: on JAX a reference to the old step would keep
    # jax.jit's cache of it, traced with the old schedule, in use.)
    tf_train_function = model.train_function if keras.backend.backend() == "tensorflow" else None
    model.fit(TEXTS[:8], LABELS[:8], batch_size=4, epochs=1, verbose=0)
    if tf_train_function is not None:
        # The traced step reads the schedule's steps when it runs: not traced again.
        assert model.train_function is tf_train_function
    schedule = model.optimizer._learning_rate
    assert schedule.start_step == 12 and schedule.total_steps == 2
    # Its 1 warm-up step, then not 0, where the first fit ended.
    assert schedule.warmup_steps == 1 and float(schedule(13)) == pytest.approx(1e-3)
    assert any(np.abs(to_numpy(w) - b).max() > 0 for w, b in zip(model.trainable_weights, before))


def test_fit_without_a_batch_size_gives_small_data_sets_more_steps(minilm_dir):
    counts = (1, 3_999, 4_000, 7_999, 8_000, 1_000_000)
    assert [kbert.training.recipes.default_batch_size(n) for n in counts] == [8, 8, 16, 16, 32, 32]
    model = tiny_classifier(minilm_dir)
    history = model.fit(TEXTS, LABELS, epochs=1, verbose=0)  # 24 texts: 3 batches of 8
    assert int(model.optimizer.iterations) == 3 and model.optimizer._learning_rate.total_steps == 3
    assert np.isfinite(history.history["loss"]).all()
    # Pairs are counted as examples, not as the two lists.
    model.fit((TEXTS, TEXTS[::-1]), LABELS, epochs=1, verbose=0)
    assert int(model.optimizer.iterations) == 6
    # A batch given is kept.
    model.fit(TEXTS, LABELS, batch_size=24, epochs=1, verbose=0)
    assert int(model.optimizer.iterations) == 7


def test_compile_takes_a_recipe_by_name_and_settings_over_it(minilm_dir):
    model = tiny_classifier(minilm_dir)  # kbert's recipe, learning_rate=1e-3
    optimizer = model.optimizer
    assert (optimizer.epsilon, optimizer.bias_corrected_epsilon, optimizer.weight_decay,
            optimizer.global_clipnorm) == (1e-8, True, 0.01, 1.0)
    model.fit(TEXTS, LABELS, epochs=1, verbose=0)  # 24 texts: kbert's batch for them is 8
    assert int(model.optimizer.iterations) == 3

    model = tiny_classifier(minilm_dir)
    model.compile(recipe="bert", learning_rate=3e-5)
    optimizer = model.optimizer
    assert (optimizer.epsilon, optimizer.bias_corrected_epsilon, optimizer.weight_decay,
            optimizer.global_clipnorm) == (1e-6, False, 0.01, 1.0)
    model.fit(TEXTS, LABELS, epochs=1, verbose=0)  # BERT's batch of 32: one step
    schedule = model.optimizer._learning_rate
    assert int(model.optimizer.iterations) == 1 and schedule.peak == 3e-5 and schedule.warmup_steps == 1

    model.compile(recipe="trainer", global_clipnorm=None)  # None: no clipping, as before
    optimizer = model.optimizer
    assert (optimizer.epsilon, optimizer.bias_corrected_epsilon, optimizer.weight_decay,
            optimizer.global_clipnorm) == (1e-8, True, 0.0, None)
    model.fit(TEXTS, LABELS, epochs=1, verbose=0)  # `Trainer`'s batch of 8, no warm-up
    schedule = model.optimizer._learning_rate
    assert int(model.optimizer.iterations) == 3 and schedule.peak == 5e-5 and schedule.warmup_steps == 0
    # A batch given is kept.
    model.fit(TEXTS, LABELS, batch_size=24, epochs=1, verbose=0)
    assert int(model.optimizer.iterations) == 4

    # The recipe is in the compile config that save, load_model and clone_model carry.
    rebuilt = kbert.BertClassifier.from_config(model.get_config())
    rebuilt.compile_from_config(model.get_compile_config())
    assert rebuilt.recipe == model.recipe
    assert (rebuilt.recipe["recipe"], rebuilt.recipe["global_clipnorm"], rebuilt.recipe["weight_decay"],
            rebuilt.recipe["warmup"]) == ("trainer", None, 0.0, 0.0)
    assert rebuilt.optimizer.global_clipnorm is None and rebuilt.optimizer.weight_decay == 0.0
    with pytest.raises(ValueError, match='recipe="roberta".*"kbert", "bert", "trainer"'):
        model.compile(recipe="roberta")


def test_predict_on_texts_in_memory_equals_keras_loop_and_traces_its_preprocessing_once(minilm_dir):
    # Traces are shared by models of equal settings: class names of this test's own.
    model = tiny_classifier(minilm_dir, class_names=["traced once", "traced twice"])
    direct = model.predict(MIXED_LENGTHS, batch_size=4, verbose=0)
    # Given callbacks, predict runs Keras' loop over a tf.data pipeline.
    looped = model.predict(MIXED_LENGTHS, batch_size=4, verbose=0, callbacks=[])
    np.testing.assert_allclose(direct, looped, atol=1e-6)
    (preprocess,) = traced(model)
    traces = preprocess.experimental_get_tracing_count()
    again = model.predict(MIXED_LENGTHS[::-1], batch_size=4, verbose=0)
    np.testing.assert_allclose(again, direct[::-1], atol=1e-6)
    assert preprocess.experimental_get_tracing_count() == traces
    # A new preprocessor (or padding) is traced anew.
    model.input_padding = "sequence_length"
    np.testing.assert_allclose(model.predict(MIXED_LENGTHS, batch_size=4, verbose=0), direct, atol=1e-5)
    assert len(traced(model)) == 2 and preprocess in traced(model)


def test_pairs_of_texts_are_classified(minilm_dir):
    model = tiny_classifier(minilm_dir, num_classes=3)
    a, b = ["the sky is blue", "water is dry"], ["it is blue", "water is wet"]
    history = model.fit((a, b), [0, 2], epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"]).all()
    assert model.predict((a, b), verbose=0).shape == (2, 3)
    np.testing.assert_allclose(model.predict((a, b), batch_size=1, verbose=0),
                               to_numpy(model(model.preprocessor((a, b)))), atol=1e-5)


def test_save_to_preset_round_trips_bit_for_bit(fitted, tmp_path):
    model = fitted[0]
    model.save_to_preset(str(tmp_path))
    restored = kbert.BertClassifier.from_preset(str(tmp_path))
    assert restored.class_names == ["negative", "positive"]
    assert restored.preprocessor.sequence_length == 32
    assert len(restored.weights) == len(model.weights)
    for a, b in zip(restored.weights, model.weights):
        np.testing.assert_array_equal(to_numpy(a), to_numpy(b))
    features = model.preprocessor(TEXTS[:6])
    np.testing.assert_array_equal(to_numpy(model(features)), to_numpy(restored(features)))
    # `predict`'s graph depends on the shapes it was traced for (the fitted
    # model's has seen others, so its shapes are relaxed), and TensorFlow's
    # graph optimiser (its remapper) fuses some of the encoder's ops only
    # where they are static: the two predictions are a rounding apart (and
    # equal bit for bit with the remapper off).
    np.testing.assert_allclose(model.predict(TEXTS[:6], verbose=0), restored.predict(TEXTS[:6], verbose=0),
                               rtol=1e-6, atol=1e-8)
    # The backbone alone loads from a task preset too.
    backbone = kbert.BertBackbone.from_preset(str(tmp_path))
    for a, b in zip(backbone.weights, model.backbone.weights):
        np.testing.assert_array_equal(to_numpy(a), to_numpy(b))


def test_single_string_is_refused_with_a_hint(minilm_dir):
    with pytest.raises(ValueError, match=r"pass a list of strings"):
        tiny_classifier(minilm_dir).predict("one text")


def test_string_labels_are_mapped_through_class_names(minilm_dir):
    model = tiny_classifier(minilm_dir, class_names=["negative", "positive"])
    names = ["positive" if label else "negative" for label in LABELS[:8]]
    history = model.fit(TEXTS[:8], names, epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"]).all()
    with pytest.raises(ValueError, match=r"not among class_names"):
        model.fit(TEXTS[:2], ["positive", "great"], verbose=0)


def test_string_labels_without_class_names_say_how_to_fix(minilm_dir):
    with pytest.raises(ValueError, match=r"give the model class_names"):
        tiny_classifier(minilm_dir).fit(TEXTS[:2], ["pos", "neg"], verbose=0)


def test_empty_data_is_refused(minilm_dir):
    with pytest.raises(ValueError, match="data set is empty"):
        tiny_classifier(minilm_dir).fit([], [], verbose=0)


def test_sequence_length_above_the_maximum_is_refused(tmp_path):
    save_random_checkpoint(tmp_path)  # 40 positions
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"token{i}" for i in range(115)]  # vocab_size 120
    (tmp_path / "vocab.txt").write_text("".join(t + "\n" for t in tokens))
    with pytest.raises(ValueError, match=r"sequence_length=64 is longer than this model's maximum, 40"):
        kbert.BertClassifier.from_preset(str(tmp_path), num_classes=2, sequence_length=64)
