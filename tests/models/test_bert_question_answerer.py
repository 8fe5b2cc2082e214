import json
import os

import keras
import numpy as np
import pytest
import transformers

import kbert
from kbert.models import task_inputs
import tensorflow as tf

from kbert.metrics import squad_metrics
from kbert.models import BertQuestionAnswerer
from kbert.text import question_answering as qa
from kbert.text.offsets import char_offsets, split_words_with_offsets, tokenize_with_byte_spans
from kbert.text import BertPreprocessor
from tests.helpers import random_inputs, to_numpy, transformers_outputs
from tests.presets.test_huggingface_import import save_random_checkpoint

SQUAD_SHIFTS = os.path.join(
    os.path.dirname(__file__), "..", "..", "examples", "data", "squad_shifts", "new_wiki_subset.json"
)
TRICKY = [
    "Zoë's café served crème brûlée (€4.50) — naïve? Ørsted & Straße!",
    "İstanbul's ﬁne e\u0301lan\u200bvital: \"quoted\", 'single', [brackets]; 1,000.5%",
    "日本語のテキスト and ΣΊΣΥΦΟΣ\tand\u00a0no-break  spaces",
]


def read_squad(limit=None):
    with open(SQUAD_SHIFTS, encoding="utf-8") as f:
        data = json.load(f)["data"]
    examples = [(qa["question"], paragraph["context"], qa["answers"])
                for article in data for paragraph in article["paragraphs"] for qa in paragraph["qas"]]
    return examples[:limit]


@pytest.fixture(scope="module")
def preprocessor(minilm_dir):
    return BertPreprocessor.from_preset(minilm_dir, sequence_length=96)


def tiny_answerer(preprocessor, **kwargs):
    backbone = kbert.BertBackbone(vocabulary_size=30522, num_layers=2, num_heads=2, hidden_dim=32,
                                  intermediate_dim=64, max_sequence_length=128, dropout=0.0)
    return BertQuestionAnswerer(backbone, preprocessor=preprocessor, **kwargs)


def test_logits_match_transformers_question_answering(tmp_path):
    hf_model = save_random_checkpoint(tmp_path, transformers.BertForQuestionAnswering)
    model = BertQuestionAnswerer.from_preset(str(tmp_path))
    inputs = random_inputs(3, 14, 120)
    outputs = model(inputs)
    expected = transformers_outputs(hf_model, inputs)
    real = inputs["padding_mask"].astype(bool)  # padding is never decoded
    for name in ("start_logits", "end_logits"):
        np.testing.assert_allclose(np.where(real, to_numpy(outputs[name]), 0),
                                   np.where(real, getattr(expected, name).numpy(), 0), atol=1e-4)


def char_spans(texts, starts, ends):
    """Ragged byte spans as lists of character spans."""
    texts = tf.constant(texts)
    chars = [char_offsets(texts, v.to_tensor(0)).numpy() for v in (starts, ends)]
    return [list(zip(a[:n].tolist(), b[:n].tolist())) for a, b, n in zip(*chars, starts.row_lengths().numpy())]


def test_words_split_like_berts_pre_tokenizer():
    text = "Café-au-lait, s'il\u00a0vous 日本"
    words, starts, ends = split_words_with_offsets(tf.constant([text]))
    assert [text[a:b] for a, b in char_spans([text], starts, ends)[0]] == [
        "Café", "-", "au", "-", "lait", ",", "s", "'", "il", "vous", "日", "本"]


def test_piece_offsets_equal_transformers_offset_mapping(minilm_dir, preprocessor):
    contexts = TRICKY + [context for _, context, _ in read_squad()[::5]]
    hf_tokenizer = transformers.BertTokenizerFast.from_pretrained(minilm_dir)
    ids, starts, ends = tokenize_with_byte_spans(preprocessor.tokenizer, tf.constant(contexts))
    for text, text_ids, spans in zip(contexts, ids.to_list(), char_spans(contexts, starts, ends)):
        expected = hf_tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        assert text_ids == expected["input_ids"]
        assert spans == [tuple(span) for span in expected["offset_mapping"]], text


