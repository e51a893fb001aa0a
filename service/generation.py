"""What chat and text completions share: validate a request against the server's limits, turn it into
a :class:`~service.worker.GenerationRequest`, and answer it as one JSON body or as Server-Sent Events.

The two routes differ only in how they build the prompt and in the JSON of their chunks and bodies,
which they describe with a :class:`ResponseShape`.
"""

from __future__ import annotations

import asyncio
import functools
import json
import re
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from fastapi import Request
from fastapi.responses import StreamingResponse
from starlette.concurrency import run_in_threadpool

from guardrail.guard.events import Finish, TextDelta, Usage
from guardrail.params import SamplingParams
from guardrail.prompts import prompt_ids
from guardrail.wordlists.wordlist import with_obfuscation
from service.errors import ApiError, documented_errors, error_body
from service.request_lists import request_list, stored_lists
from service.runtime import Runtime
from service.schemas.generation import GenerationFields
from service.worker import ChoiceEvent, GenerationFailed, GenerationRejected, GenerationRequest, Job, QueueFull

SSE_DONE = "data: [DONE]\n\n"
#: The error answers of both generation routes (OpenAPI ``responses``); 400 is added for every route.
GENERATION_ERRORS = documented_errors(
    e401="Missing or unknown API key (when GUARDRAIL_API_KEYS is set).",
    e404="Unknown model (code model_not_found) or word list (code wordlist_not_found).",
    e413="Body or request terms beyond the server's limits.",
    e429="The generation queue is full: retry after Retry-After seconds.",
    e500="The generation failed.",
)
T = TypeVar("T")
_SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
_DISCONNECT_POLL_S = 0.25


def sse_event(payload: dict[str, Any]) -> str:
    """One Server-Sent Event carrying ``payload`` as compact JSON."""
    return "data: " + json.dumps(payload, ensure_ascii=False, separators=(",", ":")) + "\n\n"


@dataclass(frozen=True)
class ResponseIdentity:
    """Identity of one response: shared by all its chunks."""

    id: str
    created: int
    model: str

    @classmethod
    def new(cls, prefix: str, model: str) -> ResponseIdentity:
        return cls(f"{prefix}-{uuid.uuid4().hex}", int(time.time()), model)


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
    """The JSON a route answers with (chat.completion vs text_completion)."""

    id_prefix: str

    def first_chunk(self, c: ResponseIdentity, index: int) -> dict[str, Any] | None: ...

    def delta_chunk(self, c: ResponseIdentity, index: int, text: str) -> dict[str, Any]: ...

    def finish_chunk(self, c: ResponseIdentity, index: int, reason: str) -> dict[str, Any]: ...

    def usage_chunk(self, c: ResponseIdentity, usage: dict[str, Any]) -> dict[str, Any]: ...

    def body(self, c: ResponseIdentity, finishes: list[Finish], usage: dict[str, Any]) -> dict[str, Any]: ...


@dataclass
class Prepared:
    """A validated request, ready to submit."""

    generation: GenerationRequest
    stream: bool
    include_usage: bool


def reject_unsupported(body: GenerationFields) -> None:
    """Refuse a request that sets a field this server does not implement (``body.unsupported_field()``).

    Raises:
        ApiError: 400 ``unsupported_parameter`` naming the field.
    """
    name = body.unsupported_field()
    if name is None:
        return
    hint = ' (only {"type": "text"})' if name == "response_format" else ""
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
    """``guardrail.prompts.prompt_ids`` for the served tokenizer (``prompt=`` text or ``messages=``), run in
    a worker thread: tokenizing a long prompt takes seconds, during which the event loop must keep
    answering (``/healthz``, other streams). A prompt too long for the context is refused first, from
    its length alone.

    Raises:
        ApiError: 400 naming ``param`` (``messages``, ``prompt``) when the prompt cannot fit the context or
            the core rejects it.
    """
    text = prompt.get("prompt")
    chars = len(text) if isinstance(text, str) else sum(len(m["content"]) for m in prompt.get("messages") or ())
    check_prompt_chars(runtime, param, chars)
    try:
        return await run_in_threadpool(prompt_ids, runtime.tokenizer, **prompt)
    except ValueError as exc:
        raise ApiError(400, str(exc), param=param, code="invalid_value") from None


def prepare(runtime: Runtime, body: GenerationFields, prompt: list[int], token_limit: int | None,
            log_fields: dict[str, object], prompt_param: str) -> Prepared:
    """Check a request against the server's limits and build the worker's request.

    Args:
        prompt: the prompt's token ids; ``prompt_param`` names the field it came from (errors).
        token_limit: the request's ``max_tokens`` (None: the server's default).
        log_fields: structured-log fields of the generation.

    Raises:
        ApiError: 404 for an unknown ``model`` or word list, 400 naming the field for anything else.
    """
    settings = runtime.settings
    if body.model != runtime.model_id:
        raise ApiError(404, f"model {body.model!r} is not served here (GET /v1/models lists {runtime.model_id!r})",
                       param="model", code="model_not_found", type_="invalid_request_error")
    reject_unsupported(body)
    if body.n > settings.max_n:
        raise ApiError(400, f"n={body.n} exceeds this server's limit of {settings.max_n}", param="n",
                       code="invalid_value")
    max_tokens = token_limit if token_limit is not None else settings.default_max_tokens
    if max_tokens > settings.max_tokens_limit:
        raise ApiError(400, f"max_tokens={max_tokens} exceeds this server's limit of {settings.max_tokens_limit}",
                       param="max_tokens", code="invalid_value")
    if not prompt:
        raise ApiError(400, "the prompt is empty", param=prompt_param, code="invalid_value")
    if len(prompt) + max_tokens > runtime.context_length:
        raise ApiError(400, f"the prompt ({len(prompt)} tokens) plus max_tokens ({max_tokens}) exceeds the "
                       f"model's context of {runtime.context_length} tokens", param=prompt_param,
                       code="context_length_exceeded")
    stored = stored_lists(runtime, body.wordlists)
    requested = request_list(runtime, body.request_terms())
    # Lists and terms without their own obfuscation level take the request's, else the server's.
    obfuscation = body.obfuscation or settings.obfuscation
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
        "evasion_guard": body.evasion_guard if body.evasion_guard is not None else settings.evasion_guard,
        "speculative": body.speculative,
        "timeout_s": settings.request_timeout_s,
    }
    if body.stop_token_ids:
        options["stop_token_ids"] = tuple(body.stop_token_ids)
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
    fields = {**log_fields, "wordlists": {s.wordlist.name: s.version for s in stored}, "obfuscation": obfuscation,
              "request_terms": len(body.request_terms()), "prompt_tokens": len(prompt), "max_tokens": max_tokens}
    return Prepared(
        GenerationRequest(prompt, wordlists, params, body.n, fields, settings.debug_log_prompts),
        stream=body.stream,
        include_usage=bool(body.stream_options and body.stream_options.include_usage),
    )


