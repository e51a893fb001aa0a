"""Compiles of a request's own terms (``banned_terms`` and aliases), off the event loop and bounded.

A request's regex terms are compiled before it is queued (their automaton limits cannot be checked by
parsing: docs/matching.md, "Regex terms"), and a set of them can cost seconds of CPU. So, per process:

* they compile in processes of their own (``GUARDRAIL_REQUEST_COMPILE_WORKERS``, service/compile_process.py), each
  driven by a thread of a pool of the same size: never on the event loop nor in the default pool the sync routes
  use, and never holding the GIL the event loop needs (``/healthz``, ``/readyz`` and the streams keep answering);
* at most ``GUARDRAIL_REQUEST_COMPILE_QUEUE`` more wait for a thread: beyond, a 503 ``compile_busy`` with
  ``Retry-After`` at once, not an unbounded queue (a wait would eat the client's time; a retry is cheap); one
  that waited longer than the time budget is not started (the same 503);
* each compile has a budget: ``GUARDRAIL_REQUEST_COMPILE_TIME_S`` seconds of its process and
  ``GUARDRAIL_REQUEST_COMPILE_MAX_STATES`` automaton states, enforced inside the construction (the automaton
  checks its deadline as it adds states), and at most
  ``GUARDRAIL_MAX_REQUEST_REGEX_TERMS`` regex terms; beyond, a 400 naming the field and the limit;
* a refused set is answered from memory for ``GUARDRAIL_COMPILE_REFUSAL_TTL_S`` (the same 400, no compile), so a
  client that retries the same request costs nothing.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool

from cachetools import TTLCache

from guardrail.matching.regex.automaton import AUTOMATA, cached_automata
from guardrail.wordlists.wordlist import Term, WordList, WordListError, wordlist_from_terms
from service.compile_process import check_in_process, start_pool
from service.errors import ApiError
from service.metrics import ServiceMetrics
from service.schemas.terms import TermItem, to_terms
from service.settings import Settings

log = logging.getLogger(__name__)

#: The name of the list that carries a request's own terms (``banned_terms``).
REQUEST_LIST = "request"


class RequestCompiler:
    """The compile pool, its admission bound and the memory of refused term sets (one per process).

    Args:
        settings: the limits (``request_compile_*``, ``max_request_*``, ``compile_refusal_*``).
        metrics: counts compiles by outcome (``guardrail_request_compiles_total``).
    """

    def __init__(self, settings: Settings, metrics: ServiceMetrics) -> None:
        self.settings = settings
        self.metrics = metrics
        # Each thread drives one compile process and waits on it (the admission bound counts threads).
        self._pool = ThreadPoolExecutor(settings.request_compile_workers, thread_name_prefix="guardrail-compile")
        self._processes = start_pool(settings.request_compile_workers)
        self._processes_lock = threading.Lock()
        self._admitted = 0  # compiling or waiting for a thread; guarded by _lock
        self._lock = threading.Lock()
        # Refused term sets -> (the 400, its weight in bytes); bounded by bytes of term text, kept for a TTL.
        self._refused: TTLCache[tuple, tuple[ApiError, int]] = TTLCache(
            settings.compile_refusal_cache_bytes, max(settings.compile_refusal_ttl_s, 1e-9),
            getsizeof=lambda entry: entry[1])

    @property
    def refusals_bytes(self) -> int:
        """Bytes of term text the refusal memory holds now."""
        with self._lock:
            self._refused.expire()
            return int(self._refused.currsize)

    def close(self) -> None:
        """Stop the pools (running compiles end at their deadline; the processes are stopped)."""
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._processes.shutdown(wait=False, cancel_futures=True)

    async def request_list(self, terms: Sequence[TermItem], param: str) -> WordList | None:
        """The request's terms as a list named ``request`` (None without terms), their regex terms compiled
        within the budget in the compile pool.

        Raises:
            ApiError: 413 naming ``param`` beyond ``GUARDRAIL_MAX_REQUEST_TERMS`` or
                ``GUARDRAIL_MAX_REQUEST_REGEX_TERMS``; 400 naming ``param.<index>`` for a bad term (regex terms
                whose automaton is over the limit included) or ``param`` when only the terms together are over
                it or their compile is over the time budget; 503 ``compile_busy`` (with ``Retry-After``) when
                every compile thread is busy and the wait is full.
        """
        if not terms:
            return None
        limit = self.settings.max_request_terms
        if len(terms) > limit:
            raise ApiError(413, f"{len(terms)} request terms exceed the limit of {limit} (GUARDRAIL_MAX_REQUEST_TERMS)",
                           param=param, code="too_many_terms")
        items = to_terms(list(terms))
        key = (param, tuple(items))
        with self._lock:
            refused = self._refused.get(key)
        if refused is not None:
            self.metrics.request_compiles.labels("refused_cached").inc()
            error = refused[0]
            raise ApiError(error.status, error.message, param=error.param, code=error.code)
        with self._lock:
            if self._admitted >= self.settings.request_compile_workers + self.settings.request_compile_queue:
                busy = True
            else:
                busy, self._admitted = False, self._admitted + 1
        if busy:
            self.metrics.request_compiles.labels("busy").inc()
            raise ApiError(503, "every request-term compile thread is busy; retry shortly "
                           "(GUARDRAIL_REQUEST_COMPILE_WORKERS, GUARDRAIL_REQUEST_COMPILE_QUEUE)", param=param,
                           code="compile_busy", headers={"Retry-After": str(self.settings.retry_after_s)})
        try:
            future = self._pool.submit(self._compile, items, param, time.monotonic())
        except RuntimeError:  # the pool was shut down (the process stops)
            self._release()
            raise
        # The slot is freed when the compile ends, not when the request does: a client that disconnects does
        # not make room for more work than the pool holds (a compile not yet started is cancelled with it).
        future.add_done_callback(lambda _: self._release())
        try:
            return await asyncio.wrap_future(future)
        except ApiError as exc:
            if exc.code != "compile_busy":
                self.metrics.request_compiles.labels(
                    "over_time" if exc.code == "compile_budget_exceeded" else "refused").inc()
            if exc.status in (400, 413):
                weight = sum(len(str(t)) for t in items) + 64 * len(items) + len(exc.message) + 256
                with self._lock:
                    if self.settings.compile_refusal_ttl_s > 0 and weight <= self._refused.maxsize:
                        self._refused[key] = (exc, weight)
            raise

    def _release(self) -> None:
        with self._lock:
            self._admitted -= 1

    def _compile(self, terms: list[str | Term], param: str, admitted: float) -> WordList:
        """Parse (on a compile thread) and compile the regex terms (in a compile process). The time budget starts
        when the process starts on them, not while waiting; a compile that waited longer than the budget is not
        started (503 ``compile_busy``): so every admitted request is answered within about twice the budget, and
        never a 400 for the server's own backlog."""
        try:
            wordlist = wordlist_from_terms(terms, name=REQUEST_LIST)
        except WordListError as exc:
            raise invalid_term(exc, param) from None
        regexes = sum(1 for term in wordlist.terms if term.regex)
        cap = self.settings.max_request_regex_terms
        if regexes > cap:
            raise ApiError(413, f"{regexes} regex request terms exceed the limit of {cap} "
                           "(GUARDRAIL_MAX_REQUEST_REGEX_TERMS)", param=param, code="too_many_regex_terms")
        max_states = self.settings.request_compile_max_states
        try:
            if regexes and not cached_automata(wordlist, max_states):
                self._check_in_process(wordlist, terms, param, admitted)
        except WordListError as exc:
            raise invalid_term(exc, param) from None
        self.metrics.request_compiles.labels("ok").inc()
        return wordlist

    def _check_in_process(self, wordlist: WordList, terms: list[str | Term], param: str, admitted: float) -> None:
        """Compile in a compile process and keep its automata; raise the request's error otherwise."""
        budget = self.settings.request_compile_time_s
        try:
            checked = self._processes.submit(check_in_process, wordlist, self.settings.request_compile_max_states,
                                             admitted, budget).result()
        except BrokenProcessPool:  # a compile process died (killed for memory, say): start new ones
            log.error("a request-term compile process died; starting new ones")
            with self._processes_lock:
                self._processes.shutdown(wait=False, cancel_futures=True)
                self._processes = start_pool(self.settings.request_compile_workers)
            raise ApiError(503, "a request-term compile process stopped; retry shortly", param=param,
                           code="compile_busy", headers={"Retry-After": str(self.settings.retry_after_s)}) from None
        if checked.outcome == "late":
            self.metrics.request_compiles.labels("busy").inc()
            raise ApiError(503, "the request-term compile threads were busy for longer than the compile budget; "
                           "retry shortly (GUARDRAIL_REQUEST_COMPILE_WORKERS, GUARDRAIL_REQUEST_COMPILE_QUEUE)",
                           param=param, code="compile_busy",
                           headers={"Retry-After": str(self.settings.retry_after_s)})
        if checked.outcome == "over_time":
            regexes = sum(1 for term in wordlist.terms if term.regex)
            raise ApiError(400, f"the {regexes} regex terms did not compile within the compile budget of "
                           f"{budget:g} s (GUARDRAIL_REQUEST_COMPILE_TIME_S): use fewer "
                           "or narrower patterns", param=param, code="compile_budget_exceeded")
        if checked.outcome == "invalid":
            raise as_request_error(checked.error(), wordlist, terms, param, self.settings.request_compile_max_states,
                                   "GUARDRAIL_REQUEST_COMPILE_MAX_STATES")
        for key, automaton in checked.automata:  # the request's artefact reads them on its worker thread
            AUTOMATA.put(key, automaton)


