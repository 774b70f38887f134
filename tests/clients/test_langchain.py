"""langchain-openai's ``ChatOpenAI`` against ``furca serve``: ``invoke``, ``stream`` (with
usage), ``with_structured_output`` in each of its methods, and ``bind_tools`` with a
``ToolMessage`` round trip."""

from __future__ import annotations

import json
from typing import Literal

import pytest
from pydantic import BaseModel, Field

from tests.clients.support import import_client
from tests.conftest import CLIENT_TIMEOUT

langchain_openai = import_client("langchain_openai")
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage  # noqa: E402
from langchain_core.tools import tool  # noqa: E402

pytestmark = pytest.mark.default_model


class Fruit(BaseModel):
    """A fruit and its color."""

    name: str = Field(max_length=12)
    color: Literal["red", "green", "yellow"]


@tool
def get_weather(city: Literal["Paris", "London", "Tokyo"], unit: Literal["celsius", "fahrenheit"]) -> str:
    """Get the current weather in a city."""
    return json.dumps({"city": city, "temperature": 21, "unit": unit})


@pytest.fixture(scope="module")
def llm(base_url, api_key, model):
    return langchain_openai.ChatOpenAI(base_url=base_url, api_key=api_key, model=model, temperature=0,
                                       max_tokens=40, max_retries=0, timeout=CLIENT_TIMEOUT)


def test_invoke(llm, model):
    msg = llm.invoke("Name a fruit.", max_tokens=6)
    assert isinstance(msg, AIMessage) and msg.content
    assert msg.response_metadata["finish_reason"] in ("stop", "length")
    assert msg.response_metadata["model_name"] == model
    usage = msg.usage_metadata
    assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"] and usage["output_tokens"] <= 6


def test_stream_matches_invoke_and_carries_usage(llm):
    whole = llm.invoke("Name a fruit.", max_tokens=6)
    chunks = list(llm.stream("Name a fruit.", max_tokens=6, stream_usage=True))
    assert len(chunks) > 1
    merged = chunks[0]
    for c in chunks[1:]:
        merged = merged + c
    assert merged.content == whole.content  # greedy: same text either way
    assert merged.usage_metadata["output_tokens"] == whole.usage_metadata["output_tokens"]
    assert merged.response_metadata["finish_reason"] == whole.response_metadata["finish_reason"]


@pytest.mark.parametrize("method", ["json_schema", "function_calling"])
def test_structured_output_pydantic(llm, method):
    structured = llm.with_structured_output(Fruit, method=method, include_raw=True)
    out = structured.invoke("Name a fruit and its color.")
    assert out["parsing_error"] is None, out["raw"]
    assert isinstance(out["parsed"], Fruit)
    if method == "function_calling":  # the schema went out as a forced tool call
        assert out["raw"].tool_calls[0]["name"] == "Fruit"


def test_structured_output_json_mode(llm):
    """``json_mode`` sends ``response_format: json_object`` (no schema reaches the server):
    the answer must be a JSON object, whatever its keys."""
    schema = {"title": "fruit", "description": "A fruit", "type": "object",
              "properties": {"name": {"type": "string"}}, "required": ["name"]}
    structured = llm.with_structured_output(schema, method="json_mode", include_raw=True)
    out = structured.invoke([HumanMessage('Answer in JSON like {"name": "apple"}. Name a fruit.')], max_tokens=24)
    assert out["raw"].response_metadata["finish_reason"] == "stop", out["raw"]
    assert out["parsing_error"] is None and isinstance(out["parsed"], dict), out["raw"].content
    assert json.loads(out["raw"].content) == out["parsed"]


def test_bind_tools_round_trip(llm):
    question = HumanMessage("What is the weather in Paris, in celsius?")
    ai = llm.bind_tools([get_weather], tool_choice="get_weather").invoke([question])
    assert ai.response_metadata["finish_reason"] == "tool_calls" and not ai.invalid_tool_calls
    [call] = ai.tool_calls
    assert call["name"] == "get_weather" and call["id"]
    result = get_weather.invoke(call)  # a ToolMessage answering this call id
    assert isinstance(result, ToolMessage) and result.tool_call_id == call["id"]
    final = llm.bind_tools([get_weather]).invoke([question, ai, result], max_tokens=12)
    assert isinstance(final, AIMessage) and (final.content or final.tool_calls)


def test_bind_tools_auto_is_well_formed(llm):
    ai = llm.bind_tools([get_weather]).invoke("What is the weather in Tokyo, in fahrenheit?")
    assert not ai.invalid_tool_calls, ai.invalid_tool_calls
    for call in ai.tool_calls:
        assert call["name"] == "get_weather" and set(call["args"]) == {"city", "unit"}
    assert ai.tool_calls or ai.content
