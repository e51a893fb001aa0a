"""Continuous batching keeps every request's contract: batched rows decode exactly as alone, never leak.

Real SmolLM2 (float32) on the leak suite (``data/leak_prompts.json``, every target banned at once, so most
rows roll back, each at its own step, while their neighbours decode on). The reference for each request is
the single-stream ``StreamingDecoder``.
"""

import threading

import pytest
from helpers.paths import load_data
from helpers.streams import assert_no_leak, contract

from guardrail.engines.transformers.batched import BatchedDecoder
from guardrail.engines.transformers.decoder import StreamingDecoder, generation_eos_ids
from guardrail.guard.events import Finish, Rollback
from guardrail.matching.compiler import compile_artefact
from guardrail.matching.vocab import TokenVocab
from guardrail.params import SamplingParams
from guardrail.prompts import prompt_ids
from guardrail.wordlists.wordlist import wordlist_from_terms

pytestmark = pytest.mark.slow

LEAKS = load_data("leak_prompts.json")
TARGETS = [wordlist_from_terms(sorted({case["term"] for case in LEAKS}), name="targets")]
MARGIN = 6  # tokens past the point where the unguarded answer says its term (as tests/engines/transformers/test_decoder_leaks.py)
#: A generation's wall-clock limit (``timeout_s``, 60 s by default) is not what these tests check: on a loaded
#: shared machine it would end a row early ("length") and fail a comparison for no reason.
NO_DEADLINE = 3600.0


@pytest.fixture(scope="module")
def decoder(smollm2_decoder):
    return smollm2_decoder


@pytest.fixture(scope="module")
def artefact(decoder):
    return compile_artefact(decoder.vocab, TARGETS)


@pytest.fixture(scope="module")
def jobs(smollm2_tokenizer, artefact):
    out = []
    for case in LEAKS:
        ids = prompt_ids(smollm2_tokenizer, messages=[{"role": "user", "content": case["prompt"]}])
        params = SamplingParams(temperature=0, max_tokens=case["tokens_to_term"] + MARGIN, timeout_s=NO_DEADLINE)
        out.append((ids, artefact, params))
    return out


@pytest.fixture(scope="module")
def alone(decoder, jobs):
    return [list(decoder.stream(*job)) for job in jobs]


@pytest.fixture(scope="module")
def batched_greedy(decoder, jobs):
    """All leak prompts through a batch of 8: later ones join as earlier ones finish (staggered joins).
    Returns the decoder, each request's events, and per step the rows that rolled back and the rows running."""
    batched = BatchedDecoder(decoder, max_batch=8, prefill_chunk=64, compact_at=2)
    requests = [batched.submit(*job) for job in jobs]
    out = {r.id: [] for r in requests}
    steps = []
    while not batched.idle:
        events = batched.step()
        for request, event in events:
            out[request.id].append(event)
        steps.append(({r.id for r, e in events if isinstance(e, Rollback)}, len(batched.cache)))
    return batched, [out[r.id] for r in requests], steps


def test_each_row_in_a_batch_of_8_equals_its_request_decoded_alone(batched_greedy, alone):
    batched, events, steps = batched_greedy
    assert max(batched.batch_sizes) == 8 and min(batched.batch_sizes) < 8  # rows joined and left
    # Rows rolled back while their neighbours decoded on.
    assert any(0 < len(rolled) < running for rolled, running in steps)
    assert batched.cache.compactions >= 1  # compact_at=2: holes were compacted mid-batch
    for got, expected in zip(events, alone, strict=True):
        assert contract(got) == contract(expected)


def test_joining_rows_are_prefilled_in_groups_and_reuse_the_cached_chat_head(batched_greedy, jobs):
    batched, events, _ = batched_greedy
    # The first 8 rows arrive together: fewer prefill passes than rows (groups), each row once.
    assert batched.prefill_passes < len(jobs)
    # Every prompt begins with the chat template's system turn: later rows load it from the prefix cache,
    # and their usage says how many prompt tokens were served from it.
    cached = [stream[-1].usage.cached_tokens for stream in events]
    assert batched.prefix_cache.hits >= len(jobs) - 8 and sum(cached) == batched.prefix_cache.cached_tokens
    assert all(c == 0 for c in cached[:8]) and all(c >= 8 for c in cached[8:])


