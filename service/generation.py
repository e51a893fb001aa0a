"""What the generating routes share (chat and text completions, Anthropic's messages, responses): validate a
request against the server's limits, turn it into a :class:`~service.worker.GenerationRequest`, and answer it
as one JSON body or as Server-Sent Events.

The routes differ in how they build the prompt (chat templates: :mod:`service.chat_prompt`) and in the JSON of
their chunks and bodies, which they describe with a :class:`ResponseShape`; messages and responses frame their
own events from :mod:`service.event_stream`.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import json
import logging
import re
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar, runtime_checkable

from fastapi import Request
from fastapi.responses import StreamingResponse
from jinja2 import TemplateError
from starlette.concurrency import run_in_threadpool

import guardrail
from guardrail.grammar.format import StructuredOutput
from guardrail.guard.events import Finish, Rollback, TextDelta, Usage
from guardrail.guard.logprobs import TokenLogprob
from guardrail.params import SamplingParams
from guardrail.prompts import prompt_ids
from guardrail.wordlists.wordlist import with_obfuscation
from service import guard_events
from service.errors import ApiError, documented_errors, error_body
from service.logs import capped_names
from service.request_lists import request_list, stored_lists
from service.runtime import Runtime
from service.schema_limits import check_structured_output
from service.schemas.generation import GenerationFields
from service.tenants.access import Caller
from service.tenants.policy import ANONYMOUS_POLICY, PolicyViolation
from service.tool_grammar import schema_error
from service.worker import (
    ChoiceEvent,
    GenerationFailed,
    GenerationRejected,
    GenerationRequest,
    Job,
    NotAdmitting,
    QueueFull,
    ServerShuttingDown,
    Slot,
)

log = logging.getLogger("guardrail.service")

SSE_DONE = "data: [DONE]\n\n"
#: ``error.code`` of a request refused or ended because the process drains (503).
SHUTTING_DOWN = "server_shutting_down"
#: An SSE comment: clients ignore it, idle proxies see traffic (sent while the guard holds text back).
SSE_KEEPALIVE = ": keep-alive\n\n"
#: The error answers of both generation routes (OpenAPI ``responses``); 400 is added for every route.
GENERATION_ERRORS = documented_errors(
    e401="Unknown, rotated or revoked API key; or none when anonymous requests are off or GUARDRAIL_API_KEYS is set.",
    e403="The API key's policy does not allow a list, request terms, or a weaker evasion guard or obfuscation.",
    e404="Unknown model (code model_not_found) or word list (code wordlist_not_found).",
    e413="Body or request terms beyond the server's limits.",
    e429="The API key's rate limit, or the generation queue is full: retry after Retry-After seconds.",
    e500="The generation failed.",
    e503="The server is shutting down (code server_shutting_down): retry after Retry-After seconds, "
         "another replica answers.",
)
T = TypeVar("T")
_SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
_DISCONNECT_POLL_S = 0.25


def sse_event(payload: dict[str, Any]) -> str:
    """One Server-Sent Event carrying ``payload`` as compact JSON."""
    return "data: " + json.dumps(payload, ensure_ascii=False, separators=(",", ":")) + "\n\n"


@functools.cache
def system_fingerprint(model: str) -> str:
    """OpenAI's ``system_fingerprint``: names the backend configuration (the served model and this package's
    version), so that a client can tell when answers may change for reasons other than the request."""
    return "fp_" + hashlib.sha256(f"{model}:{guardrail.__version__}".encode()).hexdigest()[:12]


@dataclass(frozen=True)
class ResponseIdentity:
    """Identity of one response: shared by all its chunks."""

    id: str
    created: int
    model: str
    system_fingerprint: str = ""

    @classmethod
    def new(cls, prefix: str, model: str) -> ResponseIdentity:
        return cls(f"{prefix}-{uuid.uuid4().hex}", int(time.time()), model, system_fingerprint(model))

    def head(self, kind: str) -> dict[str, Any]:
        """The fields every body and chunk of this response begins with."""
        return {"id": self.id, "object": kind, "created": self.created, "model": self.model,
                "system_fingerprint": self.system_fingerprint}


@dataclass
class GuardRecord:
    """Why one choice's answer was changed or cut: rollbacks by word list and the list that ended it with
    ``content_filter`` (the ``guardrail`` field of a choice; names and counts, never the terms)."""

    lists: Counter[str] = field(default_factory=Counter)

    def add(self, rollback: Rollback) -> None:
        self.lists[rollback.list_name] += 1

    def to_dict(self, finish: Finish) -> dict[str, Any]:
        return {"rollbacks": finish.usage.rollbacks, "lists": dict(self.lists), "filtered_by": finish.filtered_by}


def guard_headers(records: list[dict[str, Any]]) -> dict[str, str]:
    """Response headers of a non-streamed answer saying why it was changed, summed over its choices'
    ``guardrail`` records: ``Guardrail-Rollbacks: en=2, request=1`` (``0`` when none) and, when a choice ended
    with ``content_filter`` because of a list, ``Guardrail-Filtered-By: en`` (list names, never terms)."""
    lists: Counter[str] = Counter()
    for record in records:
        lists.update(record["lists"])
    headers = {"Guardrail-Rollbacks": ", ".join(f"{name}={count}" for name, count in sorted(lists.items())) or "0"}
    filtered = sorted({r["filtered_by"] for r in records if r["filtered_by"]})
    if filtered:
        headers["Guardrail-Filtered-By"] = ", ".join(filtered)
    return headers


@dataclass(frozen=True)
class ChoiceResult:
    """A finished choice: its last event, its guard record, and (when asked) the delivered tokens'
    log-probability records in order."""

    finish: Finish
    guardrail: dict[str, Any]
    logprobs: tuple[TokenLogprob, ...] = ()


@dataclass
class UsageTotal:
    """Usage summed over a request's choices (the prompt counted once, as OpenAI does)."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    rollbacks: int = 0
    forward_passes: int = 0
    reprefills: int = 0
    cached_tokens: int = 0
    draft_tokens: int = 0
    accepted_draft_tokens: int = 0

    def add(self, usage: Usage) -> None:
        self.prompt_tokens = usage.prompt_tokens
        self.cached_tokens = max(self.cached_tokens, usage.cached_tokens)  # of the one prompt
        self.completion_tokens += usage.completion_tokens
        self.rollbacks += usage.rollbacks
        self.forward_passes += usage.forward_passes
        self.reprefills += usage.reprefills
        self.draft_tokens += usage.draft_tokens
        self.accepted_draft_tokens += usage.accepted_draft_tokens

    def to_dict(self) -> dict[str, Any]:
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.prompt_tokens + self.completion_tokens,
            "prompt_tokens_details": {"cached_tokens": self.cached_tokens},
            "rollbacks": self.rollbacks,
            "forward_passes": self.forward_passes,
            "reprefills": self.reprefills,
            "draft_tokens": self.draft_tokens,
            "accepted_draft_tokens": self.accepted_draft_tokens,
        }


