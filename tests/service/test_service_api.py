"""The OpenAI-compatible API, driven with the official ``openai`` client against the real service
(SmolLM2, Redis store): answers, streaming, banned terms, finish reasons, extensions and error shapes."""

from __future__ import annotations

import openai
import pytest
from helpers.service import CLIENT_KEY, MODEL, PROMPT
from helpers.service_client import GREEDY, collect_stream, error_of

from guardrail.matching.textmatch import TextMatcher
from guardrail.wordlists.wordlist import wordlist_from_terms

pytestmark = pytest.mark.slow

def test_models_lists_the_served_model(openai_client):
    assert [m.id for m in openai_client.models.list().data] == [MODEL]


def test_chat_completion_answers_with_usage_that_counts_rollbacks(openai_client):
    answer = openai_client.chat.completions.create(**GREEDY)
    choice = answer.choices[0]
    assert choice.finish_reason == "stop"
    assert choice.message.role == "assistant" and "Paris" in choice.message.content
    usage = answer.usage
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens
    assert usage.model_extra["rollbacks"] == 0
    # A pass per kept token, less the drafted tokens accepted without one (speculative decoding).
    assert usage.model_extra["forward_passes"] >= usage.completion_tokens - usage.model_extra["accepted_draft_tokens"]
    assert usage.model_extra["accepted_draft_tokens"] <= usage.model_extra["draft_tokens"]
    assert usage.prompt_tokens_details.cached_tokens <= usage.prompt_tokens


def test_streamed_chat_sends_the_same_answer_in_chunks(openai_client):
    whole = openai_client.chat.completions.create(**GREEDY).choices[0].message.content
    stream = openai_client.chat.completions.create(**GREEDY, stream=True, stream_options={"include_usage": True})
    pieces, reasons, usage = collect_stream(stream)
    assert "".join(pieces) == whole
    assert len(pieces) > 1
    assert reasons == ["stop"]
    assert usage.completion_tokens > 0


def test_a_banned_term_the_model_would_say_never_reaches_the_client(openai_client):
    unguarded = openai_client.chat.completions.create(**GREEDY).choices[0].message.content
    assert "Paris" in unguarded  # the model does say it...
    verifier = TextMatcher([wordlist_from_terms(["Paris"])])
    stream = openai_client.chat.completions.create(
        **GREEDY, stream=True, stream_options={"include_usage": True}, extra_body={"banned_terms": ["Paris"]})
    pieces, reasons, usage = collect_stream(stream)
    sent = ""
    for piece in pieces:  # ...but no prefix of what the client received ever contains it
        sent += piece
        assert verifier.scan(sent) == [], sent
    assert usage.model_extra["rollbacks"] >= 1
    assert reasons == ["stop"]
    # Nothing sent was retracted: the stream is exactly the final answer of the same request.
    final = openai_client.chat.completions.create(**GREEDY, extra_body={"banned_terms": ["Paris"]})
    assert sent == final.choices[0].message.content
    assert sent.startswith("The capital of France is")


@pytest.mark.parametrize("field", ["bad_words", "banned_strings"])
def test_vllm_and_tabbyapi_field_names_ban_terms_too(openai_client, field):
    answer = openai_client.chat.completions.create(**GREEDY, extra_body={field: ["Paris"]})
    assert "paris" not in answer.choices[0].message.content.lower()
    assert answer.usage.model_extra["rollbacks"] >= 1


def test_an_empty_wordlists_field_generates_without_lists(openai_client):
    answer = openai_client.chat.completions.create(**GREEDY, extra_body={"wordlists": []})
    assert "Paris" in answer.choices[0].message.content


def test_a_term_with_options_bans_by_prefix(openai_client):
    term = {"text": "Par", "match": "prefix", "case_sensitive": True}
    answer = openai_client.chat.completions.create(**GREEDY, extra_body={"banned_terms": [term]})
    assert "Par" not in answer.choices[0].message.content


def test_a_spent_rollback_budget_ends_before_the_term_with_content_filter(openai_client):
    answer = openai_client.chat.completions.create(
        **GREEDY, extra_body={"banned_terms": ["Paris"], "max_rollbacks": 0})
    choice = answer.choices[0]
    assert choice.finish_reason == "content_filter"
    assert choice.message.content.rstrip() == "The capital of France is"


def test_text_completion_stops_at_max_tokens_with_length(openai_client):
    answer = openai_client.completions.create(model=MODEL, prompt="The capital of France is", max_tokens=4,
                                              temperature=0)
    assert answer.choices[0].finish_reason == "length"
    assert answer.usage.completion_tokens == 4
    stream = openai_client.completions.create(model=MODEL, prompt="The capital of France is", max_tokens=4,
                                              temperature=0, stream=True)
    chunks = list(stream)
    assert "".join(c.choices[0].text for c in chunks) == answer.choices[0].text
    assert chunks[-1].choices[0].finish_reason == "length"


def test_a_stop_string_ends_the_answer_without_it(openai_client):
    answer = openai_client.chat.completions.create(**GREEDY, stop=[" Paris"])
    assert answer.choices[0].finish_reason == "stop"
    assert answer.choices[0].message.content == "The capital of France is"


