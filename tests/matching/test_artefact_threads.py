"""One artefact is shared by every request of a process (``GUARDRAIL_MAX_CONCURRENT > 1``): many threads
stepping a cold artefact must see exactly what one thread sees. Before the memo writes took a lock this
raised ``IndexError`` in ``Artefact.transition`` (a state id published before its memo row existed)."""

from __future__ import annotations

import random
import sys
import threading

import pytest

from guardrail.matching.artefact import ROOT_STATE, Artefact
from guardrail.matching.combined import CombinedArtefact
from guardrail.matching.compiler import compile_artefact, compile_request_artefact
from guardrail.wordlists.wordlist import bundled_wordlist, wordlist_from_terms

THREADS = 8
TRIALS = 6  # a fresh cold artefact each; unguarded, the memo failed in most runs of 6 trials
SEQUENCES = 800
OWN = [wordlist_from_terms(["kill all humans", "hell", "傻逼", "sorry", "re:s[o0]rr(?:y|ies)", "re:f[u*]ck\\w{0,3}"])]


def sequences(tokenizer) -> list[list[int]]:
    """Token sequences of glued term fragments ("x" + "bitc", " fuck"…): they walk deep into the automaton,
    so most of them create new states."""
    rng = random.Random(0)
    texts = [t.text for t in bundled_wordlist("en").terms] + ["kill all humans", "傻逼", "sorry"]

    def fragment() -> str:
        text = rng.choice(texts)
        return rng.choice(["", " ", "x", "-"]) + text[:rng.randrange(1, len(text) + 1)]

    return [tokenizer.encode("".join(fragment() for _ in range(4)), add_special_tokens=False)
            for _ in range(SEQUENCES)]


def trace(artefact, ids: list[int]) -> tuple:
    """What a sequence does, independent of state numbering: hits, symbols and leads per step, the
    lookback and completing tokens at its end, and the hits at the end of text."""
    state, steps = ROOT_STATE, []
    for token in ids:
        transition = artefact.transition(state, token)
        steps.append((transition.hits, transition.symbols, transition.lead))
        state = transition.state
    return (tuple(steps), artefact.lookback(state), artefact.finish(state).hits,
            tuple(artefact.completing_tokens(state).tolist()) if len(ids) % 8 == 0 else ())


def cold_copy(kind: str, stored: Artefact):
    """A fresh artefact with an empty memo (the stored lists' root sweep reused: no recompile)."""
    fresh = Artefact(stored.vocab, stored.terms, stored.allows, sweep=stored.sweep)
    if kind == "stored":
        return fresh
    return CombinedArtefact(fresh, compile_request_artefact(stored.vocab, OWN, [bundled_wordlist("en")]))


def race(shared, work: list[list[int]]) -> tuple[list, list[BaseException]]:
    """Trace every sequence in ``THREADS`` threads at once; returns each thread's traces and the errors."""
    results: list = [None] * THREADS
    errors: list[BaseException] = []

    def run(index: int) -> None:
        # Every thread walks the same sequences (half of them backwards): they race to create the same
        # new states, where an unguarded write publishes a state id before its memo row.
        order = range(len(work)) if index % 2 else range(len(work) - 1, -1, -1)
        try:
            found = {i: trace(shared, work[i]) for i in order}
            results[index] = [found[i] for i in range(len(work))]
        except BaseException as exc:  # noqa: BLE001 - reported by the caller's assertion
            errors.append(exc)

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible
    try:
        threads = [threading.Thread(target=run, args=(i,)) for i in range(THREADS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(interval)
    return results, errors


@pytest.mark.parametrize("kind", ["stored", "combined"])
def test_threads_on_a_cold_shared_artefact_see_what_one_thread_sees(smollm2_tokenizer, smollm2_vocab, kind):
    stored = compile_artefact(smollm2_vocab, [bundled_wordlist("en")])
    work = sequences(smollm2_tokenizer)
    alone = cold_copy(kind, stored)
    expected = [trace(alone, ids) for ids in work]
    for _ in range(TRIALS):
        results, errors = race(cold_copy(kind, stored), work)
        assert not errors, repr(errors[0])
        assert all(found == expected for found in results)
