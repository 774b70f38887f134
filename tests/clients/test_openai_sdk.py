"""The `openai` SDK's own helpers against ``furca serve``: the async client and its SSE
parser, ``chat.completions.parse`` / ``.stream`` with pydantic models, pydantic function
tools, and typed errors. (Plain request/response shapes through the SDK are covered in
tests/server/test_openai_api.py; this module drives the SDK paths other clients build on.)

Outputs are constrained to schemas whose every field is bounded (enums, booleans, short
strings), so a small ``max_tokens`` always holds a complete answer.
"""

from __future__ import annotations

import asyncio
import json
from typing import Annotated, Literal

import jsonschema
import pytest
from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from tests.clients.support import import_client
from tests.conftest import CLIENT_TIMEOUT

openai = import_client("openai")

pytestmark = pytest.mark.default_model

ASK = [{"role": "user", "content": "Name a fruit."}]


class Fruit(BaseModel):
    name: str = Field(max_length=12)
    color: Literal["red", "green", "yellow"]
    ripe: bool


class GetWeather(BaseModel):
    """Get the current weather in a city."""

    city: Literal["Paris", "London", "Tokyo"]
    unit: Literal["celsius", "fahrenheit"]


WEATHER_Q = [{"role": "user", "content": "What is the weather in Paris, in celsius?"}]


@pytest.fixture(scope="module")
def client(base_url, api_key):
    return openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=0, timeout=CLIENT_TIMEOUT)


def test_async_client_chat_and_stream_with_usage(base_url, api_key, model):
    async def go():
        async with openai.AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=0, timeout=CLIENT_TIMEOUT) as ac:
            whole = await ac.chat.completions.create(model=model, messages=ASK, max_tokens=6, temperature=0)
            stream = await ac.chat.completions.create(model=model, messages=ASK, max_tokens=6, temperature=0,
                                                      stream=True, stream_options={"include_usage": True})
            return whole, [chunk async for chunk in stream]

    whole, chunks = asyncio.run(go())
    assert whole.object == "chat.completion" and whole.choices[0].message.role == "assistant"
    assert whole.usage.total_tokens == whole.usage.prompt_tokens + whole.usage.completion_tokens
    assert all(c.object == "chat.completion.chunk" and c.id == chunks[0].id for c in chunks)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content  # greedy: the stream says the same
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == whole.usage.completion_tokens
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes == [whole.choices[0].finish_reason]


def test_completions_n_and_logprobs(client, model):
    r = client.completions.create(model=model, prompt="One, two,", max_tokens=4, n=2, temperature=0.9, seed=5,
                                  logprobs=3)
    assert r.object == "text_completion" and [c.index for c in r.choices] == [0, 1]
    for c in r.choices:
        lp = c.logprobs
        assert "".join(lp.tokens) == c.text and len(lp.tokens) == len(lp.token_logprobs)
        assert all(x <= 0 for x in lp.token_logprobs) and all(1 <= len(t) <= 3 for t in lp.top_logprobs)
        assert lp.text_offset == sorted(lp.text_offset)
    assert r.usage.completion_tokens == sum(len(c.logprobs.tokens) for c in r.choices)


def test_chat_logprobs_top_is_greedy_pick(client, model):
    r = client.chat.completions.create(model=model, messages=ASK, max_tokens=5, temperature=0, logprobs=True,
                                       top_logprobs=2)
    content = r.choices[0].logprobs.content
    assert "".join(t.token for t in content) == r.choices[0].message.content
    for t in content:
        assert len(t.top_logprobs) == 2 and t.top_logprobs[0].logprob >= t.top_logprobs[1].logprob
        assert t.top_logprobs[0].token == t.token and abs(t.top_logprobs[0].logprob - t.logprob) < 1e-4


def test_parse_with_a_pydantic_model(client, model):
    """``parse`` sends ``json_schema`` strict, built from the model, and validates the answer."""
    r = client.chat.completions.parse(model=model, messages=ASK, response_format=Fruit, max_tokens=40,
                                      temperature=0.7, seed=1, n=2)
    for c in r.choices:
        assert c.finish_reason == "stop", c.message.content
        assert isinstance(c.message.parsed, Fruit) and c.message.refusal is None
        assert Fruit.model_validate_json(c.message.content) == c.message.parsed


def test_stream_helper_with_a_pydantic_model(client, model):
    with client.chat.completions.stream(model=model, messages=ASK, response_format=Fruit, max_tokens=40,
                                        temperature=0) as stream:
        events = [e.type for e in stream]
        final = stream.get_final_completion()
    assert "content.delta" in events and events.count("content.done") == 1
    assert isinstance(final.choices[0].message.parsed, Fruit)


class Tags(BaseModel):
    tags: set[Annotated[str, StringConstraints(max_length=8)]] = Field(min_length=3, max_length=4)
    ids: set[int] = Field(min_length=2, max_length=3)


def test_parse_a_set_keeps_its_items_distinct(client, model):
    """pydantic's ``set[str]`` / ``set[int]`` are ``uniqueItems`` over strings / integers:
    the server compiles them (the matcher keeps each array's items distinct) and the items
    come out distinct even when asked for repeats (here: ids [7, 71, 717]). pydantic would merge repeats into the set silently, so the
    raw JSON is checked."""
    ask = [{"role": "user", "content": "Give the tag red, then red again, then red again; ids 7, 7 and 7."}]
    r = client.chat.completions.parse(model=model, messages=ask, response_format=Tags, max_tokens=60, temperature=0)
    c = r.choices[0]
    assert c.finish_reason == "stop", c.message.content
    out = json.loads(c.message.content)
    tags, ids = out["tags"], out["ids"]
    assert 3 <= len(tags) == len(set(tags)) <= 4 and 2 <= len(ids) == len(set(ids)) <= 3
    assert isinstance(c.message.parsed, Tags)


