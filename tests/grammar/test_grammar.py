"""Structured output's building blocks (guardrail/grammar/, docs/structured-output.md) on the real SmolLM2
tokenizer and llguidance: parsing ``response_format``, the grammar state following the guard session's kept
tokens through a rollback, and the two masks combined at the position the guard rolled back to."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from guardrail.engines.transformers.sampling import BanMask, TokenPicker
from guardrail.grammar.format import ANY_OBJECT, StructuredOutput
from guardrail.grammar.matcher import GrammarState, in_json_string, string_state, unpack_bitmask
from guardrail.guard.session import KEEP, ROLLBACK, GuardSession
from guardrail.matching.compiler import compile_artefact
from guardrail.params import SamplingParams
from guardrail.wordlists.wordlist import wordlist_from_terms

NAME_SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"],
               "additionalProperties": False}
NAME_FORMAT = {"type": "json_schema", "json_schema": {"name": "answer", "schema": NAME_SCHEMA, "strict": True}}


def _state(spec, tokenizer, vocab, end_ids=(2,)):
    return GrammarState(spec, tokenizer, vocab, end_ids, len(vocab))


def _allowed(state) -> set[int]:
    return set(np.flatnonzero(~state.forbidden()[0].numpy()).tolist())


# -- response_format ------------------------------------------------------------------------------------------


def test_response_format_shapes_parse_to_a_canonical_schema():
    assert StructuredOutput.from_response_format(None) is None
    assert StructuredOutput.from_response_format({"type": "text"}) is None
    assert StructuredOutput.from_response_format({"type": "json_object"}) == StructuredOutput("json_object", ANY_OBJECT)
    spec = StructuredOutput.from_response_format(NAME_FORMAT)
    assert (spec.kind, spec.name, spec.strict) == ("json_schema", "answer", True)
    assert json.loads(spec.schema) == NAME_SCHEMA
    # Key order does not matter: equal schemas are one cache entry.
    reordered = {"type": "json_schema", "json_schema": {"schema": dict(reversed(list(NAME_SCHEMA.items())))}}
    assert StructuredOutput.from_response_format(reordered).schema == spec.schema
    assert SamplingParams(response_format=NAME_FORMAT).response_format == spec


@pytest.mark.parametrize("value", [
    {"type": "grammar"},
    {"type": "json_schema"},
    {"type": "json_schema", "json_schema": {"schema": [1, 2]}},
    {"type": "json_schema", "json_schema": {"name": 3, "schema": {}}},
    {"type": "json_schema", "json_schema": {"schema": {}, "strict": "yes"}},
    "json_object",
])
def test_a_malformed_response_format_is_a_value_error_naming_the_field(value):
    with pytest.raises(ValueError, match=r"^response_format\b"):
        SamplingParams(response_format=value)


@pytest.mark.parametrize("schema", [{"type": "foo"}, {"properties": {"a": {"$ref": "#/nowhere"}}},
                                    {"type": "string", "pattern": "(unclosed"}])
def test_a_schema_that_does_not_compile_names_the_field(schema, smollm2_tokenizer, smollm2_vocab):
    with pytest.raises(ValueError, match=r"^response_format: invalid JSON schema: "):
        _state(StructuredOutput.from_schema(schema), smollm2_tokenizer, smollm2_vocab)


# -- the grammar state --------------------------------------------------------------------------------------------


def test_the_mask_allows_each_token_of_a_valid_answer_and_the_end_only_once_it_is_complete(
        smollm2_tokenizer, smollm2_vocab):
    spec = StructuredOutput.from_response_format(NAME_FORMAT)
    state = _state(spec, smollm2_tokenizer, smollm2_vocab, end_ids=(2, 7))
    tokens = smollm2_tokenizer.encode('{"name": "Bob"}', add_special_tokens=False)
    for i, token in enumerate(tokens):
        state.sync(tokens[:i])
        allowed = _allowed(state)
        assert token in allowed
        assert not allowed & {2, 7}  # incomplete JSON: no end id
    state.sync(tokens)
    assert state.accepting and _allowed(state) == {2, 7}  # complete: only the request's end ids
    assert state.consumed == tuple(tokens)


def test_sync_rolls_the_matcher_back_to_the_sessions_tokens(smollm2_tokenizer, smollm2_vocab):
    spec = StructuredOutput.from_response_format(NAME_FORMAT)
    state = _state(spec, smollm2_tokenizer, smollm2_vocab)
    fresh = _state(spec, smollm2_tokenizer, smollm2_vocab)
    tokens = smollm2_tokenizer.encode('{"name": "A cat sat on the mat"}', add_special_tokens=False)
    other = smollm2_tokenizer.encode('{"name": "A dog"}', add_special_tokens=False)
    state.sync(tokens)
    state.sync(tokens[:4])  # rolled back len(tokens) - 4 tokens
    fresh.sync(tokens[:4])
    assert state.consumed == tuple(tokens[:4])
    assert torch.equal(state.forbidden(), fresh.forbidden())
    state.sync(other)  # a different continuation after a common prefix: back to it, then forward
    fresh.sync(other)
    assert state.consumed == tuple(other)
    assert torch.equal(state.forbidden(), fresh.forbidden())


@pytest.mark.parametrize("extra_logits", [0, 64])  # a logits row wider than the tokenizer's ids
def test_apply_adds_minus_infinity_exactly_where_the_mask_forbids(smollm2_tokenizer, smollm2_vocab, extra_logits):
    spec = StructuredOutput.from_response_format(NAME_FORMAT)
    state = GrammarState(spec, smollm2_tokenizer, smollm2_vocab, (2, 7), len(smollm2_vocab) + extra_logits)
    tokens = smollm2_tokenizer.encode('{"name": "Bob"}', add_special_tokens=False)
    for i in (0, 2, len(tokens) - 1, len(tokens)):  # the first state, inside the string, before and after "}"
        state.sync(tokens[:i])
        scores = torch.randn(1, state.num_logits)
        expected = scores.clone().masked_fill_(state.forbidden(), -float("inf"))
        state.apply(scores, tokens[:i])
        assert torch.equal(scores, expected)
        assert bool(torch.isinf(scores[0, len(smollm2_vocab):]).all())


def test_unpack_bitmask_reads_bit_i_of_word_i_over_32():
    words = np.array([0b101, -(1 << 31)], dtype=np.int32)  # -2**31: only bit 31 set
    bits = unpack_bitmask(words, 70)
    assert np.flatnonzero(bits).tolist() == [0, 2, 63]
    assert len(bits) == 70  # ids past the mask are not allowed


# -- grammar + guard -----------------------------------------------------------------------------------------------


def test_a_banned_term_inside_a_string_rolls_both_back_and_the_combined_mask_keeps_a_way_on(
        smollm2_tokenizer, smollm2_vocab):
    """The guard's hit inside a JSON string value: the session rolls back to where the term began, the grammar
    state follows it there, and at that position the combined mask bans the term's first token (guard) while
    still allowing other string content (grammar): the term is replaced, not refused."""
    artefact = compile_artefact(smollm2_vocab, [wordlist_from_terms(["cat"])])
    spec = StructuredOutput.from_response_format(NAME_FORMAT)
    session = GuardSession(artefact, smollm2_vocab, eos_ids=[2])
    grammar = _state(spec, smollm2_tokenizer, smollm2_vocab)
    tokens = smollm2_tokenizer.encode('{"name": "cat"}', add_special_tokens=False)
    cat = smollm2_tokenizer.encode("cat", add_special_tokens=False)[0]
    assert cat in tokens
    steps = []
    for token in tokens:
        grammar.sync(session.token_ids)
        assert token in _allowed(grammar)  # the grammar would let the model write the term
        step = session.accept(token)
        steps.append(step.kind)
        if step.kind == ROLLBACK:
            break
    assert steps[-1] == ROLLBACK and set(steps[:-1]) == {KEEP}
    start = tokens.index(cat)
    assert session.position == start
    grammar.sync(session.token_ids)
    assert grammar.consumed == tuple(tokens[:start])  # the matcher rolled back as many tokens as the guard
    scores = torch.zeros((1, len(smollm2_vocab)))
    BanMask().apply(scores, session.mask_ids())
    grammar.apply(scores, session.token_ids)
    assert scores[0, cat] == -float("inf")  # the guard's ban
    assert cat in _allowed(grammar)  # ... which the grammar alone allows
    survivors = set(torch.isfinite(scores[0]).nonzero().flatten().tolist())
    assert survivors and survivors <= _allowed(grammar)
    letters = smollm2_tokenizer.encode("Bob", add_special_tokens=False)[0]
    assert letters in survivors  # another name can be written


# -- engines that cannot roll a grammar back -------------------------------------------------------------------


def test_the_gateway_refuses_a_json_format_naming_the_field():
    from guardrail.engines.base import check_request
    from guardrail.engines.remote.engine import UNSUPPORTED

    params = SamplingParams(response_format={"type": "json_object"})
    with pytest.raises(ValueError, match=r"^response_format: not supported on the remote engine"):
        check_request([1, 2], params, num_logits=100, max_model_len=64, unsupported=UNSUPPORTED, engine="remote engine")
    assert check_request([1, 2], SamplingParams(), num_logits=100, max_model_len=64, unsupported=UNSUPPORTED,
                         engine="remote engine") == [1, 2]


def test_the_boolean_schemas():
    assert StructuredOutput.from_schema(True).schema == "{}"  # any value
    with pytest.raises(ValueError, match=r"^guided_json: the schema false admits no value"):
        StructuredOutput.from_schema(False, field="guided_json")


# -- checking the pick first (GrammarState.pick) -----------------------------------------------------------------

PERSON = {"type": "object", "properties": {
    "name": {"type": "string"}, "age": {"type": "integer", "minimum": 0},
    "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 4},
    "role": {"enum": ["admin", "editor", "viewer"]}},
    "required": ["name", "age", "tags", "role"], "additionalProperties": False}
PERSON_ARGS = {"name": "Ada Lovelace", "age": 36, "tags": ["math", "poetry"], "role": "editor"}


def _walks(tokenizer):
    """(spec, answer text): a schema's answer (keys in the canonical schema's order) and a strict tool call after
    text (the tool grammar of service/tool_grammar.py), each with forced runs (keys, the tool's name, the markup)
    and free ones (string content, numbers)."""
    from service.tool_grammar import ToolSpec, tool_grammar

    person = json.dumps(PERSON_ARGS, separators=(", ", ": "))
    tools = [ToolSpec("add_person", PERSON, strict=True),
             ToolSpec("get_weather", {"type": "object", "properties": {"city": {"type": "string"}}}, strict=True)]
    call = '<tool_call>\n{"name": "add_person", "arguments": ' + person + "}\n</tool_call>"
    return [(StructuredOutput.from_schema(PERSON), json.dumps(PERSON_ARGS, separators=(", ", ": "), sort_keys=True)),
            (tool_grammar("hermes", tools, "auto", None), "Adding her now.\n" + call)]


def test_allows_is_the_mask_at_every_position_of_a_schema_answer_and_a_tool_call(smollm2_tokenizer, smollm2_vocab):
    """allows() answers without the mask (a forced token, or llguidance's validate_tokens where nothing is
    forced) and must equal it: checked on every id the mask allows, every id whose bytes begin the rest of the
    answer (the non-canonical splits that the mask forbids where the grammar forces bytes and validate_tokens
    alone would take) and every 61st id."""
    kinds = set()
    for spec, text in _walks(smollm2_tokenizer):
        tokens = smollm2_tokenizer.encode(text, add_special_tokens=False)
        rest = text.encode()
        for i in range(len(tokens) + 1):
            masked, checked = _state(spec, smollm2_tokenizer, smollm2_vocab), _state(spec, smollm2_tokenizer,
                                                                                   smollm2_vocab)
            masked.sync(tokens[:i])
            checked.sync(tokens[:i])
            allowed = _allowed(masked)
            prefixes = {t for t, b in enumerate(smollm2_vocab.token_bytes) if b and rest.startswith(b)}
            ids = sorted(allowed | prefixes | set(range(0, len(smollm2_vocab), 61)) | {2})
            assert [checked.allows(t) for t in ids] == [t in allowed for t in ids], (i, text[:40])
            kinds.add("forced" if checked.forced() is not None else "bytes" if checked._bytes_forced() else "free")
            if i < len(tokens):
                rest = rest[len(smollm2_vocab.token_bytes[tokens[i]]):]
    assert kinds == {"forced", "bytes", "free"}  # every way allows() answers was taken


def test_the_greedy_pick_checked_first_is_the_argmax_of_the_masked_scores(smollm2_tokenizer, smollm2_vocab):
    """At every position of both walks, for rows whose argmax is the answer's token (accepted or forced), a
    random id (mostly refused: masked and picked again), a tie, and every score -inf but a forbidden id's."""
    rng = torch.Generator().manual_seed(7)
    totals = {"forced": 0, "accepted": 0, "refused": 0}
    for spec, text in _walks(smollm2_tokenizer):
        tokens = smollm2_tokenizer.encode(text, add_special_tokens=False)
        checked = _state(spec, smollm2_tokenizer, smollm2_vocab)
        for i in range(len(tokens)):
            reference = _state(spec, smollm2_tokenizer, smollm2_vocab)
            reference.sync(tokens[:i])
            forbidden = int(np.flatnonzero(reference.forbidden()[0].numpy())[0])
            rows = [torch.randn(1, len(smollm2_vocab), generator=rng) for _ in range(3)]
            rows[0][0, tokens[i]] = 10.0
            rows[2][0, tokens[i]] = rows[2][0, forbidden] = 10.0  # the lowest id of the tie may be refused
            rows.append(torch.full((1, len(smollm2_vocab)), -float("inf")))
            rows[3][0, forbidden] = 0.0
            for row in rows:
                expected = TokenPicker(SamplingParams(temperature=0)).pick(reference.apply(row.clone(), tokens[:i]))
                got = checked.pick(row.clone(), tokens[:i], TokenPicker(SamplingParams(temperature=0)).pick)
                assert got == expected, (i, text[:40])
        for kind, n in checked.picks.items():
            totals[kind] += n
    assert all(totals.values()), totals


def test_a_draw_checked_first_follows_the_masked_distribution_exactly(smollm2_tokenizer, smollm2_vocab):
    """Sampling: draw over the unmasked scores, keep the draw if the grammar allows it, else mask and draw again.
    The draws are enumerated, not sampled: a picker that returns a given first draw records the scores of the
    second; P(x) = sum over first draws d of p(d) [d allowed: d = x; refused: masked softmax(x)], which must be
    the masked softmax, and no outcome is a forbidden id."""
    spec = StructuredOutput.from_schema(PERSON)
    text = json.dumps(PERSON_ARGS, separators=(", ", ": "), sort_keys=True)
    tokens = smollm2_tokenizer.encode(text, add_special_tokens=False)
    # After '"age": ': digits only, nothing forced.
    position = next(i for i in range(len(tokens)) if smollm2_tokenizer.decode(tokens[:i]).endswith('"age": '))
    reference = _state(spec, smollm2_tokenizer, smollm2_vocab)
    reference.sync(tokens[:position])
    assert reference.forced() is None
    allowed = sorted(_allowed(reference))
    forbidden = [int(t) for t in np.flatnonzero(reference.forbidden()[0].numpy())[:3]]
    support = allowed[:3] + forbidden
    scores = torch.full((1, len(smollm2_vocab)), -float("inf"))
    scores[0, support] = torch.tensor([0.5, -1.0, 2.0, 1.5, 0.0, 3.0])
    p = torch.softmax(scores, dim=-1)[0]
    masked = torch.softmax(reference.apply(scores.clone(), tokens[:position]), dim=-1)[0]
    outcome = torch.zeros(len(smollm2_vocab), dtype=torch.float64)
    for first in support:
        state = _state(spec, smollm2_tokenizer, smollm2_vocab)
        calls: list[torch.Tensor] = []  # the distribution each draw was asked over

        def pick(row, first=first, calls=calls):
            calls.append(torch.softmax(row, dim=-1)[0].double())
            return first if len(calls) == 1 else int(row.argmax())  # only the first draw's value matters

        got = state.pick(scores.clone(), tokens[:position], pick)
        if first in allowed:
            assert got == first and len(calls) == 1
            outcome[first] += p[first].double()
        else:
            assert len(calls) == 2 and state.picks["refused"] == 1
            outcome += p[first].double() * calls[1]
    assert torch.allclose(outcome, masked.double(), atol=1e-9)
    assert float(outcome[forbidden].sum()) == 0.0


# -- closing within max_tokens --------------------------------------------------------------------------------


def _close(state, tokenizer) -> str:
    """Follow closing_path from the state; the text it adds (the matcher is left where it was)."""
    before = state.consumed
    path = state.closing_path(40)
    assert path is not None
    state.sync([*before, *path])
    assert state.accepting  # the path ends at a complete value
    state.sync(before)
    return tokenizer.decode(path)


def test_the_closing_path_closes_a_string_brackets_inside_it_do_not(smollm2_tokenizer, smollm2_vocab):
    from service.tool_grammar import ToolSpec, tool_grammar

    calculate = ToolSpec("calculate", {"type": "object", "properties": {"expression": {"type": "string"}},
                                       "required": ["expression"], "additionalProperties": False})
    state = _state(tool_grammar("hermes", [calculate], "named", "calculate", parallel=False), smollm2_tokenizer,
                   smollm2_vocab)
    # A string the model filled with brackets: they are characters of the string, only a quote closes it.
    text = '<tool_call>\n{"name": "calculate", "arguments": {"expression": "}}  # 144 / 12 = 12.5252'
    state.sync(smollm2_tokenizer.encode(text, add_special_tokens=False))
    added = _close(state, smollm2_tokenizer)
    assert added == '"}}\n</tool_call>'
    call = json.loads((text + added).removeprefix("<tool_call>\n").removesuffix("\n</tool_call>"))
    assert call["arguments"]["expression"].startswith("}}  # 144")


def test_the_closing_path_writes_the_required_keys_left_at_their_smallest(smollm2_tokenizer, smollm2_vocab):
    from service.tool_grammar import ToolSpec, tool_grammar

    schema = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"},
                                               "tags": {"type": "array", "items": {"type": "string"}}},
              "required": ["name", "age", "tags"], "additionalProperties": False}
    state = _state(tool_grammar("hermes", [ToolSpec("add", schema)], "named", "add", parallel=False),
                   smollm2_tokenizer, smollm2_vocab)
    text = '<tool_call>\n{"name": "add", "arguments": {"name": "Ada Lovelace, the first programmer, who'
    state.sync(smollm2_tokenizer.encode(text, add_special_tokens=False))
    call = json.loads((text + _close(state, smollm2_tokenizer)).removeprefix("<tool_call>\n")
                      .removesuffix("\n</tool_call>"))
    assert call["arguments"] == {"name": "Ada Lovelace, the first programmer, who", "age": 0, "tags": []}


@given(st.lists(st.sampled_from([b'"', b"\\", b"a", b" ", b'\\"', b'{"k": "', b"\xc3\xa9"]), max_size=30),
       st.data())
def test_string_state_read_in_pieces_equals_read_whole(pieces, data):
    """closing_path reads the text once, then token by token: any split gives the state of the whole."""
    text = b"".join(pieces)
    cut = data.draw(st.integers(0, len(text)))
    assert string_state(text[cut:], string_state(text[:cut])) == string_state(text)
    inside = False  # the definition, read plainly: quotes toggle, a backslash inside a string skips one byte
    index = 0
    while index < len(text):
        if text[index] == 0x5C and inside:
            index += 2
            continue
        inside ^= text[index] == 0x22
        index += 1
    assert in_json_string(text) == inside