def test_n_choices_are_generated_one_after_another(openai_client):
    answer = openai_client.chat.completions.create(model=MODEL, messages=PROMPT, n=2, temperature=1.0, seed=7,
                                                   max_tokens=6)
    assert [c.index for c in answer.choices] == [0, 1]
    assert all(c.finish_reason in ("stop", "length") and c.message.content for c in answer.choices)
    assert 2 <= answer.usage.completion_tokens <= 12  # both choices counted, each at most max_tokens


def test_logit_bias_steers_the_model(openai_client, service):
    token = service.runtime.tokenizer.encode(" banana", add_special_tokens=False)[0]
    answer = openai_client.chat.completions.create(**{**GREEDY, "max_tokens": 2}, logit_bias={str(token): 100})
    assert answer.choices[0].message.content.startswith(" banana")


def test_a_watermarked_answer_is_detected_and_a_plain_one_is_not(openai_client, service):
    request = {"model": MODEL, "messages": [{"role": "user", "content": "Write a short story about a cat."}],
               "temperature": 1.0, "seed": 3, "max_tokens": 64}
    marked = openai_client.chat.completions.create(**request, extra_body={"watermark": True})
    plain = openai_client.chat.completions.create(**request)
    verdicts = [service.post("/v1/watermark/detect", json={"text": a.choices[0].message.content},
                             headers={"Authorization": f"Bearer {CLIENT_KEY}"}).json() for a in (marked, plain)]
    assert verdicts[0]["prediction"] is True and verdicts[0]["z_score"] > 4
    assert verdicts[1]["prediction"] is False and verdicts[1]["z_score"] < verdicts[0]["z_score"]
    assert 0 <= verdicts[0]["p_value"] < 1e-4


def test_check_reports_every_match_with_spans(service):
    text = "Well, FUCK  you, and the shitty dog."
    response = service.post("/v1/check", json={"text": text, "banned_terms": ["dog"]},
                            headers={"Authorization": f"Bearer {CLIENT_KEY}"})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["flagged"] is True
    spans = {(m["list"], m["text"]) for m in body["matches"]}
    assert ("en", "FUCK") in spans and ("request", "dog") in spans
    for match in body["matches"]:
        assert text[match["start"]:match["end"]] == match["text"]
    assert [w["name"] for w in body["wordlists"]] == ["en"]


def test_check_of_a_clean_text_is_not_flagged(service):
    response = service.post("/v1/check", json={"text": "Have a nice day.", "wordlists": ["en", "de"]},
                            headers={"Authorization": f"Bearer {CLIENT_KEY}"})
    body = response.json()
    assert (body["flagged"], body["matches"]) == (False, [])
    assert [w["name"] for w in body["wordlists"]] == ["en", "de"]
    assert all(w["version"] >= 1 for w in body["wordlists"])


# -- errors: OpenAI's shape, and a 4xx names the field --------------------------------------------------


@pytest.mark.parametrize(
    ("change", "status", "param"),
    [
        ({"messages": []}, 400, "messages"),
        ({"temperature": 5}, 400, "temperature"),
        ({"model": "gpt-4o"}, 404, "model"),
        ({"max_tokens": 10**6}, 400, "max_tokens"),
        ({"n": 99}, 400, "n"),
        ({"logit_bias": {"99999999": 5}}, 400, "logit_bias"),
        ({"logit_bias": {"12": 500}}, 400, "logit_bias.12"),
        ({"tool_choice": "required"}, 400, "tool_choice"),  # a tool call asked for, no tools given
        ({"presence_penalty": 3.0}, 400, "presence_penalty"),
        ({"extra_body": {"wordlists": ["no-such-list"]}}, 404, "wordlists"),
        ({"extra_body": {"banned_terms": ["ok", "..."]}}, 400, "banned_terms.1"),
        ({"extra_body": {"banned_terms": [{"text": "x", "match": "fuzzy"}]}}, 400, "banned_terms.0.match"),
    ],
)
def test_bad_input_is_answered_in_openai_error_shape_naming_the_field(openai_client, change, status, param):
    request = {**GREEDY, **change}
    with pytest.raises(openai.APIStatusError) as failure:
        openai_client.chat.completions.create(**request)
    assert failure.value.status_code == status
    error = error_of(failure.value)
    assert error["param"] == param, error
    # OpenAI's type for a bad request and for an unknown model; a missing word list is a missing resource.
    assert error["type"] == ("not_found_error" if param == "wordlists" else "invalid_request_error")


def test_a_wrong_api_key_is_refused(service):
    from openai import OpenAI

    client = OpenAI(base_url=f"{service.base_url}/v1", api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError) as failure:
        client.models.list()
    assert error_of(failure.value)["code"] == "invalid_api_key"


def test_unknown_routes_answer_in_the_same_shape(service):
    response = service.get("/v1/nothing-here")
    assert response.status_code == 404
    assert set(response.json()["error"]) == {"message", "type", "param", "code"}
