"""The decoder's pure parts: sampling parameters, the processor pipeline, position bans, the release buffer,
prompt construction. No model is loaded here (tokenizers only)."""

import math

import pytest
import torch
from transformers.generation.logits_process import (
    MinPLogitsWarper,
    NoBadWordsLogitsProcessor,
    RepetitionPenaltyLogitsProcessor,
    SequenceBiasLogitsProcessor,
    SuppressTokensAtBeginLogitsProcessor,
    SuppressTokensLogitsProcessor,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
    WatermarkLogitsProcessor,
)

from guardrail.api import sampling_params
from guardrail.engines.transformers.sampling import TokenPicker, build_processors, build_warpers
from guardrail.guard.bans import PositionBans
from guardrail.guard.holdback import TextBuffer
from guardrail.params import SamplingParams
from guardrail.prompts import prompt_ids

# -- SamplingParams ------------------------------------------------------------------------------------

@pytest.mark.parametrize("field, value", [
    ("max_tokens", 0), ("max_tokens", 2.5), ("temperature", -0.1), ("temperature", math.nan),
    ("top_p", 0.0), ("top_p", 1.5), ("top_k", -1), ("min_p", 1.5), ("seed", -3), ("seed", "7"),
    ("stop", ("",)), ("stop", ("a",) * 17), ("logit_bias", {5: 101.0}), ("logit_bias", {"x": 1.0}),
    ("logit_bias", {-1: 1.0}), ("bad_words_ids", ((),)), ("bad_words_ids", ((1, -2),)),
    ("suppress_tokens", (1.5,)), ("begin_suppress_tokens", (-1,)), ("repetition_penalty", 0.0),
    ("watermark", "yes"), ("max_rollbacks", -1), ("max_rollbacks_per_position", -1), ("timeout_s", 0),
])
def test_invalid_sampling_parameter_is_rejected_by_name(field, value):
    with pytest.raises(ValueError, match=field):
        SamplingParams(**{field: value})


def test_sampling_params_normalise_json_shaped_input():
    params = SamplingParams(stop="END", logit_bias={"42": 5, 7: -100}, bad_words_ids=[[1, 2]], suppress_tokens=[3])
    assert params.stop == ("END",)
    assert params.logit_bias == {42: 5.0, 7: -100.0}
    assert params.bad_words_ids == ((1, 2),)
    assert params.suppress_tokens == (3,)


def test_token_ids_beyond_the_vocab_are_rejected_by_field():
    with pytest.raises(ValueError, match="logit_bias"):
        SamplingParams(logit_bias={50_000: 1.0}).check_vocab(49_152)
    with pytest.raises(ValueError, match="bad_words_ids"):
        SamplingParams(bad_words_ids=[[1, 60_000]]).check_vocab(49_152)


def test_unknown_api_parameter_is_named():
    with pytest.raises(ValueError, match="max_new_tokens"):
        sampling_params({"max_new_tokens": 5})


# -- the processor pipeline ----------------------------------------------------------------------------

def test_processors_follow_generate_order_and_use_transformers_classes():
    params = SamplingParams(logit_bias={3: 2.0}, repetition_penalty=1.3, bad_words_ids=[[4, 5]], suppress_tokens=[6],
                            begin_suppress_tokens=[7], temperature=0.7, top_k=20, top_p=0.9, min_p=0.05,
                            watermark=True)
    processors = build_processors(params, prompt_length=10, eos_ids={2})
    assert [type(p) for p in processors] == [SequenceBiasLogitsProcessor, RepetitionPenaltyLogitsProcessor,
                                             NoBadWordsLogitsProcessor, SuppressTokensLogitsProcessor,
                                             SuppressTokensAtBeginLogitsProcessor]
    warpers = build_warpers(params, vocab_size=100)
    assert [type(w) for w in warpers] == [TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper,
                                          MinPLogitsWarper, WatermarkLogitsProcessor]


def test_defaults_add_no_processor_and_greedy_adds_no_warper():
    assert len(build_processors(SamplingParams(), prompt_length=3, eos_ids={2})) == 0
    assert len(build_warpers(SamplingParams(temperature=0, top_k=5, top_p=0.5), vocab_size=100)) == 0


def test_logit_bias_maps_to_single_token_sequence_bias():
    processors = build_processors(SamplingParams(logit_bias={3: 100.0}), prompt_length=1, eos_ids=())
    scores = processors(torch.tensor([[0]]), torch.zeros((1, 8)))
    assert scores[0].tolist() == [0, 0, 0, 100, 0, 0, 0, 0]


