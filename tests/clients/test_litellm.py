"""LiteLLM's ``completion`` against ``furca serve`` (``model="openai/<served name>"``,
``api_base``): plain, streamed with usage, ``response_format`` from a pydantic model,
a tool call, and its exception mapping.

Offline by construction: ``LITELLM_LOCAL_MODEL_COST_MAP=True`` (set in conftest before
the import) keeps the cost map from being fetched, token counting uses the tiktoken
encodings litellm bundles, and the conftest's network guard fails a test on any lookup
past loopback.
"""

from __future__ import annotations

import json
from typing import Literal

import pytest
from pydantic import BaseModel, Field

from tests.clients.support import import_client
from tests.conftest import CLIENT_TIMEOUT

litellm = import_client("litellm")

pytestmark = [
    pytest.mark.default_model,
    # litellm's own pydantic models: not furca's concern
    pytest.mark.filterwarnings("ignore:.*ReadOnly. qualifier:UserWarning"),
    pytest.mark.filterwarnings("ignore::pydantic.warnings.PydanticDeprecatedSince211"),
]

ASK = [{"role": "user", "content": "Name a fruit."}]


class Fruit(BaseModel):
    name: str = Field(max_length=12)
    color: Literal["red", "green", "yellow"]


WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "enum": ["Paris", "London"]}},
                   "required": ["city"], "additionalProperties": False}}}


@pytest.fixture(scope="module")
def kw(base_url, api_key, model) -> dict:
    return {"model": f"openai/{model}", "api_base": base_url, "api_key": api_key, "num_retries": 0, "timeout": CLIENT_TIMEOUT}


def test_completion_and_usage(kw, model):
    r = litellm.completion(messages=ASK, max_tokens=6, temperature=0, **kw)
    c = r.choices[0]
    assert c.message.role == "assistant" and c.message.content and c.finish_reason in ("stop", "length")
    assert r.model.endswith(model)
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens
    assert 1 <= r.usage.completion_tokens <= 6


def test_streamed_completion_matches(kw):
    whole = litellm.completion(messages=ASK, max_tokens=6, temperature=0, **kw)
    chunks = list(litellm.completion(messages=ASK, max_tokens=6, temperature=0, stream=True,
                                     stream_options={"include_usage": True}, **kw))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content
    rebuilt = litellm.stream_chunk_builder(chunks, messages=ASK)
    assert rebuilt.choices[0].message.content == text
    assert rebuilt.usage.completion_tokens == whole.usage.completion_tokens


def test_response_format_pydantic_model(kw):
    r = litellm.completion(messages=[{"role": "user", "content": "Name a fruit and its color."}],
                           response_format=Fruit, max_tokens=40, temperature=0, **kw)
    assert r.choices[0].finish_reason == "stop"
    assert isinstance(Fruit.model_validate_json(r.choices[0].message.content), Fruit)


def test_named_tool_call(kw):
    r = litellm.completion(messages=[{"role": "user", "content": "Weather in Paris?"}], tools=[WEATHER_TOOL],
                           tool_choice={"type": "function", "function": {"name": "get_weather"}},
                           max_tokens=30, temperature=0, **kw)
    [call] = r.choices[0].message.tool_calls
    assert call.id and call.function.name == "get_weather"
    assert json.loads(call.function.arguments)["city"] in ("Paris", "London")


def test_token_counter_is_offline():
    """litellm counts OpenAI-style tokens with its bundled tiktoken files (the network
    guard would fail this test if tiktoken tried to download an encoding)."""
    n = litellm.token_counter(model="gpt-4o", messages=ASK)
    assert 3 <= n <= 20


def test_exceptions_are_mapped(kw):
    with pytest.raises(litellm.BadRequestError) as e:
        litellm.completion(messages=ASK, max_tokens=4, temperature=-1, **kw)
    assert "temperature" in str(e.value)
    with pytest.raises(litellm.AuthenticationError):
        litellm.completion(messages=ASK, max_tokens=4, **{**kw, "api_key": "sk-wrong"})