def test_no_leak_at_batch_8_greedy_in_final_text_and_every_streamed_prefix(batched_greedy):
    for stream in batched_greedy[1]:
        assert_no_leak(stream, TARGETS)


def test_no_leak_at_batch_8_sampled_and_seeded_rows_draw_as_alone(decoder, jobs):
    sampled = [(ids, art, SamplingParams(temperature=1.0, seed=i, max_tokens=p.max_tokens, timeout_s=NO_DEADLINE))
               for i, (ids, art, p) in enumerate(jobs)]
    events = BatchedDecoder(decoder, max_batch=8).generate(sampled)
    for stream in events:
        assert_no_leak(stream, TARGETS)
    for job, stream in list(zip(sampled, events, strict=True))[:4]:  # own generator per row
        assert contract(stream) == contract(list(decoder.stream(*job)))


def test_a_request_cancelled_while_waiting_finishes_through_its_driver_without_model_work(decoder, jobs):
    batched = BatchedDecoder(decoder, max_batch=8)
    cancel = threading.Event()
    cancel.set()
    request = batched.submit(*jobs[0], cancel=cancel)
    events = batched.step()
    assert [r for r, _ in events] == [request] and batched.idle and batched.prefill_passes == 0
    (_, finish), = events
    assert isinstance(finish, Finish) and (finish.reason, finish.text, finish.token_ids) == ("cancelled", "", ())
    assert (finish.usage.prompt_tokens, finish.usage.completion_tokens, finish.usage.forward_passes) == (
        len(jobs[0][0]), 0, 0)


def test_cancel_of_one_row_leaves_the_others_intact(decoder, jobs, alone):
    batched = BatchedDecoder(decoder, max_batch=8)
    requests = [batched.submit(*job) for job in jobs[:4]]
    out = {r.id: [] for r in requests}
    step = 0
    while not batched.idle:
        if step == 3:
            requests[1].cancel.set()
        for request, event in batched.step():
            out[request.id].append(event)
        step += 1
    cancelled = out[requests[1].id]
    assert cancelled[-1].reason == "cancelled" and len(cancelled[-1].token_ids) <= 4
    for index in (0, 2, 3):
        assert contract(out[requests[index].id]) == contract(alone[index])


def test_a_long_prompt_is_prefilled_in_chunks_while_running_rows_keep_streaming(decoder, smollm2_tokenizer,
                                                                                 artefact, jobs, alone):
    long_ids = prompt_ids(smollm2_tokenizer, messages=[
        {"role": "user", "content": "Tell me about the sea. " * 40 + LEAKS[0]["prompt"]}])
    assert len(long_ids) > 200
    batched = BatchedDecoder(decoder, max_batch=8, prefill_chunk=32)
    first = batched.submit(*jobs[2])
    batched.step()  # the first row is running
    late = batched.submit(long_ids, artefact, SamplingParams(temperature=0, max_tokens=8, timeout_s=NO_DEADLINE))
    steps_with_first_events_while_prefilling = 0
    out = {first.id: [], late.id: []}
    while not batched.idle:
        events = batched.step()
        prefilling = late.started_at is not None and not any(row.request is late for row in batched.cache.keys) \
            and not late.finished
        if prefilling and any(r is first for r, _ in events):
            steps_with_first_events_while_prefilling += 1
        for request, event in events:
            out[request.id].append(event)
    assert steps_with_first_events_while_prefilling >= 3  # > 200 tokens / 32 per step: the first row kept going
    assert contract(out[first.id]) == contract(alone[2])
    late_params = SamplingParams(temperature=0, max_tokens=8, timeout_s=NO_DEADLINE)
    assert contract(out[late.id]) == contract(list(decoder.stream(long_ids, artefact, late_params)))


