"""Schema size limits (service/schema_limits.py): bytes, nesting and object keys, each a 400 naming the field."""

from __future__ import annotations

import pytest

from guardrail.grammar.format import StructuredOutput
from service.errors import ApiError
from service.schema_limits import check_schema, check_structured_output
from service.settings import Settings

SETTINGS = Settings(max_schema_bytes=1000, max_schema_depth=4, max_schema_properties=10)


def refusal(schema, param="tools.1.function.parameters") -> ApiError:
    with pytest.raises(ApiError) as caught:
        check_schema(schema, param, SETTINGS)
    assert (caught.value.status, caught.value.param, caught.value.code) == (400, param, "schema_too_large")
    return caught.value


def test_a_schema_within_the_limits_passes():
    check_schema({"type": "object", "properties": {"a": {"type": "string"}}}, "response_format", SETTINGS)


def test_each_limit_is_a_400_naming_the_field_and_the_setting():
    padded = {"type": "object", "description": "x" * 2000}
    assert "GUARDRAIL_MAX_SCHEMA_BYTES" in refusal(padded).message
    deep: dict = {"type": "string"}
    for _ in range(5):
        deep = {"type": "array", "items": deep}
    assert "GUARDRAIL_MAX_SCHEMA_DEPTH" in refusal(deep).message
    wide = {"type": "object", "properties": {f"p{i}": {} for i in range(11)}}
    assert "GUARDRAIL_MAX_SCHEMA_PROPERTIES" in refusal(wide).message


def test_a_structured_output_is_measured_by_its_text():
    spec = StructuredOutput("json_schema", '{"type": "object", "description": "' + "x" * 2000 + '"}')
    with pytest.raises(ApiError) as caught:
        check_structured_output(spec, "text.format", SETTINGS)
    assert caught.value.param == "text.format" and "bytes" in caught.value.message
