"""``logprobs`` / ``top_logprobs`` (chat) and ``logprobs`` (completions), driven with the official ``openai``
client against the real service (SmolLM2): the records are the delivered tokens' — never a rolled-back one's —
in order, and their tokens spell the delivered text, streamed or not (docs/service.md, "Logprobs")."""

from __future__ import annotations

import openai
import pytest
from helpers.service import MODEL
from helpers.service_client import GREEDY, error_of

from guardrail.matching.textmatch import TextMatcher
from guardrail.wordlists.wordlist import wordlist_from_terms

pytestmark = pytest.mark.slow

TEXT = {"model": MODEL, "prompt": "The capital of France is", "temperature": 0, "max_tokens": 12}


def streamed_chat(stream) -> tuple[str, list, list[str]]:
    """(content, logprob records, finish reasons) of a streamed chat completion."""
    content, records, reasons = "", [], []
    for chunk in stream:
        for choice in chunk.choices:
            content += choice.delta.content or ""
            if choice.logprobs is not None:
                records += choice.logprobs.content
            if choice.finish_reason is not None:
                reasons.append(choice.finish_reason)
    return content, records, reasons


def test_chat_logprobs_are_the_delivered_tokens_with_their_most_likely_alternatives(openai_client):
    answer = openai_client.chat.completions.create(**GREEDY, logprobs=True, top_logprobs=3)
    choice = answer.choices[0]
    records = choice.logprobs.content
    assert "".join(r.token for r in records) == choice.message.content
    assert len(records) == answer.usage.completion_tokens  # EOS ended it: no record, no text
    for record in records:
        assert record.logprob <= 0 and bytes(record.bytes).decode() == record.token
        assert len(record.top_logprobs) == 3
        assert [t.logprob for t in record.top_logprobs] == sorted((t.logprob for t in record.top_logprobs),
                                                                  reverse=True)
        # Greedy over the raw distribution (no processor, nothing banned here): the pick is the top one.
        assert record.top_logprobs[0].token == record.token
        assert record.top_logprobs[0].logprob == pytest.approx(record.logprob)


def test_streamed_chat_logprobs_equal_the_whole_answers(openai_client):
    whole = openai_client.chat.completions.create(**GREEDY, logprobs=True, top_logprobs=2).choices[0]
    content, records, reasons = streamed_chat(
        openai_client.chat.completions.create(**GREEDY, logprobs=True, top_logprobs=2, stream=True))
    assert reasons == ["stop"] and content == whole.message.content
    assert "".join(r.token for r in records) == content
    assert [(r.token, r.bytes) for r in records] == [(r.token, r.bytes) for r in whole.logprobs.content]
    assert [r.logprob for r in records] == pytest.approx([r.logprob for r in whole.logprobs.content], abs=1e-4)


def test_without_logprobs_asked_there_are_none(openai_client):
    choice = openai_client.chat.completions.create(**GREEDY).choices[0]
    assert choice.logprobs is None
    _, records, _ = streamed_chat(openai_client.chat.completions.create(**GREEDY, stream=True))
    assert records == []


def test_no_rolled_back_token_appears_in_the_logprobs(openai_client):
    request = {**GREEDY, "extra_body": {"banned_terms": ["Paris"]}, "logprobs": True, "top_logprobs": 5}
    answer = openai_client.chat.completions.create(**request)
    assert answer.usage.model_extra["rollbacks"] >= 1  # the model said " Paris": it was rolled back
    records = answer.choices[0].logprobs.content
    content = answer.choices[0].message.content
    assert "".join(r.token for r in records) == content
    assert len(records) == answer.usage.completion_tokens  # kept tokens only (rolled-back ones do not count)
    verifier = TextMatcher([wordlist_from_terms(["Paris"])])
    assert verifier.scan(content) == []
    for record in records:
        assert "Paris" not in record.token
        for alternative in record.top_logprobs:  # no alternative shows the term either
            assert verifier.scan(alternative.token) == [], alternative
    # Streamed: the same records, each with the chunk that releases its text.
    streamed, streamed_records, _ = streamed_chat(openai_client.chat.completions.create(**request, stream=True))
    assert streamed == content
    assert [r.token for r in streamed_records] == [r.token for r in records]


def test_text_completion_logprobs_in_the_legacy_shape(openai_client):
    answer = openai_client.completions.create(**TEXT, logprobs=2)
    choice = answer.choices[0]
    logprobs = choice.logprobs
    assert "".join(logprobs.tokens) == choice.text and len(logprobs.tokens) == answer.usage.completion_tokens
    assert len(logprobs.token_logprobs) == len(logprobs.top_logprobs) == len(logprobs.tokens)
    assert logprobs.text_offset == [len("".join(logprobs.tokens[:i])) for i in range(len(logprobs.tokens))]
    for token, logprob, top in zip(logprobs.tokens, logprobs.token_logprobs, logprobs.top_logprobs):
        assert 1 <= len(top) <= 2 and max(top.values()) == pytest.approx(logprob) and top[token] == pytest.approx(logprob)
    chunks = list(openai_client.completions.create(**TEXT, logprobs=2, stream=True))
    tokens = [t for c in chunks for choice in c.choices if choice.logprobs for t in choice.logprobs.tokens]
    offsets = [o for c in chunks for choice in c.choices if choice.logprobs for o in choice.logprobs.text_offset]
    assert "".join(c.choices[0].text for c in chunks) == choice.text
    assert tokens == logprobs.tokens and offsets == logprobs.text_offset


@pytest.mark.parametrize(("request_fields", "param"), [
    ({"logprobs": True, "top_logprobs": 21}, "top_logprobs"),
    ({"top_logprobs": 2}, "top_logprobs"),  # OpenAI's rule: top_logprobs needs logprobs: true
    ({"logprobs": False, "top_logprobs": 0}, "top_logprobs"),
])
def test_bad_chat_logprobs_fields_are_refused_naming_the_field(openai_client, request_fields, param):
    with pytest.raises(openai.BadRequestError) as failure:
        openai_client.chat.completions.create(**GREEDY, **request_fields)
    assert error_of(failure.value)["param"] == param


@pytest.mark.parametrize("value", [21, -1, True])
def test_bad_completions_logprobs_are_refused_naming_the_field(openai_client, value):
    with pytest.raises(openai.BadRequestError) as failure:
        openai_client.completions.create(**TEXT, extra_body={"logprobs": value})
    assert error_of(failure.value)["param"] == "logprobs"
