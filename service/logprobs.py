"""The delivered tokens' log-probabilities in OpenAI's shapes (docs/service.md, "Logprobs").

The engine releases one :class:`~guardrail.guard.logprobs.TokenLogprob` per delivered token with the
:class:`~guardrail.guard.events.TextDelta` that finishes releasing it (:mod:`guardrail.guard.logprobs`); this
module only writes them as JSON: chat's ``choices[].logprobs.content[]`` and the legacy completions'
``choices[].logprobs.{tokens, token_logprobs, top_logprobs, text_offset}``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from guardrail.guard.logprobs import TokenLogprob

#: What OpenAI (and vLLM) write for a probability of 0: JSON has no ``-Infinity``.
ZERO_PROBABILITY_LOGPROB = -9999.0


def finite(logprob: float) -> float:
    """``logprob``, with ``-inf`` (and NaN) written as :data:`ZERO_PROBABILITY_LOGPROB`."""
    return logprob if math.isfinite(logprob) else ZERO_PROBABILITY_LOGPROB


def chat_content(records: Sequence[TokenLogprob]) -> list[dict[str, Any]]:
    """Chat's ``logprobs.content`` items: ``{token, logprob, bytes, top_logprobs: [{token, logprob, bytes}]}``."""
    return [{"token": r.token, "logprob": finite(r.logprob), "bytes": list(r.bytes),
             "top_logprobs": [{"token": t.token, "logprob": finite(t.logprob), "bytes": list(t.bytes)}
                              for t in r.top]} for r in records]


def chat_logprobs(records: Sequence[TokenLogprob]) -> dict[str, Any]:
    """A chat choice's (or chunk's) ``logprobs`` object."""
    return {"content": chat_content(records), "refusal": None}


class CompletionOffsets:
    """The legacy completions' ``logprobs`` objects of one choice; counts ``text_offset`` (characters into the
    choice's text, as vLLM does without ``echo``) across the chunks of a stream."""

    def __init__(self) -> None:
        self.chars = 0

    def logprobs(self, records: Sequence[TokenLogprob]) -> dict[str, Any]:
        """``{tokens, token_logprobs, top_logprobs, text_offset}`` of ``records`` (the next ones of the choice).
        ``top_logprobs`` maps token text to logprob: alternatives of the same text keep the likelier."""
        offsets = []
        for record in records:
            offsets.append(self.chars)
            self.chars += len(record.token)
        tops = []
        for record in records:
            top: dict[str, float] = {}
            for alternative in record.top:
                top.setdefault(alternative.token, finite(alternative.logprob))
            tops.append(top)
        return {"tokens": [r.token for r in records], "token_logprobs": [finite(r.logprob) for r in records],
                "top_logprobs": tops, "text_offset": offsets}
