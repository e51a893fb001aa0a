"""Watermarked generation (transformers' WatermarkLogitsProcessor) is detected by WatermarkDetector, also when the
generation went through rollbacks; the same generation without the watermark is not flagged."""

import pytest

from guardrail.engines.transformers.decoder import StreamingDecoder, generation_eos_ids
from guardrail.engines.transformers.watermark import DEFAULT_Z_THRESHOLD, detect_watermark
from guardrail.guard.events import Rollback
from guardrail.matching.compiler import compile_artefact
from guardrail.matching.vocab import TokenVocab
from guardrail.params import SamplingParams
from guardrail.prompts import prompt_ids
from guardrail.wordlists.wordlist import wordlist_from_terms

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def generations(smollm2_model, smollm2_tokenizer):
    vocab = TokenVocab.from_tokenizer(smollm2_tokenizer, eos_ids=generation_eos_ids(smollm2_model))
    decoder = StreamingDecoder(smollm2_model, smollm2_tokenizer, vocab)
    # Common words banned so that the watermarked run rolls back several times.
    artefact = compile_artefact(vocab, [wordlist_from_terms(["the", "a", "and", "dragon"])])
    ids = prompt_ids(smollm2_tokenizer, messages=[{"role": "user", "content": "Tell me a story about a dragon."}])
    out = {}
    for watermark in (True, False):
        events = list(decoder.stream(ids, artefact, SamplingParams(temperature=1.0, seed=11, max_tokens=120,
                                                                   watermark=watermark)))
        out[watermark] = events
    return out


def test_watermarked_text_is_detected_despite_rollbacks(generations, smollm2_model, smollm2_tokenizer):
    events = generations[True]
    finish = events[-1]
    assert sum(isinstance(e, Rollback) for e in events) >= 2
    assert len(finish.token_ids) >= 60
    verdict = detect_watermark(finish.token_ids, smollm2_model.config)
    assert verdict.detected and verdict.z_score > DEFAULT_Z_THRESHOLD
    # What /v1/watermark/detect sees: the text, tokenized again.
    retokenized = smollm2_tokenizer.encode(finish.text, add_special_tokens=False)
    assert detect_watermark(retokenized, smollm2_model.config).detected


def test_text_without_watermark_is_not_flagged(generations, smollm2_model):
    finish = generations[False][-1]
    assert len(finish.token_ids) >= 60
    verdict = detect_watermark(finish.token_ids, smollm2_model.config)
    assert not verdict.detected and verdict.z_score < DEFAULT_Z_THRESHOLD


def test_detection_needs_two_tokens(smollm2_model):
    with pytest.raises(ValueError, match="token_ids"):
        detect_watermark([5], smollm2_model.config)
