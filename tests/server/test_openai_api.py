"""The OpenAI-compatible API through the official `openai` client (and raw HTTP for
errors), on a live server with the default model."""

from __future__ import annotations

import json

import httpx
import jsonschema
import openai
import pytest

from tests.server.conftest import MODEL_NAME, assert_idle

pytestmark = pytest.mark.default_model

USER = [{"role": "user", "content": "Name a fruit."}]

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "enum": ["Paris", "London", "Tokyo"]},
                           "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
            "required": ["city", "unit"],
            "additionalProperties": False,
        },
    },
}
TIME_TOOL = {
    "type": "function",
    "function": {
        "name": "get_time",
        "description": "Get the local time in a timezone",
        "parameters": {"type": "object", "properties": {"tz": {"type": "string", "enum": ["UTC", "CET"]}},
                       "required": ["tz"], "additionalProperties": False},
    },
}
TOOLS = [WEATHER_TOOL, TIME_TOOL]
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
WEATHER_Q = [{"role": "user", "content": "What is the weather in Paris, in celsius?"}]


def check_call(call) -> dict:
    assert call.type == "function" and call.id
    args = json.loads(call.function.arguments)
    jsonschema.validate(args, SCHEMAS[call.function.name])
    return args


def test_models(client):
    models = client.models.list()
    assert [m.id for m in models.data] == [MODEL_NAME]
    assert client.models.retrieve(MODEL_NAME).id == MODEL_NAME
    assert client.models.retrieve("default").id == MODEL_NAME  # the alias; answers carry the real id
    with pytest.raises(openai.NotFoundError) as e:
        client.models.retrieve("no-such-model")
    assert e.value.body["code"] == "model_not_found"


def test_chat(client):
    r = client.chat.completions.create(model=MODEL_NAME, messages=USER, max_tokens=6, temperature=0)
    c = r.choices[0]
    assert c.message.role == "assistant" and c.message.content
    assert c.finish_reason in ("stop", "length")
    assert r.usage.prompt_tokens > 5 and 1 <= r.usage.completion_tokens <= 6
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens
    assert r.model == MODEL_NAME and r.id.startswith("chatcmpl-")
    # the same prompt again hits the radix cache
    again = client.chat.completions.create(model=MODEL_NAME, messages=USER, max_tokens=6, temperature=0)
    assert again.choices[0].message.content == c.message.content
    assert again.usage.prompt_tokens_details.cached_tokens > 0


