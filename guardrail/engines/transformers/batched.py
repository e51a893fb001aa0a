"""Continuous batching: many guarded generations share one forward pass per step.

Each request is a *row* that composes a :class:`~guardrail.engines.transformers.decoder.Generation` — the
single-stream decoder's per-request state and loop (its own :class:`~guardrail.guard.session.GuardSession`,
processors and warpers, seeded ``torch.Generator``, stop strings, hold-back, ``max_tokens``, deadline, cancel
event and kept logits), unchanged: the row drives :meth:`Generation.steps` and runs the forward pass each
:class:`~guardrail.engines.transformers.decoder.Feed` asks for in the step's batch pass instead of at once. One
:meth:`BatchedDecoder.step`:

1. admits waiting requests (up to ``max_batch`` rows): each looks up its prompt head in the prefix cache
   (:mod:`~guardrail.engines.transformers.prefix_cache`), and the rows admitted together are prefilled as
   groups, one forward pass per chunk for a whole group
   (:class:`~guardrail.engines.transformers.batch_cache.Prefill`; rows with the same cached head length and
   little padding share a group). At most ``prefill_chunk`` tokens are spent per step, so a long prompt
   takes several steps while running rows keep streaming; a finished group joins the batch cache and puts
   its prompts' heads in the prefix cache. A burst of 8 chat requests costs one prefill pass, not 8, which
   is what keeps the time to first token at 8 streams near that of one (bench/batching.py);
2. lets every running row pick from its kept logits, then every row's guard judge its pick, until each
   keeps a token (rollbacks re-pick from the kept logits of their target: no forward pass; the row's cache
   columns past it become holes, :meth:`BatchKVCache.rollback_to`) or finishes (the row leaves the batch).
   All picks come first, then all guards' verdicts, then the engine's actions, so that the guards' work runs
   back to back, cache-warm (issue 29);
3. runs ONE forward pass over the batch with the kept token of every running row, and masks the guard's ids
   of every row's next position in ONE write (:class:`~guardrail.engines.transformers.sampling.BatchBanMask`,
   the batch-level guard step of :mod:`guardrail.guard.batch`).

Events come out per request (``(request, event)`` pairs), the same TextDelta / Rollback / Finish sequence the
single-stream decoder yields for that request: greedy rows give the same tokens (tested,
tests/engines/transformers/test_batching.py), sampled rows the same draws for the same seed (own generator per row).

Models whose cache has sliding-window layers (Gemma 3) fall back to batch-1: requests run one after another
through ``StreamingDecoder.stream`` (see :mod:`guardrail.engines.transformers.batch_cache` for why), and
:attr:`BatchedDecoder.max_batch` is 1.

Failures: a row whose own per-token work raises (its :class:`Generation`'s loop: the guard session, sampling,
a grammar matcher, logprobs; or its start after the prefill) ends alone: it leaves the batch and the cache,
and only its request gets the error (:meth:`BatchedDecoder.stream` raises it); its neighbours decode on. A
failure in shared work (the batch forward pass, a group prefill, admission, compaction) leaves the batch
cache untrusted and ends every request (:meth:`BatchedDecoder._fail_all`).

Threading: :meth:`BatchedDecoder.step` is driven by one thread; :meth:`submit` and the cancel events may be
used from others. :meth:`BatchedDecoder.start` runs that thread itself, and :meth:`BatchedDecoder.stream` then
gives each caller (one thread per request, as the service's worker has) a plain event iterator, a drop-in for
``StreamingDecoder.stream``.
"""

from __future__ import annotations

import collections
import itertools
import logging
import queue
import threading
import time
from collections.abc import Callable, Generator, Iterator, Sequence
from typing import cast

import torch

from guardrail.engines.drafting import expected_tokens
from guardrail.engines.transformers.batch_cache import (
    DEFAULT_COMPACT_AT,
    DEFAULT_PREFILL_CHUNK,
    BatchKVCache,
    Prefill,
)
from guardrail.engines.transformers.decoder import JUDGED, PICKED, Feed, Generation, Marker, StreamingDecoder
from guardrail.engines.transformers.kv_cache import has_sliding_layers
from guardrail.engines.transformers.prefix_cache import (
    BLOCK_TOKENS,
    DEFAULT_PREFIX_CACHE_BYTES,
    CachedPrefix,
    PrefixCache,
)
from guardrail.engines.transformers.sampling import BatchBanMask
from guardrail.guard.events import Event, Finish, TextDelta
from guardrail.matching.combined import ArtefactLike
from guardrail.params import SamplingParams

