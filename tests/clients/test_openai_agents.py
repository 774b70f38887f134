"""openai-agents against ``furca serve`` through its chat-completions model class
(``OpenAIChatCompletionsModel`` over an ``AsyncOpenAI`` pointed at furca; its default
talks the Responses API, which furca does not serve). Tracing is disabled: it would ship
spans to api.openai.com.

The agent's ``tool_choice`` names the tool and ``tool_use_behavior="stop_on_first_tool"``
makes the tool's result the final output, so the run does not depend on the model's
choice; a structured ``output_type`` goes out as a strict ``json_schema``.
"""

from __future__ import annotations

import asyncio
import json
from typing import Literal

import pytest
from pydantic import BaseModel

from tests.clients.support import import_client
from tests.conftest import CLIENT_TIMEOUT

agents = import_client("agents")
import openai  # noqa: E402

pytestmark = pytest.mark.default_model

QUESTION = "What is the weather in Paris, in celsius?"


class Fruit(BaseModel):
    name: Literal["apple", "banana", "cherry"]
    ripe: bool


@pytest.fixture
def chat_model(base_url, api_key, model):
    agents.set_tracing_disabled(True)
    client = openai.AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=0, timeout=CLIENT_TIMEOUT)
    return agents.OpenAIChatCompletionsModel(model=model, openai_client=client)


@pytest.fixture
def weather_agent(chat_model):
    calls: list[dict] = []

    @agents.function_tool
    def get_weather(city: Literal["Paris", "London", "Tokyo"], unit: Literal["celsius", "fahrenheit"]) -> str:
        """Get the current weather in a city."""
        calls.append({"city": city, "unit": unit})
        return json.dumps({"city": city, "temperature": 21, "unit": unit})

    agent = agents.Agent(name="weather", instructions="Answer with the tools.", model=chat_model,
                         tools=[get_weather], tool_use_behavior="stop_on_first_tool",
                         model_settings=agents.ModelSettings(tool_choice="get_weather", max_tokens=40, temperature=0))
    return agent, calls


def test_function_tool_call_runs_the_tool(weather_agent):
    agent, calls = weather_agent
    result = agents.Runner.run_sync(agent, QUESTION, max_turns=2)
    assert len(calls) == 1
    assert json.loads(result.final_output) == {**calls[0], "temperature": 21}
    kinds = [item.type for item in result.new_items]
    assert kinds == ["tool_call_item", "tool_call_output_item"]
    assert result.new_items[0].raw_item.call_id == result.new_items[1].raw_item["call_id"]
    assert sum(r.usage.output_tokens for r in result.raw_responses) > 0


def test_streamed_run_reports_the_tool_events(weather_agent):
    agent, calls = weather_agent

    async def go():
        run = agents.Runner.run_streamed(agent, QUESTION, max_turns=2)
        events = [e async for e in run.stream_events()]
        return run, events

    run, events = asyncio.run(go())
    names = [e.name for e in events if e.type == "run_item_stream_event"]
    assert names == ["tool_called", "tool_output"] and len(calls) == 1
    assert json.loads(run.final_output)["city"] == calls[0]["city"]


def test_structured_output_type(chat_model):
    agent = agents.Agent(name="fruit", instructions="Name a fruit.", model=chat_model, output_type=Fruit,
                         model_settings=agents.ModelSettings(max_tokens=32, temperature=0))
    result = agents.Runner.run_sync(agent, "Name a fruit.", max_turns=1)
    assert isinstance(result.final_output, Fruit)
