"""Gemma 3 (sliding-window layers, window 512): rollback past the window by cropping with past recording,
and the re-prefill fallback when a cache cannot crop — both give what a fresh decode of the prefix gives."""

import pytest
import torch

from guardrail.engines.transformers.decoder import StreamingDecoder, generation_eos_ids
from guardrail.engines.transformers.kv_cache import KVCache, has_sliding_layers
from guardrail.guard.events import Finish, Rollback, TextDelta
from guardrail.matching.compiler import compile_artefact
from guardrail.matching.obfuscation import OFF  # the artefacts here compile the lists as they are
from guardrail.matching.textmatch import TextMatcher
from guardrail.matching.vocab import TokenVocab
from guardrail.params import SamplingParams
from guardrail.prompts import prompt_ids
from guardrail.wordlists.wordlist import wordlist_from_terms

pytestmark = pytest.mark.slow

CAPITALS = [("Italy", "Rome"), ("Spain", "Madrid"), ("Germany", "Berlin"), ("Japan", "Tokyo"), ("Egypt", "Cairo"),
            ("Canada", "Ottawa"), ("Russia", "Moscow"), ("Greece", "Athens"), ("Portugal", "Lisbon"),
            ("Austria", "Vienna"), ("Norway", "Oslo"), ("Peru", "Lima"), ("Kenya", "Nairobi"), ("Chile", "Santiago"),
            ("France", "Paris")]
# A few-shot prompt longer than the 512-token window, after which the base model answers " Paris".
LONG_PROMPT = "".join(f"Q: What is the capital of {country}?\nA: The capital of {country} is {city}.\n"
                      for country, city in CAPITALS * 2) + "Q: What is the capital of France?\nA:"


@pytest.fixture(scope="module")
def gemma3_decoder_vocab(gemma3_model, gemma3_tokenizer):
    return TokenVocab.from_tokenizer(gemma3_tokenizer, eos_ids=generation_eos_ids(gemma3_model))


@pytest.fixture(scope="module")
def long_prompt_ids(gemma3_tokenizer, gemma3_model):
    ids = prompt_ids(gemma3_tokenizer, prompt=LONG_PROMPT)
    window = gemma3_model.config.sliding_window
    assert has_sliding_layers(gemma3_model) and len(ids) > window + 50
    return ids


def fresh_logits(model, ids):
    return KVCache(model).forward(ids)


def test_crop_past_the_window_with_past_recording_equals_a_fresh_prefill(gemma3_model, long_prompt_ids):
    ids = long_prompt_ids
    kv = KVCache(gemma3_model, record_past=True)
    kv.forward(ids[:-4])
    for token in ids[-4:]:
        kv.forward([token])
    assert kv.can_crop(3)
    assert kv.rollback_to(len(ids) - 3, ids) is False  # cropped, no re-prefill
    after = kv.forward([ids[-3]])
    assert kv.reprefills == 0
    torch.testing.assert_close(after, fresh_logits(gemma3_model, ids[:-2]), atol=1e-3, rtol=1e-4)


def test_cache_that_cannot_crop_is_rebuilt_and_equals_a_fresh_prefill(gemma3_model, long_prompt_ids):
    ids = long_prompt_ids
    kv = KVCache(gemma3_model, record_past=False)  # sliding layers then keep only the window: cannot crop
    kv.forward(ids[:-2])
    kv.forward([ids[-2]])
    assert not kv.can_crop(1)
    assert kv.rollback_to(len(ids) - 2, ids) is True
    assert kv.reprefills == 1 and kv.length == len(ids) - 2
    after = kv.forward([ids[-2]])
    torch.testing.assert_close(after, fresh_logits(gemma3_model, ids[:-1]), atol=1e-3, rtol=1e-4)


def test_after_a_crop_a_deeper_rollback_falls_back_to_reprefill(gemma3_model, long_prompt_ids):
    # transformers trims a sliding layer back to the window on every crop, so the states before the last
    # crop target are gone: can_crop must say so instead of cropping into a wrong cache.
    ids = long_prompt_ids
    kv = KVCache(gemma3_model, record_past=True)
    kv.forward(ids[:-3])
    kv.forward([ids[-3]])
    kv.forward([ids[-2]])
    assert kv.rollback_to(len(ids) - 2, ids) is False  # cropped: sliding layers now hold just the window
    kv.forward([ids[-2]])
    assert kv.can_crop(1) and not kv.can_crop(2)
    assert kv.rollback_to(len(ids) - 3, ids) is True
    after = kv.forward([ids[-3]])
    torch.testing.assert_close(after, fresh_logits(gemma3_model, ids[:-2]), atol=1e-3, rtol=1e-4)


def test_fallback_path_gives_the_same_text_as_the_crop_path(gemma3_model, gemma3_tokenizer, gemma3_decoder_vocab,
                                                            long_prompt_ids):
    terms = [wordlist_from_terms(["Paris", "capital"])]
    artefact = compile_artefact(gemma3_decoder_vocab, terms)
    params = SamplingParams(temperature=0, max_tokens=8)
    unguarded = list(StreamingDecoder(gemma3_model, gemma3_tokenizer, gemma3_decoder_vocab)
                     .stream(long_prompt_ids, None, params))[-1]
    assert TextMatcher(terms, obfuscation=OFF).scan(unguarded.text), unguarded.text  # the model does say it

    runs = {}
    for record_past in (True, False):
        decoder = StreamingDecoder(gemma3_model, gemma3_tokenizer, gemma3_decoder_vocab, record_past=record_past)
        events = list(decoder.stream(long_prompt_ids, artefact, params))
        runs[record_past] = events
        finish = events[-1]
        assert isinstance(finish, Finish)
        assert any(isinstance(e, Rollback) for e in events)
        assert TextMatcher(terms, obfuscation=OFF).scan(finish.text) == []
        assert "".join(e.text for e in events if isinstance(e, TextDelta)) == finish.text
    cropped, rebuilt = runs[True][-1], runs[False][-1]
    assert cropped.usage.reprefills == 0
    crops = sum(1 for e in runs[True] if isinstance(e, Rollback) and e.tokens_discarded)
    assert rebuilt.usage.reprefills == crops > 0
    assert rebuilt.text == cropped.text
    assert rebuilt.usage.forward_passes == cropped.usage.forward_passes + rebuilt.usage.reprefills
