"""The CPU-heavy part of a request-term compile, in processes of their own (service/request_compiles.py).

A budgeted compile is pure Python: in a thread of the service's process it holds the GIL for up to its whole
time budget, and the event loop, which gives the GIL up at every socket call, waits a switch interval (5 ms) to
get it back each time: two compile threads made one ``GET /healthz`` take up to half a second on the 2-core
machine (docs/benchmarks.md, "Abuse"). In a process of its own a compile takes a core, never the GIL.

Only the regex automata cross the process boundary (each a pickle of its node tables, ~30 KB for a few terms,
a few MB at the state limit); the parent puts them into :data:`guardrail.matching.regex.automaton.AUTOMATA`,
where the request's artefact reads them on its worker thread, so an accepted set is not compiled twice.
Processes start with ``spawn`` (the service's threads make ``fork`` unsafe) and import this module and the
regex compiler only (~30 MB each, ~0.2 s); :func:`start_pool` starts them before the first request.
"""

from __future__ import annotations

import multiprocessing
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

from guardrail.matching.regex.automaton import AUTOMATA, CompileBudgetExceeded, RegexAutomaton, check_regex_terms
from guardrail.wordlists.wordlist import WordList, WordListError


@dataclass(frozen=True)
class Checked:
    """What a compile process answers: ``outcome`` is ``ok`` (``automata`` holds each case mode's
    ``(key, automaton)``), ``late`` (it waited longer than the budget before it started), ``over_time`` (past
    the deadline) or ``invalid`` (``reason``, ``source``, ``line`` of the :class:`WordListError`)."""

    outcome: str
    automata: tuple[tuple[tuple, RegexAutomaton], ...] = ()
    reason: str = ""
    source: str = ""
    line: int | None = None

    def error(self) -> WordListError:
        """The :class:`WordListError` of an ``invalid`` answer."""
        return WordListError(self.reason, self.source, self.line)


def _ready() -> int:
    return 0


def start_pool(workers: int, timeout_s: float = 120.0) -> ProcessPoolExecutor:
    """``workers`` compile processes, started and ready when this returns (each imports the regex compiler once:
    ~0.2 s, in parallel), so that the first requests do not spend their compile budget waiting for an
    interpreter to start.

    Raises:
        ValueError: ``workers`` < 1.
        TimeoutError: the processes were not ready within ``timeout_s`` seconds.
    """
    pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"))
    # The pool starts a process per task while none is idle: one task per worker starts them all.
    for started in [pool.submit(_ready) for _ in range(workers)]:
        started.result(timeout=timeout_s)
    return pool


def check_in_process(wordlist: WordList, max_states: int, admitted: float, budget_s: float) -> Checked:
    """Compile ``wordlist``'s regex terms within ``max_states`` nodes and ``budget_s`` seconds from when this
    starts (runs in a compile process).

    Args:
        admitted: ``time.monotonic()`` when the request was admitted (the clock is system-wide on Linux): one
            that waited longer than ``budget_s`` is not started (``late``).
    """
    started = time.monotonic()
    if started - admitted > budget_s:
        return Checked("late")
    AUTOMATA.clear()  # the parent keeps the automata; this process's copies would only hold memory
    try:
        built = check_regex_terms(wordlist, max_states, deadline=started + budget_s)
    except CompileBudgetExceeded:
        return Checked("over_time")
    except WordListError as exc:
        return Checked("invalid", reason=exc.reason, source=exc.source, line=exc.line)
    finally:
        AUTOMATA.clear()
    return Checked("ok", tuple(built))
