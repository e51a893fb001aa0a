"""How a request's answer is read for tool calls (:class:`ToolUse`), from its tool choice as each API states it
(chat completions', the Messages API's and the Responses API's): the parser the server is set up with, the text a
forced call begins with, and the stop string that ends a forced single call."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from service.runtime import Runtime
from service.tool_calls import PARSERS, ToolCall, ToolCallParser, forced_prefix

#: ``auto``: the model decides; ``required``: some call (Anthropic's ``any``); ``named``: that function's call.
Mode = Literal["auto", "required", "named"]


@dataclass(frozen=True)
class ToolUse:
    """How one request's answer is read for tool calls.

    Attributes:
        parser: the output format.
        prefix: text the answer was made to begin with (a forced call), part of the prompt.
        single: return at most one call (``parallel_tool_calls: false`` or a named function).
    """

    parser: ToolCallParser
    prefix: str = ""
    single: bool = False

    def limit(self, calls: list[ToolCall], already: int = 0) -> list[ToolCall]:
        return calls[:max(0, 1 - already)] if self.single else calls


def tool_use(runtime: Runtime, mode: Mode, name: str | None = None,
             single: bool = False) -> tuple[ToolUse, tuple[str, ...]]:
    """The :class:`ToolUse` of a request that offers tools (``mode`` ``none`` is no ToolUse at all: the tools are
    not shown), and the stop strings a named call adds (its closing tag: one call, then the answer ends)."""
    parser = PARSERS[runtime.settings.tool_call_parser]
    if mode == "named":
        stop = ("</tool_call>",) if runtime.settings.tool_call_parser == "hermes" else ()
        return ToolUse(parser, forced_prefix(parser, name), single=True), stop
    if mode == "required":
        return ToolUse(parser, forced_prefix(parser, None), single=single), ()
    return ToolUse(parser, single=single), ()