def check_compiles(wordlist: WordList, items: Sequence[str | Term], param: str, max_states: int,
                   deadline: float | None = None, limit_name: str | None = None) -> None:
    """Check that the regex terms of ``wordlist`` (built from ``items``) compile within ``max_states``
    automaton nodes, which parsing alone cannot tell (docs/matching.md, "Regex terms"), in this thread.

    Args:
        deadline: ``time.monotonic()`` past which the compile stops (None: no limit).
        limit_name: the setting behind ``max_states``, named in the message.

    Raises:
        ApiError: 400 naming ``param.<index>`` (the index in ``items``), the term and the reason; ``param``
            alone when only the regex terms together are too large.
        CompileBudgetExceeded: past ``deadline``.
    """
    from guardrail.matching.regex.automaton import check_regex_terms

    if not any(term.regex for term in wordlist.terms):
        return
    try:
        check_regex_terms(wordlist, max_states, deadline=deadline)
    except WordListError as exc:
        raise as_request_error(exc, wordlist, items, param, max_states, limit_name) from None


def as_request_error(exc: WordListError, wordlist: WordList, items: Sequence[str | Term], param: str,
                     max_states: int, limit_name: str | None) -> ApiError:
    """The 400 of a :func:`~guardrail.matching.regex.automaton.check_regex_terms` refusal of ``wordlist`` (built
    from ``items``): ``param.<index>`` names the request item the term at fault came from."""
    if exc.line is not None:  # a line of the deduplicated list: find the request item it came from
        term = wordlist.terms[exc.line - 1]
        index = next(i for i, item in enumerate(items, start=1) if wordlist_from_terms([item]).terms[0] == term)
        exc = WordListError(exc.reason, exc.source, index)
    error = invalid_term(exc, param)
    if limit_name is not None and "automaton states" in error.message:
        error.message += f" (limit: {max_states} states, {limit_name})"
    return error


def invalid_term(exc: WordListError, param: str) -> ApiError:
    """The 400 for a term the core refused; ``exc.line`` (1-based index) becomes ``param.<index>``."""
    index = f".{exc.line - 1}" if exc.line else ""
    return ApiError(400, f"invalid term: {exc.reason}", param=f"{param}{index}", code="invalid_term")
