"""The gateway engine's fail-closed rule and its resubmission protocol, against a scripted upstream.

vLLM's real server (tests/engines/remote/gateway) honours ``logit_bias`` -100, so it cannot show what the gateway does when an
upstream returns a banned token anyway: this scripted upstream (an ``httpx.MockTransport``: a fake, for that
reason only; tests/helpers/scripted_upstream.py) ignores every bias and always decodes the same text.
"""

from __future__ import annotations

import json
import threading

import httpx
import pytest
from helpers.scripted_upstream import ScriptedUpstream

from guardrail.engines.remote.engine import BAN_BIAS, RemoteEngine, RemoteUsage
from guardrail.engines.remote.upstream import UpstreamMismatch
from guardrail.guard.events import Completion, Finish
from guardrail.matching.cache import ArtefactCache
from guardrail.params import SamplingParams
from guardrail.wordlists.wordlist import wordlist_from_terms


def engine_for(upstream: ScriptedUpstream, tokenizer, vocab, logits_processor: str = "auto") -> RemoteEngine:
    engine = RemoteEngine("http://upstream", tokenizer, vocab, logits_processor=logits_processor,
                          transport=httpx.MockTransport(upstream))
    engine.start()
    return engine


def decode_with_sorry_banned(engine: RemoteEngine, base: list[int], vocab) -> Completion:
    """Greedy, 16 tokens, "sorry" banned with 3 re-picks per position; the engine is closed after."""
    try:
        artefact = ArtefactCache(cache_dir=None).get_with_request(vocab, [], [wordlist_from_terms(["sorry"])])
        params = SamplingParams(temperature=0, max_tokens=16, max_rollbacks_per_position=3)
        return Completion.from_events(engine.stream(base, artefact, params, threading.Event()))
    finally:
        engine.close()


def test_a_banned_token_the_upstream_returns_anyway_is_never_kept(smollm2_tokenizer, smollm2_vocab):
    base = smollm2_tokenizer.encode("Say it:", add_special_tokens=False)
    script = smollm2_tokenizer.encode(" I am sorry about that", add_special_tokens=False)
    upstream = ScriptedUpstream(smollm2_tokenizer, base, script)
    engine = engine_for(upstream, smollm2_tokenizer, smollm2_vocab)
    upstream.requests.clear()  # the start-up check's probe
    done = decode_with_sorry_banned(engine, base, smollm2_vocab)
    assert "sorry" not in done.text and done.finish_reason == "content_filter"
    assert done.usage.banned_returned == 4  # the 4th return of the banned token is past the position's budget
    sorry_at = len(smollm2_tokenizer.encode(" I am", add_special_tokens=False))
    first = str(script[sorry_at])
    repicks = [r for r in upstream.requests if r["max_tokens"] == 1]
    # Each re-pick resubmits prompt + kept tokens with the position's ban as logit_bias, one token at a time.
    assert repicks and all(r["prompt"] == base + script[:sorry_at] and r["logit_bias"][first] == BAN_BIAS
                           for r in repicks)


class ProcessorOnlyAtStartUp(ScriptedUpstream):
    """Answers the start-up probe as an upstream running guardrail's logits processor would (the banned token
    is not the answer), then ignores ``vllm_xargs`` like the rest of the script: a replica without the
    processor behind the same router."""

    def __call__(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content) if request.content else {}
        if "vllm_xargs" in body and body["prompt"][:len(self.base)] != self.base:  # the probe
            banned = json.loads(body["vllm_xargs"]["guardrail"])["bans"]["0"]
            other = next(t for t in range(10, 100) if t not in banned)
            return httpx.Response(200, json={"choices": [{"index": 0, "token_ids": [other], "text": ""}]})
        return super().__call__(request)


def test_exact_masks_that_do_not_hold_fall_back_to_bias_and_repick(smollm2_tokenizer, smollm2_vocab):
    base = smollm2_tokenizer.encode("Say it:", add_special_tokens=False)
    script = smollm2_tokenizer.encode(" I am sorry about that", add_special_tokens=False)
    upstream = ProcessorOnlyAtStartUp(smollm2_tokenizer, base, script)
    engine = engine_for(upstream, smollm2_tokenizer, smollm2_vocab, logits_processor="on")
    assert engine.info is not None and engine.info.logits_processor
    upstream.requests.clear()
    done = decode_with_sorry_banned(engine, base, smollm2_vocab)
    assert "sorry" not in done.text and done.finish_reason == "content_filter"
    sorry = script[len(smollm2_tokenizer.encode(" I am", add_special_tokens=False))]
    first, *later = upstream.requests[1:]  # after the first request, which ran into the hit
    # The re-pick went in one request, the ban as an exact mask at its first position...
    assert first["max_tokens"] > 1 and json.loads(first["vllm_xargs"]["guardrail"])["bans"] == {"0": [sorry]}
    # ...which did not hold: from then on, one-token re-picks under logit_bias, as on any vLLM server.
    assert later and all(r["max_tokens"] == 1 and r["logit_bias"][str(sorry)] == BAN_BIAS for r in later)
    assert done.usage.banned_returned == 4


