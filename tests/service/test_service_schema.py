"""Property-based tests of the service from its own OpenAPI schema (schemathesis): whatever a client
sends, the answer is never a 5xx, errors keep OpenAI's shape, and the generation endpoints answer with
documented status codes, content types and bodies (no drift between the schema and the service)."""

from __future__ import annotations

import copy

import pytest
import schemathesis
from helpers.service import ADMIN_TOKEN, CLIENT_KEY, MODEL
from hypothesis import HealthCheck, Phase, settings
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)

pytestmark = pytest.mark.slow

EXAMPLES_PER_OPERATION = 12  # ~7 operations: well under a minute on 2 cores
# Each example a few tokens at most; no shrinking (each step would generate again): a failure reports the
# example as generated.
GENERATION_EXAMPLES_PER_OPERATION = 10
# Every run draws the same cases: the suite's Hypothesis profile (tests/conftest.py) sets ``derandomize``, so
# Hypothesis seeds each operation's test from the test function and schemathesis adds no per-run seed of its
# own; a failure in CI fails the same way here. The cost: no new cases from run to run; raise the example
# counts to explore more (or HYPOTHESIS_PROFILE=dev).


def openapi_document() -> dict:
    """The schema of an app built (not started: no model) with the test server's settings."""
    from service.app import create_app
    from service.settings import Settings

    return create_app(Settings(admin_token=ADMIN_TOKEN, api_keys=[CLIENT_KEY],
                               redis_url="redis://127.0.0.1:6379/0")).openapi()


# Loaded at collection from the app object: schemathesis's lazy fixture loader does not run under the
# pytest version pinned here; the calls go to the live shared server.
schema = schemathesis.openapi.from_dict(openapi_document()).include(path_regex=r"^/(admin/|v1/(check|moderations)$)")


@pytest.fixture(scope="module")
def restored_default_list(service):
    """A generated PUT may replace the default list: it is put back afterwards."""
    english = service.admin("GET", "/admin/wordlists/en").json()
    yield service
    service.admin("PUT", "/admin/wordlists/en", json={"terms": english["terms"], "allow": english["allow"]})


@schema.parametrize()
@settings(max_examples=EXAMPLES_PER_OPERATION, deadline=None, suppress_health_check=list(HealthCheck))
def test_no_input_makes_the_admin_or_check_api_fail_with_a_5xx(case, restored_default_list):
    token = CLIENT_KEY if case.path.startswith("/v1/") else ADMIN_TOKEN
    response = case.call(base_url=restored_default_list.base_url, headers={"Authorization": f"Bearer {token}"},
                         timeout=30)
    assert response.status_code < 500, (case.method, case.path, response.text[:500])
    if response.status_code >= 400:  # OpenAI's error shape (/v1/messages, Anthropic's, is in the test below)
        assert set(response.json()["error"]) == {"message", "type", "param", "code"}


def test_each_listing_endpoint_keeps_its_own_schema_name_for_the_shared_list_envelope():
    schemas = openapi_document()["components"]["schemas"]
    for name, item in {"ModelList": "ModelCard", "WordListIndex": "WordListSummary", "AuditLog": "AuditOut",
                       "TenantIndex": "TenantOut", "TenantAuditLog": "TenantAuditOut"}.items():
        assert schemas[name]["properties"]["data"]["items"] == {"$ref": f"#/components/schemas/{item}"}
        assert schemas[name]["properties"]["object"]["const"] == "list"
    assert not [name for name in schemas if name.startswith("ListOf")]  # no generic name leaks into clients


# -- the generation endpoints, with examples bounded so that each one costs at most a few tokens -----------


