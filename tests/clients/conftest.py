"""The client conformance suite's setup: the real client libraries (``openai``, ``anthropic``, ``langchain-openai``,
``openai-agents``, ``pydantic-ai``, ``instructor``) against the one service of the test session
(:mod:`helpers.service_fixtures`: SmolLM2, the bundled Hermes template for tools, the real Redis store).

Each library is used the way its documentation calls tools and structured output, streamed and not, with a
banned term in play (:data:`helpers.clients.BANNED`: the city the model names); a library's own error on the server's answer
fails the test (no retries: ``max_retries`` 0, ``output_retries`` 0). Nothing leaves the machine: every client
gets the service's ``base_url`` and a test key, and the libraries' telemetry is off (the variables below, set
before any of them is imported).
"""

from __future__ import annotations

import os

import pytest
from helpers.service import CLIENT_KEY, MODEL

# Before the libraries are imported: keys for clients that want one at construction, no tracing export (the
# Agents SDK sends traces to OpenAI by default; LangSmith and Logfire only when asked, said here all the same).
for _name, _value in {"OPENAI_API_KEY": CLIENT_KEY, "ANTHROPIC_API_KEY": CLIENT_KEY,
                      "OPENAI_AGENTS_DISABLE_TRACING": "1", "OPENAI_AGENTS_DONT_LOG_MODEL_DATA": "1",
                      "LANGCHAIN_TRACING_V2": "false", "LANGSMITH_TRACING": "false", "LOGFIRE_SEND_TO_LOGFIRE": "false",
                      "DO_NOT_TRACK": "1"}.items():
    os.environ[_name] = _value


@pytest.fixture(scope="session")
def base_url(service) -> str:
    """The OpenAI-style base URL of the session's service (``.../v1``)."""
    return f"{service.base_url}/v1"


@pytest.fixture(scope="session")
def model() -> str:
    return MODEL