def test_chat_streaming_usage_in_last_chunk(client):
    chunks = list(client.chat.completions.create(
        model=MODEL_NAME, messages=USER, max_tokens=5, temperature=0, stream=True,
        stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    reasons = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert len(reasons) == 1 and reasons[0] in ("stop", "length")
    last = chunks[-1]
    assert last.choices == [] and last.usage is not None
    assert all(c.usage is None for c in chunks[:-1])
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    full = client.chat.completions.create(model=MODEL_NAME, messages=USER, max_tokens=5, temperature=0)
    assert text == full.choices[0].message.content
    assert last.usage.completion_tokens == full.usage.completion_tokens


def test_chat_n2_seeded(client):
    r = client.chat.completions.create(model=MODEL_NAME, messages=USER, max_tokens=5, n=2, seed=7,
                                       temperature=1.0)
    assert [c.index for c in r.choices] == [0, 1]
    assert all(c.message.content is not None for c in r.choices)
    again = client.chat.completions.create(model=MODEL_NAME, messages=USER, max_tokens=5, n=2, seed=7,
                                           temperature=1.0)
    assert [c.message.content for c in again.choices] == [c.message.content for c in r.choices]
    # prompt tokens counted once, completion tokens summed over the samples
    one = client.chat.completions.create(model=MODEL_NAME, messages=USER, max_tokens=1)
    assert r.usage.prompt_tokens == one.usage.prompt_tokens
    assert 2 <= r.usage.completion_tokens <= 10


def test_chat_stop_and_logprobs(client):
    r = client.chat.completions.create(model=MODEL_NAME, messages=USER, max_tokens=4, temperature=0,
                                       logprobs=True, top_logprobs=3)
    lp = r.choices[0].logprobs.content
    assert len(lp) == r.usage.completion_tokens
    for tok in lp:
        assert tok.logprob <= 0 and len(tok.top_logprobs) == 3
        assert tok.top_logprobs[0].logprob >= tok.top_logprobs[-1].logprob
        assert abs(tok.top_logprobs[0].logprob - tok.logprob) < 1e-4  # greedy picks the top token
    assert "".join(t.token for t in lp) == r.choices[0].message.content


def test_json_object(client):
    r = client.chat.completions.create(
        model=MODEL_NAME, max_tokens=40, temperature=0, response_format={"type": "json_object"},
        messages=[{"role": "user", "content": "Describe a cat as JSON with keys name and age."}])
    c = r.choices[0]
    if c.finish_reason == "stop":
        assert isinstance(json.loads(c.message.content), dict)
    else:  # cut by max_tokens: still a JSON prefix starting an object
        assert c.message.content.lstrip().startswith("{")


PERSON = {
    "type": "object",
    "properties": {"name": {"type": "string", "maxLength": 12},
                   "mood": {"type": "string", "enum": ["happy", "sad"]},
                   "age": {"type": "integer", "minimum": 0, "maximum": 99}},
    "required": ["name", "mood", "age"],
    "additionalProperties": False,
}


def test_json_schema_strict_validates(client):
    r = client.chat.completions.create(
        model=MODEL_NAME, max_tokens=48, temperature=0.8, seed=3, n=3,
        messages=[{"role": "user", "content": "Invent a person."}],
        response_format={"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON, "strict": True}})
    for c in r.choices:
        assert c.finish_reason == "stop", c.message.content
        jsonschema.validate(json.loads(c.message.content), PERSON)


def test_structured_output_parse_helper(client):
    """The client's `parse` helper (what LangChain / instructor-style structured output use)."""
    from typing import Literal

    from pydantic import BaseModel, Field

    class Verdict(BaseModel):
        answer: Literal["yes", "no"]
        confidence: int = Field(ge=0, le=9)

    r = client.chat.completions.parse(model=MODEL_NAME, max_tokens=30, temperature=0, response_format=Verdict,
                                      messages=[{"role": "user", "content": "Is the sky blue?"}])
    parsed = r.choices[0].message.parsed
    assert isinstance(parsed, Verdict) and parsed.answer in ("yes", "no")


def test_tool_choice_named(client):
    r = client.chat.completions.create(model=MODEL_NAME, messages=WEATHER_Q, tools=TOOLS, max_tokens=40,
                                       temperature=0, tool_choice={"type": "function",
                                                                   "function": {"name": "get_weather"}})
    c = r.choices[0]
    assert c.finish_reason == "tool_calls" and c.message.content is None
    assert len(c.message.tool_calls) == 1 and c.message.tool_calls[0].function.name == "get_weather"
    check_call(c.message.tool_calls[0])


def test_tool_choice_required(client):
    r = client.chat.completions.create(model=MODEL_NAME, messages=WEATHER_Q, tools=TOOLS, max_tokens=60,
                                       temperature=0, tool_choice="required", parallel_tool_calls=False)
    c = r.choices[0]
    assert c.finish_reason == "tool_calls", c
    assert len(c.message.tool_calls) == 1
    check_call(c.message.tool_calls[0])


def test_tool_choice_auto(client):
    r = client.chat.completions.create(model=MODEL_NAME, messages=WEATHER_Q, tools=TOOLS, max_tokens=60,
                                       temperature=0, tool_choice="auto")
    c = r.choices[0]
    if c.message.tool_calls:  # the model called a tool: its arguments must be valid
        assert c.finish_reason == "tool_calls"
        for call in c.message.tool_calls:
            check_call(call)
    else:  # or it answered in text, which must not contain a half-parsed call
        assert c.finish_reason in ("stop", "length") and c.message.content


def test_tool_round_trip_and_streamed_call(client):
    """An assistant tool call (content null) and a tool result render (fallback
    template); a streamed named call sends its arguments as deltas of index 0."""
    messages = WEATHER_Q + [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "get_weather", "arguments": '{"city": "Paris", "unit": "celsius"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": '{"temp": 21}'},
    ]
    r = client.chat.completions.create(model=MODEL_NAME, messages=messages, tools=TOOLS, max_tokens=8,
                                       temperature=0)
    assert r.choices[0].message.content is not None or r.choices[0].message.tool_calls
    chunks = list(client.chat.completions.create(
        model=MODEL_NAME, messages=WEATHER_Q, tools=TOOLS, max_tokens=40, temperature=0, stream=True,
        tool_choice={"type": "function", "function": {"name": "get_time"}}))
    deltas = [tc for c in chunks if c.choices for tc in (c.choices[0].delta.tool_calls or [])]
    assert deltas[0].id and deltas[0].function.name == "get_time" and all(d.index == 0 for d in deltas)
    args = json.loads("".join(d.function.arguments or "" for d in deltas))
    jsonschema.validate(args, SCHEMAS["get_time"])
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["tool_calls"]


# a tool whose parameters have no additionalProperties: seeded samples once carried keys it
# does not declare ({"city": "Paris", "location": "Bordeaux"}) and get_weather(**args) raised
LOOSE_WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20},
                                                    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
                   "required": ["city"]}}}