def test_sliding_window_models_fall_back_to_batch_1(gemma3_model, gemma3_tokenizer):
    vocab = TokenVocab.from_tokenizer(gemma3_tokenizer, eos_ids=generation_eos_ids(gemma3_model))
    decoder = StreamingDecoder(gemma3_model, gemma3_tokenizer, vocab)
    batched = BatchedDecoder(decoder, max_batch=8)
    assert not batched.batched and batched.max_batch == 1
    params = SamplingParams(temperature=0, max_tokens=6, timeout_s=NO_DEADLINE)
    jobs = [(gemma3_tokenizer.encode(text), None, params) for text in ("The capital of France is", "One, two,")]
    events = batched.generate(jobs)
    for job, stream in zip(jobs, events, strict=True):
        assert contract(stream) == contract(list(decoder.stream(*job)))


def test_bad_input_is_refused_at_submit_naming_the_field(decoder):
    batched = BatchedDecoder(decoder)
    with pytest.raises(ValueError, match="prompt_ids"):
        batched.submit([], None, SamplingParams(temperature=0))
    with pytest.raises(ValueError, match="max_batch"):
        BatchedDecoder(decoder, max_batch=0)
    assert batched.idle


def test_stream_from_many_threads_is_a_drop_in_for_the_single_stream_decoder(decoder, jobs, alone):
    batched = BatchedDecoder(decoder, max_batch=4)
    batched.start()
    results = {}
    try:
        def consume(index):
            results[index] = list(batched.stream(*jobs[index]))

        threads = [threading.Thread(target=consume, args=(i,)) for i in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=300)
        with pytest.raises(ValueError, match="prompt_ids"):  # refused by the call, not later in the loop
            batched.stream([], None, SamplingParams(temperature=0))
    finally:
        batched.stop()
    assert max(batched.batch_sizes) > 1  # the threads' requests shared forward passes
    for index in range(4):
        assert contract(results[index]) == contract(alone[index])


def test_every_row_picks_then_every_guard_judges_then_every_verdict_applies(decoder, jobs, monkeypatch):
    """Issue 29: in each step all running rows pick, then all their guards judge (``GuardSession.accept``), then
    all verdicts are applied, so that the guards run back to back; rollbacks re-pick and judge after that. The
    single-stream decoder never hands the step markers out."""
    from guardrail.engines.transformers.decoder import Generation
    from guardrail.guard.events import Event
    from guardrail.guard.session import GuardSession

    log: list[tuple[str, int]] = []
    pick, accept, emit = Generation._pick, GuardSession.accept, Generation.emit

    def logged_pick(self):
        log.append(("pick", id(self.session)))
        return pick(self)

    def logged_accept(self, token, logprobs=None):
        log.append(("accept", id(self)))
        return accept(self, token, logprobs)

    def logged_emit(self, events):
        log.append(("verdict", id(self.session)))
        return emit(self, events)

    monkeypatch.setattr(Generation, "_pick", logged_pick)
    monkeypatch.setattr(GuardSession, "accept", logged_accept)
    monkeypatch.setattr(Generation, "emit", logged_emit)
    batched = BatchedDecoder(decoder, max_batch=8)
    for job in jobs[:8]:
        batched.submit(*job)
    steps, rolled_back = 0, False
    while not batched.idle:
        log.clear()
        events = batched.step()
        rolled_back |= any(isinstance(e, Rollback) for _, e in events)
        firsts: dict[str, dict[int, int]] = {"pick": {}, "accept": {}, "verdict": {}}
        for index, (kind, row) in enumerate(log):
            firsts[kind].setdefault(row, index)
        if len(firsts["verdict"]) > 1:
            steps += 1
            assert max(firsts["pick"].values()) < min(firsts["accept"].values())
            assert max(firsts["accept"].values()) < min(firsts["verdict"].values())
    assert steps > 5 and rolled_back
    alone = list(decoder.stream(*jobs[0]))
    assert all(isinstance(event, Event) for event in alone)
