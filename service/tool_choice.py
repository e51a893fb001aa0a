"""How a request's answer is made and read for tool calls (:class:`ToolUse`), from its tool choice as each API
states it (chat completions', the Messages API's and the Responses API's): the parser the server is set up with
and, where the choice forces a call or a tool is ``strict``, the grammar the call is generated under
(:mod:`service.tool_grammar`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from guardrail.grammar.format import StructuredOutput
from service.errors import ApiError
from service.runtime import Runtime
from service.schema_limits import check_schema
from service.tool_calls import PARSERS, ToolCall, ToolCallParser
from service.tool_grammar import Mode, ToolSpec, schema_error, tool_grammar

__all__ = ["Mode", "ToolUse", "tool_use"]


@dataclass(frozen=True)
class ToolUse:
    """How one request's answer is made and read for tool calls.

    Attributes:
        parser: the output format.
        grammar: the grammar the answer is generated under (a forced call, a strict tool; it includes the
            request's ``response_format`` when there is one); ``None``: the answer is free.
        single: return at most one call (``parallel_tool_calls: false`` or a named function).
        names: the declared functions' names.
    """

    parser: ToolCallParser
    grammar: StructuredOutput | None = None
    single: bool = False
    names: tuple[str, ...] = ()

    def limit(self, calls: list[ToolCall], already: int = 0) -> list[ToolCall]:
        return calls[:max(0, 1 - already)] if self.single else calls


def tool_use(runtime: Runtime, functions: Sequence[dict[str, Any]], mode: Mode, name: str | None = None,
             single: bool = False, text_format: StructuredOutput | None = None,
             schema_param: Callable[[int], str] = lambda i: f"tools.{i}.function.parameters",
             choice_param: str = "tool_choice") -> ToolUse:
    """The :class:`ToolUse` of a request that offers tools (``tool_choice`` ``none`` is no ToolUse at all: the
    tools are not shown).

    Args:
        functions: the tools as chat completions' function tools (``{"type": "function", "function": {"name",
            "parameters", "strict"}}``).
        mode: the tool choice; ``name``: the function of a ``named`` choice.
        single: at most one call (``parallel_tool_calls: false``; Anthropic's ``disable_parallel_tool_use``).
        text_format: the request's ``response_format`` (under ``auto`` a text answer follows it).
        schema_param: the request field of tool ``i``'s schema, for a 400 naming it.
        choice_param: the request field of the tool choice.

    Raises:
        ApiError: 400 ``schema_too_large`` naming tool ``i``'s schema beyond the schema limits
            (:mod:`service.schema_limits`); 400 naming ``choice_param`` (a forced call) or ``tools`` (a strict
            tool) when the engine
            cannot generate under a grammar (docs/structured-output.md, "Engines"); naming tool ``i``'s schema
            when it does not compile.
    """
    for i, function in enumerate(functions):  # every tool's schema, before anything compiles or renders it
        parameters = (function.get("function") or {}).get("parameters")
        if parameters is not None:
            check_schema(parameters, schema_param(i), runtime.settings)
    parser_name = runtime.settings.tool_call_parser
    parser = PARSERS[parser_name]
    specs = [ToolSpec.from_function(f) for f in functions]
    names = tuple(spec.name for spec in specs)
    single = single or mode == "named"
    try:
        grammar = tool_grammar(parser_name, specs, mode, name, parallel=not single, text_format=text_format)
    except ValueError as exc:
        raise ApiError(400, str(exc), param=choice_param, code="invalid_value") from None
    if grammar is None:
        return ToolUse(parser, single=single, names=names)
    if not runtime.engine.capabilities.structured_output:
        param = choice_param if mode != "auto" else "tools" if any(s.strict for s in specs) else "response_format"
        what = "a forced tool call" if mode != "auto" else "a strict tool" if param == "tools" else "response_format"
        raise ApiError(400, f"{param}: {what} is generated under a grammar, served by the transformers engine only, "
                       f"not by the {runtime.engine.name} engine (docs/structured-output.md)", param=param,
                       code="unsupported_parameter")
    for i, spec in enumerate(specs):
        if mode != "auto" or spec.strict:
            error = schema_error(spec.arguments_schema(True))
            if error is not None:
                raise ApiError(400, f"{schema_param(i)}: invalid JSON schema: {error}", param=schema_param(i),
                               code="invalid_value")
    return ToolUse(parser, grammar, single, names)
