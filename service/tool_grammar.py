"""The grammar a tool call is generated under (vLLM's guided decoding of tool calls, under the guard): the call's
markup, one of the declared names, and arguments that follow that tool's ``parameters`` JSON schema, as one
llguidance Lark grammar (:class:`~guardrail.grammar.format.StructuredOutput` of kind ``lark``) that the engine's
grammar state masks with and rolls back with the guard (docs/structured-output.md, "Tool calls").

When a grammar is built (:func:`tool_grammar`):

- ``required`` (Anthropic's ``any``): the answer is one call (``parallel_tool_calls: false``) or one or more
  calls, each to a declared tool with arguments per its schema; no text. Parallel calls are at most as many as
  the declared tools: a small model that goes on writing calls (SmolLM2 does, after its first one) would
  otherwise loop until ``max_tokens`` and cut its last call; one tool means one call.
- a named function: exactly that function's call.
- ``auto`` with a ``strict`` tool, or with a ``response_format``: the model may answer in text or call; text
  is free (or follows the ``response_format`` schema), a call is held to the declared names and schemas (a
  tool without ``strict`` takes any JSON object as arguments).
- ``auto`` otherwise: no grammar; the answer is read for calls as the model wrote them.

The grammar's layout is the one the chat template shows the model (:class:`~service.tool_calls.HermesParser`:
``<tool_call>\\n{"name": ..., "arguments": ...}\\n</tool_call>``, calls separated by a newline; the ``json``
parser: the bare object, or a list of them), so that the parsers read every constrained answer.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from guardrail.grammar.format import StructuredOutput, lark_json

#: ``auto``: the model decides; ``required``: some call (Anthropic's ``any``); ``named``: that function's call.
Mode = Literal["auto", "required", "named"]
#: Free text that never writes the Hermes opening tag (llguidance's ``&``/``~`` regex operators: the tag can
#: only be written as the start of a constrained call).
_TEXT_WITHOUT_TAG = r"/(?s:.*)/ & ~/(?s:.*)<tool_call>(?s:.*)/"


@dataclass(frozen=True)
class ToolSpec:
    """One declared function as the grammar needs it.

    Attributes:
        name: the function's name.
        parameters: its arguments' JSON schema (``None``: any JSON object).
        strict: the request asked for its arguments to follow ``parameters`` (``strict: true``).
    """

    name: str
    parameters: Mapping[str, Any] | None
    strict: bool = False

    @classmethod
    def from_function(cls, tool: Mapping[str, Any]) -> ToolSpec:
        """From chat completions' ``{"type": "function", "function": {"name", "parameters", "strict"}}``."""
        function = tool["function"]
        return cls(function["name"], function.get("parameters"), bool(function.get("strict")))

    def arguments_schema(self, constrained: bool) -> Mapping[str, Any]:
        """The arguments' schema in the grammar: ``parameters`` when ``constrained`` (and given), else any
        object (a call must still parse)."""
        if constrained and self.parameters is not None:
            return self.parameters
        return {"type": "object"}


def _literal(text: str) -> str:
    """A Lark string literal of ``text`` (JSON's escapes are Lark's)."""
    return json.dumps(text, ensure_ascii=False)


def _name(name: str) -> str:
    """``name`` as it appears between the quotes of a JSON string."""
    return json.dumps(name, ensure_ascii=False)[1:-1]


def _hermes(tools: Sequence[ToolSpec], constrained: Sequence[bool]) -> list[str]:
    """``call_i``: tool ``i``'s whole call; ``body_i``: the same after the opening tag (a call that follows
    text begins with the lazy ``lead``, which ends at the tag)."""
    rules = []
    for i, (tool, strict) in enumerate(zip(tools, constrained)):
        head = _literal('\n{"name": "' + _name(tool.name) + '", "arguments": ')
        tail = _literal("}\n</tool_call>")
        rules.append(f"body_{i}: {head} {lark_json(tool.arguments_schema(strict))} {tail}")
        rules.append(f'call_{i}: "<tool_call>" body_{i}')
    rules.append("body: " + " | ".join(f"body_{i}" for i in range(len(tools))))
    return rules


