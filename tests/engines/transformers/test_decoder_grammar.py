"""Structured output under the guard on the real SmolLM2, single-stream and batched (docs/structured-output.md):
on prompts whose answer names a banned term inside a JSON string value, every answer parses against the
schema, contains the term in no streamed prefix, and got there by rollback (not by refusing); the grammar
matcher ends in step with the session's kept tokens; a schema that can only be satisfied by a banned term
ends with ``content_filter`` before it."""

from __future__ import annotations

import json

import jsonschema
import pytest
from helpers.streams import assert_no_leak

from guardrail.engines.transformers.batched import BatchedDecoder
from guardrail.engines.transformers.decoder import Generation
from guardrail.guard.events import Finish, Rollback
from guardrail.matching.compiler import compile_artefact
from guardrail.params import SamplingParams
from guardrail.prompts import prompt_ids
from guardrail.wordlists.wordlist import wordlist_from_terms

#: The generation's wall-clock limit is not what these tests check (a loaded machine would end early).
NO_DEADLINE = 3600.0
SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"],
          "additionalProperties": False}
FORMAT = {"type": "json_schema", "json_schema": {"name": "answer", "schema": SCHEMA, "strict": True}}
#: (prompt, the term its unguarded JSON answer holds in "name").
ELICITING = [
    ("What is the capital of France? Answer in JSON with the key name.", "Paris"),
    ("What is the capital of the United Kingdom? Reply as JSON with the key name.", "London"),
]
LISTS = [wordlist_from_terms([term for _, term in ELICITING], name="targets")]


@pytest.fixture(scope="module")
def artefact(smollm2_decoder):
    return compile_artefact(smollm2_decoder.vocab, LISTS)


def _params(max_tokens: int = 40, response_format=FORMAT) -> SamplingParams:
    return SamplingParams(temperature=0, max_tokens=max_tokens, timeout_s=NO_DEADLINE, response_format=response_format)


def _prompt(tokenizer, text: str) -> list[int]:
    return prompt_ids(tokenizer, messages=[{"role": "user", "content": text}])


def _check(events) -> dict:
    """The answer parses against the schema and no prefix of it holds a term; returns the object."""
    assert_no_leak(events, LISTS)
    finish = events[-1]
    assert finish.reason == "stop", finish
    answer = json.loads(finish.text)
    jsonschema.validate(answer, SCHEMA)
    return answer


@pytest.mark.parametrize(("prompt", "term"), ELICITING)
def test_the_unguarded_json_answer_holds_the_term(smollm2_decoder, smollm2_tokenizer, prompt, term):
    """The premise: these prompts do elicit the term inside the JSON string."""
    events = list(smollm2_decoder.stream(_prompt(smollm2_tokenizer, prompt), None, _params()))
    answer = json.loads(events[-1].text)
    assert term in answer["name"]


@pytest.mark.parametrize(("prompt", "term"), ELICITING)
def test_a_banned_term_in_a_json_string_is_rolled_back_and_replaced(smollm2_decoder, smollm2_tokenizer, artefact,
                                                                    prompt, term):
    generation = Generation(smollm2_decoder, _prompt(smollm2_tokenizer, prompt), artefact, _params())
    events = list(generation.run())
    answer = _check(events)
    assert term.lower() not in answer["name"].lower()
    assert any(isinstance(e, Rollback) for e in events)  # replaced, not refused
    # The grammar matcher is past exactly the kept tokens (it rolled back with every rollback).
    assert generation.grammar is not None and generation.grammar.consumed == events[-1].token_ids