class Point(BaseModel):
    model_config = ConfigDict(frozen=True)
    x: int
    y: int


class Route(BaseModel):
    stops: set[Point] = Field(min_length=3, max_length=3)


def test_parse_a_set_of_objects_keeps_them_distinct(client, model):
    """``set[FrozenModel]`` is uniqueItems over objects: the server compiles it (the
    matcher compares the items as values) and three stops come out distinct even when
    asked for the same one three times. The raw JSON is checked (pydantic would merge
    equal points silently)."""
    ask = [{"role": "user", "content": "Give a route whose three stops are all the point x=1, y=2."}]
    r = client.chat.completions.parse(model=model, messages=ask, response_format=Route, max_tokens=60, temperature=0)
    c = r.choices[0]
    assert c.finish_reason == "stop", c.message.content
    stops = json.loads(c.message.content)["stops"]
    assert len(stops) == 3 and len({(p["x"], p["y"]) for p in stops}) == 3, stops
    jsonschema.validate(json.loads(c.message.content), Route.model_json_schema())
    assert isinstance(c.message.parsed, Route)


def test_member_order_any_through_extra_body(client, model):
    """furca's ``member_order`` request field (sent with the SDK's extra_body): a
    json_schema whose members may come in any order, each key once. The finished answer
    is valid with no key twice; a value the field does not take is a 400 naming it."""
    schema = {"type": "object", "properties": {"color": {"enum": ["red", "green", "yellow"]},
                                               "name": {"type": "string", "maxLength": 12}, "ripe": {"type": "boolean"}},
              "required": ["name", "color"], "additionalProperties": False}
    fmt = {"type": "json_schema", "json_schema": {"name": "fruit", "schema": schema}}
    r = client.chat.completions.create(model=model, messages=ASK, response_format=fmt, max_tokens=40, temperature=0,
                                       extra_body={"member_order": "any"})
    c = r.choices[0]
    assert c.finish_reason == "stop", c.message.content
    pairs = json.loads(c.message.content, object_pairs_hook=lambda kv: kv)
    assert len({k for k, _ in pairs}) == len(pairs)
    jsonschema.validate(json.loads(c.message.content), schema)
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=model, messages=ASK, response_format=fmt, max_tokens=4,
                                       extra_body={"member_order": "sorted"})
    assert e.value.status_code == 400 and "member_order" in str(e.value.body)


@pytest.mark.parametrize("tool_choice", [
    {"type": "function", "function": {"name": "GetWeather"}},
    "required",
])
def test_pydantic_function_tool_parsed_arguments(client, model, tool_choice):
    r = client.chat.completions.parse(model=model, messages=WEATHER_Q, tools=[openai.pydantic_function_tool(GetWeather)],
                                      tool_choice=tool_choice, max_tokens=40, temperature=0)
    c = r.choices[0]
    assert c.finish_reason == "tool_calls" and len(c.message.tool_calls) == 1
    call = c.message.tool_calls[0]
    assert call.id and call.type == "function" and call.function.name == "GetWeather"
    assert isinstance(call.function.parsed_arguments, GetWeather)


def test_tool_auto_then_round_trip(client, model):
    """``auto`` answers a tool call or text, both well formed; a tool result sent back
    (assistant message with tool_calls + role "tool") gets an answer."""
    tools = [openai.pydantic_function_tool(GetWeather)]
    auto = client.chat.completions.create(model=model, messages=WEATHER_Q, tools=tools, tool_choice="auto",
                                          max_tokens=40, temperature=0)
    c = auto.choices[0]
    if c.message.tool_calls:
        assert c.finish_reason == "tool_calls"
        for call in c.message.tool_calls:
            GetWeather.model_validate_json(call.function.arguments)
    else:
        assert c.finish_reason in ("stop", "length") and c.message.content
    forced = client.chat.completions.create(model=model, messages=WEATHER_Q, tools=tools, max_tokens=40,
                                            temperature=0, tool_choice="required")
    call = forced.choices[0].message.tool_calls[0]
    args = GetWeather.model_validate_json(call.function.arguments)
    messages = WEATHER_Q + [
        forced.choices[0].message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": json.dumps({"city": args.city, "temperature": 21})},
    ]
    answer = client.chat.completions.create(model=model, messages=messages, tools=tools, tool_choice="none",
                                            max_tokens=8, temperature=0)
    assert answer.choices[0].message.content and not answer.choices[0].message.tool_calls


def test_typed_errors(client, base_url, model):
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=model, messages=ASK, max_tokens=4, temperature=-1)
    assert e.value.status_code == 400 and e.value.param == "temperature" and e.value.body["message"]
    with pytest.raises(openai.NotFoundError) as e:
        client.chat.completions.create(model="no-such-model", messages=ASK, max_tokens=4)
    assert e.value.code == "model_not_found"
    wrong_key = openai.OpenAI(base_url=base_url, api_key="sk-wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        wrong_key.chat.completions.create(model=model, messages=ASK, max_tokens=4)