def test_picker_returns_none_when_every_token_is_banned():
    scores = torch.full((1, 5), -math.inf)
    assert TokenPicker(SamplingParams(temperature=0)).pick(scores) is None
    assert TokenPicker(SamplingParams(temperature=1.0, seed=1)).pick(scores) is None


def test_seeded_sampling_is_reproducible_and_respects_masks():
    scores = torch.zeros((1, 50))
    scores[0, :10] = -math.inf
    draws = [[TokenPicker(SamplingParams(seed=seed)).pick(scores) for _ in range(3)] for seed in (1, 1, 2)]
    assert draws[0] == draws[1]
    assert all(t >= 10 for run in draws for t in run)


# -- position bans -------------------------------------------------------------------------------------

def test_rollback_keeps_bans_up_to_the_position_and_drops_later_ones():
    bans = PositionBans()
    bans.add(2, {10})
    bans.add(5, {11, 12})
    bans.add(7, {13})
    bans.rollback_to(5)
    assert bans.banned(2) == {10} and bans.banned(5) == {11, 12} and bans.at(7) is None
    bans.rollback_to(3)
    assert bans.banned(5) == frozenset() and bans.at(5) is None
    assert bans.at(2).tolist() == [10]


def test_bans_accumulate_at_one_position():
    bans = PositionBans()
    bans.add(0, {3})
    bans.add(0, {1, 3})
    assert bans.at(0).tolist() == [1, 3]


# -- the release buffer --------------------------------------------------------------------------------

TABLE = (b"", b"he", b"llo", b" w", b"\xc3", b"\xa9", b"orld", b"END", b"EN", b"D")


def buffer(tokens, stop=()):
    text = TextBuffer(TABLE, stop)
    for token in tokens:
        text.append(token)
    return text


def test_a_split_character_is_released_only_when_whole():
    text = buffer([1, 4])
    assert text.release(text.end(2)) == "he"
    text.append(5)
    assert text.release(text.end(3)) == "\u00e9"
    assert text.text == "he\u00e9"


def test_truncating_into_released_text_raises():
    text = buffer([1, 2, 3])
    text.release(text.end(2))
    text.rollback_to(2)
    with pytest.raises(RuntimeError, match="retract"):
        text.rollback_to(1)


def test_stop_string_found_and_its_possible_beginnings_held_back():
    text = buffer([1, 2, 8], stop=("END",))
    assert text.find_stop(0) is None
    assert text.stop_cuts() == [5]  # "EN" could begin "END"
    text.append(9)
    assert text.find_stop(3) == 5


def test_final_release_flushes_a_dangling_partial_character_as_replacement():
    text = buffer([1, 4])
    assert text.release(text.end(2), final=True) == "he\ufffd"


# -- prompts -------------------------------------------------------------------------------------------

def test_chat_prompt_ends_where_the_assistant_answers(smollm2_tokenizer):
    ids = prompt_ids(smollm2_tokenizer, messages=[{"role": "user", "content": "Hi"}])
    assert smollm2_tokenizer.decode(ids).endswith("<|im_start|>assistant\n")


def test_raw_prompt_keeps_the_tokenizers_bos(gemma3_tokenizer):
    ids = prompt_ids(gemma3_tokenizer, prompt="Once upon a time")
    assert ids[0] == gemma3_tokenizer.bos_token_id


@pytest.mark.parametrize("kwargs, message", [
    ({}, "exactly one"),
    ({"prompt": "a", "messages": [{"role": "user", "content": "b"}]}, "exactly one"),
    ({"prompt": ""}, "prompt"),
    ({"messages": []}, "messages"),
    ({"messages": [{"role": "robot", "content": "x"}]}, r"messages\[0\].role"),
    ({"messages": [{"role": "user", "content": 5}]}, r"messages\[0\].content"),
])
def test_bad_prompt_input_is_rejected(smollm2_tokenizer, kwargs, message):
    with pytest.raises(ValueError, match=message):
        prompt_ids(smollm2_tokenizer, **kwargs)


def test_chat_on_a_base_model_is_rejected(gemma3_tokenizer):
    with pytest.raises(ValueError, match="chat template"):
        prompt_ids(gemma3_tokenizer, messages=[{"role": "user", "content": "Hi"}])
