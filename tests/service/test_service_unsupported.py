"""One place refuses the request fields the service does not implement (service.generation.reject_unsupported):
the shared OpenAI/vLLM fields and each endpoint's own, always 400 ``unsupported_parameter`` naming the field."""

from __future__ import annotations

import pytest

from service.errors import ApiError
from service.generation import reject_unsupported
from service.schemas.generation import ChatCompletionRequest, CompletionRequest

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
TEXT = {"model": "m", "prompt": "hi"}


@pytest.mark.parametrize(("request_type", "body", "field"), [
    (ChatCompletionRequest, {**CHAT, "functions": [{"name": "f"}]}, "functions"),  # tools are supported: the old API is not
    (ChatCompletionRequest, {**CHAT, "response_format": {"type": "grammar"}}, "response_format"),
    (CompletionRequest, {**TEXT, "response_format": {"type": "regex"}}, "response_format"),
    (ChatCompletionRequest, {**CHAT, "prompt_logprobs": 1}, "prompt_logprobs"),
    (ChatCompletionRequest, {**CHAT, "guided_regex": "[a-z]+"}, "guided_regex"),
    (CompletionRequest, {**TEXT, "echo": True}, "echo"),
    (CompletionRequest, {**TEXT, "suffix": "!"}, "suffix"),
    (CompletionRequest, {**TEXT, "best_of": 2}, "best_of"),
    (CompletionRequest, {**TEXT, "prompt_logprobs": 1}, "prompt_logprobs"),
])
def test_an_unsupported_field_is_refused_with_400_naming_it(request_type, body, field):
    with pytest.raises(ApiError) as failure:
        reject_unsupported(request_type.model_validate(body))
    assert (failure.value.status, failure.value.param, failure.value.code) == (400, field, "unsupported_parameter")
    assert field in str(failure.value)


@pytest.mark.parametrize(("request_type", "body"), [
    (ChatCompletionRequest, {**CHAT, "tools": [], "response_format": {"type": "text"}, "logprobs": False}),
    (ChatCompletionRequest, {**CHAT, "response_format": {"type": "json_object"}, "guided_json": {"type": "object"}}),
    (CompletionRequest, {**TEXT, "echo": False, "suffix": "", "best_of": 1}),
])
def test_defaults_and_their_equivalents_pass(request_type, body):
    reject_unsupported(request_type.model_validate(body))  # raises on failure
    assert request_type.model_validate(body).unsupported_field() is None
