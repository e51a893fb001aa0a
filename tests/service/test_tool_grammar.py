"""The grammar tool calls are generated under (service/tool_grammar.py), through the real SmolLM2 tokenizer and
llguidance's matcher as the engine runs it (:class:`~guardrail.grammar.matcher.GrammarState`): which answers each
tool choice lets through, token by token, and which it refuses."""

from __future__ import annotations

import json

import pytest

from guardrail.grammar.format import StructuredOutput
from guardrail.grammar.matcher import GrammarState
from service.tool_calls import HermesParser, JsonParser, parse_answer
from service.tool_grammar import ToolSpec, schema_error, tool_grammar

WEATHER = ToolSpec("get_weather", {"type": "object", "properties": {"city": {"type": "string"}},
                                   "required": ["city"], "additionalProperties": False}, strict=True)
TIME = ToolSpec("get_time", {"type": "object", "properties": {"tz": {"type": "string", "enum": ["UTC", "CET"]}},
                             "required": ["tz"]})
CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
TIME_CALL = '<tool_call>\n{"name": "get_time", "arguments": {"tz": "UTC"}}\n</tool_call>'


def _follows(spec: StructuredOutput, text: str, tokenizer, vocab) -> bool:
    """Whether the grammar lets ``text`` be written, token by token, and end there (the engine's end id allowed)."""
    state = GrammarState(spec, tokenizer, vocab, [tokenizer.eos_token_id], len(vocab))
    kept: list[int] = []
    for token in tokenizer.encode(text, add_special_tokens=False):
        if bool(state.forbidden()[0, token]):
            return False
        kept.append(token)
        state.sync(kept)
    return not bool(state.forbidden()[0, tokenizer.eos_token_id])


@pytest.mark.parametrize(("mode", "name", "parallel", "text", "allowed"), [
    ("named", "get_weather", True, CALL, True),
    ("named", "get_weather", True, TIME_CALL, False),  # another tool
    ("named", "get_weather", True, CALL + "\n" + CALL, False),  # a named choice is one call
    ("named", "get_weather", True, CALL.replace("city", "town"), False),  # arguments off the schema
    ("named", "get_weather", True, CALL.replace('"Paris"', "3"), False),
    ("required", None, True, TIME_CALL, True),
    ("required", None, True, CALL + "\n" + TIME_CALL, True),  # parallel calls
    ("required", None, False, CALL + "\n" + TIME_CALL, False),  # parallel_tool_calls: false
    ("required", None, True, CALL + "\n" + TIME_CALL + "\n" + CALL, False),  # at most one call per declared tool
    ("required", None, True, "Paris is sunny.", False),  # a call is required
    ("required", None, True, CALL.replace("get_weather", "Paris"), False),  # a tool that does not exist
    ("required", None, True, TIME_CALL.replace("UTC", "PST"), False),  # forced calls follow every schema
    ("auto", None, True, "Paris is sunny.", True),  # strict under auto: text is free
    ("auto", None, True, "Let me look.\n" + CALL, True),
    ("auto", None, True, "Let me look.\n" + CALL.replace("city", "town"), False),  # the strict tool's schema
    ("auto", None, True, TIME_CALL.replace("UTC", "PST"), True),  # a tool without strict: any object
    ("auto", None, True, CALL.replace("get_weather", "Paris"), False),  # only declared names
])
def test_each_tool_choice_lets_through_only_its_calls(smollm2_tokenizer, smollm2_vocab, mode, name, parallel, text,
                                                      allowed):
    spec = tool_grammar("hermes", [WEATHER, TIME], mode, name, parallel=parallel)
    assert _follows(spec, text, smollm2_tokenizer, smollm2_vocab) is allowed
    if allowed and mode != "auto":
        _, calls = parse_answer(HermesParser(), text)  # what the grammar allows, the parser reads
        assert calls and all(json.loads(call.arguments) for call in calls)


def test_auto_without_strict_tools_or_a_format_is_free():
    assert tool_grammar("hermes", [TIME], "auto") is None


def test_a_response_format_under_auto_is_the_text_alternative(smollm2_tokenizer, smollm2_vocab):
    answer = StructuredOutput.from_schema({"type": "object", "properties": {"n": {"type": "integer"}},
                                           "required": ["n"]})
    spec = tool_grammar("hermes", [TIME], "auto", text_format=answer)
    assert _follows(spec, '{"n": 3}', smollm2_tokenizer, smollm2_vocab)
    assert _follows(spec, TIME_CALL, smollm2_tokenizer, smollm2_vocab)
    assert not _follows(spec, "three", smollm2_tokenizer, smollm2_vocab)


def test_the_json_format_grammar_writes_what_its_parser_reads(smollm2_tokenizer, smollm2_vocab):
    spec = tool_grammar("json", [WEATHER, TIME], "required")
    both = '[{"name": "get_weather", "arguments": {"city": "Paris"}}, {"name": "get_time", "arguments": {"tz": "CET"}}]'
    assert _follows(spec, both, smollm2_tokenizer, smollm2_vocab)
    assert [c.name for c in parse_answer(JsonParser(), both)[1]] == ["get_weather", "get_time"]
    assert not _follows(spec, '{"name": "nope", "arguments": {}}', smollm2_tokenizer, smollm2_vocab)


def test_names_are_escaped_and_an_unknown_named_function_is_refused():
    spec = tool_grammar("hermes", [ToolSpec('we"ird', None)], "named", 'we"ird')
    assert '\\"we\\\\\\"ird\\"' in spec.schema  # a JSON string inside a Lark string literal
    with pytest.raises(ValueError, match="not in tools"):
        tool_grammar("hermes", [WEATHER], "named", "other")


def test_a_schema_that_does_not_compile_is_named_by_llguidance():
    assert schema_error(WEATHER.parameters) is None
    assert "objekt" in schema_error({"type": "objekt"})