def submit(runtime: Runtime, prepared: Prepared) -> Job:
    """Queue the request. Raises ApiError 429 with ``Retry-After`` when the queue is full."""
    try:
        return runtime.worker.submit(prepared.generation, runtime.settings.request_timeout_s)
    except QueueFull as exc:
        raise ApiError(429, "The server is busy: too many generations queued. Retry later.",
                       code="queue_full", headers={"Retry-After": str(exc.retry_after_s)}) from None


async def _while_connected(work: Awaitable[T], job: Job, request: Request) -> T:
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


async def _finishes(first: ChoiceEvent, events: AsyncIterator[ChoiceEvent]) -> list[Finish]:
    finishes: dict[int, Finish] = {}
    async for item in _prepend(first, events):
        if isinstance(item.event, Finish):
            finishes[item.index] = item.event
    return [finishes[i] for i in sorted(finishes)]


async def respond(runtime: Runtime, request: Request, prepared: Prepared, shape: ResponseShape,
                  endpoint: str) -> Any:
    """Run a prepared request and answer it (JSON body, or SSE when ``stream`` was asked).

    The response starts only once the generation has produced its first event, so that a request the
    decoder refuses is still answered with a 4xx, not a stream.
    """
    started = getattr(request.state, "started_at", time.perf_counter())
    completion = ResponseIdentity.new(shape.id_prefix, runtime.model_id)
    job = submit(runtime, prepared)
    events = job.events()
    streaming = False
    try:
        first = await _while_connected(anext(events, None), job, request)
        if first is None:  # cancelled while queued: the client is gone, nobody reads this
            raise ApiError(499, "client closed the request", code="cancelled")
        if prepared.stream:
            stream = _sse(first, events, shape, completion, prepared, lambda: runtime.metrics.time_to_first_token
                          .labels(endpoint).observe(time.perf_counter() - started), job)
            streaming = True
            return StreamingResponse(stream, media_type="text/event-stream", headers=_SSE_HEADERS)
        finishes = await _while_connected(_finishes(first, events), job, request)
    except GenerationRejected as exc:
        raise ApiError(400, str(exc), param=_named_field(str(exc)), code="invalid_value") from None
    except GenerationFailed as exc:
        raise ApiError(500, str(exc), code="generation_failed") from None
    finally:
        if not streaming:
            job.cancel.set()  # a no-op once finished; else nobody will read what the model makes
    if len(finishes) < prepared.generation.n:  # cancelled midway
        raise ApiError(499, "client closed the request", code="cancelled")
    total = UsageTotal()
    for finish in finishes:
        total.add(finish.usage)
    return shape.body(completion, finishes, total.to_dict())


async def _prepend(first: ChoiceEvent, rest: AsyncIterator[ChoiceEvent]) -> AsyncIterator[ChoiceEvent]:
    yield first
    async for item in rest:
        yield item


async def _sse(first: ChoiceEvent, events: AsyncIterator[ChoiceEvent], shape: ResponseShape,
               completion: ResponseIdentity, prepared: Prepared, first_text: Callable[[], None],
               job: Job) -> AsyncIterator[str]:
    """The SSE body: chunks of released text, one finish chunk per choice, optional usage, [DONE].

    A failure after the stream started becomes an ``error`` event (OpenAI's error body) followed by
    ``[DONE]``. When the client disconnects, Starlette cancels this generator and ``finally`` stops
    the generation.
    """
    total = UsageTotal()
    opened: set[int] = set()
    sent_text = False
    try:
        try:
            async for item in _prepend(first, events):
                event, index = item.event, item.index
                if index not in opened:
                    opened.add(index)
                    chunk = shape.first_chunk(completion, index)
                    if chunk is not None:
                        yield sse_event(chunk)
                if isinstance(event, TextDelta):
                    if event.text:
                        if not sent_text:
                            sent_text = True
                            first_text()
                        yield sse_event(shape.delta_chunk(completion, index, event.text))
                elif isinstance(event, Finish):
                    total.add(event.usage)
                    yield sse_event(shape.finish_chunk(completion, index, event.reason))
            if prepared.include_usage:
                yield sse_event(shape.usage_chunk(completion, total.to_dict()))
        except (GenerationFailed, GenerationRejected) as exc:
            yield sse_event(error_body(str(exc), status=500, code="generation_failed"))
        yield SSE_DONE
    finally:
        job.cancel.set()
