"""A failure in the batch ends only the requests it can touch.

A row's own per-token work (its guard session, sampling, grammar, logprobs) raising ends that request
alone: its neighbours decode on to exactly the text they give without it, and its KV cache row is freed.
A failure of shared work (the batch forward pass, the batch cache in a row's rollback) leaves the batch
cache untrusted: every request in the batch ends. Either way the decoder goes on serving new requests.

Real SmolLM2 (float32), real compiled artefact, the decoder's own driver thread (``start``/``stream``, as
the service's worker uses it). The failures are injected (fault injection, the one stand-in here): a
wrapper around the real artefact whose ``transition`` raises from its Nth call on, a wrapper around the
batcher's real forward pass that raises on its Nth call, and a batch cache whose rollback raises.
"""

import collections
import threading

import pytest
from helpers.paths import load_data
from helpers.streams import contract
from helpers.wait import wait_until

from guardrail.engines.transformers.batched import BatchedDecoder
from guardrail.guard.events import Finish, TextDelta
from guardrail.matching.compiler import compile_artefact
from guardrail.params import SamplingParams
from guardrail.prompts import prompt_ids
from guardrail.wordlists.wordlist import wordlist_from_terms

pytestmark = pytest.mark.slow

PROMPTS = ["Name three colours of the rainbow.", "Say hello to a friend.", "Describe the sea in one sentence."]
#: The faulty row's guard step raises on its FAULT_AT-th call, a few tokens in (its neighbours ask for more).
FAULT_AT = 4
MAX_TOKENS = 16
#: Not what these tests check (the default 60 s would end a row early on a loaded machine).
NO_DEADLINE = 3600.0
PARAMS = SamplingParams(temperature=0, max_tokens=MAX_TOKENS, timeout_s=NO_DEADLINE)
#: Bounds a wait for the driver thread, not a speed claim.
WAIT_S = 300.0


class InjectedGuardError(Exception):
    """The injected failure of one request's guard step."""


class InjectedForwardError(Exception):
    """The injected failure of the shared batch forward pass."""


class InjectedCacheError(Exception):
    """The injected failure of the shared batch cache in a row's rollback."""


class FailingArtefact:
    """The real artefact, except that ``transition`` (the guard session's per-token step) raises
    :class:`InjectedGuardError` from its ``fail_at``-th call on: fault injection for one request. Its memo
    always misses (``memo_rows``: an empty row for every state), so every token's step is a ``transition``
    call (the matcher reads a memo hit without one)."""

    def __init__(self, artefact, fail_at: int):
        self._artefact = artefact
        self._fail_at = fail_at
        self.calls = 0
        self.memo_rows = collections.defaultdict(dict)

    def transition(self, *args, **kwargs):
        self.calls += 1
        if self.calls >= self._fail_at:
            raise InjectedGuardError(f"guard step {self.calls} of this request failed")
        return self._artefact.transition(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self._artefact, name)


@pytest.fixture(scope="module")
def artefact(smollm2_decoder):
    return compile_artefact(smollm2_decoder.vocab, [wordlist_from_terms(["octopus"], name="targets")])


@pytest.fixture(scope="module")
def jobs(smollm2_tokenizer, artefact):
    return [(prompt_ids(smollm2_tokenizer, messages=[{"role": "user", "content": text}]), artefact, PARAMS)
            for text in PROMPTS]


@pytest.fixture(scope="module")
def alone(smollm2_decoder, jobs):
    """Each request decoded by itself: what it streams without any neighbour."""
    return [list(smollm2_decoder.stream(*job)) for job in jobs]


@pytest.fixture
def batched(smollm2_decoder):
    decoder = BatchedDecoder(smollm2_decoder, max_batch=4)
    decoder.start()
    yield decoder
    decoder.stop()


def consume_all(streams):
    """Drain each stream on its own thread (as the worker does); each result is ``(events, error)``."""
    results = {}

    def consume(index, stream):
        events = []
        try:
            for event in stream:
                events.append(event)
        except RuntimeError as error:
            results[index] = (events, error)
            return
        results[index] = (events, None)

    threads = [threading.Thread(target=consume, args=(i, s)) for i, s in enumerate(streams)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=WAIT_S)
    assert len(results) == len(streams), "a stream never ended"
    return [results[index] for index in range(len(streams))]


