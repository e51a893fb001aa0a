"""The gateway engine: guard an inference server that already runs, token by token, over HTTP.

The service renders the chat template and sends token ids, so it sees every token the upstream decodes
(``return_token_ids``). Each request's tokens go through its :class:`GuardSession`; only released text
leaves (hold-back as on the other engines). The upstream cannot crop a running request, so a rollback is a
resubmission, as on the in-process vLLM engine (docs/design.md, "Engines and scale")::

    continuation:   POST /v1/completions {prompt: prompt + kept, stream, return_token_ids,
                                          logit_bias: always-banned ids -> -100, max_tokens: room}
      each token -> judge (guardrail.guard.verdict): keep (release text) | rollback | finish
    on a rollback:  close the stream (the upstream aborts the request), then
                    POST {prompt: prompt + kept, logit_bias: always-banned + the position's bans -> -100,
                          max_tokens: 1}               -- the re-pick at the rollback position
                    and a continuation from there on;
                    or, when the upstream runs guardrail's vLLM logits processor (found at start-up), one
                    POST {prompt: prompt + kept, vllm_xargs: {guardrail: always-banned ids everywhere, the
                          position's bans at its first position}, max_tokens: room} -- re-pick and continue.

The resubmitted prompt is the aborted request's prefix: an upstream with prefix caching serves it from the KV
blocks that request filled (only the tail past the last full block is prefilled again).

The request body, the stream's reading and the start-up check differ per server API (vLLM's OpenAI server,
llama.cpp's server): :mod:`guardrail.engines.remote.backends`, one module each.

Fail closed: ``logit_bias`` is a bias, not a mask (vLLM clamps it to -100). A token the upstream returns
although it was banned for that request is never given to the session: it counts as a hit at that position
(``max_rollbacks_per_position`` and ``max_rollbacks`` apply; beyond them ``content_filter``), and the position
is asked again. Whatever the upstream returns, no banned term is released: the session matches the text.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Generator, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from guardrail.engines.base import EngineCapabilities, EngineHealth, EngineUnavailable, check_request
from guardrail.engines.remote.backends import Submission, UpstreamAPI, WithheldTokens, connect
from guardrail.engines.remote.backends.vllm import BAN_BIAS, VLLMAPI
from guardrail.engines.remote.client import UpstreamClient, UpstreamError
from guardrail.engines.remote.upstream import UpstreamInfo
from guardrail.guard.driver import DecodeDriver
from guardrail.guard.events import Event, FinishReason, Usage
from guardrail.guard.session import GuardSession
from guardrail.guard.verdict import KEEP
from guardrail.matching.combined import ArtefactLike
from guardrail.matching.vocab import TokenVocab
from guardrail.params import SamplingParams

__all__ = ["BAN_BIAS", "RemoteEngine", "RemoteUsage"]

log = logging.getLogger("guardrail.engines.remote")

#: SamplingParams fields the gateway does not implement on vLLM (the embedded engine does); each API names its own.
UNSUPPORTED = VLLMAPI.unsupported
#: Tokens asked for in one response after a stream held ids back (:class:`WithheldTokens`): a UTF-8 character
#: is at most 4 bytes, a token at least 1, so 4 more complete the character the withheld tokens began.
RECOVERY_TOKENS = 8


@dataclass(frozen=True)
class RemoteUsage(Usage):
    """:class:`Usage` of a generation through the gateway.

    Attributes:
        requests: upstream requests made (the first, re-picks and continuations).
        resubmissions: requests that re-pick a position after a hit, with its bans (``max_tokens: 1`` on a
            stock server; the continuation itself through guardrail's logits processor); ``reprefills`` counts
            the same.
        banned_returned: tokens the upstream returned despite their ban (each counted as a hit, never kept).
        withheld: streams that held token ids back (llama.cpp: a token ending inside a UTF-8 character), each
            followed by a non-streamed request for the missing tokens.
    """

    requests: int = 0
    resubmissions: int = 0
    banned_returned: int = 0
    withheld: int = 0


class _Counters:
    def __init__(self) -> None:
        self.requests = 0
        self.resubmissions = 0
        self.banned_returned = 0
        self.withheld = 0
        self.recover = False  # the last stream held ids back: ask for the next tokens in one response
        self.chunks = 0
        self.cached_tokens = 0
        self.banned_at: dict[int, int] = {}


class _Verdicts:
    """The gateway's :class:`~guardrail.guard.verdict.VerdictHandler` for one generation.

    Events are buffered, not yielded from here: the loop yields a keep's events at once and a rollback's or
    a finish's only after it has closed the upstream stream (closing it is what aborts the upstream request).
    A keep needs nothing (the upstream decodes on); a rollback needs nothing here either (the loop leaves
    the stream and resubmits ``prompt + kept`` with the position's bans); a finish calls
    :meth:`RemoteEngine._finish` (the driver's finish with the gateway's counters).
    """

    __slots__ = ("counters", "driver", "engine", "events")

    def __init__(self, engine: RemoteEngine, driver: DecodeDriver, counters: _Counters) -> None:
        self.engine = engine
        self.driver = driver
        self.counters = counters
        self.events: list[Event] = []

    def emit(self, events: Sequence[Event]) -> None:
        self.events.extend(events)

    def on_keep(self, token_id: int, position: int) -> None:
        pass

    def on_rollback(self, position: int) -> None:
        pass

    def on_finish(self, reason: FinishReason) -> None:
        self.events.extend(self.engine._finish(self.driver, reason, self.counters))

    def drain(self) -> list[Event]:
        """The buffered events, in order; the buffer is emptied."""
        events, self.events = self.events, []
        return events


class RemoteEngine:
    """The gateway to an upstream that takes and returns token ids (vLLM's OpenAI server, llama.cpp's server).

    Args:
        url: the upstream's root URL.
        tokenizer: the upstream model's tokenizer (checked against the upstream at :meth:`start`).
        vocab: its bytes table (the artefacts are compiled for it).
        model: the upstream model id (default: the first ``/v1/models`` lists).
        api: the upstream's API: ``auto`` (detected at :meth:`start`), ``vllm`` or ``llamacpp``
            (:mod:`guardrail.engines.remote.backends`).
        logits_processor: ``auto`` (use guardrail's vLLM logits processor when :meth:`start` finds it on the
            upstream), ``on`` (refuse to start without it) or ``off`` (bans through ``logit_bias``).
        capacity: streams at once (the worker's threads; one pooled connection each).
        connect_timeout_s, read_timeout_s, retries: see :class:`UpstreamClient`.
        health_interval_s: how often ``/health`` is probed, seconds.
        retry_after_s: the ``Retry-After`` hint while the upstream is down, seconds.
        context_length: used until :meth:`start` reads the upstream's ``max_model_len``, tokens.
        transport: see :class:`UpstreamClient`.
    """

    name = "remote"

    def __init__(self, url: str, tokenizer: Any, vocab: TokenVocab, *, model: str | None = None, api: str = "auto",
                 logits_processor: str = "auto", capacity: int = 32,
                 connect_timeout_s: float = 2.0, read_timeout_s: float = 60.0, retries: int = 2,
                 health_interval_s: float = 1.0, retry_after_s: int = 1, context_length: int = 2048,
                 transport: httpx.BaseTransport | None = None) -> None:
        self.url = url
        self.tokenizer = tokenizer
        self.vocab = vocab
        self.capacity = capacity
        self.context_length = context_length
        self.num_logits = len(vocab)
        self.eos_ids = frozenset(vocab.eos_ids)
        self.client = UpstreamClient(url, max_connections=capacity + 2, connect_timeout_s=connect_timeout_s,
                                     read_timeout_s=read_timeout_s, retries=retries, transport=transport)
        self.info: UpstreamInfo | None = None
        self.api: UpstreamAPI | None = None
        self._api_name = api
        self._logits_processor = logits_processor
        self._model = model
        self._health_interval_s = health_interval_s
        self._probe_timeout_s = connect_timeout_s
        self._retry_after_s = retry_after_s
        self._health = EngineHealth(False, "not started")
        self._stopped = threading.Event()
        self._prober: threading.Thread | None = None

    # -- Engine --------------------------------------------------------------------------------------
    def start(self) -> None:
        """Pick the upstream's API and check the upstream (:func:`~guardrail.engines.remote.backends.connect`),
        then start the health probe.

        Raises:
            UpstreamMismatch: unreachable, another tokenizer, or a missing capability (named).
        """
        self.api, self.info = connect(self.client, self.tokenizer, self._model, self._api_name,
                                      logits_processor=self._logits_processor)
        if self.info.max_model_len:
            self.context_length = self.info.max_model_len
        self._health = EngineHealth(True, f"upstream {self.url} serves {self.info.model!r}")
        log.info("upstream checked", extra={"upstream": self.url, "upstream_api": self.info.api,
                                            "upstream_model": self.info.model,
                                            "max_model_len": self.context_length,
                                            "logits_processor": self.info.logits_processor})
        self._prober = threading.Thread(target=self._probe, name="guardrail-upstream-health", daemon=True)
        self._prober.start()

    def close(self) -> None:
        self._stopped.set()
        if self._prober is not None:
            self._prober.join(timeout=self._health_interval_s + self._probe_timeout_s + 1)
        self.client.close()

    def health(self) -> EngineHealth:
        return self._health

    @property
    def capabilities(self) -> EngineCapabilities:
        """What the upstream's API supports (known after :meth:`start`); no model config: the gateway sees the
        upstream's tokenizer only, not its model's config (its logits width may be padded past the vocab), so
        ``/v1/watermark/detect`` answers 400 naming this engine."""
        return EngineCapabilities.refusing(self.api.unsupported if self.api else UNSUPPORTED, usage=RemoteUsage,
                                           upstream=True)

    def stream(self, prompt_ids: Sequence[int], artefact: ArtefactLike | None, params: SamplingParams,
               cancel: threading.Event | None = None) -> Iterator[Event]:
        """See :meth:`guardrail.engines.base.Engine.stream`; the Finish's usage is a :class:`RemoteUsage`.

        Raises:
            ValueError: empty prompt, an id outside the vocab, a prompt of ``context_length`` tokens or more, a
                parameter the gateway does not implement (named) — before any request.
            EngineUnavailable: the upstream is down (before a request), or refused the first connection.
            RuntimeError: from the iterator: the upstream failed midway (:class:`UpstreamError`, or the
                connection broke).
        """
        prompt = check_request(prompt_ids, params, num_logits=self.num_logits, max_model_len=self.context_length,
                               unsupported=self.api.unsupported if self.api else UNSUPPORTED, engine="remote engine")
        if not self._health.ok:
            raise EngineUnavailable(f"the upstream is down ({self._health.detail})", self._retry_after_s)
        session = GuardSession.from_params(artefact, self.vocab, params, eos_ids=self.eos_ids,
                                           num_logits=self.num_logits, prompt_tokens=len(prompt))
        return self._run(prompt, params, session, cancel)

    # -- the decode loop -----------------------------------------------------------------------------
    def _run(self, prompt: list[int], params: SamplingParams, session: GuardSession,
             cancel: threading.Event | None) -> Iterator[Event]:
        counters = _Counters()
        # The loop end (cancel, deadline, room, judge, finish, usage); its clock starts at the first event asked.
        driver = DecodeDriver(session, timeout_s=params.timeout_s, max_tokens=params.max_tokens, cancel=cancel,
                              context_length=self.context_length)
        verdicts = _Verdicts(self, driver, counters)
        while True:
            reason = driver.stop_reason(room=True)  # cancelled; past the deadline or no room: length
            if reason is not None:
                yield from self._finish(driver, reason, counters)
                return
            position = session.position
            room = driver.room()
            assert self.api is not None and self.info is not None, "start() checks the upstream first"
            always_banned = frozenset(int(t) for t in session.always_banned)
            position_bans = frozenset(int(t) for t in session.bans.banned(position))
            # A re-pick: the position's bans hold for its first token only. An API that cannot ban one position
            # gets a request of one token under them, then a plain continuation. So does an answer whose exact
            # masks did not hold once (a replica behind a router without guardrail's logits processor).
            in_request = self.api.repick_in_request and not counters.banned_returned
            single = bool(position_bans) and not in_request
            recover, counters.recover = counters.recover, False
            body = self.api.body(Submission(
                self.info.model, prompt + list(session.token_ids), params,
                1 if single else min(room, RECOVERY_TOKENS) if recover else room, always_banned, position,
                counters.requests, params.end_ids(self.eos_ids), whole=single or recover, position_bans=position_bans,
                in_request=in_request))
            counters.requests += 1
            counters.resubmissions += bool(position_bans)
            reason = yield from self._request(body, single, driver, verdicts, always_banned, position_bans,
                                              counters, params)
            yield from verdicts.drain()  # a rollback's or a verdict finish's events: the stream is closed now
            if reason is not None:
                yield from self._finish(driver, reason, counters)
                return
            if session.finished:  # the verdict finished it (through _Verdicts.on_finish)
                return

    def _request(self, body: dict[str, Any], single: bool, driver: DecodeDriver, verdicts: _Verdicts,
                 always_banned: frozenset[int], position_bans: frozenset[int],
                 counters: _Counters, params: SamplingParams) -> Generator[Event, None, FinishReason | None]:
        """Stream one upstream request through the session (:meth:`DecodeDriver.judge`). Returns
        (as the generator's value) the reason of a finish the engine decides itself (cancel, timeout, the
        banned-token budget), or ``None``: the next request (a rollback, a re-pick done, the upstream's
        length, ids held back) or, when ``session.finished``, the end (a verdict finish; its events wait in
        ``verdicts``). ``always_banned`` ids are banned at every position, ``position_bans`` at the request's first."""
        assert self.api is not None, "start() checks the upstream first"
        session = driver.session
        received = 0
        upstream_reason = None
        try:
            with self.api.stream(self.client, body) as pieces:
                for piece in pieces:
                    counters.chunks += piece.steps
                    if counters.requests == 1:  # the prompt as the client sent it, as on every engine
                        counters.cached_tokens += piece.cached_tokens
                    for token in piece.token_ids:
                        received += 1
                        token = int(token)
                        if (token in always_banned or (received == 1 and token in position_bans)
                                or not 0 <= token < self.num_logits):
                            return self._banned_returned(session, counters, params)  # closes the stream
                        if driver.judge(token, verdicts) != KEEP:
                            return None  # leaving the block closes the stream: the upstream aborts
                        yield from verdicts.drain()
                        reason = driver.stop_reason()  # cancelled, or past the deadline
                        if reason is not None:
                            return reason
                        if single:
                            return None  # a re-pick keeps one token (llama.cpp may decode more to end a character)
                    upstream_reason = piece.finish_reason or upstream_reason
        except WithheldTokens as exc:
            counters.withheld += 1
            counters.recover = True
            log.info("upstream stream held token ids back", extra={"missing": exc.missing})
            return None  # the kept tokens are complete up to the gap: the next request asks again, in one answer
        except httpx.ConnectError as exc:
            self._health = EngineHealth(False, f"upstream {self.url} refused a connection")
            if counters.requests == 1:
                raise EngineUnavailable(f"the upstream cannot be reached ({type(exc).__name__})",
                                        self._retry_after_s) from exc
            raise RuntimeError(f"the upstream connection failed midway ({type(exc).__name__})") from exc
        except httpx.HTTPError as exc:
            raise RuntimeError(f"the upstream connection failed midway ({type(exc).__name__})") from exc
        if received == 0:
            raise UpstreamError(f"upstream returned no token (finish_reason={upstream_reason!r})")
        if single or upstream_reason == "length":
            return None  # a re-pick done, or the upstream's own token limit: ask for the rest
        # The upstream ended the text where the session did not (its stop): the end-of-text rule applies.
        driver.judge_end(verdicts, "stop" if upstream_reason == "stop" else "length")
        return None

    def _banned_returned(self, session: GuardSession, counters: _Counters,
                         params: SamplingParams) -> FinishReason | None:
        """A token banned for this request came back anyway (or an id outside the vocab): never kept; a hit at
        the position, under the same budgets as a rollback."""
        counters.banned_returned += 1
        position = session.position
        count = counters.banned_at[position] = counters.banned_at.get(position, 0) + 1
        log.warning("upstream returned a banned token", extra={"position": position})
        if count > params.max_rollbacks_per_position or counters.banned_returned > params.max_rollbacks:
            return "content_filter"
        return None

    def _finish(self, driver: DecodeDriver, reason: FinishReason, counters: _Counters) -> Iterator[Event]:
        yield from driver.finish(reason, forward_passes=counters.chunks, reprefills=counters.resubmissions,
                                 cached_tokens=counters.cached_tokens, usage=RemoteUsage, requests=counters.requests,
                                 resubmissions=counters.resubmissions, banned_returned=counters.banned_returned,
                                 withheld=counters.withheld)

    def _probe(self) -> None:
        while not self._stopped.wait(self._health_interval_s):
            up = self.client.ok("/health", self._probe_timeout_s)
            if up != self._health.ok:
                log.warning("upstream up" if up else "upstream down", extra={"upstream": self.url})
            self._health = EngineHealth(up, f"upstream {self.url} " + ("answers" if up else "does not answer /health"))
