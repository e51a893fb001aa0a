"""The gateway's per-API adapters (guardrail/engines/remote/backends): request bodies and stream reading.

The chunks below have the fields llama.cpp's server writes (tools/server/server-task.cpp,
``to_json_non_oaicompat``: ``tokens``, ``tokens_predicted``, ``stop``, ``stop_type``, ``timings.cache_n``); the
real server runs in tests/engines/remote/llamacpp (``make llamacpp-test``), which CI leaves out for its build time, so
the reading rules are pinned here too.
"""

from __future__ import annotations

import json

import httpx
import pytest

from guardrail.engines.remote.backends import Submission, WithheldTokens, api_named
from guardrail.engines.remote.backends.llamacpp import _pieces, _whole
from guardrail.engines.remote.backends.vllm import BAN_BIAS
from guardrail.engines.remote.client import UpstreamError
from guardrail.params import SamplingParams


def submission(params: SamplingParams, **fields) -> Submission:
    base = {"model": "m", "prompt": [1, 2, 3], "params": params, "max_tokens": 16, "always_banned": frozenset({7}),
            "position": 0, "submissions": 0, "end_ids": frozenset({2})}
    return Submission(**{**base, **fields})


def test_llamacpp_bans_are_exact_and_a_client_bias_never_lifts_one():
    body = api_named("llamacpp").body(submission(SamplingParams(logit_bias={7: 5.0, 9: 1.5})))
    assert body["logit_bias"] == [[9, 1.5], [7, False]]
    assert body["prompt"] == [1, 2, 3] and body["n_predict"] == 16 and body["return_tokens"] and body["cache_prompt"]
    assert body["stream"] is True


def test_llamacpp_min_tokens_bans_the_end_ids_until_enough_tokens_are_kept():
    params = SamplingParams(min_tokens=4)
    early = api_named("llamacpp").body(submission(params, position=3))
    late = api_named("llamacpp").body(submission(params, position=4))
    assert [2, False] in early["logit_bias"] and [2, False] not in late["logit_bias"]


def test_llamacpp_short_requests_are_answered_whole_and_seeds_move_per_request():
    body = api_named("llamacpp").body(submission(SamplingParams(seed=2**32 - 1), whole=True, submissions=2))
    assert body["stream"] is False and body["seed"] == 1


def test_vllm_bans_are_the_clamped_bias():
    body = api_named("vllm").body(submission(SamplingParams(logit_bias={7: 5.0}), position=2))
    assert body["logit_bias"] == {"7": BAN_BIAS} and body["stop_token_ids"] == [2] and body["return_token_ids"]
    assert "vllm_xargs" not in body


def test_without_per_position_bans_a_repick_bans_its_ids_for_the_whole_request():
    stock = api_named("vllm", "off").body(submission(SamplingParams(), position_bans=frozenset({5, 6})))
    assert stock["logit_bias"] == {"5": BAN_BIAS, "6": BAN_BIAS, "7": BAN_BIAS}
    llamacpp = api_named("llamacpp").body(submission(SamplingParams(), position_bans=frozenset({5})))
    assert llamacpp["logit_bias"] == [[5, False], [7, False]]


def test_through_guardrails_logits_processor_bans_are_exact_masks_and_a_repick_holds_one_position():
    api = api_named("vllm")  # in_request: the engine's choice when check() found the processor (real: gateway/)
    body = api.body(submission(SamplingParams(logit_bias={7: 5.0, 9: 1.5}), position_bans=frozenset({6, 5}), in_request=True))
    guard = json.loads(body["vllm_xargs"]["guardrail"])  # vllm_xargs values are scalars: the object as JSON
    assert guard == {"mask": "bans", "always_banned": [7], "bans": {"0": [5, 6]}}
    assert body["logit_bias"] == {"7": 5.0, "9": 1.5}  # the client's; -inf masks outweigh any finite bias
    plain = api.body(submission(SamplingParams(), in_request=True))
    assert json.loads(plain["vllm_xargs"]["guardrail"]) == {"mask": "bans", "always_banned": [7]}


def test_the_logits_processor_mode_is_checked():
    with pytest.raises(ValueError, match="must be one of"):
        api_named("vllm", "sometimes")
    with pytest.raises(ValueError, match="needs vLLM's server"):
        api_named("llamacpp", "on")
    assert api_named("llamacpp", "auto").repick_in_request is False


def chunk(tokens: list[int], predicted: int, **more) -> dict:
    return {"content": "", "tokens": tokens, "stop": False, "tokens_predicted": predicted, **more}


def test_a_llamacpp_stream_reads_ids_up_to_its_stop_chunk():
    chunks = [chunk([], 0), chunk([11], 1), chunk([12], 2),
              chunk([], 2, stop=True, stop_type="limit", timings={"cache_n": 30})]
    pieces = list(_pieces(iter(chunks)))
    assert [t for p in pieces for t in p.token_ids] == [11, 12]
    assert pieces[-1].finish_reason == "length" and pieces[-1].cached_tokens == 30


def test_ids_a_llamacpp_stream_held_back_stop_the_reading_before_the_chunk_that_shows_the_gap():
    # Token 3 ended inside a UTF-8 character: no chunk; the next chunk carries only token 4's id.
    chunks = iter([chunk([11], 1), chunk([12], 2), chunk([14], 4), chunk([15], 5)])
    read: list[int] = []
    with pytest.raises(WithheldTokens) as caught:
        for piece in _pieces(chunks):
            read.extend(piece.token_ids)
    assert read == [11, 12] and caught.value.missing == 1


def test_a_llamacpp_stream_whose_last_ids_were_held_back_raises_at_its_stop_chunk():
    with pytest.raises(WithheldTokens):
        list(_pieces(iter([chunk([11], 1), chunk([], 2, stop=True, stop_type="limit")])))


def test_a_llamacpp_stream_cut_before_its_stop_chunk_is_a_broken_connection():
    with pytest.raises(httpx.RemoteProtocolError):
        list(_pieces(iter([chunk([11], 1)])))


def test_a_whole_llamacpp_answer_must_hold_every_id_it_decoded():
    piece = _whole({"tokens": [5, 6], "tokens_predicted": 2, "stop_type": "eos"})
    assert list(piece.token_ids) == [5, 6] and piece.finish_reason == "stop"
    with pytest.raises(UpstreamError, match="decoded 3 tokens but returned 2"):
        _whole({"tokens": [5, 6], "tokens_predicted": 3, "stop_type": "limit"})


def test_an_sglang_upstream_is_driven_as_vllms_api_with_a_warning(caplog):
    from guardrail.engines.remote.backends import detect
    from guardrail.engines.remote.client import UpstreamClient

    # detect() reads the /v1/models card only for SGLang: no request reaches this unroutable address.
    client = UpstreamClient("http://127.0.0.1:9", max_connections=1, connect_timeout_s=0.1, read_timeout_s=0.1,
                            retries=0)
    try:
        with caplog.at_level("WARNING", logger="guardrail.engines.remote"):
            assert detect(client, {"id": "m", "owned_by": "sglang"}) == "vllm"
    finally:
        client.close()
    assert "untested against a real SGLang server" in caplog.text
