"""How a request's answer is read for tool calls, from its tool choice as the Messages and Responses APIs state it
(chat completions reads its own ``tool_choice`` in :mod:`service.routes.chat`): the parser the server is set up
with, the text a forced call begins with, and the stop string that ends a forced single call."""

from __future__ import annotations

from typing import Literal

from service.routes.chat import ToolUse
from service.runtime import Runtime
from service.tool_calls import PARSERS, forced_prefix

#: ``auto``: the model decides; ``required``: some call (Anthropic's ``any``); ``named``: that function's call.
Mode = Literal["auto", "required", "named"]


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