def windowed(model, questions, contexts):
    return model.preprocessor.windows(tf.constant(questions), tf.constant(contexts), model.head_settings())


def test_windows_cover_the_whole_context_and_each_token_has_one_best_window(preprocessor):
    model = tiny_answerer(preprocessor, stride=20)
    question, context, _ = max(read_squad(), key=lambda example: len(example[1]))
    w = windowed(model, [question], [context])
    token = w["token"].numpy()
    num_tokens = int(tf.size(w["token_starts"]))
    assert len(token) > 3  # really split into windows
    seen = token[w["is_context"].numpy()]
    best = token[w["max_context"].numpy()]
    assert set(seen) == set(range(num_tokens)) and sorted(best) == list(range(num_tokens))
    first_tokens = [row[row >= 0][0] for row in token]
    assert first_tokens == [20 * k for k in range(len(first_tokens))]


def test_answers_outside_a_window_point_at_cls(preprocessor):
    model = tiny_answerer(preprocessor, stride=20)
    question, context, answers = max(read_squad(), key=lambda example: len(example[1]))
    w = windowed(model, [question], [context])
    start = answers[0]["answer_start"]
    starts, ends = (v.numpy() for v in qa.answer_positions(w, tf.constant([context]), tf.constant([start]),
                                                             tf.constant([start + len(answers[0]["text"])])))
    inside = starts > 0
    assert 0 < inside.sum() < len(inside)
    rows = np.flatnonzero(inside)
    a = char_offsets(tf.constant([context] * len(rows)), tf.constant(
        [[w["starts"].numpy()[r, starts[r]], w["ends"].numpy()[r, ends[r]]] for r in rows])).numpy()
    assert all(context[x:y] == answers[0]["text"] for x, y in a)


def test_gold_spans_decode_to_the_gold_answer_text(preprocessor):
    # An oracle: logits peaked on the gold tokens must decode to the gold text,
    # which checks windows, labels, offsets and decoding together.
    model = tiny_answerer(preprocessor, stride=32)
    examples = read_squad()
    questions, contexts = [q for q, _, _ in examples], [c for _, c, _ in examples]
    answers = [a[0] for _, _, a in examples]
    w = windowed(model, questions, contexts)
    starts, ends = qa.answer_positions(w, tf.constant(contexts), tf.constant([a["answer_start"] for a in answers]),
                                       tf.constant([a["answer_start"] + len(a["text"]) for a in answers]))
    shape = w["features"]["token_ids"].shape
    start_logits = tf.one_hot(starts, shape[1]) * 10.0
    end_logits = tf.one_hot(ends, shape[1]) * 10.0
    decoded = qa.answers(w, tf.constant(contexts), start_logits, end_logits, 100, 20)
    texts = [t.decode() for t in decoded["answer"].numpy()]
    exact = np.mean([t == a["text"] for t, a in zip(texts, answers)])
    print(f"oracle: {exact:.1%} of {len(examples)} gold answers decoded to exactly their text")
    assert exact > 0.97
    bounds = zip(decoded["start"].numpy(), decoded["end"].numpy())
    assert all(contexts[i][a:b] == t for i, ((a, b), t) in enumerate(zip(bounds, texts)))


@pytest.mark.parametrize("prediction, references, exact_match, f1", [
    ("The Eiffel Tower!", ["eiffel tower"], 100.0, 100.0),  # case, article, punctuation
    ("in Paris", ["Paris, France"], 0.0, 50.0),
    ("Paris", ["London", "  paris "], 100.0, 100.0),  # the best of several references
    ("an", ["the"], 100.0, 0.0),  # both normalise to nothing: equal, but no common token
    ("1,000", ["1000"], 100.0, 100.0),
])
def test_squad_metrics_follow_the_official_script(prediction, references, exact_match, f1):
    assert squad_metrics([prediction], [references]) == {"exact_match": exact_match, "f1": f1}


