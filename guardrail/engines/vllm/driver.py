"""Rollback on vLLM: stream each request through its guard session; on a hit, abort and resubmit.

vLLM cannot crop a running request's KV cache, so a rollback to completion position ``p`` aborts the
request and submits ``prompt + the p kept tokens`` again (a ``TokensPrompt``) with the bans of ``p``
(docs/design.md, "Engines and scale")::

    engine thread, every step:   LLMEngine.step() -> new token ids of each request (DELTA outputs)
      for each id: GuardSession.accept(id)
        keep      -> forward the released text (hold-back: never a term, never a retracted fragment)
        rollback  -> abort the vLLM request; add prompt + kept tokens, extra_args["guardrail"]["bans"] =
                     {0: the bans of p} (the logits processor masks them, with the always-banned ids:
                     GuardSession.always_banned, which holds the escalated terms' too — evasion guard)
        finish    -> GuardSession.finish(reason); abort the vLLM request if it still runs

With prefix caching, the resubmission's prompt is served from the KV blocks the aborted request filled: only
the tail past the last full block (``block_size`` tokens) is prefilled again (docs/vllm.md, measurements).

Why ``LLMEngine`` and not ``AsyncLLM``: ``AsyncLLM`` always runs the engine core in a second process (about
50 s to start on this CPU, and an ``if __name__ == "__main__"`` guard in every entry script), while the
in-process ``LLMEngine`` (``VLLM_ENABLE_V1_MULTIPROCESSING=0``) starts in seconds and lets the driver abort
and resubmit between two steps, before the next forward pass. One engine thread owns the engine; callers
(threads, or the service's worker pool) read their events from a queue, so nothing blocks an event loop.
"""

from __future__ import annotations

import itertools
import os
import queue
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from guardrail.engines.base import check_request
from guardrail.engines.vllm.args import GuardArgs
from guardrail.guard.driver import DecodeDriver
from guardrail.guard.events import Event, Finish, FinishReason, Usage
from guardrail.guard.session import GuardSession
from guardrail.guard.verdict import KEEP
from guardrail.matching.combined import ArtefactLike
from guardrail.matching.obfuscation import DEFAULT_OBFUSCATION, Obfuscation
from guardrail.matching.vocab import TokenVocab
from guardrail.params import SamplingParams

if TYPE_CHECKING:
    from guardrail.matching.cache import ArtefactCache

__all__ = ["DEFAULT_BLOCK_SIZE", "VLLMDriver", "VLLMUsage"]

#: KV-cache block size (tokens). A resubmission re-prefills only the tail past its last full block (fewer
#: than ``block_size`` tokens: 1 at 129 tokens, 17 at 2,001, ``bench/vllm.py``). 32 is what issue 10
#: measured on this CPU (first token of a resubmission 0.16-0.47 s at ~1,000 tokens of context, 8.6-11.9 s
#: without prefix caching); smaller blocks were not swept here (docs/vllm.md).
DEFAULT_BLOCK_SIZE = 32
#: SamplingParams fields the vLLM engine does not implement (the embedded engine does).
UNSUPPORTED = ("bad_words_ids", "begin_suppress_tokens", "suppress_tokens", "watermark", "response_format", "logprobs")


@dataclass(frozen=True)
class VLLMUsage(Usage):
    """:class:`Usage` of a generation on vLLM.

    Attributes:
        resubmissions: requests submitted again after a rollback (``reprefills`` counts the same).
        prefill_tokens: prompt tokens computed (not served from the prefix cache), over all submissions.
    """

    resubmissions: int = 0
    prefill_tokens: int = 0