class ResponseShape(Protocol):
    """The JSON a route answers with (chat.completion vs text_completion). A shape may keep per-choice state
    (the chat route reads tool calls out of the streamed text): one instance serves one request."""

    id_prefix: str

    def first_chunk(self, c: ResponseIdentity, index: int) -> dict[str, Any] | None: ...

    def delta_chunks(self, c: ResponseIdentity, index: int, text: str) -> list[dict[str, Any]]: ...

    def finish_chunks(self, c: ResponseIdentity, index: int, result: ChoiceResult) -> list[dict[str, Any]]: ...

    def usage_chunk(self, c: ResponseIdentity, usage: dict[str, Any]) -> dict[str, Any]: ...

    def body(self, c: ResponseIdentity, results: list[ChoiceResult], usage: dict[str, Any]) -> dict[str, Any]: ...


@runtime_checkable
class ReportsLogprobs(Protocol):
    """A :class:`ResponseShape` whose route can ask for logprobs (chat and completions)."""

    def add_logprobs(self, chunk: dict[str, Any], index: int, records: Sequence[TokenLogprob]) -> None:
        """Put ``records`` (choice ``index``'s next ones) in ``chunk``'s choice."""


@dataclass
class Prepared:
    """A validated request, ready to submit."""

    generation: GenerationRequest
    stream: bool
    include_usage: bool
    caller: Caller | None = None
    tokens: int = 0  # what the caller's tokens-per-minute limit counts: prompt + n x max_tokens
    keepalive_s: float = 0.0
    guard_events: bool = False  # stream_options.include_guard_events (service/guard_events.py)


