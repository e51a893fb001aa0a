"""Helpers for tests over decoded streams: what a client sees of one, and the no-leak check on every chunk."""

from __future__ import annotations

from guardrail.guard.events import Event, Finish, Rollback, TextDelta
from guardrail.matching.obfuscation import OFF  # the artefacts here compile the lists as they are
from guardrail.matching.textmatch import TextMatcher
from guardrail.wordlists.wordlist import WordList


def contract(events: list[Event]) -> list[tuple]:
    """What a client sees of a stream: deltas, rollbacks, and the finish without timings or pass counts."""
    out: list[tuple] = []
    for event in events:
        if isinstance(event, Finish):
            out.append(("finish", event.reason, event.text, event.token_ids, event.usage.completion_tokens,
                        event.usage.rollbacks))
        elif isinstance(event, Rollback):
            out.append(("rollback", event.position, event.tokens_discarded))
        else:
            out.append(("delta", event.text))
    return out


def assert_no_leak(events: list[Event], lists: list[WordList]) -> None:
    """No streamed prefix and not the final text matches ``lists``; the stream ends with its one
    :class:`Finish`, whose text is what was streamed."""
    matcher = TextMatcher(lists, obfuscation=OFF)
    streamed = ""
    for event in events[:-1]:
        assert not isinstance(event, Finish)
        if isinstance(event, TextDelta):
            streamed += event.text
            assert matcher.scan(streamed) == [], streamed
    finish = events[-1]
    assert isinstance(finish, Finish) and finish.text == streamed
    assert matcher.scan(finish.text) == [], finish.text
