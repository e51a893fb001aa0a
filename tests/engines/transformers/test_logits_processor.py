"""Mask-only guarding inside ``model.generate`` (SmolLM2): the weaker guarantee, stated in the test names.

What mask-only promises (guardrail/engines/transformers/logits_processor.py): no emitted token completes a term
from the text before it; a word term can still complete *after the fact* when the text ends right after it
(``max_new_tokens``), and the model glues or rephrases around masked tokens. The full guarantee is the
rollback decoder's (tests/test_decoder_*.py).
"""

import pytest
import torch

from guardrail.engines.transformers.decoder import generation_eos_ids
from guardrail.engines.transformers.logits_processor import MaskOnlyLogitsProcessor
from guardrail.matching.compiler import compile_artefact
from guardrail.matching.obfuscation import OFF  # the artefacts here compile the lists as they are
from guardrail.matching.textmatch import TextMatcher
from guardrail.matching.vocab import TokenVocab
from guardrail.prompts import prompt_ids
from guardrail.wordlists.wordlist import MatchMode, Term, wordlist_from_terms

pytestmark = pytest.mark.slow

ANIMALS = ("cow", "cows", "pig", "pigs", "chicken", "chickens", "sheep", "horse", "horses", "goat", "goats",
           "dog", "dogs", "cat", "cats", "duck", "ducks")
PROMPTS = ("Name five animals that live on a farm.", "List some pets people keep at home.")
MAX_NEW_TOKENS = 24


@pytest.fixture(scope="module")
def vocab(smollm2_model, smollm2_tokenizer):
    return TokenVocab.from_tokenizer(smollm2_tokenizer, eos_ids=generation_eos_ids(smollm2_model))


@pytest.fixture(scope="module")
def chats(smollm2_tokenizer):
    return [prompt_ids(smollm2_tokenizer, messages=[{"role": "user", "content": p}]) for p in PROMPTS]


def generate(model, tokenizer, vocab, batch, processor=None, **kwargs):
    """Greedy ``model.generate`` over left-padded prompts; the completion texts (and the processor's after-the-fact
    hits, checked on the output)."""
    width = max(len(ids) for ids in batch)
    pad = min(vocab.eos_ids)
    input_ids = torch.tensor([[pad] * (width - len(ids)) + ids for ids in batch])
    attention = torch.tensor([[0] * (width - len(ids)) + [1] * len(ids) for ids in batch])
    with torch.inference_mode():
        out = model.generate(input_ids, attention_mask=attention, do_sample=False, max_new_tokens=MAX_NEW_TOKENS,
                             pad_token_id=pad, logits_processor=[processor] if processor else None, **kwargs)
    texts = [tokenizer.decode(row[width:], skip_special_tokens=True) for row in out]
    return texts if processor is None else (texts, processor.missed(out))


@pytest.fixture(scope="module")
def unguarded(smollm2_model, smollm2_tokenizer, vocab, chats):
    return generate(smollm2_model, smollm2_tokenizer, vocab, chats)


def test_precondition_the_unguarded_model_names_the_animals(unguarded):
    matcher = TextMatcher([wordlist_from_terms(ANIMALS)])
    assert all(matcher.scan(text) for text in unguarded), unguarded


def test_mask_only_single_token_substring_terms_never_appear(smollm2_model, smollm2_tokenizer, vocab, chats,
                                                             unguarded):
    lists = [wordlist_from_terms([Term(a, MatchMode.SUBSTRING) for a in ANIMALS])]
    processor = MaskOnlyLogitsProcessor(compile_artefact(vocab, lists), vocab)
    texts, missed = generate(smollm2_model, smollm2_tokenizer, vocab, chats, processor)
    matcher = TextMatcher(lists, obfuscation=OFF)
    assert [matcher.scan(text) for text in texts] == [[], []], texts
    assert texts != unguarded
    assert missed == [[], []]


def test_mask_only_word_terms_complete_only_after_the_fact_at_the_length_cut(smollm2_model, smollm2_tokenizer,
                                                                              vocab, chats):
    lists = [wordlist_from_terms(ANIMALS)]
    processor = MaskOnlyLogitsProcessor(compile_artefact(vocab, lists), vocab)
    texts, missed = generate(smollm2_model, smollm2_tokenizer, vocab, chats, processor)
    matcher = TextMatcher(lists, obfuscation=OFF)
    for text, row_missed in zip(texts, missed):
        found = matcher.scan(text)
        # Inside the text no term is complete; one may stand at the very end, where the text was cut (followed at
        # most by a character the cut split, decoded as U+FFFD).
        assert all(text[m.end:].strip(" \ufffd") == "" for m in found), (text, found)
        assert [m.term for m in found] == [h.term for h in row_missed]


def test_mask_only_masks_end_of_text_after_a_pending_word(smollm2_model, smollm2_tokenizer, vocab):
    # A session at " cat" (word pending): ending the text there would complete it, so EOS is masked.
    lists = [wordlist_from_terms(["cat"])]
    processor = MaskOnlyLogitsProcessor(compile_artefact(vocab, lists), vocab)
    cat = smollm2_tokenizer.encode(" cat", add_special_tokens=False)
    ids = torch.tensor([[1, 2, 3]])
    scores = torch.zeros((1, smollm2_model.config.vocab_size))
    processor(ids, scores)
    masked = processor(torch.cat([ids, torch.tensor([cat])], dim=1), scores)
    assert all(masked[0, e] == -float("inf") for e in vocab.eos_ids)
    assert masked[0, smollm2_tokenizer.encode("s", add_special_tokens=False)[0]] == 0  # " cats" is another word
    assert torch.equal(scores, torch.zeros_like(scores))  # the input scores are not modified


def test_beam_search_is_refused(smollm2_model, smollm2_tokenizer, vocab, chats):
    processor = MaskOnlyLogitsProcessor(compile_artefact(vocab, [wordlist_from_terms(["cat"])]), vocab)
    with pytest.raises(ValueError, match="num_beams"):
        generate(smollm2_model, smollm2_tokenizer, vocab, chats[:1], processor, num_beams=3)
