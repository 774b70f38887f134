"""pydantic-ai (``pydantic-ai-slim[openai]``, ``OpenAIChatModel`` + ``OpenAIProvider``)
against ``furca serve``: an agent with a function tool and a structured output.

Which tool a 135M model picks is its own wisdom, so the agent's settings name the tool per
step (``tool_choice=[name]``, a list pydantic-ai sends as a named ``tool_choice``): step 1
calls ``get_weather``, step 2 the output tool ``final_result``. The protocol under test:
forced calls come back as tool calls, the tool result goes back as a ``tool`` message, the
output tool's arguments validate into the output type, in plain and streamed runs.
"""

from __future__ import annotations

import asyncio
from typing import Literal

import pytest
from pydantic import BaseModel, Field

from tests.clients.support import import_client

pydantic_ai = import_client("pydantic_ai")
from pydantic_ai.messages import ModelRequest, ModelResponse, ToolCallPart, ToolReturnPart  # noqa: E402
from pydantic_ai.models.openai import OpenAIChatModel  # noqa: E402
from pydantic_ai.providers.openai import OpenAIProvider  # noqa: E402
from pydantic_ai.usage import UsageLimits  # noqa: E402

pytestmark = pytest.mark.default_model

TEMPERATURE_C = 21
QUESTION = "What is the temperature in Paris?"


class Weather(BaseModel):
    city: Literal["Paris", "London", "Tokyo"]
    temperature: int = Field(ge=-50, le=50)


def forced_steps(ctx) -> dict:
    """Step 1 must call the function tool; later steps the output tool."""
    return {"max_tokens": 48, "temperature": 0,
            "tool_choice": ["get_weather"] if ctx.run_step == 1 else ["final_result"]}


@pytest.fixture
def agent_and_calls(base_url, api_key, model):
    chat_model = OpenAIChatModel(model, provider=OpenAIProvider(base_url=base_url, api_key=api_key))
    agent = pydantic_ai.Agent(chat_model, output_type=Weather, model_settings=forced_steps,
                              instructions="Use the tools to answer.")
    calls: list[str] = []

    @agent.tool_plain
    def get_weather(city: Literal["Paris", "London", "Tokyo"]) -> int:
        """The current temperature in a city, in celsius."""
        calls.append(city)
        return TEMPERATURE_C

    return agent, calls


def check_history(messages, calls: list[str]) -> None:
    """Every tool call the server returned is answered by a return with its id."""
    made = [p for m in messages if isinstance(m, ModelResponse) for p in m.parts if isinstance(p, ToolCallPart)]
    returned = {p.tool_call_id: p.tool_name for m in messages if isinstance(m, ModelRequest) for p in m.parts
                if isinstance(p, ToolReturnPart)}
    assert [p.tool_name for p in made] == ["get_weather", "final_result"]
    assert all(p.tool_call_id and returned.get(p.tool_call_id) == p.tool_name for p in made)
    assert len(calls) == 1 and made[0].args_as_dict() == {"city": calls[0]}


def test_agent_with_a_tool_and_structured_output(agent_and_calls):
    agent, calls = agent_and_calls
    result = agent.run_sync(QUESTION, usage_limits=UsageLimits(request_limit=3))
    assert isinstance(result.output, Weather)
    check_history(result.all_messages(), calls)
    usage = result.usage
    assert usage.requests == 2 and usage.tool_calls == 1 and usage.input_tokens > 0 and usage.output_tokens > 0


def test_streamed_agent_run(agent_and_calls):
    agent, calls = agent_and_calls

    async def go():
        async with agent.run_stream(QUESTION, usage_limits=UsageLimits(request_limit=3)) as run:
            partials = [p async for p in run.stream_output(debounce_by=None)]
            return partials, await run.get_output(), run.all_messages()

    partials, output, messages = asyncio.run(go())
    assert isinstance(output, Weather) and partials and partials[-1] == output
    check_history(messages, calls)