log = logging.getLogger("guardrail.engines.transformers.batched")

#: Rows per step by default: the aggregate-throughput knee of SmolLM2 on 2 CPU cores (bench/batching.py).
DEFAULT_MAX_BATCH = 8
#: A prefill group may spend this share of its tokens on padding at most (rows x longest prompt <=
#: (1 + share) x the group's prompt tokens): grouping saves passes, padding costs compute.
MAX_PREFILL_PADDING = 0.5


class Request:
    """A submitted generation (a handle: the caller matches events to it by identity).

    Attributes:
        prompt_ids: the prompt.
        params: its sampling parameters.
        cancel: set it to end the generation at the next step with ``Finish(reason="cancelled")``.
        submitted_at, started_at, first_token_at: ``time.perf_counter()`` when it was submitted, when its
            prefill began, when its first text was released (``None`` until then).
        cached_tokens: prompt tokens loaded from the prefix cache instead of prefilled (set at admission).
        finished: True once its :class:`Finish` was handed out.
    """

    _ids = itertools.count()

    def __init__(self, prompt_ids: Sequence[int], params: SamplingParams, cancel: threading.Event | None):
        self.id = next(self._ids)
        self.prompt_ids = list(prompt_ids)
        self.params = params
        self.cancel = cancel if cancel is not None else threading.Event()
        self.submitted_at = time.perf_counter()
        self.started_at: float | None = None
        self.first_token_at: float | None = None
        self.cached_tokens = 0
        self.finished = False

    def __repr__(self) -> str:
        return f"Request({self.id})"


class _SharedCacheError(Exception):
    """The shared batch cache failed inside a row's own step (a rollback, which may compact): not that
    row's alone, since the cache may be half-changed. The original is the ``__cause__``; :meth:`BatchedDecoder.step`
    re-raises it, which ends every request."""


class _RowKV:
    """A row's slice of the batch cache, as the :class:`~guardrail.engines.transformers.decoder.DecodeKV` its
    generation decodes on: a rollback masks the row's columns (holes), the batcher advances it per pass."""

    def __init__(self, cache: BatchKVCache, row: _BatchRow, prefill_passes: int, length: int):
        self.cache = cache
        self.row = row
        self.length = length
        self.forward_passes = prefill_passes
        self.reprefills = 0

    def fed(self, tokens: int) -> None:
        """A batch forward pass appended ``tokens`` columns to this row."""
        self.forward_passes += 1
        self.length += tokens

    def rollback_to(self, length: int, token_ids: Sequence[int]) -> bool:
        """Mask the row's columns after ``length`` tokens (holes); no forward pass. Returns False (no re-prefill).

        Raises:
            _SharedCacheError: the batch cache raised (its original error as the cause).
        """
        try:
            self.cache.rollback_to(self.row, length)
        except Exception as exc:  # noqa: BLE001 - shared state: must not be isolated as this row's failure
            raise _SharedCacheError(f"the batch cache failed in a rollback of {self.row.request!r}") from exc
        self.length = length
        return False

    def reprefill(self, token_ids: Sequence[int]) -> torch.Tensor:
        raise RuntimeError("a batched row rolled back past its kept logits (the session's frontier was not kept)")


class _BatchRow:
    """One request in the batch: its :class:`Generation` (the single-stream decode state, composed) and
    what the scheduler holds for it between steps."""

    def __init__(self, decoder: StreamingDecoder, request: Request, artefact: ArtefactLike | None):
        self.request = request
        self.generation = Generation(decoder, request.prompt_ids, artefact, request.params, request.cancel)
        self.prompt = self.generation.prompt
        self.kv: _RowKV | None = None  # set by start()
        self.feed: Feed | None = None  # what this row feeds in the step's forward pass
        self.next_logits: torch.Tensor | None = None  # what that pass returned for it, (fed tokens, vocab)
        self.loop: Generator[Event | Feed | Marker, torch.Tensor, None] | None = None

    def start(self, cache: BatchKVCache, prefill_passes: int, logits: torch.Tensor) -> None:
        """Begin decoding after the prefill: ``logits`` ``(1, vocab)`` are the next-token logits of the prompt."""
        self.kv = _RowKV(cache, self, prefill_passes, len(self.prompt))
        started = self.request.started_at
        assert started is not None, "the batcher stamps started_at before the row's prefill"
        self.loop = self.generation.steps(self.kv, logits, started, self.request.cached_tokens)