class _Job:
    """One guarded request: its session, its current vLLM request, and the queue its caller reads."""

    def __init__(self, job_id: int, prompt: list[int], params: SamplingParams, session: GuardSession,
                 guard: GuardArgs | None, cancel: threading.Event | None, max_model_len: int):
        self.id = job_id
        self.prompt = prompt
        self.params = params
        self.session = session
        # The loop end (cancel, deadline, room, judge, finish, usage); its clock starts now, at stream().
        self.driver = DecodeDriver(session, timeout_s=params.timeout_s, max_tokens=params.max_tokens, cancel=cancel,
                                   context_length=max_model_len)
        self.guard = guard
        # session.always_banned that guard.always_banned holds (the artefact's at first; escalations add theirs).
        self.always_banned = session.always_banned
        self.cancel = cancel
        self.closed = threading.Event()  # the caller stopped reading
        self.events: queue.SimpleQueue[Event | BaseException] = queue.SimpleQueue()
        self.request_id: str | None = None
        self.submissions = 0
        self.cached_tokens = 0  # over all submissions (what was not prefilled)
        self.prompt_cached_tokens = 0  # of the first submission: the prompt's (Usage.cached_tokens)
        self.cached_for: str | None = None
        self.submitted_tokens = 0
        self.steps = 0
        self.done = False


class _JobVerdicts:
    """The driver's :class:`~guardrail.guard.verdict.VerdictHandler` for one job: a rollback resubmits
    ``prompt + kept tokens`` with the bans of the target position, a finish ends the job; a keep needs
    nothing (vLLM decodes on)."""

    __slots__ = ("driver", "job")

    def __init__(self, driver: VLLMDriver, job: _Job):
        self.driver = driver
        self.job = job

    def emit(self, events: Sequence[Event]) -> None:
        for event in events:
            self.job.events.put(event)

    def on_keep(self, token_id: int, position: int) -> None:
        pass

    def on_rollback(self, position: int) -> None:
        self.driver._resubmit(self.job)

    def on_finish(self, reason: FinishReason) -> None:
        self.driver._finish(self.job, reason)