def test_fit_on_raw_squad_examples_lowers_the_loss(preprocessor):
    examples = read_squad(24)
    x = ([q for q, _, _ in examples], [c for _, c, _ in examples])
    y = [a[0] for _, _, a in examples]
    model = tiny_answerer(preprocessor)
    model.compile(optimizer=keras.optimizers.Adam(3e-3))
    history = model.fit(x, y, batch_size=16, epochs=2, verbose=0).history
    assert history["loss"][1] < history["loss"][0]
    # The windows' pipeline runs without tf.data's autotuning (see the classifier's test).
    assert task_inputs.dataset(model, x, y, batch_size=16).options().autotune.enabled is False


def test_fit_shuffles_all_windows_together_each_epoch(preprocessor):
    # As transformers' run_qa shuffles its features: a question's windows
    # spread over the epoch, not in neighbouring batches.
    examples = read_squad(30)
    x = ([q for q, _, _ in examples], [c for _, c, _ in examples])
    y = [a[0] for _, _, a in examples]
    model = tiny_answerer(preprocessor, stride=24)
    keras.utils.set_random_seed(0)

    def windows(dataset):
        # Each window as its token ids, and the question it belongs to (the
        # tokens between [CLS] and the first [SEP]).
        rows = [tuple(ids) for x, _, _ in dataset for ids in x["token_ids"].numpy().tolist()]
        return rows, [row[1:row.index(102)] for row in rows]

    in_order, in_order_questions = windows(task_inputs.dataset(model, x, y, batch_size=2))
    dataset = task_inputs.dataset(model, x, y, batch_size=2, shuffle=True)
    first, questions = windows(dataset)
    second, _ = windows(dataset)
    assert sorted(first) == sorted(in_order) == sorted(second) and first != second
    positions = {}
    for i, question in enumerate(questions):
        positions.setdefault(question, []).append(i)
    spreads = [max(p) - min(p) for p in positions.values() if len(p) > 1]
    counts = [in_order_questions.count(q) for q in positions]
    assert len(spreads) >= 10 and max(counts) >= 3
    # Uniformly shuffled, k windows of n span (k - 1) / (k + 1) * n on average
    # (n / 3 for k = 2); a buffer of a few batches keeps them within it.
    assert np.mean(spreads) > len(first) / 4


def test_answer_gives_a_span_of_the_original_context(preprocessor):
    model = tiny_answerer(preprocessor, max_answer_length=5)
    examples = read_squad(6)
    contexts = [c for _, c, _ in examples]
    answers = model.answer([q for q, _, _ in examples], contexts)
    for context, answer in zip(contexts, answers):
        assert answer["answer"] == context[answer["start"]:answer["end"]] and answer["start"] < answer["end"]
        assert np.isfinite(answer["score"])


def test_predict_on_raw_input_returns_the_windows_logits(preprocessor):
    model = tiny_answerer(preprocessor, stride=20)
    examples = read_squad(3)
    x = ([q for q, _, _ in examples], [c for _, c, _ in examples])
    logits = model.predict(x, batch_size=2, verbose=0)
    assert logits["start_logits"].shape == logits["end_logits"].shape
    assert logits["start_logits"].shape[0] > 3 and logits["start_logits"].shape[1] == 96
    # The same windows as Keras' loop over the tf.data pipeline that fit reads
    # (run where callbacks are given), in batches of 2 windows.
    looped = model.predict(x, batch_size=2, verbose=0, callbacks=[])
    for name in ("start_logits", "end_logits"):
        np.testing.assert_allclose(logits[name], looped[name], atol=1e-6)


def test_sequence_too_short_for_the_question_says_what_to_change(minilm_dir):
    with pytest.raises(ValueError, match="longer sequence_length or a smaller max_question_length"):
        tiny_answerer(BertPreprocessor.from_preset(minilm_dir, sequence_length=32), max_question_length=40)


def test_save_to_preset_keeps_the_window_settings(preprocessor, tmp_path):
    model = tiny_answerer(preprocessor, stride=48, max_answer_length=12)
    model.save_to_preset(str(tmp_path))
    restored = BertQuestionAnswerer.from_preset(str(tmp_path))
    assert (restored.stride, restored.max_answer_length, restored.preprocessor.sequence_length) == (48, 12, 96)
    inputs = random_inputs(2, 20, 30522)
    np.testing.assert_array_equal(to_numpy(model(inputs)["start_logits"]), to_numpy(restored(inputs)["start_logits"]))