def test_batched_rows_hold_the_grammar_and_the_guard_as_alone(smollm2_decoder, smollm2_tokenizer, artefact):
    jobs = [(_prompt(smollm2_tokenizer, prompt), artefact, _params()) for prompt, _ in ELICITING]
    jobs.append((_prompt(smollm2_tokenizer, "Give me a JSON object describing a cat."), artefact,
                 _params(response_format={"type": "json_object"})))
    alone = [list(smollm2_decoder.stream(*job)) for job in jobs]
    batched = BatchedDecoder(smollm2_decoder, max_batch=4, prefill_chunk=256)
    requests = [batched.submit(*job) for job in jobs]
    out = {r.id: [] for r in requests}
    while not batched.idle:
        for request, event in batched.step():
            out[request.id].append(event)
    rows = [out[r.id] for r in requests]
    assert max(batched.batch_sizes) > 1
    for row, single in zip(rows, alone):
        assert row[-1].text == single[-1].text and row[-1].token_ids == single[-1].token_ids
    for row in rows[:2]:
        _check(row)
        assert any(isinstance(e, Rollback) for e in row)
    assert_no_leak(rows[2], LISTS)  # json_object: held like alone (equal above), whatever its length
    assert rows[2][-1].text.startswith("{")


def test_a_schema_only_a_banned_term_satisfies_ends_with_content_filter_before_it(smollm2_decoder,
                                                                                   smollm2_tokenizer, artefact):
    """Dead end: the grammar allows only the term, the guard bans it: the usual path (rollbacks until no
    candidate or the budget is spent), never the term."""
    schema = {"type": "object", "properties": {"name": {"enum": ["Paris"]}}, "required": ["name"]}
    params = _params(response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": schema}})
    events = list(smollm2_decoder.stream(_prompt(smollm2_tokenizer, ELICITING[0][0]), artefact, params))
    assert_no_leak(events, LISTS)
    finish = events[-1]
    assert isinstance(finish, Finish) and finish.reason == "content_filter"
    assert finish.text.startswith('{"name": "') and "Paris" not in finish.text


# -- checking the pick first (GrammarState.pick) against masking every position ------------------------------

PERSON = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer", "minimum": 0},
                                           "city": {"type": "string"}},
          "required": ["name", "age", "city"], "additionalProperties": False}
PERSON_FORMAT = {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON, "strict": True}}


def _tool_format() -> dict:
    from service.tool_grammar import ToolSpec, tool_grammar

    tools = [ToolSpec("add_person", PERSON, strict=True),
             ToolSpec("get_weather", {"type": "object", "properties": {"city": {"type": "string"}},
                                      "required": ["city"]}, strict=True)]
    return tool_grammar("hermes", tools, "required", None)


def _both_ways(decoder, monkeypatch, prompt, artefact, params):
    """The events and picks checked first, then the events masking every position first."""
    generation = Generation(decoder, prompt, artefact, params)
    checked = list(generation.run())
    assert generation.grammar is not None and not generation.grammar_first
    with monkeypatch.context() as patch:
        patch.setattr(decoder, "grammar_check_first", False)
        reference = Generation(decoder, prompt, artefact, params)
        masked = list(reference.run())
        assert reference.grammar_first
    return checked, masked, generation.grammar.picks


def test_greedy_tokens_checked_first_equal_masking_every_position(smollm2_decoder, smollm2_tokenizer, artefact,
                                                                 monkeypatch):
    """Greedy decoding: the same events (text, rollbacks, tokens, finish) both ways, on the name schema under
    the guard (rollbacks in a string), a person schema, JSON mode and a tool call; every way GrammarState.pick
    decides (forced, accepted, refused) is taken."""
    tool = _tool_format()
    cases = [(ELICITING[0][0], artefact, FORMAT, 40),
             ("Describe Ada Lovelace as JSON (name, age, city).", artefact, PERSON_FORMAT, 60),
             ("Give me a JSON object describing a cat.", None, {"type": "json_object"}, 48),
             ("Add Ada Lovelace, 36, from London, to my contacts.", None, tool, 80)]
    totals = {"forced": 0, "accepted": 0, "refused": 0}
    for prompt, lists, response_format, max_tokens in cases:
        params = SamplingParams(temperature=0, max_tokens=max_tokens, timeout_s=NO_DEADLINE,
                                response_format=response_format)
        checked, masked, picks = _both_ways(smollm2_decoder, monkeypatch, _prompt(smollm2_tokenizer, prompt),
                                            lists, params)
        assert [repr(e) for e in checked[:-1]] == [repr(e) for e in masked[:-1]], prompt
        assert (checked[-1].text, checked[-1].token_ids, checked[-1].reason) == (
            masked[-1].text, masked[-1].token_ids, masked[-1].reason), prompt
        for kind, n in picks.items():
            totals[kind] += n
    assert all(totals.values()), totals


