"""The field cap of request objects that keep unknown fields (service/schemas/open_object.py), and the 400 the
service answers for a body beyond it (the abuse suite's body of unknown keys, issue 31)."""

from __future__ import annotations

import pytest
from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError

from service.errors import validation_response
from service.schemas.generation import ChatCompletionRequest, FunctionDefinition
from service.schemas.messages import CountTokensRequest
from service.schemas.open_object import MAX_FIELDS

CHAT = {"model": "m", "messages": [{"role": "user", "content": "Hi"}]}


def _padded(body: dict, total: int) -> dict:
    return body | {f"k{i:07d}": 0 for i in range(total - len(body))}


@pytest.mark.parametrize("model, body", [
    (ChatCompletionRequest, CHAT),
    (CountTokensRequest, CHAT),
    (FunctionDefinition, {"name": "f"}),
])
def test_an_object_holds_at_most_max_fields_unknown_ones_included(model, body):
    kept = model.model_validate(_padded(body, MAX_FIELDS))
    assert len(kept.model_extra or {}) == MAX_FIELDS - len(body)  # unknown fields kept up to the cap
    with pytest.raises(ValidationError) as refused:
        model.model_validate(_padded(body, MAX_FIELDS + 1))
    assert f"{MAX_FIELDS + 1:,} fields" in str(refused.value) and f"at most {MAX_FIELDS}" in str(refused.value)


def test_a_body_beyond_the_cap_is_a_400_that_says_why():
    with pytest.raises(ValidationError) as refused:
        ChatCompletionRequest.model_validate(_padded(CHAT, 100_000))
    errors = [{**e, "loc": ("body", *e["loc"])} for e in refused.value.errors()]
    response = validation_response(RequestValidationError(errors))
    assert response.status_code == 400
    assert b"100,000 fields" in response.body and b"invalid_value" in response.body
