"""What the gateway engine needs from one upstream server API: the request body, the stream read as token ids,
the start-up check. One module per API (:mod:`.vllm`, :mod:`.llamacpp`) implements :class:`UpstreamAPI`.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol

from guardrail.engines.remote.client import UpstreamClient
from guardrail.engines.remote.upstream import UpstreamInfo
from guardrail.params import SamplingParams

__all__ = ["Piece", "Submission", "UpstreamAPI", "WithheldTokens"]


@dataclass(frozen=True)
class Submission:
    """One upstream request the engine sends (a continuation, a re-pick or a recovery).

    Attributes:
        model: the upstream model id.
        prompt: the prompt's token ids followed by the kept completion tokens.
        params: the client's sampling parameters.
        max_tokens: tokens to decode at most.
        always_banned: token ids the upstream must not decode at any position (the lists' always-banned ids).
        position_bans: token ids it must not decode at the first position of this request: the bans a rollback left at
            ``position``. Without ``in_request`` they come with ``max_tokens`` 1 and hold for the whole answer.
        in_request: ban per position, as exact masks (the API's :attr:`UpstreamAPI.repick_in_request`; the
            engine drops it for the rest of an answer once a banned id came back anyway).
        position: completion tokens kept so far (the first token decoded lands there).
        submissions: requests sent before this one for the same answer (a seed is moved by it).
        end_ids: the ids that end this answer (EOS unless ``ignore_eos``, plus ``stop_token_ids``).
        whole: the engine needs every id of this short request (a re-pick, a recovery): an API whose stream
            may hold ids back answers it in one response.
    """

    model: str
    prompt: list[int]
    params: SamplingParams
    max_tokens: int
    always_banned: frozenset[int]
    position: int
    submissions: int
    end_ids: frozenset[int]
    whole: bool = False
    position_bans: frozenset[int] = frozenset()
    in_request: bool = False

    @property
    def banned_anywhere(self) -> frozenset[int]:
        """``always_banned`` ∪ ``position_bans``: what an API without per-position bans bans for the whole request."""
        return self.always_banned | self.position_bans if self.position_bans else self.always_banned


@dataclass(frozen=True)
class Piece:
    """Part of an upstream answer, read from one stream chunk (or a whole response).

    Attributes:
        token_ids: ids decoded, in order.
        finish_reason: ``"stop"`` (the upstream's own end: EOS, a stop id), ``"length"`` (its token limit), or
            ``None`` (more follows).
        steps: decode steps this piece stands for (``forward_passes``).
        cached_tokens: prompt tokens the upstream served from its prefix cache (reported once per request).
    """

    token_ids: Sequence[int]
    finish_reason: str | None = None
    steps: int = 0
    cached_tokens: int = 0


class WithheldTokens(RuntimeError):
    """The upstream decoded tokens its stream did not send (llama.cpp's server sends no chunk for a token that
    ends inside a UTF-8 character, and the next chunk carries only the next token's id). The pieces read
    before are complete; the engine asks for the rest again in one response (``Submission.whole``).

    Attributes:
        missing: tokens decoded but not sent.
    """

    def __init__(self, missing: int) -> None:
        super().__init__(f"the upstream stream held back {missing} token id(s)")
        self.missing = missing


class UpstreamAPI(Protocol):
    """One server API the gateway can drive.

    Attributes:
        name: its ``GUARDRAIL_UPSTREAM_API`` value.
        unsupported: :class:`SamplingParams` fields it cannot implement (refused with 400).
        repick_in_request: whether a request can ban ids at its first position only (``Submission.position_bans``)
            and decode on: a rollback then costs one request instead of a ``max_tokens: 1`` re-pick and a
            continuation. Set by :meth:`check`.
    """

    name: str
    unsupported: tuple[str, ...]
    repick_in_request: bool

    def check(self, client: UpstreamClient, tokenizer: Any, card: dict[str, Any],
              samples: Sequence[str]) -> UpstreamInfo:
        """Check the upstream serving ``card`` (its ``/v1/models`` entry): same tokenizer on ``samples``, token
        ids in and out. Raises ``UpstreamMismatch`` naming what is missing."""
        ...

    def body(self, submission: Submission) -> dict[str, Any]:
        """The request body of ``submission``."""
        ...

    def stream(self, client: UpstreamClient, body: dict[str, Any]) -> AbstractContextManager[Any]:
        """Send ``body``; the ``with`` value iterates :class:`Piece` s. Leaving the block closes the connection
        (the upstream aborts the request). Raises ``UpstreamError``, ``httpx.HTTPError``, or
        :class:`WithheldTokens` (after the complete pieces)."""
        ...
