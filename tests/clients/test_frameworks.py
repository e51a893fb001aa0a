"""The agent frameworks and helpers built on the ``openai`` library, each the way its documentation calls tools and
structured output, streamed and not, a banned term in every request: LangChain's ``bind_tools(tool_choice=name)``
and ``with_structured_output``, the OpenAI Agents SDK with ``tool_choice="required"`` (the Responses API, its
default, and chat completions streamed), pydantic-ai's default ``output_type`` (an output tool) and instructor's
``TOOLS`` mode (a named function)."""

from __future__ import annotations

import asyncio

import pytest
from helpers.clients import ASK, BANNED, MAX_TOKENS, assert_valid_arguments
from helpers.service import CLIENT_KEY
from pydantic import BaseModel

GUARD = {"banned_terms": BANNED}
#: A structured answer the model gives in a few tokens (the banned city stays in play, unasked).
CITY_PROMPT = "Name a city in Japan and its country."


class City(BaseModel):
    """A city and the country it is in."""

    name: str
    country: str


def get_weather(city: str) -> str:
    """Get the current weather in a city.

    Args:
        city: The city name.
    """
    return f"Sunny in {city}."


# -- LangChain ----------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def chat_model(base_url, model):
    from langchain_openai import ChatOpenAI

    return ChatOpenAI(model=model, base_url=base_url, api_key=CLIENT_KEY, temperature=0, max_tokens=MAX_TOKENS,
                      max_retries=0, timeout=600, extra_body=GUARD)


def test_langchain_bind_tools_with_a_named_tool_choice(chat_model):
    bound = chat_model.bind_tools([get_weather], tool_choice="get_weather")
    [call] = bound.invoke(ASK).tool_calls
    assert call["name"] == "get_weather" and call["id"]
    assert_valid_arguments(call["args"])
    chunks = list(bound.stream(ASK))
    assert len([c for c in chunks if c.tool_call_chunks]) > 1  # the arguments arrive in pieces
    gathered = chunks[0]
    for chunk in chunks[1:]:
        gathered += chunk
    assert gathered.tool_calls[0]["args"] == call["args"]  # greedy: the same call streamed


def test_langchain_with_structured_output(chat_model):
    city = chat_model.with_structured_output(City).invoke(CITY_PROMPT)
    assert isinstance(city, City)


# -- OpenAI Agents SDK --------------------------------------------------------------------------------------------


def _weather_agent(model_object, seen: list[str]):
    from agents import Agent, ModelSettings, function_tool

    @function_tool
    def weather(city: str) -> str:
        """Get the current weather in a city.

        Args:
            city: The city name.
        """
        seen.append(city)
        return f"Sunny in {city}."

    return Agent(name="weather", instructions="Answer questions about the weather with the tool.", tools=[weather],
                 model=model_object, tool_use_behavior="stop_on_first_tool",
                 model_settings=ModelSettings(tool_choice="required", temperature=0, max_tokens=MAX_TOKENS,
                                              extra_body=GUARD))


@pytest.fixture
def agents_client(base_url):
    """An async client per test: each run drives its own event loop (``run_sync``, ``asyncio.run``)."""
    from agents import set_tracing_disabled
    from openai import AsyncOpenAI

    set_tracing_disabled(True)
    return AsyncOpenAI(base_url=base_url, api_key=CLIENT_KEY, max_retries=0, timeout=600)


def test_the_agents_sdk_calls_a_required_tool_through_the_responses_api(agents_client, model):
    from agents import OpenAIResponsesModel, Runner

    seen: list[str] = []
    result = Runner.run_sync(_weather_agent(OpenAIResponsesModel(model, agents_client), seen), ASK)
    assert len(seen) == 1 and result.final_output == f"Sunny in {seen[0]}."
    assert_valid_arguments({"city": seen[0]})


def test_the_agents_sdk_streams_a_required_tool_through_chat_completions(agents_client, model):
    from agents import OpenAIChatCompletionsModel, Runner

    seen: list[str] = []

    async def run() -> object:
        result = Runner.run_streamed(_weather_agent(OpenAIChatCompletionsModel(model, agents_client), seen), ASK)
        async for _ in result.stream_events():
            pass
        return result.final_output

    assert asyncio.run(run()) == f"Sunny in {seen[0]}." and len(seen) == 1
    assert_valid_arguments({"city": seen[0]})


# -- pydantic-ai ----------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def city_agent(base_url, model):
    from pydantic_ai import Agent
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    chat = OpenAIChatModel(model, provider=OpenAIProvider(base_url=base_url, api_key=CLIENT_KEY))
    return Agent(chat, output_type=City, retries={"output": 0, "tools": 0},
                 model_settings={"temperature": 0, "max_tokens": MAX_TOKENS, "extra_body": GUARD})


def test_pydantic_ai_default_output_type(city_agent):
    assert isinstance(city_agent.run_sync(CITY_PROMPT).output, City)


def test_pydantic_ai_streams_its_output(city_agent):
    async def run() -> City:
        async with city_agent.run_stream(CITY_PROMPT) as result:
            return await result.get_output()

    assert isinstance(asyncio.run(run()), City)


# -- instructor -----------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def instructor_client(base_url):
    import instructor
    from openai import OpenAI

    return instructor.from_openai(OpenAI(base_url=base_url, api_key=CLIENT_KEY, max_retries=0, timeout=600),
                                  mode=instructor.Mode.TOOLS)


def test_instructor_tools_mode(instructor_client, model):
    request = {"model": model, "messages": [{"role": "user", "content": CITY_PROMPT}],
               "temperature": 0, "max_tokens": MAX_TOKENS, "max_retries": 0, "extra_body": GUARD}
    assert isinstance(instructor_client.chat.completions.create(response_model=City, **request), City)
    # Partial[City] (every field optional) is another tool for the model: its answer may differ, not its shape.
    partials = list(instructor_client.chat.completions.create_partial(response_model=City, **request))
    assert len(partials) > 1 and City.model_validate(partials[-1].model_dump())