def submit_together(batched, jobs):
    """Open every stream while holding the batcher's lock, so one admission takes them all (one batch)."""
    with batched._lock:
        return [batched.stream(*job) for job in jobs]


def test_a_row_whose_own_step_raises_ends_alone_and_its_neighbours_decode_as_without_it(batched, jobs, alone,
                                                                                         artefact):
    faulty = FailingArtefact(artefact, FAULT_AT)
    ids, _, params = jobs[2]
    (first, first_error), (second, second_error), (failed, error) = consume_all(
        submit_together(batched, [jobs[0], jobs[1], (ids, faulty, params)]))

    # The faulty request: some text, then the error naming its class (the original as the cause).
    assert error is not None and "InjectedGuardError" in str(error)
    assert isinstance(error.__cause__, InjectedGuardError)
    assert faulty.calls == FAULT_AT and not any(isinstance(e, Finish) for e in failed)
    assert any(isinstance(e, TextDelta) for e in failed)
    # Its neighbours shared passes with it, outlived it, and streamed exactly what they stream alone.
    assert max(batched.batch_sizes) == 3 and 2 in batched.batch_sizes
    assert first_error is None and second_error is None
    assert contract(first) == contract(alone[0]) and contract(second) == contract(alone[1])
    assert len(first[-1].token_ids) > FAULT_AT and len(second[-1].token_ids) > FAULT_AT

    # No KV cache row outlives its request; the decoder serves the next one as before.
    wait_until(lambda: batched.idle, WAIT_S, "the batcher empties")
    assert len(batched.cache) == 0 and batched.cache.cache is None
    assert batched.alive
    assert contract(list(batched.stream(*jobs[2]))) == contract(alone[2])
    assert len(batched.cache) == 0


def test_a_failed_forward_pass_ends_every_row_and_the_decoder_serves_on(batched, jobs, alone):
    forward, passes = batched._forward, []

    def failing_forward(cache):  # the shared batch pass: raises on its third call (fault injection)
        passes.append(len(cache))
        if len(passes) == 3:
            raise InjectedForwardError("the batch forward pass failed")
        forward(cache)

    batched._forward = failing_forward
    results = consume_all(submit_together(batched, jobs))

    assert passes[2] == 3  # the failed pass carried all three rows
    for events, error in results:
        assert error is not None and "InjectedForwardError" in str(error)
        assert not any(isinstance(e, Finish) for e in events)
    wait_until(lambda: batched.idle, WAIT_S, "the batcher empties")
    assert len(batched.cache) == 0 and batched.alive
    assert contract(list(batched.stream(*jobs[0]))) == contract(alone[0])


def test_a_batch_cache_failure_in_a_rows_rollback_is_shared_and_not_isolated(smollm2_decoder, smollm2_tokenizer):
    """A rollback runs inside the row's own step, but it changes the shared batch cache (and may compact
    it): when the cache raises there, the step raises (the driver then ends every request) instead of
    ending that row alone."""
    leaks = load_data("leak_prompts.json")[:3]  # prompts whose answers say a banned term: rows roll back
    artefact = compile_artefact(smollm2_decoder.vocab,
                                [wordlist_from_terms(sorted({case["term"] for case in leaks}), name="targets")])
    batched = BatchedDecoder(smollm2_decoder, max_batch=4)
    requests = [batched.submit(prompt_ids(smollm2_tokenizer, messages=[{"role": "user", "content": case["prompt"]}]),
                               artefact, SamplingParams(temperature=0, max_tokens=case["tokens_to_term"] + 6,
                                                        timeout_s=NO_DEADLINE))
                for case in leaks]
    rollbacks = []

    def failing_rollback(key, length):  # fault injection: the shared cache fails in a row's rollback
        rollbacks.append(key)
        raise InjectedCacheError("the batch cache failed in a rollback")

    batched.cache.rollback_to = failing_rollback
    with pytest.raises(InjectedCacheError):
        while not batched.idle:
            batched.step()
    assert len(rollbacks) == 1 and rollbacks[0].request in requests
    assert not batched._failures  # not handed to the row's request alone