def get_weather(city: str, unit: str = "celsius") -> str:
    return f"{city}: 21 {unit}"


@pytest.mark.parametrize("tool_choice", ["required", {"type": "function", "function": {"name": "get_weather"}}])
def test_tool_arguments_carry_only_declared_properties(client, tool_choice):
    r = client.chat.completions.create(model=MODEL_NAME, messages=WEATHER_Q, tools=[LOOSE_WEATHER], max_tokens=40,
                                       temperature=1.0, seed=11, n=3, tool_choice=tool_choice)
    calls = [call for c in r.choices for call in c.message.tool_calls or []]
    assert calls
    for call in calls:
        assert get_weather(**json.loads(call.function.arguments)).endswith(("celsius", "fahrenheit"))


def test_legacy_functions_through_the_sdk(client):
    r = client.chat.completions.create(model="default", messages=WEATHER_Q, max_tokens=40, temperature=0,
                                       functions=[WEATHER_TOOL["function"]], function_call={"name": "get_weather"})
    c = r.choices[0]
    assert c.finish_reason == "function_call" and not c.message.tool_calls
    jsonschema.validate(json.loads(c.message.function_call.arguments), SCHEMAS["get_weather"])
    assert c.message.function_call.name == "get_weather" and r.model == MODEL_NAME


def test_readme_example_and_plain_errors(client):
    """README's own call (model="default"); an image part and an unserved route say what
    is wrong."""
    r = client.chat.completions.create(model="default", messages=[{"role": "user", "content": "Hi"}], max_tokens=2)
    assert r.model == MODEL_NAME and r.system_fingerprint and r.choices[0].message.content
    image = {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}}
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="default", max_tokens=2, messages=[
            {"role": "user", "content": [{"type": "text", "text": "What is this?"}, image]}])
    assert "image inputs are not supported by this model" in e.value.body["message"]
    assert e.value.body["param"] == "messages[0].content[1]"
    with pytest.raises(openai.NotFoundError) as e:
        client.embeddings.create(model="default", input="hello")
    assert "/v1/embeddings is not served by furca" in e.value.body["message"]


def test_completions(client):
    r = client.completions.create(model=MODEL_NAME, prompt="The capital of France is", max_tokens=4,
                                  temperature=0, logprobs=2)
    c = r.choices[0]
    assert c.text and len(c.logprobs.tokens) == r.usage.completion_tokens
    assert "".join(c.logprobs.tokens) == c.text and all(len(t) <= 2 for t in c.logprobs.top_logprobs)
    batch = client.completions.create(model=MODEL_NAME, prompt=["1, 2, 3,", "a, b, c,"], max_tokens=3,
                                      temperature=0, n=2)
    assert [ch.index for ch in batch.choices] == [0, 1, 2, 3]
    assert batch.choices[0].text == batch.choices[1].text  # greedy: both samples agree
    streamed = "".join(ch.choices[0].text for ch in client.completions.create(
        model=MODEL_NAME, prompt="The capital of France is", max_tokens=4, temperature=0, stream=True)
        if ch.choices)
    assert streamed == c.text
    echo = client.completions.create(model=MODEL_NAME, prompt="Hello", max_tokens=2, temperature=0, echo=True)
    assert echo.choices[0].text.startswith("Hello")
    scored = client.completions.create(model=MODEL_NAME, prompt="The capital of France is Paris", max_tokens=0,
                                       echo=True, logprobs=1)  # how lm-evaluation-harness scores text
    lp = scored.choices[0].logprobs
    assert scored.choices[0].text == "The capital of France is Paris" == "".join(lp.tokens)
    assert lp.token_logprobs[0] is None and all(x <= 0 for x in lp.token_logprobs[1:])
    assert len(lp.tokens) == scored.usage.prompt_tokens and scored.usage.completion_tokens == 0