def reject_unsupported(body: GenerationFields) -> None:
    """Refuse a request that sets a field this server does not implement (``body.unsupported_field()``).

    Raises:
        ApiError: 400 ``unsupported_parameter`` naming the field.
    """
    name = body.unsupported_field()
    if name is None:
        return
    hint = ' (type must be "text", "json_object" or "json_schema")' if name == "response_format" else ""
    raise ApiError(400, f"{name}{hint} is not supported by this server; remove it from the request",
                   param=name, code="unsupported_parameter")


def _named_field(message: str) -> str | None:
    """The SamplingParams field a core validation message starts with (``"logit_bias[...]: ..."``)."""
    head = re.split(r"[\s:\[]", message, maxsplit=1)[0]
    return head if head in SamplingParams.field_names() else None


@functools.cache
def max_token_chars(tokenizer: Any) -> int:
    """The most characters one token of ``tokenizer`` can stand for: the longest token string of its vocab.

    A byte-level BPE token string has one character per byte and a SentencePiece one at least one per
    character it covers, so a text of ``c`` characters needs at least ``ceil(c / max_token_chars)``
    tokens. Computed once per tokenizer (cached on its identity).
    """
    return max((len(token) for token in tokenizer.get_vocab()), default=1) or 1


def check_prompt_chars(runtime: Runtime, param: str, chars: int) -> None:
    """Refuse a prompt that cannot fit the model's context, from its length alone (no tokenizing).

    Raises:
        ApiError: 400 ``context_length_exceeded`` naming ``param`` when ``chars`` characters need more
            tokens than the context holds, whatever the tokenization.
    """
    at_least = -(-chars // max_token_chars(runtime.tokenizer))
    if at_least > runtime.context_length:
        raise ApiError(400, f"the prompt ({chars} characters, at least {at_least} tokens) exceeds the model's "
                       f"context of {runtime.context_length} tokens", param=param, code="context_length_exceeded")


async def prompt_token_ids(runtime: Runtime, param: str, **prompt: Any) -> list[int]:
    """``guardrail.prompts.prompt_ids`` for the served tokenizer (``prompt=`` text or ``messages=``, and its
    keyword arguments ``tools``, ``chat_template``, ``assistant_prefix``), run in
    a worker thread: tokenizing a long prompt takes seconds, during which the event loop must keep
    answering (``/healthz``, other streams). A prompt too long for the context is refused first, from
    its length alone.

    Raises:
        ApiError: 400 naming ``param`` (``messages``, ``prompt``) when the prompt cannot fit the context or
            the core or the chat template rejects it (a template may raise on a turn order it does not allow).
    """
    text = prompt.get("prompt")
    chars = len(text) if isinstance(text, str) else sum(len(m["content"]) for m in prompt.get("messages") or ())
    check_prompt_chars(runtime, param, chars)
    try:
        return await run_in_threadpool(prompt_ids, runtime.tokenizer, **prompt)
    except (ValueError, TemplateError) as exc:
        raise ApiError(400, str(exc), param=param, code="invalid_value") from None


def _terms_param(body: GenerationFields) -> str:
    """The field that carries the request's own terms (for a 403 naming it)."""
    return next((name for name in ("banned_terms", "bad_words", "banned_strings") if getattr(body, name)),
                "banned_terms")


async def prepare(runtime: Runtime, body: GenerationFields, prompt: list[int], token_limit: int | None,
            log_fields: dict[str, object], prompt_param: str, caller: Caller | None = None,
            grammar: StructuredOutput | None = None) -> Prepared:
    """Check a request against the server's limits and its caller's policy, and build the worker's request.

    Args:
        prompt: the prompt's token ids; ``prompt_param`` names the field it came from (errors).
        token_limit: the request's ``max_tokens`` (None: the policy's or the server's default).
        log_fields: structured-log fields of the generation.
        caller: the tenant (or anonymous caller) of the request; None = anonymous.
        grammar: the answer's grammar when the route built one (tool calls, :mod:`service.tool_grammar`; it
            includes the request's own structured output), in place of the request's structured output.

    Raises:
        ApiError: 404 for an unknown ``model`` or word list, 403 naming the field the caller's policy does
            not allow, 400 naming the field for anything else.
    """
    settings = runtime.settings
    policy = caller.policy if caller is not None else ANONYMOUS_POLICY
    if body.model != runtime.model_id:
        raise ApiError(404, f"model {body.model!r} is not served here (GET /v1/models lists {runtime.model_id!r})",
                       param="model", code="model_not_found", type_="invalid_request_error")
    reject_unsupported(body)
    ignored, ignored_count = capped_names(body.ignored_fields())
    if ignored_count:  # capped: a body of unknown keys must not make a log line of its size
        log.info("ignored request fields", extra={**log_fields, "ignored_fields": ignored,
                                                   "ignored_field_count": ignored_count})
    if body.n > settings.max_n:
        raise ApiError(400, f"n={body.n} exceeds this server's limit of {settings.max_n}", param="n",
                       code="invalid_value")
    max_tokens = token_limit if token_limit is not None else policy.default_max_tokens(settings.default_max_tokens)
    limit = policy.max_tokens_limit(settings.max_tokens_limit)
    if max_tokens > limit:
        whose = "this server's" if limit == settings.max_tokens_limit else "this API key's"
        raise ApiError(400, f"max_tokens={max_tokens} exceeds {whose} limit of {limit}",
                       param="max_tokens", code="invalid_value")
    if not prompt:
        raise ApiError(400, "the prompt is empty", param=prompt_param, code="invalid_value")
    if len(prompt) + max_tokens > runtime.context_length:
        raise ApiError(400, f"the prompt ({len(prompt)} tokens) plus max_tokens ({max_tokens}) exceeds the "
                       f"model's context of {runtime.context_length} tokens", param=prompt_param,
                       code="context_length_exceeded")
    try:
        names = policy.wordlists(body.wordlists, runtime.default_wordlists)
        policy.check_request_terms(len(body.request_terms()), _terms_param(body))
        evasion_guard = policy.evasion_guard_for(body.evasion_guard, settings.evasion_guard)
        # Lists and terms without their own obfuscation level take the request's, else the policy's or server's.
        obfuscation = policy.obfuscation_for(body.obfuscation, settings.obfuscation)
    except PolicyViolation as exc:
        raise ApiError(403, str(exc), param=exc.param, code="not_allowed") from None
    stored = stored_lists(runtime, names)
    requested = await request_list(runtime, body.request_terms(), _terms_param(body))  # in the compile pool
    wordlists = tuple(with_obfuscation([s.wordlist for s in stored] + ([requested] if requested is not None else []),
                                       obfuscation))
    options: dict[str, Any] = {
        "max_tokens": max_tokens,
        "stop": body.stop_list(),
        "logit_bias": body.logit_bias or {},
        "watermark": body.watermark,
        "watermark_key": settings.watermark_key,
        "max_rollbacks": min(settings.max_rollbacks, body.max_rollbacks if body.max_rollbacks is not None
                             else settings.max_rollbacks),
        "max_rollbacks_per_position": settings.max_rollbacks_per_position,
        "evasion_guard": evasion_guard,
        "speculative": body.speculative,
        "timeout_s": settings.request_timeout_s,
    }
    if body.stop_token_ids:
        options["stop_token_ids"] = tuple(body.stop_token_ids)
    structured = structured_output_of(runtime, body)
    if grammar is not None:
        structured = grammar
    if structured is not None:
        options["response_format"] = structured
    try:
        options["logprobs"] = body.logprobs_count()
    except ValueError as exc:  # the message starts with the field's name
        raise ApiError(400, str(exc), param=str(exc).split(":", 1)[0], code="invalid_value") from None
    for name in ("temperature", "top_p", "top_k", "min_p", "seed", "repetition_penalty", "presence_penalty",
                 "frequency_penalty", "min_tokens", "ignore_eos"):
        value = getattr(body, name)
        if value is not None:
            options[name] = value
    try:
        params = SamplingParams(**options)
        params.check_vocab(runtime.vocab_size)
    except ValueError as exc:  # the core's messages start with the field's name
        raise ApiError(400, str(exc), param=_named_field(str(exc)), code="invalid_value") from None
    fields = {**log_fields, "wordlists": {s.wordlist.name: s.version for s in stored},
              "obfuscation": str(obfuscation),
              "request_terms": len(body.request_terms()), "prompt_tokens": len(prompt), "max_tokens": max_tokens,
              "tenant": caller.tenant if caller is not None else None,
              "response_format": structured.kind if structured is not None else None}
    return Prepared(
        GenerationRequest(prompt, wordlists, params, body.n, fields, settings.debug_log_prompts),
        stream=body.stream,
        include_usage=bool(body.stream_options and body.stream_options.include_usage),
        guard_events=bool(body.stream_options and body.stream_options.include_guard_events),
        caller=caller,
        tokens=len(prompt) + body.n * max_tokens,
        keepalive_s=settings.sse_keepalive_s,
    )


def structured_output_of(runtime: Runtime, body: GenerationFields) -> StructuredOutput | None:
    """The request's JSON format (docs/structured-output.md). The schema is checked here, without the tokenizer,
    so that the 400 names the route's field; the engine compiles it for the tokenizer when the request is admitted.

    Raises:
        ApiError: 400 naming the field (``response_format``, ``guided_json``, ``text.format``,
            ``output_config.format``) when malformed, beyond the schema limits (``schema_too_large``:
            :mod:`service.schema_limits`), or when the engine is not
            the embedded one (vLLM's own structured outputs and an upstream's cannot roll back with the guard).
    """
    try:
        structured = body.structured_output()
    except ValueError as exc:
        field = str(exc).split(":", 1)[0]
        raise ApiError(400, str(exc), param=field, code="invalid_value") from None
    if structured is not None:  # before anything compiles it: its size is the server's memory
        check_structured_output(structured, body.structured_output_field(), runtime.settings)
    if structured is not None and not runtime.engine.capabilities.structured_output:
        field = body.structured_output_field()
        raise ApiError(400, f"{field}: structured output is served by the transformers engine only, not by the "
                       f"{runtime.engine.name} engine (docs/structured-output.md)", param=field,
                       code="unsupported_parameter")
    if structured is not None:
        error = schema_error(structured.schema_object())
        if error is not None:
            field = body.structured_output_field()
            raise ApiError(400, f"{field}: invalid JSON schema: {error}", param=field, code="invalid_value")
    return structured


def _unavailable(runtime: Runtime) -> ApiError:
    health = runtime.engine.health()
    return ApiError(503, f"The model server is unavailable ({health.detail}). Retry later.",
                    code="engine_unavailable", headers={"Retry-After": str(runtime.settings.retry_after_s)})


async def submit(runtime: Runtime, request: Request, prepared: Prepared) -> Job:
    """Queue the request: take a place in the queue, then charge the caller's tokens per minute (so a full
    queue spends none), then fill the place.

    Raises:
        ApiError: 503 with ``Retry-After`` while the process drains, or while the engine reports itself down (a
            remote upstream that does not answer); 429 with ``Retry-After`` when the queue is full or over the
            caller's tokens per minute; 400 naming ``max_tokens`` when the request alone exceeds them.
    """
    if not runtime.engine.health().ok:
        raise _unavailable(runtime)
    slot = _reserve(runtime)
    try:
        if prepared.caller is not None:  # a Redis round trip: off the event loop
            await run_in_threadpool(request.app.state.tenants.admit_tokens, prepared.caller, prepared.tokens)
    except BaseException:
        runtime.worker.release(slot)
        raise
    return runtime.worker.enqueue(slot, prepared.generation, runtime.settings.request_timeout_s)


def _reserve(runtime: Runtime) -> Slot:
    try:
        return runtime.worker.reserve()
    except QueueFull as exc:
        raise ApiError(429, "The server is busy: too many generations queued. Retry later.",
                       code="queue_full", headers={"Retry-After": str(exc.retry_after_s)}) from None
    except NotAdmitting as exc:
        raise _shutting_down(str(exc).capitalize() + ". Retry the request.", exc.retry_after_s) from None


def _shutting_down(message: str, retry_after_s: int) -> ApiError:
    return ApiError(503, message, code=SHUTTING_DOWN, headers={"Retry-After": str(retry_after_s)})


async def while_connected(work: Awaitable[T], job: Job, request: Request) -> T:
    """Await ``work``; if the client disconnects meanwhile, cancel the job (``work`` then ends soon, as
    the job's events do)."""
    task = asyncio.ensure_future(work)
    try:
        while not task.done():
            await asyncio.wait({task}, timeout=_DISCONNECT_POLL_S)
            if not task.done() and not job.cancel.is_set() and await request.is_disconnected():
                job.cancel.set()
        return task.result()
    finally:
        if not task.done():  # we are being torn down: stop the model, drop the waiter
            job.cancel.set()
            task.cancel()


async def collect_results(first: ChoiceEvent, events: AsyncIterator[ChoiceEvent]) -> list[ChoiceResult]:
    results: dict[int, ChoiceResult] = {}
    records: dict[int, GuardRecord] = {}
    logprobs: dict[int, list[TokenLogprob]] = {}
    async for item in prepend(first, events):
        event = item.event
        if isinstance(event, Rollback):
            records.setdefault(item.index, GuardRecord()).add(event)
        elif isinstance(event, TextDelta) and event.logprobs:
            logprobs.setdefault(item.index, []).extend(event.logprobs)
        elif isinstance(event, Finish):
            results[item.index] = ChoiceResult(event, records.get(item.index, GuardRecord()).to_dict(event),
                                               tuple(logprobs.get(item.index, ())))
    return [results[i] for i in sorted(results)]


#: What writes a stream's SSE body: (first event, the other events, shape, identity, request, a callback for
#: the first released text, job) -> the body's lines. :func:`_sse` writes chat and completions chunks.
Streamer = Callable[[ChoiceEvent, AsyncIterator[ChoiceEvent], "ResponseShape", ResponseIdentity, Prepared,
                     Callable[[], None], Job], AsyncIterator[str]]


async def respond(runtime: Runtime, request: Request, prepared: Prepared, shape: ResponseShape,
                  endpoint: str, streamer: Streamer | None = None) -> Any:
    """Run a prepared request and answer it (JSON body, or SSE when ``stream`` was asked).

    The response starts only once the generation has produced its first event, so that a request the
    decoder refuses is still answered with a 4xx, not a stream. ``streamer``: the SSE body's writer (default:
    chat and completions chunks, then ``[DONE]``).
    """
    started = getattr(request.state, "started_at", time.perf_counter())
    completion = ResponseIdentity.new(shape.id_prefix, runtime.model_id)
    job = await submit(runtime, request, prepared)
    events = job.events()
    streaming = False
    try:
        first = await while_connected(anext(events, None), job, request)
        if first is None:  # cancelled while queued: the client is gone, nobody reads this
            raise ApiError(499, "client closed the request", code="cancelled")
        if prepared.stream:
            ttft = runtime.metrics.time_to_first_token.labels(endpoint, runtime.metrics.model_name)
            stream = (streamer or _sse)(first, events, shape, completion, prepared,
                                        lambda: ttft.observe(time.perf_counter() - started), job)
            streaming = True
            return StreamingResponse(stream, media_type="text/event-stream", headers=_SSE_HEADERS)
        results = await while_connected(collect_results(first, events), job, request)
    except GenerationRejected as exc:
        raise ApiError(400, str(exc), param=_named_field(str(exc)), code="invalid_value") from None
    except ServerShuttingDown as exc:
        raise _shutting_down(str(exc), runtime.settings.retry_after_s) from None
    except GenerationFailed as exc:
        if not runtime.engine.health().ok:  # failed before any event because the upstream went down
            raise _unavailable(runtime) from None
        raise ApiError(500, str(exc), code="generation_failed") from None
    finally:
        if not streaming:
            job.cancel.set()  # a no-op once finished; else nobody will read what the model makes
    if len(results) < prepared.generation.n:  # cancelled midway
        raise ApiError(499, "client closed the request", code="cancelled")
    total = UsageTotal()
    for result in results:
        total.add(result.finish.usage)
    return shape.body(completion, results, total.to_dict())


async def prepend(first: ChoiceEvent, rest: AsyncIterator[ChoiceEvent]) -> AsyncIterator[ChoiceEvent]:
    yield first
    async for item in rest:
        yield item


async def with_keepalive(events: AsyncIterator[ChoiceEvent], interval_s: float) -> AsyncIterator[ChoiceEvent | None]:
    """``events``, with ``None`` whenever ``interval_s`` seconds pass without one (0: never). The pending
    ``anext`` is awaited through a task, so a timeout does not cancel (and so close) the generator."""
    pending: asyncio.Future[ChoiceEvent] | None = None
    try:
        while True:
            if pending is None:
                pending = asyncio.ensure_future(anext(events))
            if interval_s > 0:
                done, _ = await asyncio.wait({pending}, timeout=interval_s)
                if not done:
                    yield None
                    continue
            try:
                item = await pending
            except StopAsyncIteration:
                return
            pending = None
            yield item
    finally:
        if pending is not None and not pending.done():
            pending.cancel()


async def _sse(first: ChoiceEvent, events: AsyncIterator[ChoiceEvent], shape: ResponseShape,
               completion: ResponseIdentity, prepared: Prepared, first_text: Callable[[], None],
               job: Job) -> AsyncIterator[str]:
    """The SSE body: chunks of released text, the finish chunk(s) of each choice, optional usage, [DONE].

    With ``stream_options.include_usage`` every chunk carries ``usage: null`` and a last chunk with no
    choices carries the totals (OpenAI's shape). With ``stream_options.include_guard_events`` each rollback, and
    each choice's end before its finish chunk, is a chunk with no choices and a ``guardrail_event``
    (:mod:`service.guard_events`). A comment line is sent whenever ``keepalive_s`` passes
    without a chunk. A failure after the stream started becomes an ``error`` event (OpenAI's error body)
    followed by ``[DONE]``; so does the drain deadline (status 503, code ``server_shutting_down``). When the
    client disconnects, Starlette cancels this generator and ``finally`` stops the generation.
    """
    total = UsageTotal()
    opened: set[int] = set()
    records: dict[int, GuardRecord] = {}
    # Logprob records not sent yet, per choice: they go out with the next chunk of that choice (a delta of
    # no text, or text a tool-call parser holds, yields none).
    unsent: dict[int, list[TokenLogprob]] = {}
    sent_text = False
    readable = guard_events.readable_by(prepared.caller) if prepared.guard_events else None

    def guard_event(event: dict[str, Any]) -> str:
        return chunk_event(guard_events.event_chunk(shape.usage_chunk(completion, {}), event))

    def with_logprobs(chunks: list[dict[str, Any]], index: int) -> list[dict[str, Any]]:
        pending = unsent.get(index)
        if pending and chunks and isinstance(shape, ReportsLogprobs):
            shape.add_logprobs(chunks[0], index, pending)
            del unsent[index]
        return chunks

    def chunk_event(chunk: dict[str, Any]) -> str:
        if prepared.include_usage:
            chunk["usage"] = None
        return sse_event(chunk)

    try:
        try:
            async for item in with_keepalive(prepend(first, events), prepared.keepalive_s):
                if item is None:
                    yield SSE_KEEPALIVE
                    continue
                event, index = item.event, item.index
                if index not in opened:
                    opened.add(index)
                    chunk = shape.first_chunk(completion, index)
                    if chunk is not None:
                        yield chunk_event(chunk)
                if isinstance(event, TextDelta):
                    if event.logprobs:
                        unsent.setdefault(index, []).extend(event.logprobs)
                    if event.text:
                        for chunk in with_logprobs(shape.delta_chunks(completion, index, event.text), index):
                            if not sent_text:
                                sent_text = True
                                first_text()
                            yield chunk_event(chunk)
                elif isinstance(event, Rollback):
                    records.setdefault(index, GuardRecord()).add(event)
                    if readable is not None:
                        yield guard_event(guard_events.rollback_event(index, event, readable))
                elif isinstance(event, Finish):
                    total.add(event.usage)
                    if readable is not None:
                        yield guard_event(guard_events.finish_event(index, event))
                    result = ChoiceResult(event, records.get(index, GuardRecord()).to_dict(event))
                    for chunk in with_logprobs(shape.finish_chunks(completion, index, result), index):
                        yield chunk_event(chunk)
            if prepared.include_usage:
                yield sse_event(shape.usage_chunk(completion, total.to_dict()))
        except ServerShuttingDown as exc:
            yield sse_event(error_body(str(exc), status=503, code=SHUTTING_DOWN))
        except (GenerationFailed, GenerationRejected) as exc:
            yield sse_event(error_body(str(exc), status=500, code="generation_failed"))
        yield SSE_DONE
    finally:
        job.cancel.set()
