"""Tool calls read from a model's answer: the parsers (Hermes ``<tool_call>{json}</tool_call>``, plain JSON) and
the per-choice state that splits a streamed answer into content deltas and ``tool_calls`` deltas.

The guard has already run on all of this text: a tool call's name and arguments are generated text like any
other, so a banned term inside them was rolled back before the parser ever saw it (docs/service.md, "Tools").

A parser answers two questions about the text generated so far (:class:`ToolCallParser`): up to where is it
surely content (so it can be streamed as ``delta.content``), and which tool calls does it hold. vLLM's
``--tool-call-parser`` names are used (``hermes``); more formats are added by writing another parser and
registering it in :data:`PARSERS`.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from typing import Any, Protocol

_DECODER = json.JSONDecoder()


@dataclass(frozen=True)
class ToolCall:
    """One parsed call: the function's name and its arguments as a JSON string (OpenAI's shape)."""

    name: str
    arguments: str
    id: str = field(default_factory=lambda: f"call_{uuid.uuid4().hex[:24]}")

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}}


def _call_from(value: object) -> ToolCall | None:
    """A call from a decoded JSON object ``{"name", "arguments" | "parameters"}``; None if it is not one."""
    if not isinstance(value, dict) or not isinstance(value.get("name"), str) or not value["name"]:
        return None
    arguments = value.get("arguments", value.get("parameters", {}))
    if isinstance(arguments, str):  # some models write the arguments as a JSON string already
        try:
            arguments = json.loads(arguments)
        except ValueError:
            return None
    if not isinstance(arguments, dict):
        return None
    return ToolCall(value["name"], json.dumps(arguments, ensure_ascii=False))


def _first_json(text: str) -> tuple[object, int] | None:
    """The JSON value at the start of ``text`` (leading whitespace skipped) and where it ends; None if none."""
    start = len(text) - len(text.lstrip())
    try:
        return _DECODER.raw_decode(text, start)
    except ValueError:
        return None


class ToolCallParser(Protocol):
    """How one output format writes tool calls."""

    #: What a forced call's answer is made to begin with (``tool_choice`` ``required`` / a named function):
    #: ``{name}`` is replaced by the function's name, JSON-escaped; the text before ``{name}`` is used alone
    #: for ``required``.
    forced_prefix: str

    def content_end(self, text: str) -> int:
        """How many leading characters of ``text`` are content whatever follows (safe to stream); the
        rest may still turn out to be a tool call."""
        ...

    def parse(self, text: str, final: bool) -> tuple[str, list[ToolCall]]:
        """The content and the tool calls in ``text``. ``final``: the answer ended (an unclosed call is
        read as far as its JSON goes); else only complete calls are returned."""
        ...


class HermesParser:
    """``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` blocks (Hermes 2 Pro, Qwen2.5, the bundled
    ``hermes`` chat template). Content is the text before the first block; a block whose JSON is not a call is
    left in the content."""

    open_tag = "<tool_call>"
    close_tag = "</tool_call>"
    forced_prefix = '<tool_call>\n{"name": "{name}", "arguments": '

    def content_end(self, text: str) -> int:
        found = text.find(self.open_tag)
        if found >= 0:
            return found
        # A tail that could be the start of the tag is held back until the next text decides.
        for keep in range(min(len(self.open_tag) - 1, len(text)), 0, -1):
            if self.open_tag.startswith(text[-keep:]):
                return len(text) - keep
        return len(text)

    def parse(self, text: str, final: bool) -> tuple[str, list[ToolCall]]:
        first = text.find(self.open_tag)
        if first < 0:
            return text, []
        calls: list[ToolCall] = []
        at = first
        while at >= 0:
            body_start = at + len(self.open_tag)
            end = text.find(self.close_tag, body_start)
            if end < 0 and not final:
                break
            body = text[body_start:] if end < 0 else text[body_start:end]
            decoded = _first_json(body)
            call = _call_from(decoded[0]) if decoded is not None else None
            if call is None:
                if final and not calls:  # not a call after all: the whole answer is content
                    return text, []
                break
            calls.append(call)
            if end < 0:
                break
            at = text.find(self.open_tag, end + len(self.close_tag))
        return text[:first], calls


class JsonParser:
    """The whole answer is one JSON call ``{"name", "arguments"}`` (or ``"parameters"``, Llama 3's form) or a
    list of them, as small models often answer when shown tools; anything else is content."""

    forced_prefix = '{"name": "{name}", "arguments": '

    def content_end(self, text: str) -> int:
        stripped = text.lstrip()
        if not stripped or stripped[0] in "{[":
            return 0
        return len(text)

    def parse(self, text: str, final: bool) -> tuple[str, list[ToolCall]]:
        if not final or text.lstrip()[:1] not in ("{", "["):
            return (text, []) if final else ("", [])
        decoded = _first_json(text)
        if decoded is None:
            return text, []
        values = decoded[0] if isinstance(decoded[0], list) else [decoded[0]]
        calls = [_call_from(value) for value in values]
        if not calls or any(call is None for call in calls):
            return text, []
        return "", [call for call in calls if call is not None]


#: Parsers by name (``GUARDRAIL_TOOL_CALL_PARSER``).
PARSERS: dict[str, ToolCallParser] = {"hermes": HermesParser(), "json": JsonParser()}


def forced_prefix(parser: ToolCallParser, function: str | None) -> str:
    """The text a forced tool call's answer begins with: the opening up to the name (``required``) or through
    the name (a named function)."""
    head, _, _ = parser.forced_prefix.partition("{name}")
    if function is None:
        return head
    return head + json.dumps(function)[1:-1] + parser.forced_prefix.partition("{name}")[2]


class ToolCallStream:
    """One choice's answer read as it streams: content to release and tool calls once each is complete.

    Args:
        parser: the output format.
        prefix: text the answer was made to begin with (a forced call's opening, part of the prompt): it is
            read as part of the answer, never sent as content.
    """

    def __init__(self, parser: ToolCallParser, prefix: str = "") -> None:
        self.parser = parser
        self.text = prefix
        self._content_sent = 0
        self._prefix = len(prefix)
        self.calls: list[ToolCall] = []

    def feed(self, delta: str) -> tuple[str, list[ToolCall]]:
        """Add generated text; returns the content that is now safe to send and the calls completed by it."""
        self.text += delta
        content_end = self.parser.content_end(self.text) if not self._prefix else 0
        content = self.text[self._content_sent:content_end] if content_end > self._content_sent else ""
        self._content_sent += len(content)
        _, calls = self.parser.parse(self.text, final=False)
        return content, self._new(calls)

    def finish(self) -> tuple[str, list[ToolCall]]:
        """The answer ended: the content not yet sent and the remaining calls. Text held back as a possible
        call that did not parse as one is released as content."""
        content, calls = self.parser.parse(self.text, final=True)
        if not calls:
            content = self.text
        rest = content[self._content_sent:] if len(content) > self._content_sent else ""
        self._content_sent += len(rest)
        return rest, self._new(calls)

    def _new(self, calls: list[ToolCall]) -> list[ToolCall]:
        fresh = calls[len(self.calls):]
        self.calls.extend(fresh)
        return fresh


def parse_answer(parser: ToolCallParser, text: str, prefix: str = "") -> tuple[str | None, list[ToolCall]]:
    """A whole answer's content (None when it only called tools) and tool calls."""
    content, calls = parser.parse(prefix + text, final=True)
    if not calls:
        return prefix + text, []
    return (content if content.strip() else None), calls