class BatchedDecoder:
    """Continuous batching over one model; drive it with :meth:`step` (or :meth:`generate`).

    Args:
        decoder: the single-stream decoder (model, vocab, EOS ids, retry-bans policy; its per-request loop is
            what every row runs).
        max_batch: rows decoded together at most (>= 1); forced to 1 for models with sliding-window layers.
        prefill_chunk: prompt tokens (rows x columns, padding included) prefilled per step at most (>= 1; a
            longer prefill spans several steps).
        prefix_cache_bytes: budget of the prefix cache in bytes (0 turns it off; see
            :mod:`~guardrail.engines.transformers.prefix_cache`).
        compact_at: holes a row may hold before its cache is compacted (see :class:`BatchKVCache`).
        on_step: called with the row count after every batch forward pass (the service's batch-size metric).

    Attributes:
        batched: False when the model falls back to batch-1 (sliding-window layers).
        forward_passes: batch forward passes run (prefill chunks not counted).
        batch_sizes: rows in each batch forward pass (the last 4,096; for metrics and benchmarks).
        prefill_passes: group prefill forward passes run.
        prefix_cache: the prompt heads' KV caches (``None`` for the batch-1 fallback).

    Raises:
        ValueError: ``max_batch`` or ``prefill_chunk`` below 1, ``prefix_cache_bytes`` below 0 (named).
    """

    def __init__(self, decoder: StreamingDecoder, max_batch: int = DEFAULT_MAX_BATCH,
                 prefill_chunk: int = DEFAULT_PREFILL_CHUNK, compact_at: int = DEFAULT_COMPACT_AT,
                 on_step: Callable[[int], None] | None = None,
                 prefix_cache_bytes: int = DEFAULT_PREFIX_CACHE_BYTES):
        if not isinstance(max_batch, int) or max_batch < 1:
            raise ValueError(f"max_batch must be an int >= 1, got {max_batch!r}")
        if not isinstance(prefill_chunk, int) or prefill_chunk < 1:
            raise ValueError(f"prefill_chunk must be an int >= 1, got {prefill_chunk!r}")
        self.decoder = decoder
        self.batched = not has_sliding_layers(decoder.model)
        self.max_batch = max_batch if self.batched else 1
        self.prefill_chunk = prefill_chunk
        self.cache = BatchKVCache(decoder.model, compact_at) if self.batched else None
        self.prefix_cache = PrefixCache(prefix_cache_bytes) if self.batched else None
        self.prefill_passes = 0
        self.on_step = on_step
        self.forward_passes = 0
        self._mask = BatchBanMask()
        self.batch_sizes: collections.deque[int] = collections.deque(maxlen=4096)
        self._lock = threading.RLock()  # stream() submits while holding it
        self._waiting: collections.deque[_BatchRow | tuple[Request, Iterator[Event]]] = collections.deque()
        self._prefilling: list[tuple[list[_BatchRow], Prefill]] = []
        self._running: list[_BatchRow] = []
        self._single: tuple[Request, Iterator[Event]] | None = None  # the batch-1 fallback's current stream
        self._outboxes: dict[int, queue.SimpleQueue] = {}  # request id -> its stream()'s events (driver thread)
        self._failures: list[tuple[Request, Exception]] = []  # rows that failed alone, not yet delivered
        self._wake = threading.Event()
        self._driver: threading.Thread | None = None
        self._stopping = False

    # -- requests ------------------------------------------------------------------------------------
    def submit(self, prompt_ids: Sequence[int], artefact: ArtefactLike | None, params: SamplingParams,
               cancel: threading.Event | None = None) -> Request:
        """Queue a generation; it joins the batch at a coming step.

        Raises:
            ValueError: as ``StreamingDecoder.stream`` (empty prompt, token ids outside the vocab, an
                artefact of another vocab), raised here, before any model work.
        """
        request = Request(prompt_ids, params, cancel)
        if self.batched:
            item: _BatchRow | tuple[Request, Iterator[Event]] = _BatchRow(self.decoder, request, artefact)
        else:
            stream = self.decoder.stream(request.prompt_ids, artefact, params, request.cancel)
            item = (request, stream)
        with self._lock:
            self._waiting.append(item)
        self._wake.set()
        return request

    @property
    def active(self) -> int:
        """Requests admitted and not finished (prefilling or decoding)."""
        return len(self._running) + self._prefilling_rows + (self._single is not None)

    @property
    def _prefilling_rows(self) -> int:
        return sum(len(rows) for rows, _ in self._prefilling)

    @property
    def waiting(self) -> int:
        """Requests submitted and not yet admitted."""
        with self._lock:
            return len(self._waiting)

    @property
    def idle(self) -> bool:
        return not self.active and not self.waiting

    # -- the step ------------------------------------------------------------------------------------
    def step(self, deliver: Callable[[list[tuple[Request, Event]]], None] | None = None
             ) -> list[tuple[Request, Event]]:
        """Admit, prefill (one chunk budget), let every row pick, then one batch forward pass.

        Args:
            deliver: called with this step's events before the forward pass (then the step returns none),
                so that released text is not held for the length of a pass.

        Returns:
            The events of this step, in order, each with its request. A request's last event is its
            :class:`Finish`, unless its own row failed (:meth:`_fail_row`): then its error waits in
            ``_failures`` for :meth:`_deliver` (or :meth:`generate` raises it), and its events end there.

        Raises:
            Exception: whatever shared work raised (admission, a prefill or batch forward pass, the batch
                cache in a row's rollback or compaction): the batch state is then not trusted (:meth:`_drive`
                ends every request).
        """
        if not self.batched:
            return self._step_single()
        cache = self.cache
        assert cache is not None, "a batched decoder holds a BatchKVCache"
        events: list[tuple[Request, Event]] = []
        self._admit(events)
        self._prefill()
        # Every row picks, then every row's guard judges its pick, then every verdict is applied (the loop
        # yields PICKED and JUDGED in between): the guards' Python runs back to back, its data still in the
        # CPU caches, instead of between each row's own pick and bookkeeping, which evict it (issue 29). A
        # row's events stay in its order; the step's are in row order.
        running = list(self._running)
        outs: list[list[tuple[Request, Event]]] = [[] for _ in running]
        picked = [i for i, row in enumerate(running) if self._run(row, outs[i], PICKED)]
        judged = [i for i in picked if self._run(running[i], outs[i], JUDGED)]
        feeding = [i for i in judged if self._run(running[i], outs[i], None)]
        for out in outs:
            events += out
        if deliver is not None:  # before the pass: released text reaches its client a pass earlier
            deliver(events)
            events = []
        if feeding:
            self._forward(cache)
        return events

    def _forward(self, cache: BatchKVCache) -> None:
        """One forward pass: every row's kept token, and the drafts worth verifying (:meth:`_draft_width`)."""
        rows = cast("list[_BatchRow]", cache.keys)  # this batcher keys its cache by its rows; every cached row feeds
        spans = []
        for row in rows:
            assert row.feed is not None, "every running row kept a token this step"
            spans.append(row.feed.tokens)
        width = self._draft_width(rows, spans)
        spans = [span[:1 + width] for span in spans]
        if width == 0:
            logits = cache.forward([span[0] for span in spans])
            self._mask.apply(logits, [row.generation for row in rows])  # the batch's guard masks: one write
            outs = [logits[index:index + 1].clone() for index in range(len(rows))]  # kept logits outlive the step
        else:
            outs = cache.forward_spans(spans)
        self.forward_passes += 1
        self.batch_sizes.append(len(rows))
        if self.on_step is not None:
            self.on_step(len(rows))
        for row, span, out in zip(rows, spans, outs, strict=True):
            assert row.kv is not None, "a running row was started"
            row.kv.fed(len(span))
            row.next_logits = out

    def _draft_width(self, rows: list[_BatchRow], spans: list[list[int]]) -> int:
        """Drafted tokens per row this pass (the same bound for every row): the width that maximises the
        batch's expected kept tokens per unit of cost, each row's drafts accepted at its own average rate
        (:func:`~guardrail.engines.drafting.draft_width` for one row; a wider pass costs every row)."""
        longest = max(len(span) for span in spans) - 1
        if longest == 0:
            return 0
        cost = self.decoder.speculative.cost
        best, best_rate = 0, float(len(rows))
        for width in range(1, longest + 1):
            expected = sum(expected_tokens(row.generation.acceptance, min(width, len(span) - 1))
                           for row, span in zip(rows, spans, strict=True))
            rate = expected / cost.of(width, len(rows))
            if rate > best_rate:
                best, best_rate = width, rate
        return best

    def _admit(self, events: list[tuple[Request, Event]]) -> None:
        """Take waiting requests into free rows; their prefills start as groups (:meth:`_group`)."""
        admitted: list[tuple[_BatchRow, CachedPrefix | None]] = []
        while len(self._running) + self._prefilling_rows + len(admitted) < self.max_batch:
            with self._lock:
                if not self._waiting:
                    break
                row = self._waiting.popleft()
            assert isinstance(row, _BatchRow), "a batched decoder queues rows"
            request = row.request
            if request.cancel.is_set():  # left while waiting: no model work
                events.append((request, self._cancelled_before_start(row)))
                continue
            request.started_at = time.perf_counter()
            assert self.prefix_cache is not None, "a batched decoder holds a prefix cache"
            head = self.prefix_cache.match(row.prompt)
            request.cached_tokens = head.length if head is not None else 0
            admitted.append((row, head))
        for group in self._group(admitted):
            rows = [row for row, _ in group]
            heads = [head for _, head in group]
            prefill = Prefill(self.decoder.model, [row.prompt for row in rows], self.prefill_chunk,
                              heads=None if heads[0] is None else cast("list[CachedPrefix]", heads))
            self._prefilling.append((rows, prefill))

    @staticmethod
    def _group(admitted: list[tuple[_BatchRow, CachedPrefix | None]]
               ) -> list[list[tuple[_BatchRow, CachedPrefix | None]]]:
        """Rows prefilled together: the same cached head length, and padding within MAX_PREFILL_PADDING."""
        def head_length(item: tuple[_BatchRow, CachedPrefix | None]) -> int:
            return item[1].length if item[1] is not None else 0

        groups: list[list[tuple[_BatchRow, CachedPrefix | None]]] = []
        fed = 0  # prompt tokens the current group feeds
        for item in sorted(admitted, key=lambda i: (head_length(i), len(i[0].prompt))):
            rest = len(item[0].prompt) - head_length(item)
            group = groups[-1] if groups else None
            if (group is not None and head_length(group[0]) == head_length(item)
                    and (len(group) + 1) * rest <= (1 + MAX_PREFILL_PADDING) * (fed + rest)):
                group.append(item)
                fed += rest
            else:
                groups.append([item])
                fed = rest
        return groups

    def _prefill(self) -> None:
        """Spend up to ``prefill_chunk`` tokens on the prefill groups, in order; join those that finish."""
        cache, prefix_cache = self.cache, self.prefix_cache
        assert cache is not None and prefix_cache is not None, "a batched decoder holds both caches"
        budget = self.prefill_chunk
        while self._prefilling and budget > 0:
            rows, prefill = self._prefilling[0]
            budget -= prefill.advance(budget)
            self.prefill_passes += 1
            if not prefill.done:
                continue
            self._prefilling.pop(0)
            for index, row in enumerate(rows):  # before the join: the join moves the group's cache
                if len(row.prompt) // BLOCK_TOKENS * BLOCK_TOKENS > prefill.head_length:
                    prefix_cache.insert(row.prompt, prefill.prompt_layers(index))
            logits = prefill.logits
            assert logits is not None, "a done prefill holds its logits"
            cache.join(rows, prefill)
            for index, row in enumerate(rows):
                self._running.append(row)
                try:
                    row.start(cache, prefill.forward_passes, logits[index:index + 1])
                except Exception as exc:  # noqa: BLE001 - the row's own work: only its request ends
                    self._fail_row(row, exc)

    def _run(self, row: _BatchRow, events: list[tuple[Request, Event]], until: Marker | None) -> bool:
        """:meth:`_advance` ``row``; a row that finishes leaves the batch and the cache, one that fails alone
        leaves through :meth:`_fail_row`. Returns whether it is still running.

        Raises:
            Exception: the shared cache failed in the row's rollback (:class:`_SharedCacheError`'s cause).
        """
        try:
            running = self._advance(row, events, until)
        except _SharedCacheError as exc:  # the shared cache, not the row: every request ends (_drive)
            raise cast("Exception", exc.__cause__) from None
        except Exception as exc:  # noqa: BLE001 - the row's own work: only its request ends
            self._fail_row(row, exc)
            return False
        if not running:
            self._running.remove(row)
            cache = self.cache
            assert cache is not None, "a batched decoder holds a BatchKVCache"
            cache.leave(row)
        return running

    def _advance(self, row: _BatchRow, events: list[tuple[Request, Event]], until: Marker | None) -> bool:
        """Run ``row``'s loop on to the marker ``until`` (:data:`PICKED`: from the last forward pass to the next
        pick; :data:`JUDGED`: through the guard's verdict on it), or with ``None`` until it keeps a token
        (applying the verdict; a rollback picks and judges again), collecting its events. Returns False when
        it finished instead."""
        request = row.request
        steps = row.loop
        assert steps is not None, "set by start()"
        try:
            if until is PICKED:  # the step's first run of the row: from the pass (or the start)
                sent, row.next_logits, row.feed = row.next_logits, None, None
                item = steps.send(sent) if sent is not None else next(steps)
            elif row.feed is not None:  # it already asked for its forward pass this step
                return True
            else:
                item = next(steps)
            while True:
                if isinstance(item, Feed):
                    row.feed = item
                    return True
                if isinstance(item, Marker):
                    if item is until:
                        return True
                else:
                    events.append((request, item))
                    if isinstance(item, Finish):
                        request.finished = True
                    elif request.first_token_at is None and isinstance(item, TextDelta):
                        request.first_token_at = time.perf_counter()
                item = next(steps)
        except StopIteration:
            return False

    def _fail_row(self, row: _BatchRow, exc: Exception) -> None:
        """``row``'s own work raised (its loop or its start): it leaves the batch and the cache, and its
        request alone gets ``exc`` (queued for :meth:`_deliver`, after the events it released before).
        The other rows' state is untouched: the shared cache only loses this row (``leave``)."""
        log.exception("%r failed in its own step; it leaves the batch, its neighbours go on", row.request,
                      exc_info=exc)
        self._running.remove(row)
        cache = self.cache
        assert cache is not None, "a batched decoder holds a BatchKVCache"
        cache.leave(row)
        row.loop, row.feed, row.next_logits = None, None, None  # drop its logits and generator now
        self._failures.append((row.request, exc))

    def _cancelled_before_start(self, row: _BatchRow) -> Finish:
        """The request left while waiting: its driver finishes it (no text, no model work)."""
        row.request.finished = True
        *_, finish = row.generation.driver.finish("cancelled")
        assert isinstance(finish, Finish), "a finish ends with the Finish event"
        return finish

    def _step_single(self) -> list[tuple[Request, Event]]:
        """Batch-1 fallback: the next event of the current stream (starting the next one when needed)."""
        if self._single is None:
            with self._lock:
                if not self._waiting:
                    return []
                single = self._waiting.popleft()
                assert not isinstance(single, _BatchRow), "the batch-1 fallback queues streams"
                self._single = single
            single[0].started_at = time.perf_counter()
        request, stream = self._single
        event = next(stream)
        if isinstance(event, Finish):
            request.finished = True
            self._single = None
        elif request.first_token_at is None and isinstance(event, TextDelta):
            request.first_token_at = time.perf_counter()
        return [(request, event)]

    # -- convenience -----------------------------------------------------------------------------------
    def generate(self, jobs: Sequence[tuple[Sequence[int], ArtefactLike | None, SamplingParams]],
                 join_at: Sequence[int] | None = None) -> list[list[Event]]:
        """Run ``jobs`` (``(prompt_ids, artefact, params)``) to the end; return each one's events.

        Args:
            join_at: the step at which each job is submitted (default: all at step 0).
        """
        join_at = list(join_at) if join_at is not None else [0] * len(jobs)
        out: dict[int, list[Event]] = {}
        requests: dict[int, Request] = {}  # job index -> its request
        step = 0
        while step <= max(join_at, default=0) or not self.idle:
            for index, at in enumerate(join_at):
                if at == step:
                    request = requests[index] = self.submit(*jobs[index])
                    out[request.id] = []
            for request, event in self.step():
                out[request.id].append(event)
            if self._failures:  # a row failed alone: as stream() would, the caller gets its error
                _, exc = self._failures.pop(0)
                raise exc
            step += 1
        return [out[requests[index].id] for index in range(len(jobs))]

    # -- driven by its own thread ----------------------------------------------------------------------
    def start(self) -> None:
        """Run :meth:`step` on a daemon thread whenever there is work (for :meth:`stream`)."""
        if self._driver is None:
            self._stopping = False
            self._driver = threading.Thread(target=self._drive, name="guardrail-batch", daemon=True)
            self._driver.start()

    @property
    def alive(self) -> bool:
        """Whether the driver thread runs (:meth:`start` was called and it has not ended)."""
        return self._driver is not None and self._driver.is_alive()

    def stop(self, timeout_s: float = 10.0) -> None:
        """Cancel every request and stop the driver thread."""
        self._stopping = True
        with self._lock:
            for item in self._waiting:
                (item.request if isinstance(item, _BatchRow) else item[0]).cancel.set()
        for row in self._running:
            row.request.cancel.set()
        self._wake.set()
        if self._driver is not None:
            self._driver.join(timeout_s)
            self._driver = None

    def stream(self, prompt_ids: Sequence[int], artefact: ArtefactLike | None, params: SamplingParams,
               cancel: threading.Event | None = None) -> Iterator[Event]:
        """``StreamingDecoder.stream``'s contract, decoded in the shared batch (needs :meth:`start`).

        Raises:
            ValueError: as :meth:`submit`, raised by this call.
            RuntimeError: when iterating, if this request's own row failed, or the shared batch step did
                (the message names the error class; the original is its ``__cause__``).
        """
        if self._driver is None:
            raise RuntimeError("BatchedDecoder.stream needs start() first")
        outbox: queue.SimpleQueue = queue.SimpleQueue()
        with self._lock:
            request = self.submit(prompt_ids, artefact, params, cancel)
            self._outboxes[request.id] = outbox
        return self._events(outbox)

    @staticmethod
    def _events(outbox: queue.SimpleQueue) -> Iterator[Event]:
        while True:
            item = outbox.get()
            if isinstance(item, BaseException):
                raise RuntimeError(f"the batch step failed ({type(item).__name__})") from item
            yield item
            if isinstance(item, Finish):
                return

    def _drive(self) -> None:
        """The driver thread: step while there is work. A row's own failure ends its request alone (inside
        :meth:`step`); any other exception from the step ends every request (:meth:`_fail_all`), and the
        thread goes on serving new requests."""
        while not self._stopping or not self.idle:
            if self.idle:
                self._wake.wait(0.5)
                self._wake.clear()
                continue
            try:
                self._deliver(self.step(deliver=self._deliver))  # the batch-1 fallback returns its events
            except Exception as exc:  # noqa: BLE001 - every waiting stream must end, never hang
                log.exception("batch step failed; every request ends")
                self._fail_all(exc)

    def _deliver(self, events: list[tuple[Request, Event]]) -> None:
        """Hand each event to its request's :meth:`stream`, then each row failure's error to its own
        request's (after that request's last events; driver thread)."""
        for request, event in events:
            with self._lock:
                outbox = self._outboxes.get(request.id)
                if isinstance(event, Finish):
                    self._outboxes.pop(request.id, None)
            if outbox is not None:
                outbox.put(event)
        while self._failures:
            request, exc = self._failures.pop(0)
            with self._lock:
                outbox = self._outboxes.pop(request.id, None)
            if outbox is not None:
                outbox.put(exc)

    def _fail_all(self, exc: Exception) -> None:
        """Shared work raised (:meth:`step` outside a row's own work, see :meth:`_fail_row`): the batch
        cache is not trusted any more, so every request ends with ``exc`` and the cache starts empty. Rows
        that failed alone earlier in the step still get their own error."""
        self._deliver([])  # the rows that failed alone before the shared failure
        with self._lock:
            requests = [row.request for row in self._running]
            requests += [row.request for rows, _ in self._prefilling for row in rows]
            requests += [item.request if isinstance(item, _BatchRow) else item[0] for item in self._waiting]
            if self._single is not None:
                requests.append(self._single[0])
            self._waiting.clear()
            outboxes = [self._outboxes.pop(r.id, None) for r in requests]
        self._running, self._prefilling, self._single = [], [], None
        if self.cache is not None:  # batched
            self.cache = BatchKVCache(self.decoder.model, self.cache.compact_at)
        for outbox in outboxes:
            if outbox is not None:
                outbox.put(exc)
