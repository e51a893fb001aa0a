"""Tool calls read from a model's answer: the parsers (Hermes ``<tool_call>{json}</tool_call>``, plain JSON) and
the per-choice state that splits a streamed answer into content deltas and tool-call pieces (a call's name first,
then its arguments' JSON text fragment by fragment, as OpenAI and vLLM stream them).

The guard has already run on all of this text: a tool call's name and arguments are generated text like any
other, so a banned term inside them was rolled back before the parser ever saw it (docs/service.md, "Tools").

A parser answers three questions about the text generated so far (:class:`ToolCallParser`): up to where is it
surely content (so it can be streamed as ``delta.content``), which tool calls does it hold, and how far has each
call come (its name, and the part of its arguments written so far). A call's ``arguments`` are the JSON text the
model wrote (OpenAI's shape: a string), so the streamed fragments add up to the whole call's. vLLM's
``--tool-call-parser`` names are used (``hermes``); more formats are added by writing another parser and
registering it in :data:`PARSERS`.
"""

from __future__ import annotations

import dataclasses
import json
import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

_DECODER = json.JSONDecoder()
#: The head of a call as the chat template shows it (and the grammar writes it): ``{"name": "...",
#: "arguments": `` and the object's brace. A call that starts so is streamed as it grows; another layout is sent
#: whole once complete.
_CALL_HEAD = re.compile(r'\s*\{\s*"name"\s*:\s*"((?:[^"\\]|\\.)*)"\s*,\s*"arguments"\s*:\s*(?=\{)')


@dataclass(frozen=True)
class ToolCall:
    """One parsed call: the function's name and its arguments as a JSON string (OpenAI's shape)."""

    name: str
    arguments: str
    id: str = field(default_factory=lambda: f"call_{uuid.uuid4().hex[:24]}")

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}}


@dataclass(frozen=True)
class CallProgress:
    """How far one call of an answer has come.

    Attributes:
        name: the function's name.
        arguments: the arguments' JSON text written so far (all of it once ``call`` is set).
        call: the whole call once it is complete.
    """

    name: str
    arguments: str
    call: ToolCall | None = None


def _json_extent(text: str) -> int:
    """How many leading characters of ``text`` (a JSON object or array as it is being written) belong to that
    value: all of it while the value is open, up to its closing bracket once closed."""
    depth = 0
    in_string = escaped = False
    for i, char in enumerate(text):
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "{[":
            depth += 1
        elif char in "}]":
            depth -= 1
            if depth == 0:
                return i + 1
    return len(text)


def _call_from(value: object, raw_arguments: str | None = None) -> ToolCall | None:
    """A call from a decoded JSON object ``{"name", "arguments" | "parameters"}``; None if it is not one.
    ``raw_arguments``: the arguments' JSON text as written, kept when they are an object."""
    if not isinstance(value, dict) or not isinstance(value.get("name"), str) or not value["name"]:
        return None
    arguments = value.get("arguments", value.get("parameters", {}))
    if raw_arguments is not None and isinstance(arguments, dict):
        return ToolCall(value["name"], raw_arguments)
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


def _read_call(text: str) -> tuple[ToolCall | None, int]:
    """The call whose JSON object starts ``text`` (leading whitespace skipped) and where that object ends;
    ``(None, 0)`` when it is not one. Arguments in the template's layout keep their text as written."""
    decoded = _first_json(text)
    if decoded is None:
        return None, 0
    head = _CALL_HEAD.match(text)
    raw = None
    if head is not None:
        try:
            _, end = _DECODER.raw_decode(text, head.end())
            raw = text[head.end():end]
        except ValueError:
            raw = None
    return _call_from(decoded[0], raw), decoded[1]


class ToolCallParser(Protocol):
    """How one output format writes tool calls."""

    def content_end(self, text: str) -> int:
        """How many leading characters of ``text`` are content whatever follows (safe to stream); the
        rest may still turn out to be a tool call."""
        ...

    def parse(self, text: str, final: bool) -> tuple[str, list[ToolCall]]:
        """The content and the tool calls in ``text``. ``final``: the answer ended (an unclosed call is
        read as far as its JSON goes); else only complete calls are returned."""
        ...

    def progress(self, text: str) -> list[CallProgress]:
        """The calls of ``text`` (an answer still being written) in order: the complete ones, then the open one
        when its name and the start of its arguments are known. Empty for a format whose calls are only
        known at the end."""
        ...


class HermesParser:
    """``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` blocks (Hermes 2 Pro, Qwen2.5, the bundled
    ``hermes`` chat template). Content is the text before the first block; a block whose JSON is not a call is
    left in the content."""

    open_tag = "<tool_call>"
    close_tag = "</tool_call>"

    def content_end(self, text: str) -> int:
        found = text.find(self.open_tag)
        if found >= 0:
            return found
        # A tail that could be the start of the tag is held back until the next text decides.
        for keep in range(min(len(self.open_tag) - 1, len(text)), 0, -1):
            if self.open_tag.startswith(text[-keep:]):
                return len(text) - keep
        return len(text)

    def _close(self, text: str, body_start: int) -> int:
        """Where the block opened before ``body_start`` closes (-1: not yet): the first closing tag after its JSON
        value once that value is complete, so that the tag's text inside a string argument does not end it."""
        decoded = _first_json(text[body_start:])
        return text.find(self.close_tag, body_start + (decoded[1] if decoded is not None else 0))

    def parse(self, text: str, final: bool) -> tuple[str, list[ToolCall]]:
        first = text.find(self.open_tag)
        if first < 0:
            return text, []
        calls: list[ToolCall] = []
        at = first
        while at >= 0:
            body_start = at + len(self.open_tag)
            end = self._close(text, body_start)
            if end < 0 and not final:
                break
            body = text[body_start:] if end < 0 else text[body_start:end]
            call, _ = _read_call(body)
            if call is None:
                if final and not calls:  # not a call after all: the whole answer is content
                    return text, []
                break
            calls.append(call)
            if end < 0:
                break
            at = text.find(self.open_tag, end + len(self.close_tag))
        return text[:first], calls

    def progress(self, text: str) -> list[CallProgress]:
        found: list[CallProgress] = []
        at = text.find(self.open_tag)
        while at >= 0:
            body_start = at + len(self.open_tag)
            end = self._close(text, body_start)
            if end >= 0:
                call, _ = _read_call(text[body_start:end])
                if call is None:  # not a call: nothing after it is read as one either (as parse)
                    break
                found.append(CallProgress(call.name, call.arguments, call))
                at = text.find(self.open_tag, end + len(self.close_tag))
                continue
            head = _CALL_HEAD.match(text, body_start)
            if head is not None:
                try:
                    name = json.loads('"' + head.group(1) + '"')
                except ValueError:
                    break
                arguments = text[head.end():]
                found.append(CallProgress(name, arguments[:_json_extent(arguments)]))
            break
        return found


