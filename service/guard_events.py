"""The guard's events as extra chunks of a chat or text completion stream (opt-in:
``stream_options.include_guard_events``; docs/service.md, "Guard events").

Each :class:`~guardrail.guard.events.Rollback` of a choice becomes a chunk with no choices and a ``guardrail_event``
``{"type": "rollback", ...}``, sent where it happened in the stream (after the text released before it), and each
choice's end a ``{"type": "finish", ...}`` just before its finish chunk. The term and the retracted fragment are
confidential: they are given only when the caller may read the list
(:func:`service.tenants.access.may_read_list`: the admin token, the bundled lists, the request's own terms, a
tenant's own lists), else they are null and the event says only which list and where.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from guardrail.guard.events import Finish, Rollback
from service.tenants.access import Caller, may_read_list

#: The chunk field that carries a guard event.
FIELD = "guardrail_event"


def readable_by(caller: Caller | None) -> Callable[[str], bool]:
    """Whether ``caller`` may read a list's terms, by list name (asked once per list)."""
    answers: dict[str, bool] = {}

    def readable(name: str) -> bool:
        if name not in answers:
            answers[name] = may_read_list(caller, name, admin=False)
        return answers[name]

    return readable


def rollback_event(index: int, rollback: Rollback, readable: Callable[[str], bool]) -> dict[str, Any]:
    """The ``guardrail_event`` of a rollback of choice ``index``: where it happened (``position`` in completion
    tokens, ``offset`` in characters of the answer), the list, and, when the caller may read the list, the term
    and the retracted ``fragment`` (null otherwise)."""
    shown = readable(rollback.list_name)
    return {
        "type": "rollback", "index": index, "position": rollback.position, "offset": rollback.offset,
        "list": rollback.list_name, "term": rollback.term if shown else None,
        "fragment": rollback.fragment if shown else None, "tokens_discarded": rollback.tokens_discarded,
        "attempt": rollback.attempt, "escalated": rollback.escalated, "evasion": rollback.evasion,
    }


def finish_event(index: int, finish: Finish) -> dict[str, Any]:
    """The ``guardrail_event`` of choice ``index``'s end: the guard's finish reason, ``filtered_by`` (the list a
    ``content_filter`` answer was cut before, when its budget ran out) and the choice's rollbacks."""
    return {"type": "finish", "index": index, "finish_reason": finish.reason, "filtered_by": finish.filtered_by,
            "rollbacks": finish.usage.rollbacks}


def event_chunk(no_choices: dict[str, Any], event: dict[str, Any]) -> dict[str, Any]:
    """A chunk carrying ``event``: ``no_choices`` is the response's chunk with empty ``choices`` (its usage chunk's
    head: ``id``, ``object``, ``created``, ``model``, ``system_fingerprint``), so OpenAI's clients read it as a
    chunk with nothing to add to any choice."""
    chunk = {key: value for key, value in no_choices.items() if key != "usage"}
    chunk[FIELD] = event
    return chunk
