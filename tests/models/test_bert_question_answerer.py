import json
import os

import keras
import numpy as np
import pytest
import torch
import transformers

import kbert
from kbert.models.bert_question_answerer import (
    BertQuestionAnswerer,
    decode_answers,
    piece_spans,
    squad_metrics,
    tokenize_with_offsets,
    window_starts,
    word_spans,
)
from kbert.text import BertPreprocessor
from tests.helpers import random_inputs, to_numpy
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
    with torch.no_grad():
        expected = hf_model(
            input_ids=torch.tensor(inputs["token_ids"]).long(),
            token_type_ids=torch.tensor(inputs["segment_ids"]).long(),
            attention_mask=torch.tensor(inputs["padding_mask"]).long(),
        )
    real = inputs["padding_mask"].astype(bool)  # padding is never decoded
    for name in ("start_logits", "end_logits"):
        np.testing.assert_allclose(np.where(real, to_numpy(outputs[name]), 0),
                                   np.where(real, getattr(expected, name).numpy(), 0), atol=1e-4)


def test_word_spans_split_like_berts_pre_tokenizer():
    text = "Café-au-lait, s'il\u00a0vous 日本"
    assert [text[a:b] for a, b in word_spans(text)] == ["Café", "-", "au", "-", "lait", ",", "s", "'", "il",
                                                          "vous", "日", "本"]


def test_piece_spans_map_normalized_pieces_back_to_accented_characters():
    assert piece_spans("Éclairs", ["ec", "##lair", "##s"]) == [(0, 2), (2, 6), (6, 7)]
    # A combining accent (dropped by the normalizer) stays with its letter.
    assert piece_spans("e\u0301lan", ["el", "##an"]) == [(0, 3), (3, 5)]
    assert piece_spans("cafe\u0301", ["cafe"]) == [(0, 5)]
    # Characters the normalizer drops between words are in no piece.
    assert piece_spans("ab\u200b", ["ab"]) == [(0, 2)]
    assert piece_spans("☃", ["[UNK]"]) == [(0, 1)]


def test_piece_offsets_equal_transformers_offset_mapping(minilm_dir, preprocessor):
    contexts = TRICKY + [context for _, context, _ in read_squad()[::5]]
    hf_tokenizer = transformers.BertTokenizerFast.from_pretrained(minilm_dir)
    for text, (ids, spans) in zip(contexts, tokenize_with_offsets(preprocessor.tokenizer, contexts)):
        expected = hf_tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        assert ids == expected["input_ids"]
        assert spans == [tuple(span) for span in expected["offset_mapping"]], text


def test_window_starts_move_by_the_stride_and_reach_the_end():
    assert window_starts(10, window_length=4, stride=3) == [0, 3, 6]
    assert window_starts(4, window_length=4, stride=3) == [0]
    # A stride longer than a window would skip tokens: windows then abut.
    assert window_starts(10, window_length=4, stride=8) == [0, 4, 8]


def test_windows_cover_the_whole_context_and_each_token_has_one_best_window(preprocessor):
    model = tiny_answerer(preprocessor, stride=20)
    question, context, _ = max(read_squad(), key=lambda example: len(example[1]))
    encoded = model.encode([question], [context])
    spans = tokenize_with_offsets(preprocessor.tokenizer, [context])[0][1]
    assert len(encoded["example_index"]) > 3  # really split into windows
    seen, best = [], []
    for chars, max_context in zip(encoded["token_chars"], encoded["max_context"]):
        context_tokens = chars[:, 0] >= 0
        seen += [tuple(c) for c in chars[context_tokens]]
        best += [tuple(c) for c in chars[max_context]]
    assert set(seen) == set(spans) and sorted(best) == sorted(spans)
    first_tokens = [chars[chars[:, 0] >= 0][0, 0] for chars in encoded["token_chars"]]
    assert first_tokens == [spans[20 * k][0] for k in range(len(first_tokens))]


def test_answers_outside_a_window_point_at_cls(preprocessor):
    model = tiny_answerer(preprocessor, stride=20)
    question, context, answers = max(read_squad(), key=lambda example: len(example[1]))
    encoded = model.encode([question], [context], [answers[0]])
    inside = encoded["start_positions"] > 0
    assert 0 < inside.sum() < len(inside)
    for w in np.flatnonzero(inside):
        a, b = encoded["token_chars"][w, encoded["start_positions"][w], 0], \
            encoded["token_chars"][w, encoded["end_positions"][w], 1]
        assert context[a:b] == answers[0]["text"]


def test_gold_spans_decode_to_the_gold_answer_text(preprocessor):
    # An oracle: logits peaked on the gold tokens must decode to the gold text,
    # which checks windows, labels, offsets and decoding together.
    model = tiny_answerer(preprocessor, stride=32)
    examples = read_squad()
    questions, contexts = [q for q, _, _ in examples], [c for _, c, _ in examples]
    answers = [a[0] for _, _, a in examples]
    encoded = model.encode(questions, contexts, answers)
    start_logits = np.zeros(encoded["token_ids"].shape, "float32")
    end_logits = np.zeros_like(start_logits)
    rows = np.arange(len(start_logits))
    start_logits[rows, encoded["start_positions"]] = 10.0
    end_logits[rows, encoded["end_positions"]] = 10.0
    decoded = decode_answers(encoded, contexts, start_logits, end_logits, max_answer_length=100)
    exact = np.mean([d["text"] == a["text"] for d, a in zip(decoded, answers)])
    print(f"oracle: {exact:.1%} of {len(examples)} gold answers decoded to exactly their text")
    assert exact > 0.97
    assert all(contexts[i][slice(*d["chars"])] == d["text"] for i, d in enumerate(decoded))


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


def test_predict_answers_with_a_span_of_the_original_context(preprocessor):
    model = tiny_answerer(preprocessor, max_answer_length=5)
    examples = read_squad(6)
    contexts = [c for _, c, _ in examples]
    answers = model.predict(([q for q, _, _ in examples], contexts), verbose=0)
    for context, answer in zip(contexts, answers):
        start, end = answer["chars"]
        assert answer["text"] == context[start:end] and 0 < end - start
        assert np.isfinite(answer["score"])


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