class JsonParser:
    """The whole answer is one JSON call ``{"name", "arguments"}`` (or ``"parameters"``, Llama 3's form) or a
    list of them, as small models often answer when shown tools; anything else is content."""

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

    def progress(self, text: str) -> list[CallProgress]:
        return []  # calls are read at the end (the answer is one JSON value)


#: Parsers by name (``GUARDRAIL_TOOL_CALL_PARSER``).
PARSERS: dict[str, ToolCallParser] = {"hermes": HermesParser(), "json": JsonParser()}


@dataclass(frozen=True)
class ToolCallPiece:
    """One piece of a streamed call: its start (``first``: id and name), a fragment of its arguments' JSON text,
    its end (``done``: the whole call), or several of these at once.

    Attributes:
        index: the call's position among the answer's calls (OpenAI's ``tool_calls[].index``).
        id: the call's id, the same in every piece and in the whole call.
        name: the function's name.
        arguments: the next fragment of the arguments (possibly empty).
        first: this is the call's first piece.
        done: the whole call, in the call's last piece.
    """

    index: int
    id: str
    name: str
    arguments: str = ""
    first: bool = False
    done: ToolCall | None = None


class ToolCallStream:
    """One choice's answer read as it streams: content to release, and the pieces of its tool calls.

    Args:
        parser: the output format.
        limit: at most this many calls (``None``: any); the pieces of later calls are not sent.
    """

    def __init__(self, parser: ToolCallParser, limit: int | None = None) -> None:
        self.parser = parser
        self.limit = limit
        self.text = ""
        self._content_sent = 0
        self._started: list[tuple[str, str]] = []  # per started call: its id, the arguments sent
        self.calls: list[ToolCall] = []  # the complete calls sent, in order

    def feed(self, delta: str) -> tuple[str, list[ToolCallPiece]]:
        """Add generated text; returns the content that is now safe to send and the new pieces of calls."""
        self.text += delta
        content_end = self.parser.content_end(self.text)
        content = self.text[self._content_sent:content_end] if content_end > self._content_sent else ""
        self._content_sent += len(content)
        return content, self._pieces(self.parser.progress(self.text))

    def finish(self) -> tuple[str, list[ToolCallPiece]]:
        """The answer ended: the content not yet sent and the calls' last pieces. Text held back as a possible
        call that did not parse as one is released as content, unless a call's pieces were already sent (an
        answer cut inside its arguments: ``finish_reason`` says why)."""
        content, calls = self.parser.parse(self.text, final=True)
        if not calls:  # all content, but for a call whose pieces were sent (the text before it)
            content = self.text[:self.parser.content_end(self.text)] if self._started else self.text
        rest = content[self._content_sent:] if len(content) > self._content_sent else ""
        self._content_sent += len(rest)
        return rest, self._pieces([CallProgress(call.name, call.arguments, call) for call in calls])

    def _pieces(self, progress: Sequence[CallProgress]) -> list[ToolCallPiece]:
        pieces: list[ToolCallPiece] = []
        if self.limit is not None:
            progress = progress[:self.limit]
        for index, call in enumerate(progress):
            if index < len(self.calls):
                continue  # complete and sent
            first = index == len(self._started)
            if first:
                call_id = call.call.id if call.call is not None else ToolCall(call.name, "").id
                self._started.append((call_id, ""))
            call_id, sent = self._started[index]
            # The text grows at its end; the whole call's arguments are the text streamed (the same slice).
            fragment = call.arguments[len(sent):] if call.arguments.startswith(sent) else ""
            self._started[index] = (call_id, sent + fragment)
            done = dataclasses.replace(call.call, id=call_id) if call.call is not None else None
            if done is not None:
                self.calls.append(done)
            if first or fragment or done is not None:
                pieces.append(ToolCallPiece(index, call_id, call.name, fragment, first, done))
        return pieces


def parse_answer(parser: ToolCallParser, text: str) -> tuple[str | None, list[ToolCall]]:
    """A whole answer's content (None when it only called tools) and tool calls. A call cut inside its arguments
    (``max_tokens``) is returned with the arguments written so far, as the stream sent them and as OpenAI returns
    a cut call (``finish_reason`` says why); its markup is never content."""
    content, calls = parser.parse(text, final=True)
    if not calls:
        progress = parser.progress(text)
        if not progress:
            return text, []
        content = text[:parser.content_end(text)]
        calls = [call.call or ToolCall(call.name, call.arguments) for call in progress]
    return (content if content.strip() else None), calls
