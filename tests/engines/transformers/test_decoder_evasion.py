"""The evasion guard on real SmolLM2: prompts on which the decoder, after a rollback, writes the banned term
in a form the whole-word rule lets through — and what the guard does to them.

``data/evasion_prompts.json`` holds, per kind (``glued``, ``underscore``, ``edit``), a prompt, its banned term,
the decoding (greedy or a seed at temperature 1.0) and the form the decoder writes with the guard off
(measured; the first test re-checks it, so the cases stay meaningful when the model or tokenizer changes).
The forms are found with :func:`guardrail.matching.evasion_forms.find_evasions`, the text-level verifier,
and leaks with :class:`TextMatcher` on the answer and on every streamed prefix.
"""


import pytest
from helpers.paths import load_data
from helpers.streams import assert_no_leak

from guardrail.engines.transformers.batched import BatchedDecoder
from guardrail.engines.transformers.decoder import StreamingDecoder, generation_eos_ids
from guardrail.guard.events import Finish, Rollback
from guardrail.matching.compiler import compile_artefact
from guardrail.matching.evasion_forms import find_evasions
from guardrail.matching.term_spec import flatten
from guardrail.matching.textmatch import TextMatcher
from guardrail.matching.vocab import TokenVocab
from guardrail.params import SamplingParams
from guardrail.prompts import prompt_ids
from guardrail.wordlists.wordlist import MatchMode, Term, wordlist_from_terms

pytestmark = pytest.mark.slow

CASES = load_data("evasion_prompts.json")
#: Forms the substring escalation removes; ``edit`` forms need the ``edit`` mode (one edit of tolerance).
CAUGHT = ("glued", "underscore")
NO_HIT_PROMPTS = ["Describe a sunny day at the beach.", "Explain how a bicycle works.",
                  "Give me three tips for learning to cook."]


def case_id(case):
    return f"{case['kind']}:{case['term']}:{'greedy' if case['seed'] is None else case['seed']}"


@pytest.fixture(scope="module")
def decoder(smollm2_model, smollm2_tokenizer):
    vocab = TokenVocab.from_tokenizer(smollm2_tokenizer, eos_ids=generation_eos_ids(smollm2_model))
    return StreamingDecoder(smollm2_model, smollm2_tokenizer, vocab)


def lists_of(case):
    return [wordlist_from_terms([case["term"]], name="targets")]


def params_of(case, mode):
    return SamplingParams(temperature=0 if case["seed"] is None else 1.0, seed=case["seed"],
                          max_tokens=case["max_tokens"], evasion_guard=mode)


def run_case(decoder, tokenizer, case, mode):
    ids = prompt_ids(tokenizer, messages=[{"role": "user", "content": case["prompt"]}])
    return list(decoder.stream(ids, compile_artefact(decoder.vocab, lists_of(case)), params_of(case, mode)))


def forms_after_first_rollback(events, vocab, lists):
    """The evasion forms in the answer after its first rollback (as ``bench/decode.py`` counts them)."""
    finish = events[-1]
    rollbacks = [e for e in events if isinstance(e, Rollback)]
    if not rollbacks:
        return []
    first = min(r.position for r in rollbacks)
    offset = len(b"".join(vocab.token_bytes[t] for t in finish.token_ids[:first]).decode("utf-8", "replace"))
    return [f for f in find_evasions(finish.text, flatten(lists)[0]) if f.end > offset]


def test_every_kind_has_a_case():
    assert {case["kind"] for case in CASES} == {"glued", "underscore", "edit"}


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_without_the_guard_the_decoder_writes_the_form(decoder, smollm2_tokenizer, case):
    events = run_case(decoder, smollm2_tokenizer, case, "off")
    assert not any(isinstance(e, Rollback) and (e.escalated or e.evasion) for e in events)
    forms = [(f.kind, f.text) for f in forms_after_first_rollback(events, decoder.vocab, lists_of(case))]
    assert (case["kind"], case["form"]) in forms, events[-1].text
    assert_no_leak(events, lists_of(case))  # no leak either way: the form is no whole-word match