def test_regex_and_grammar_extras(client):
    r = client.completions.create(model=MODEL_NAME, prompt="My phone number is", max_tokens=12, temperature=0,
                                  extra_body={"regex": r"[0-9]{3}-[0-9]{4}"})
    import re

    assert re.fullmatch(r"[0-9]{3}-[0-9]{4}", r.choices[0].text), r.choices[0].text
    g = client.chat.completions.create(model=MODEL_NAME, messages=USER, max_tokens=8, temperature=0,
                                       extra_body={"ebnf": 'root ::= "apple" | "pear"'})
    assert g.choices[0].message.content in ("apple", "pear")


# -- errors (raw HTTP) ---------------------------------------------------------------------


def _err(resp: httpx.Response, status: int) -> dict:
    assert resp.status_code == status, resp.text
    body = resp.json()["error"]
    assert set(body) == {"message", "type", "param", "code"}
    return body


@pytest.mark.parametrize("body, param", [
    ({"messages": []}, "messages"),
    ({}, "messages"),
    ({"messages": [{"role": "wizard", "content": "x"}]}, None),
    ({"messages": USER, "temperature": -1}, "temperature"),
    ({"messages": USER, "max_tokens": 0}, "max_tokens"),
    ({"messages": USER, "top_logprobs": 2}, None),
    ({"messages": USER, "stream_options": {"include_usage": True}}, None),
    ({"messages": USER, "tools": []}, None),
    ({"messages": USER, "tool_choice": "required"}, None),
    ({"messages": USER, "tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}}, None),
    ({"messages": USER, "response_format": {"type": "json_schema"}}, None),
    ({"messages": USER, "regex": "a+", "ebnf": 'root ::= "a"'}, None),
    ({"messages": [{"role": "user", "content": None}]}, None),
])
def test_invalid_requests_are_400(http, body, param):
    err = _err(http.post("/v1/chat/completions", json=body), 400)
    if param:
        assert err["param"] == param


def test_context_length_error_names_both_numbers(http):
    long = "hello " * 9000
    err = _err(http.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": long}]}), 400)
    assert "8192" in err["message"] and "input tokens" in err["message"]
    err = _err(http.post("/v1/chat/completions", json={"messages": USER, "max_tokens": 8190}), 400)
    assert "8192" in err["message"] and "8190 in the completion" in err["message"]
    assert err["code"] == "context_length_exceeded"


def test_compile_errors_are_400(http):
    err = _err(http.post("/v1/chat/completions", json={"messages": USER, "regex": "(unclosed"}), 400)
    assert "regex" in err["message"].lower() or "compile" in err["message"].lower()
    err = _err(http.post("/v1/chat/completions", json={"messages": USER, "ebnf": "root ::= undefined_rule"}), 400)
    assert "undefined_rule" in err["message"]
    bad_schema = {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "no-such-type"}}}
    _err(http.post("/v1/chat/completions", json={"messages": USER, "response_format": bad_schema}), 400)


def test_auth_and_unknown_model(server, http):
    for headers in ({}, {"Authorization": "Bearer wrong"}):
        r = httpx.post(f"{server.url}/v1/chat/completions", json={"messages": USER}, headers=headers)
        assert _err(r, 401)["code"] == "invalid_api_key"
    assert httpx.get(f"{server.url}/health").status_code == 200  # health needs no key
    err = _err(http.post("/v1/chat/completions", json={"model": "gpt-4", "messages": USER, "max_tokens": 1}), 404)
    assert err["code"] == "model_not_found"
    assert_idle(http)