def bounded_generation_document() -> dict:
    """The OpenAPI document with the generation requests' costly fields narrowed (the schema under test
    is otherwise the app's own): at most 4 tokens and 2 choices, short texts, few terms, the served model
    or an unknown one."""
    document = copy.deepcopy(openapi_document())
    small_int = {"type": "integer", "minimum": 1, "maximum": 4}  # never null: the server's default is 24
    short_text = {"type": "string", "maxLength": 40}
    schemas = document["components"]["schemas"]
    for name in ("ChatCompletionRequest", "CompletionRequest", "ResponsesRequest", "MessagesRequest"):
        properties = schemas[name]["properties"]
        properties["model"] = {"enum": [MODEL, "not-served"]}
        properties["max_tokens"] = small_int
        schemas[name]["required"] = sorted({*schemas[name].get("required", []), "max_tokens"})
        properties["n"] = {"type": "integer", "minimum": 1, "maximum": 2}
        properties["min_tokens"] = {"anyOf": [{"type": "integer", "minimum": 0, "maximum": 4}, {"type": "null"}]}
        for field in ("banned_terms", "bad_words", "banned_strings", "stop_token_ids"):
            properties[field] = {"anyOf": [{"type": "array", "items": short_text, "maxItems": 3}, {"type": "null"}]}
        properties["stop_token_ids"]["anyOf"][0]["items"] = {"type": "integer", "minimum": 0, "maximum": 100}
    schemas["ChatCompletionRequest"]["properties"]["max_completion_tokens"] = small_int
    schemas["ChatCompletionRequest"]["properties"]["messages"]["maxItems"] = 3
    schemas["ChatMessage"]["properties"]["content"] = {"anyOf": [short_text, {"type": "null"}]}
    schemas["ChatCompletionRequest"]["properties"]["tools"] = {"anyOf": [
        {"type": "array", "items": {"$ref": "#/components/schemas/ToolDefinition"}, "maxItems": 2}, {"type": "null"}]}
    responses = schemas["ResponsesRequest"]
    responses["properties"]["max_output_tokens"] = small_int
    responses["required"] = sorted({*responses["required"], "max_output_tokens"})
    responses["properties"]["input"] = {"anyOf": [short_text, {
        "type": "array", "items": {"$ref": "#/components/schemas/InputMessage"}, "minItems": 1, "maxItems": 3}]}
    responses["properties"]["instructions"] = {"anyOf": [short_text, {"type": "null"}]}
    schemas["InputMessage"]["properties"]["content"] = short_text
    schemas["CompletionRequest"]["properties"]["prompt"] = {"anyOf": [
        short_text, {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 49151},
                     "minItems": 1, "maxItems": 8}]}
    messages = schemas["MessagesRequest"]["properties"]
    messages["messages"]["maxItems"] = 3
    messages["system"] = {"anyOf": [short_text, {"type": "null"}]}
    messages["stop_sequences"] = {"anyOf": [{"type": "array", "items": {**short_text, "minLength": 1},
                                             "maxItems": 2}, {"type": "null"}]}
    messages["tools"] = {"anyOf": [{"type": "array", "items": {"$ref": "#/components/schemas/ToolParam"},
                                    "maxItems": 2}, {"type": "null"}]}
    responses["properties"]["tools"] = {"anyOf": [
        {"type": "array", "items": {"$ref": "#/components/schemas/FunctionTool"}, "maxItems": 2}, {"type": "null"}]}
    return document


generation_schema = schemathesis.openapi.from_dict(bounded_generation_document()).include(
    path_regex=r"^/v1/((chat/)?completions|responses|messages)$")


@generation_schema.parametrize()
@settings(max_examples=GENERATION_EXAMPLES_PER_OPERATION, deadline=None, suppress_health_check=list(HealthCheck),
          phases=[Phase.explicit, Phase.generate])
def test_no_generation_request_fails_with_a_5xx_or_answers_off_its_schema(case, service):
    response = case.call_and_validate(
        base_url=service.base_url, headers={"Authorization": f"Bearer {CLIENT_KEY}"}, timeout=120,
        checks=[not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance])
    # Anthropic's error shape from the route; a method it does not take (405) is answered by the router, as elsewhere.
    if response.status_code >= 400 and case.path == "/v1/messages" and response.status_code != 405:
        assert response.json().get("type") == "error", (response.status_code, response.text[:500])
        assert set(response.json()["error"]) == {"message", "type", "param"}
    elif response.status_code >= 400:
        assert set(response.json()["error"]) == {"message", "type", "param", "code"}