@pytest.mark.parametrize("mode", ["substring", "edit"])
@pytest.mark.parametrize("case", [c for c in CASES if c["kind"] in CAUGHT], ids=case_id)
def test_with_the_guard_the_form_is_gone(decoder, smollm2_tokenizer, case, mode):
    events = run_case(decoder, smollm2_tokenizer, case, mode)
    finish = events[-1]
    assert any(isinstance(e, Rollback) and e.escalated for e in events)
    forms = forms_after_first_rollback(events, decoder.vocab, lists_of(case))
    assert [f for f in forms if f.kind in CAUGHT] == [], finish.text
    assert_no_leak(events, lists_of(case))
    # The independent check of the contract: from the escalation position (the first rollback: a text written
    # before anything was refused keeps its forms, "def set_stupid" in one case) no substring occurrence.
    substring = [wordlist_from_terms([Term(case["term"], MatchMode.SUBSTRING)])]
    rollbacks = [e for e in events if isinstance(e, Rollback)]
    kept = finish.token_ids[:min(r.position for r in rollbacks)]
    head = b"".join(decoder.vocab.token_bytes[t] for t in kept).decode("utf-8", "replace")
    assert finish.text.startswith(head)
    assert TextMatcher(substring).scan(finish.text[len(head):]) == [], finish.text
    assert case["form"] not in finish.text[len(head):]


@pytest.mark.parametrize("case", [c for c in CASES if c["kind"] == "edit"], ids=case_id)
def test_a_one_edit_form_is_rolled_back_in_edit_mode_only(decoder, smollm2_tokenizer, case):
    assert case["form"] in run_case(decoder, smollm2_tokenizer, case, "substring")[-1].text
    events = run_case(decoder, smollm2_tokenizer, case, "edit")
    assert case["form"] not in events[-1].text
    assert forms_after_first_rollback(events, decoder.vocab, lists_of(case)) == [], events[-1].text
    assert any(isinstance(e, Rollback) and e.evasion for e in events)  # an escalated variant was rolled back
    assert_no_leak(events, lists_of(case))


@pytest.mark.parametrize("seed", [None, 0, 1], ids=lambda s: "greedy" if s is None else f"seed{s}")
def test_prompts_that_hit_nothing_decode_identically_with_and_without_the_guard(decoder, smollm2_tokenizer,
                                                                                  seed):
    lists = [wordlist_from_terms(sorted({c["term"] for c in CASES}), name="targets")]
    artefact = compile_artefact(decoder.vocab, lists)
    for prompt in NO_HIT_PROMPTS:
        ids = prompt_ids(smollm2_tokenizer, messages=[{"role": "user", "content": prompt}])
        outputs = []
        for mode in ("off", "substring"):
            params = SamplingParams(temperature=0 if seed is None else 1.0, seed=seed, max_tokens=24,
                                    evasion_guard=mode)
            events = list(decoder.stream(ids, artefact, params))
            assert not any(isinstance(e, Rollback) for e in events)
            outputs.append([e for e in events if not isinstance(e, Finish)] + [events[-1].token_ids])
        assert outputs[0] == outputs[1]


def test_the_batched_engine_rows_escalate_on_their_own(decoder, smollm2_tokenizer):
    """Every case with the guard on and off, plus a prompt that hits nothing, in one batch: each row equals
    its request decoded alone (escalation state is per row; nothing is shared but the compiled artefacts)."""
    jobs = []
    for case in CASES:
        ids = prompt_ids(smollm2_tokenizer, messages=[{"role": "user", "content": case["prompt"]}])
        artefact = compile_artefact(decoder.vocab, lists_of(case))
        jobs += [(ids, artefact, params_of(case, "substring")), (ids, artefact, params_of(case, "off"))]
    quiet = prompt_ids(smollm2_tokenizer, messages=[{"role": "user", "content": NO_HIT_PROMPTS[0]}])
    jobs.append((quiet, jobs[0][1], SamplingParams(temperature=0, max_tokens=16)))
    batched = BatchedDecoder(decoder, max_batch=8).generate(jobs)
    for job, got in zip(jobs, batched, strict=True):
        alone = list(decoder.stream(*job))
        assert got[-1].token_ids == alone[-1].token_ids and got[-1].text == alone[-1].text
        assert [e for e in got if isinstance(e, Rollback)] == [e for e in alone if isinstance(e, Rollback)]
    escalated = [any(isinstance(e, Rollback) and e.escalated for e in events) for events in batched]
    assert escalated[0::2][:len(CASES)] == [True] * len(CASES) and not any(escalated[1::2])