def test_sampled_tokens_checked_first_follow_the_grammar(smollm2_decoder, smollm2_tokenizer, artefact):
    """Sampling at temperature 1.5 with the watermark (warpers that act on each score alone): every kept token is
    one the grammar allows (the matcher consumes each, or sync raises), some draws were refused and drawn
    again, and the answer parses against the schema."""
    params = SamplingParams(temperature=1.5, seed=3, max_tokens=60, timeout_s=NO_DEADLINE, watermark=True,
                            response_format=PERSON_FORMAT)
    generation = Generation(smollm2_decoder, _prompt(smollm2_tokenizer, "Describe a famous scientist as JSON."),
                            artefact, params)
    events = list(generation.run())
    assert not generation.grammar_first and generation.grammar is not None
    assert generation.grammar.consumed == events[-1].token_ids
    assert generation.grammar.picks["refused"] > 0
    if events[-1].reason == "stop":
        jsonschema.validate(json.loads(events[-1].text), PERSON)


def test_top_p_masks_first(smollm2_decoder, smollm2_tokenizer):
    """A warper that keeps candidates by mass would see forbidden tokens among them unmasked: mask first."""
    params = SamplingParams(temperature=0.8, top_p=0.9, seed=1, max_tokens=8, response_format=FORMAT)
    assert Generation(smollm2_decoder, _prompt(smollm2_tokenizer, "Hi"), None, params).grammar_first


def test_an_answer_max_tokens_would_cut_is_closed_within_it(smollm2_decoder, smollm2_tokenizer, monkeypatch):
    """Near max_tokens the grammar's closing path takes over (GrammarState.close_within): the answer ends with the
    end id inside the budget and parses against the schema; without it the same request is cut mid-JSON."""
    import guardrail.engines.transformers.decoder as decoder_module

    prompt = _prompt(smollm2_tokenizer, "Describe Ada Lovelace as JSON (name, age, city), with a long name.")
    params = _params(max_tokens=24, response_format=PERSON_FORMAT)  # the shortest answer is 18 tokens and the end
    with monkeypatch.context() as patch:
        patch.setattr(decoder_module, "CLOSING_HORIZON", 0)
        cut = list(Generation(smollm2_decoder, prompt, None, params).run())[-1]
    assert cut.reason == "length"
    with pytest.raises(json.JSONDecodeError):
        json.loads(cut.text)
    generation = Generation(smollm2_decoder, prompt, None, params)
    finish = list(generation.run())[-1]
    assert finish.reason == "stop" and len(finish.token_ids) <= 24
    jsonschema.validate(json.loads(finish.text), PERSON)
    assert generation.grammar is not None and generation.grammar.closed > 0


def test_an_answer_that_fits_is_not_changed_by_the_closing_check(smollm2_decoder, smollm2_tokenizer, artefact,
                                                                 monkeypatch):
    """The closing check runs over the last CLOSING_HORIZON tokens (here all 40) and takes over only when the
    room would not hold the answer: with room to spare the events are those without it."""
    import guardrail.engines.transformers.decoder as decoder_module

    prompt = _prompt(smollm2_tokenizer, ELICITING[0][0])
    generation = Generation(smollm2_decoder, prompt, artefact, _params())
    checked = list(generation.run())
    with monkeypatch.context() as patch:
        patch.setattr(decoder_module, "CLOSING_HORIZON", 0)
        unchecked = list(Generation(smollm2_decoder, prompt, artefact, _params()).run())
    assert [repr(e) for e in checked[:-1]] == [repr(e) for e in unchecked[:-1]]
    assert checked[-1].text == unchecked[-1].text and checked[-1].reason == unchecked[-1].reason == "stop"
    assert generation.grammar is not None and generation.grammar.closed == 0