AUSTEN = "Jane Austen wrote Pride and Prejudice in 1813."


def test_a_training_answer_not_at_its_start_is_refused_naming_it(preprocessor):
    model = tiny_answerer(preprocessor)
    answers = [{"text": "Jane Austen", "answer_start": 0}, {"text": "1813", "answer_start": 5}]
    with pytest.raises(ValueError, match=r"Answer 1 .* not at answer_start=5 .* reads 'Aust'.* The text is at 41"):
        model.fit((["Who wrote it?", "When?"], [AUSTEN, AUSTEN]), answers, epochs=1, verbose=0)


def test_a_blank_answer_text_is_refused_not_read_as_unanswerable(preprocessor):
    model = tiny_answerer(preprocessor)
    with pytest.raises(ValueError, match=r"Answer 0 .* is blank: give the answer's text, or \"\""):
        model.preprocessor.examples((["Who?"], [AUSTEN]), [{"text": "  ", "answer_start": 4}])


def test_answer_text_is_compared_with_whitespace_collapsed_as_squads_evaluation(preprocessor):
    model = tiny_answerer(preprocessor)
    context = "Jane  Austen\nwrote it."
    parts = model.preprocessor.examples((["Who?"], [context]), [{"text": "Jane Austen\twrote", "answer_start": 0}])
    assert (int(parts[2][0]), int(parts[3][0])) == (0, len("Jane  Austen\nwrote"))


def test_unanswerable_questions_train_cls_as_start_and_end(preprocessor):
    model = tiny_answerer(preprocessor, stride=20)
    examples = read_squad(2)
    questions, contexts = [q for q, _, _ in examples] * 2, [c for _, c, _ in examples] * 2
    # SQuAD 2.0 as its JSON writes them, and as Hugging Face datasets' squad_v2 does.
    answers = [a[0] for _, _, a in examples] + [{"text": "", "answer_start": 0}, {"text": [], "answer_start": []}]
    parts = model.preprocessor.examples((questions, contexts), answers)
    batch = model.preprocessor.batch_function(model.head_settings(), labeled=True)
    features, positions, _ = batch(*parts)
    example = windowed(model, questions, contexts)["example"].numpy()
    for name in ("start_logits", "end_logits"):
        at = positions[name].numpy()
        assert (at[example >= 2] == 0).all()  # [CLS] in every window of the unanswerable ones
        assert (at[example < 2] > 0).any()
    history = model.fit((questions, contexts), answers, batch_size=4, epochs=1, verbose=0).history
    assert np.isfinite(history["loss"][0])


def test_null_score_margin_answers_nothing_where_cls_beats_the_best_span(preprocessor):
    model = tiny_answerer(preprocessor, stride=20)
    examples = read_squad(8)
    questions, contexts = [q for q, _, _ in examples], [c for _, c, _ in examples]
    spans = model.answer(questions, contexts)
    # run_squad.py's null score: the lowest [CLS] start + end of the example's windows.
    logits = model.predict((questions, contexts), verbose=0)
    cls = logits["start_logits"][:, 0] + logits["end_logits"][:, 0]
    example = windowed(model, questions, contexts)["example"].numpy()
    np.testing.assert_allclose([s["null_score"] for s in spans], [cls[example == i].min() for i in range(8)],
                               atol=1e-5)

    # A margin between the examples' (null - best span) differences: those
    # above it answer "" with the null score, the others keep their span.
    differences = np.array([s["null_score"] - s["score"] for s in spans])
    margin = float(np.median(differences))
    strict = BertQuestionAnswerer(model.backbone, model.preprocessor, stride=20, null_score_margin=margin)
    strict.get_layer("span_logits").set_weights(model.get_layer("span_logits").get_weights())
    answers = strict.answer(questions, contexts)
    assert 0 < (differences > margin).sum() < 8
    for span, answer, difference in zip(spans, answers, differences):
        if difference > margin:
            assert (answer["answer"], answer["start"], answer["end"]) == ("", 0, 0)
            assert answer["score"] == pytest.approx(span["null_score"])
        else:
            assert answer == span
    assert BertQuestionAnswerer.from_config(strict.get_config()).null_score_margin == margin