def test_a_spent_budget_names_the_list_of_its_term(smollm2_tokenizer, smollm2_vocab):
    """``max_rollbacks: 0`` ends at the first hit with content_filter, blamed on the term's list (the
    ``filtered_by`` the service counts by list), as on the other engines."""
    base = smollm2_tokenizer.encode("Say it:", add_special_tokens=False)
    script = smollm2_tokenizer.encode(" I am sorry about that", add_special_tokens=False)
    engine = engine_for(ScriptedUpstream(smollm2_tokenizer, base, script), smollm2_tokenizer, smollm2_vocab)
    artefact = ArtefactCache(cache_dir=None).get_with_request(
        smollm2_vocab, [], [wordlist_from_terms(["sorry"], name="apology")])
    try:
        cut = list(engine.stream(base, artefact, SamplingParams(temperature=0, max_tokens=16, max_rollbacks=0),
                                 threading.Event()))[-1]
    finally:
        engine.close()
    assert cut.reason == "content_filter" and cut.filtered_by == "apology" and cut.text == " I am"
    assert cut.usage.guard_step_seconds is not None  # two tokens judged before the hit


def test_an_upstream_with_another_tokenizer_is_refused(smollm2_tokenizer, smollm2_vocab):
    upstream = ScriptedUpstream(smollm2_tokenizer, [1], [2], tokenize_offset=1)
    with pytest.raises(UpstreamMismatch, match="tokenizer mismatch"):
        engine_for(upstream, smollm2_tokenizer, smollm2_vocab)


def test_an_eos_the_upstream_streams_finishes_through_the_verdict_once_with_the_gateway_usage(smollm2_tokenizer,
                                                                                              smollm2_vocab):
    base = smollm2_tokenizer.encode("Say it:", add_special_tokens=False)
    text = smollm2_tokenizer.encode(" I am fine", add_special_tokens=False)
    upstream = ScriptedUpstream(smollm2_tokenizer, base, [*text, smollm2_tokenizer.eos_token_id, *text])
    engine = engine_for(upstream, smollm2_tokenizer, smollm2_vocab)
    upstream.requests.clear()  # the start-up check's probe
    try:
        params = SamplingParams(temperature=0, max_tokens=16)
        events = list(engine.stream(base, None, params, threading.Event()))
    finally:
        engine.close()
    finishes = [e for e in events if isinstance(e, Finish)]
    assert len(finishes) == 1 and events[-1] is finishes[0]  # GuardSession.finish ran once, its Finish is last
    done = Completion.from_events(events)
    # The EOS ends the text (judge -> on_finish): nothing after it is kept, one upstream request was enough.
    assert (done.text, done.finish_reason) == (" I am fine", "stop")
    assert isinstance(done.usage, RemoteUsage) and done.usage.requests == 1 and len(upstream.requests) == 1


# -- the loop end is the shared DecodeDriver's (guardrail/guard/driver.py): cancel, deadline, room -----------------

def stream_through(smollm2_tokenizer, smollm2_vocab, base: list[int], params: SamplingParams,
                   cancel: threading.Event | None = None, cancel_after_text: bool = False):
    """The events of one unguarded stream after ``base`` (the script: a long sentence), and the upstream's
    completion requests."""
    script = smollm2_tokenizer.encode(" one two three four five six seven eight nine ten eleven twelve",
                                      add_special_tokens=False)
    upstream = ScriptedUpstream(smollm2_tokenizer, base, script)
    engine = engine_for(upstream, smollm2_tokenizer, smollm2_vocab)
    upstream.requests.clear()  # the start-up check's probe
    events = []
    try:
        for event in engine.stream(base, None, params, cancel):
            events.append(event)
            if cancel_after_text and cancel is not None and getattr(event, "text", ""):
                cancel.set()
    finally:
        engine.close()
    assert isinstance(events[-1], Finish) and sum(isinstance(e, Finish) for e in events) == 1
    return events, upstream.requests


def test_a_cancel_mid_stream_ends_with_cancelled_at_the_next_token(smollm2_tokenizer, smollm2_vocab):
    base = smollm2_tokenizer.encode("Count:", add_special_tokens=False)
    events, requests = stream_through(smollm2_tokenizer, smollm2_vocab, base,
                                      SamplingParams(temperature=0, max_tokens=12), threading.Event(),
                                      cancel_after_text=True)
    done = events[-1]
    assert done.reason == "cancelled" and done.text == " one" and len(requests) == 1
    assert isinstance(done.usage, RemoteUsage) and done.usage.completion_tokens == 1


def test_a_spent_deadline_ends_with_length_before_any_request(smollm2_tokenizer, smollm2_vocab):
    base = smollm2_tokenizer.encode("Count:", add_special_tokens=False)
    # A deadline already past when the loop first asks (1 ns: no sleep, no wall-clock threshold).
    events, requests = stream_through(smollm2_tokenizer, smollm2_vocab, base,
                                      SamplingParams(temperature=0, max_tokens=12, timeout_s=1e-9))
    assert (events[-1].reason, events[-1].text, requests) == ("length", "", [])


def test_the_room_left_in_the_context_bounds_the_request_and_ends_with_length(smollm2_tokenizer, smollm2_vocab):
    # The scripted upstream's max_model_len is 2048: a 2040-token prompt leaves room for 8 tokens, below max_tokens.
    word = smollm2_tokenizer.encode(" word", add_special_tokens=False)
    base = word * 2040
    events, requests = stream_through(smollm2_tokenizer, smollm2_vocab, base,
                                      SamplingParams(temperature=0, max_tokens=12))
    done = events[-1]
    assert [r["max_tokens"] for r in requests] == [8]
    assert (done.reason, done.usage.completion_tokens) == ("length", 8)
    assert done.text == " one two three four five six seven eight"