def _json(tools: Sequence[ToolSpec], constrained: Sequence[bool]) -> list[str]:
    rules = []
    for i, (tool, strict) in enumerate(zip(tools, constrained)):
        head = _literal('{"name": "' + _name(tool.name) + '", "arguments": ')
        rules.append(f"call_{i}: {head} {lark_json(tool.arguments_schema(strict))} \"}}\"")
    return rules


def tool_grammar(parser: str, tools: Sequence[ToolSpec], mode: Mode, name: str | None = None,
                 parallel: bool = True, text_format: StructuredOutput | None = None) -> StructuredOutput | None:
    """The grammar of a request's answer with tools (see the module's docstring for when there is one).

    Args:
        parser: the server's tool-call parser (``hermes`` or ``json``, :data:`service.tool_calls.PARSERS`).
        tools: the declared functions, in the request's order.
        mode: the tool choice; ``name`` the function of ``named``.
        parallel: more than one call may be made, up to one per declared tool (``parallel_tool_calls``; a named
            choice makes one).
        text_format: the request's ``response_format`` (a text answer's JSON), under ``auto``.

    Returns:
        The grammar, or ``None`` when the answer is free (``auto`` with no strict tool and no text format).

    Raises:
        ValueError: ``name`` is not one of ``tools``; a ``parameters`` that is not a JSON object.
    """
    if mode == "auto" and text_format is None and not any(tool.strict for tool in tools):
        return None
    if mode == "named":
        tools = [tool for tool in tools if tool.name == name]
        if not tools:
            raise ValueError(f"tool_choice names function {name!r}, which is not in tools")
        parallel = False
    # Forced calls follow every tool's schema (vLLM's rule); under auto, strict tools only.
    constrained = [mode != "auto" or tool.strict for tool in tools]
    calls = (_hermes if parser == "hermes" else _json)(tools, constrained)
    call = "call: " + " | ".join(f"call_{i}" for i in range(len(tools)))
    more = len(tools) - 1 if parallel else 0  # calls after the first (module docstring)
    if parser == "hermes":
        sequence = f'call ("\\n" call){{0,{more}}}' if more else "call"
    else:
        sequence = f'call | "[" call (", " call){{0,{more}}} "]"' if more else "call"
    rules = ["%llguidance {}"]
    if mode != "auto":
        rules.append(f"start: {sequence}")
    elif text_format is not None:
        text = lark_json(json.loads(text_format.schema))
        rules.append(f"start: text | {sequence}")
        rules.append(f"text: {text}")
    elif parser == "hermes":
        # Text, or text and then calls: the opening tag only ever starts a call. A greedy text lexeme cannot be
        # followed by the tag's (llguidance does not split lexemes after the fact), so text that ends at the
        # first tag is one lazy lexeme (llguidance's docs/syntax.md, "Tool calling").
        rest = f' ("\\n" call){{0,{more}}}' if more else ""
        rules.append(f"start: TEXT | lead body{rest}")
        rules.append("lead[lazy]: /(?s:.*)<tool_call>/")
        rules.append(f"TEXT: {_TEXT_WITHOUT_TAG}")
    else:
        # The json format: an answer that starts with a brace or bracket is a call; anything else is text.
        rules.append(f"start: TEXT | {sequence}")
        rules.append(r"TEXT: /([^\[{\s](?s:.*))?/")
    rules.append(call)
    rules.extend(calls)
    return StructuredOutput.from_lark("\n".join(rules) + "\n", name="tool_calls")


def schema_error(schema: Mapping[str, Any]) -> str | None:
    """llguidance's message when ``schema`` (a tool's ``parameters``) does not compile as the grammar's JSON,
    else ``None``. No tokenizer is needed: a request's schemas are checked when it arrives, in microseconds to
    milliseconds, and the 400 can name the tool."""
    from llguidance import LLMatcher

    try:
        grammar = LLMatcher.grammar_from_json_schema(json.dumps(schema), defaults={"whitespace_flexible": False})
        message = LLMatcher.validate_grammar(grammar)
    except Exception as exc:  # noqa: BLE001 - whatever the client's schema makes the compiler raise is a 400
        return str(exc)
    return message or None