class VLLMDriver:
    """Guarded generation on a vLLM v1 engine, with rollback by resubmission.

    Build it with :meth:`load`. Thread-safe: any number of callers may stream at once; their requests are
    batched by vLLM (continuous batching), and a rollback in one never touches another.

    Args:
        engine: a ``vllm.v1.engine.llm_engine.LLMEngine`` (in-process) whose logits processors include
            :class:`~guardrail.engines.vllm.logits_processor.GuardLogitsProcessor` (installed by entry point).
        tokenizer_path: the directory of the engine's tokenizer (the guard's bytes table is built from it).
        vocab: use this bytes table (and the artefacts compiled for it) instead; it must hold the same bytes.

    Raises:
        ValueError: ``vocab`` differs from the engine tokenizer's bytes table.
    """

    def __init__(self, engine, tokenizer_path: str | Path, vocab: TokenVocab | None = None):
        self.engine = engine
        from guardrail.engines.vllm.logits_processor import load_vocab  # imports vLLM

        own_vocab, self.eos_ids = load_vocab(str(tokenizer_path))
        self.vocab = own_vocab if vocab is None else vocab
        if self.vocab.token_bytes != own_vocab.token_bytes:
            raise ValueError("vocab: not the bytes table of the engine's tokenizer")
        self.num_logits = engine.model_config.get_vocab_size()
        self.max_model_len = engine.model_config.max_model_len
        self._cache: ArtefactCache | None = None
        self._ids = itertools.count()
        self._commands: queue.SimpleQueue[_Job] = queue.SimpleQueue()
        self._jobs: dict[str, _Job] = {}  # live vLLM request id -> job
        self._closed = False
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._loop, name="guardrail-vllm-engine", daemon=True)
        self._thread.start()

    @classmethod
    def load(cls, model: str = "smollm2", *, block_size: int = DEFAULT_BLOCK_SIZE, enable_prefix_caching: bool = True,
             dtype: str = "float32", max_model_len: int = 2048, kv_cache_gib: int | None = None,
             vocab: TokenVocab | None = None, **engine_args) -> VLLMDriver:
        """Start an in-process vLLM engine on ``model`` (a name or path, :func:`guardrail.models.model_directory`).

        Args:
            block_size: KV-cache block size in tokens (see :data:`DEFAULT_BLOCK_SIZE`).
            enable_prefix_caching: reuse KV blocks across submissions (what makes a rollback cheap).
            dtype: ``"float32"`` matches the embedded engine token for token; bfloat16 diverges on CPU.
            max_model_len: prompt + completion tokens at most.
            kv_cache_gib: ``VLLM_CPU_KVCACHE_SPACE`` (CPU KV cache in GiB) when not set in the environment.
            vocab: see the class.
            **engine_args: more ``vllm.EngineArgs`` fields (``enforce_eager``, ``tensor_parallel_size``...).

        Raises:
            ValueError: unknown model (see :func:`guardrail.models.resolve_model`); vLLM's own errors pass through.
        """
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        if kv_cache_gib is not None:
            os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(kv_cache_gib))
        from vllm import EngineArgs
        from vllm.v1.engine.llm_engine import LLMEngine

        from guardrail.models import model_directory

        directory = model_directory(model)
        args = EngineArgs(model=str(directory), dtype=dtype, max_model_len=max_model_len, block_size=block_size,
                          enable_prefix_caching=enable_prefix_caching, **engine_args)
        engine = LLMEngine.from_engine_args(args)
        return cls(engine, directory, vocab)

    # -- the caller's side ------------------------------------------------------------------------------
    def artefact(self, wordlists: Sequence[str] = (), banned_terms: Sequence[str] = (),
                 obfuscation: Obfuscation = DEFAULT_OBFUSCATION) -> ArtefactLike | None:
        """The compiled lists (``None`` without terms): bundled lists from guardrail's artefact cache, the
        extra terms compiled per call and combined with them (``ArtefactCache.get_with_request``); the lists
        that set no level at ``obfuscation`` (``DEFAULT_OBFUSCATION``, as on every path: docs/vllm.md).

        Raises:
            WordListError: unknown list name, invalid term.
        """
        from guardrail.wordlists.selection import select_wordlists
        from guardrail.wordlists.wordlist import with_obfuscation, wordlist_from_terms

        stored = with_obfuscation(select_wordlists(wordlists), obfuscation)
        request_lists = with_obfuscation([wordlist_from_terms(banned_terms)] if banned_terms else [], obfuscation)
        if not any(wl.terms for wl in (*stored, *request_lists)):
            return None
        if self._cache is None:
            from guardrail.matching.cache import ArtefactCache
            from guardrail.models import cache_dir

            self._cache = ArtefactCache(cache_dir=cache_dir())
        # The request's own terms compile apart in milliseconds (no vocab sweep) and combine with the lists.
        return self._cache.get_with_request(self.vocab, stored, request_lists)

    def stream(self, prompt_ids: Sequence[int], *, wordlists: Sequence[str] = (), banned_terms: Sequence[str] = (),
               artefact: ArtefactLike | None = None, params: SamplingParams | None = None,
               cancel: threading.Event | None = None,
               obfuscation: Obfuscation = DEFAULT_OBFUSCATION) -> Iterator[Event]:
        """Generate after ``prompt_ids``: :class:`TextDelta` and :class:`Rollback` events, then one :class:`Finish`
        (its ``usage`` a :class:`VLLMUsage`). The same events, hold-back and finish reasons as the embedded engine.

        Args:
            prompt_ids: the prompt's token ids (:func:`guardrail.prompts.prompt_ids`), not empty.
            wordlists, banned_terms, obfuscation: what to guard against (none: plain vLLM, token for token), at
                that level for the lists that set none (:meth:`artefact`), or
            artefact: the lists already compiled for :attr:`vocab` (the service's stored lists).
            params: sampling, stop strings, ``max_tokens``, rollback budget, ``timeout_s``.
            cancel: set it to end the stream at the next step (``finish_reason="cancelled"``).

        Raises:
            ValueError: empty prompt, an id outside the vocab, a prompt of ``max_model_len`` tokens or more, a
                parameter the vLLM engine does not implement (named), an unknown list or invalid term — all
                raised by this call, before anything is submitted.
            RuntimeError: from the iterator, if the engine thread failed.
        """
        params = SamplingParams() if params is None else params
        prompt = check_request(prompt_ids, params, num_logits=self.num_logits, max_model_len=self.max_model_len,
                               unsupported=UNSUPPORTED, engine="vLLM engine")
        if artefact is None:
            artefact = self.artefact(wordlists, banned_terms, obfuscation)
        elif wordlists or banned_terms:
            raise ValueError("pass either artefact or wordlists/banned_terms, not both")
        # The engine masks the artefact's always-banned ids and the position bans; the session catches hits.
        guard = GuardArgs(always_banned=tuple(int(t) for t in artefact.always_banned), mask="bans") \
            if artefact is not None else None
        session = GuardSession.from_params(artefact, self.vocab, params, eos_ids=self.eos_ids,
                                           num_logits=self.num_logits, prompt_tokens=len(prompt))
        if self._error is not None:
            raise RuntimeError("the vLLM engine thread failed") from self._error
        job = _Job(next(self._ids), prompt, params, session, guard, cancel, self.max_model_len)
        self._commands.put(job)
        return self._events(job)

    def generate(self, prompt_ids: Sequence[int], **kwargs) -> Finish:
        """Like :meth:`stream`, returning only the :class:`Finish` (``text``, ``reason``, ``usage``)."""
        for event in self.stream(prompt_ids, **kwargs):
            if isinstance(event, Finish):
                return event
        raise RuntimeError("the stream ended without a Finish event")  # a driver bug, never expected

    @property
    def alive(self) -> bool:
        """Whether the engine loop thread runs (false after :meth:`close` or if it died)."""
        return self._thread.is_alive()

    def close(self) -> None:
        """Stop the engine thread (requests in flight end with ``cancelled``)."""
        self._closed = True
        self._thread.join(timeout=30)

    @staticmethod
    def _events(job: _Job) -> Iterator[Event]:
        try:
            while True:
                item = job.events.get()
                if isinstance(item, BaseException):
                    raise RuntimeError(f"vLLM failed on this request: {item}") from item
                yield item
                if isinstance(item, Finish):
                    return
        finally:
            job.closed.set()  # a caller that stops reading cancels the request

    # -- the engine thread ------------------------------------------------------------------------------
    def _loop(self) -> None:
        try:
            while not self._closed:
                self._admit(block=not self._jobs)
                for job in {id(j): j for j in self._jobs.values()}.values():
                    self._check_limits(job)
                if not self._jobs:
                    continue
                for output in self.engine.step():
                    owner = self._jobs.get(output.request_id)
                    if owner is None:  # the last output of an aborted submission
                        continue
                    try:
                        self._on_output(owner, output)
                    except Exception as exc:  # noqa: BLE001 - one request's failure must not end the others
                        self._retire(owner)
                        owner.done = True
                        owner.events.put(exc)
            for job in list(self._jobs.values()):
                self._finish(job, "cancelled")
        except BaseException as exc:  # noqa: BLE001 - every waiting caller must hear of it
            self._error = exc
            for job in list(self._jobs.values()):
                job.events.put(exc)
            raise

    def _admit(self, block: bool) -> None:
        while True:
            try:
                job = self._commands.get(timeout=0.05) if block else self._commands.get_nowait()
            except queue.Empty:
                return
            block = False
            try:
                self._submit(job)
            except Exception as exc:  # noqa: BLE001 - vLLM refused the request: tell its caller only
                self._retire(job)
                job.done = True
                job.events.put(exc)

    def _check_limits(self, job: _Job) -> None:
        # A caller that stopped reading cancels as its cancel event would.
        reason: FinishReason | None = "cancelled" if job.closed.is_set() else job.driver.stop_reason()
        if reason is not None:
            self._finish(job, reason)

    def _submit(self, job: _Job) -> None:
        """Submit the prompt plus the kept tokens, with the bans of the next position."""
        from vllm import SamplingParams as VLLMSamplingParams
        from vllm.inputs import TokensPrompt
        from vllm.sampling_params import RequestOutputKind

        session, params = job.session, job.params
        kept = list(session.token_ids)
        position = session.position
        room = job.driver.room()
        if room <= 0:
            self._finish(job, "length")
            return
        extra_args = None
        if job.guard is not None:
            bans = session.bans.banned(position)
            always_banned = session.always_banned
            if always_banned is not job.always_banned:  # an escalated term (evasion guard) started or was dropped
                job.always_banned = always_banned
                job.guard = replace(job.guard, always_banned=tuple(int(t) for t in always_banned))
            guard = replace(job.guard, bans={0: tuple(sorted(bans))} if bans else {}, resume_tokens=position)
            extra_args = guard.to_extra_args()
        seed = params.seed if params.seed is None or not job.submissions else params.seed + job.submissions
        sampling = VLLMSamplingParams(
            n=1, temperature=params.temperature, top_p=params.top_p, top_k=params.top_k, min_p=params.min_p,
            seed=seed, max_tokens=room, repetition_penalty=params.repetition_penalty,
            presence_penalty=params.presence_penalty, frequency_penalty=params.frequency_penalty,
            # A resubmission's output starts at `position`: min_tokens counts what is still owed. vLLM's
            # penalties count the output tokens of this submission only (documented in docs/vllm.md).
            min_tokens=max(0, params.min_tokens - position), ignore_eos=params.ignore_eos,
            logit_bias=dict(params.logit_bias) or None, output_kind=RequestOutputKind.DELTA, detokenize=False,
            stop_token_ids=sorted(job.session.eos_ids), extra_args=extra_args,
        )
        request_id = f"guardrail-{job.id}-{job.submissions}"
        job.submissions += 1
        job.submitted_tokens += len(job.prompt) + position
        job.request_id = request_id
        self._jobs[request_id] = job
        self.engine.add_request(request_id, TokensPrompt(prompt_token_ids=job.prompt + kept), sampling)

    def _on_output(self, job: _Job, output) -> None:
        if job.cached_for != output.request_id:  # reported with every output; counted once per submission
            if job.cached_for is None:  # the first submission: the prompt as the client sent it
                job.prompt_cached_tokens = output.num_cached_tokens or 0
            job.cached_for = output.request_id
            job.cached_tokens += output.num_cached_tokens or 0
        job.steps += 1
        verdicts = _JobVerdicts(self, job)
        for token in output.outputs[0].token_ids:
            if job.driver.judge(int(token), verdicts) != KEEP:  # resubmitted or finished
                return
        if output.finished:
            # vLLM ended the text where the session did not (its max_model_len): the end-of-text rule applies.
            self._retire(job)
            job.driver.judge_end(verdicts, "length")

    def _put(self, job: _Job, events: Sequence[Event]) -> None:
        for event in events:
            job.events.put(event)

    def _retire(self, job: _Job) -> None:
        """Forget the job's current vLLM request, aborting it when it still runs."""
        request_id = job.request_id
        if request_id is not None and self._jobs.pop(request_id, None) is not None:
            self.engine.abort_request([request_id])
        job.request_id = None

    def _resubmit(self, job: _Job) -> None:
        self._retire(job)
        self._submit(job)

    def _finish(self, job: _Job, reason: FinishReason) -> None:
        if job.done:
            return
        self._retire(job)
        job.done = True
        resubmissions = max(0, job.submissions - 1)
        self._put(job, job.driver.finish(
            reason, forward_passes=job.steps, reprefills=resubmissions, cached_tokens=job.prompt_cached_tokens,
            usage=VLLMUsage, resubmissions=resubmissions, prefill_tokens=job.submitted_tokens - job.cached_tokens))
