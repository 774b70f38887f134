"""Errors a person can read: bad request fields get one plain sentence and a ``param``
that names the field (``messages[0].content[1]``), never pydantic's union internals;
routes furca does not serve get an OpenAI-shaped 404 that lists the ones it does."""

from __future__ import annotations

import asyncio
import re

import httpx
import pytest

from furca.server import ServerArgs, create_app

U = [{"role": "user", "content": "hi"}]
# what pydantic's union errors look like: a member type in the location, or its words
INTERNALS = re.compile(r"\.(str|int|list\[|dict\[|literal\[)|list\[|literal\[|function-after|Value error|"
                       r"valid dictionary or instance|NamedToolChoice|ContentPart|ChatMessage|ResponseFormat")


@pytest.fixture(scope="module")
def engine(tiny_model):
    from furca.runtime.engine import Engine

    with Engine(tiny_model, max_total_tokens=1024) as e:
        yield e


def call(engine, requests):
    async def main():
        app = create_app(engine, args=ServerArgs())
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://test", timeout=60) as c:
                return [await c.request(m, p, json=b) for m, p, b in requests]

    return asyncio.run(main())


def image(i=1):
    return {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}}


CHAT = "/v1/chat/completions"
CASES = [
    # (path, body, param, words the message must contain)
    (CHAT, {"messages": [{"role": "user", "content": [{"type": "text", "text": "What is this?"}, image()]}]},
     "messages[0].content[1]", "image inputs are not supported by this model"),
    (CHAT, {"messages": [{"role": "user", "content": [{"type": "input_audio", "input_audio": {}}]}]},
     "messages[0].content[0]", "audio inputs are not supported"),
    (CHAT, {"messages": U + [{"role": "user", "content": [{"type": "file", "file": {}}]}]},
     "messages[1].content[0]", "file inputs are not supported"),
    (CHAT, {"messages": [{"role": "user", "content": [{"type": "hologram"}]}]},
     "messages[0].content[0].type", "unknown content part type 'hologram'"),
    (CHAT, {"messages": [{"role": "user", "content": [{"type": "text"}]}]},
     "messages[0].content[0].text", "must be a string"),
    (CHAT, {"messages": [{"role": "user", "content": 5}]}, "messages[0].content", "content must be a string"),
    (CHAT, {"messages": ["hi"]}, "messages[0]", "must be a JSON object"),
    (CHAT, {"messages": U, "tool_choice": "sometimes"}, "tool_choice", '"none", "auto", "required"'),
    (CHAT, {"messages": U, "tool_choice": {"type": "function"}}, "tool_choice.function.name", "is missing"),
    (CHAT, {"messages": U, "tool_choice": {"type": "retrieval", "function": {"name": "f"}}}, "tool_choice.type",
     'must be "function"'),
    (CHAT, {"messages": U, "function_call": 3}, "function_call", '"none", "auto" or {"name": ...}'),
    (CHAT, {"messages": U, "stop": 5}, "stop", "a string or a list of strings"),
    (CHAT, {"messages": U, "stop": ["a", 1]}, "stop", "a string or a list of strings"),
    (CHAT, {"messages": U, "response_format": "json"}, "response_format", "must be an object with a type"),
    (CHAT, {"messages": U, "response_format": {"type": "xml"}}, "response_format.type", "'json_schema'"),
    (CHAT, {"messages": U, "json_schema": 5}, "json_schema", "JSON Schema object"),
    (CHAT, {"messages": U, "logit_bias": {"five": 1}}, "logit_bias", "token ids"),
    (CHAT, {"messages": U, "regex": "a", "ebnf": "root ::= \"a\""}, "ebnf", "at most one constraint"),
    (CHAT, {"messages": U, "tools": [{"type": "function", "function": {"name": "a b"}}]},
     "tools[0].function.name", "pattern"),
    (CHAT, {"messages": [{"role": "user"}]}, "messages[0].content", "needs content"),
    (CHAT, {}, "messages", "required"),
    ("/v1/completions", {"prompt": 5}, "prompt", "a string, a list of strings, a list of token ids"),
    ("/v1/completions", {"prompt": None}, "prompt", "a string, a list of strings"),
    ("/v1/completions", {"prompt": [1.5]}, "prompt", "a list of token ids"),
    ("/v1/completions", {"prompt": [[1, 2], [3, "a"]]}, "prompt[1]", "prompt[1] must be a list of token ids"),
    ("/v1/completions", {"prompt": ["a", 2]}, "prompt[1]", "prompt[1] must be a string"),
    ("/v1/completions", {"prompt": []}, "prompt", "must not be empty"),
    ("/v1/completions", {"prompt": "x", "suffix": "y"}, "suffix", "not supported"),
    ("/generate", {"text": 5}, "text", "text must be a string or a list of strings"),
    ("/generate", {"input_ids": [[1], "a"]}, "input_ids", "a list of token ids or a list of token-id lists"),
    ("/generate", {"text": "a", "sampling_params": 3}, "sampling_params", "an object or a list of objects"),
    ("/tokenize", {"prompt": 3}, "prompt", "a string or a list of strings"),
]


def test_bad_fields_get_a_plain_sentence_naming_the_field(engine):
    answers = call(engine, [("POST", path, body) for path, body, _, _ in CASES])
    for (path, body, param, words), r in zip(CASES, answers):
        assert r.status_code == 400, (body, r.text)
        err = r.json()["error"]
        assert set(err) == {"message", "type", "param", "code"}
        assert err["param"] == param, (body, err)
        assert words in err["message"], (body, err)
        assert not INTERNALS.search(err["message"] + (err["param"] or "")), (body, err)


def test_a_request_body_that_is_not_json_is_400(engine):
    async def main():
        app = create_app(engine, args=ServerArgs())
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://test") as c:
                return await c.post(CHAT, content=b"{not json", headers={"content-type": "application/json"})

    r = asyncio.run(main())
    assert r.status_code == 400 and "not valid JSON" in r.json()["error"]["message"]


@pytest.mark.parametrize("method, path", [
    ("POST", "/v1/embeddings"), ("POST", "/v1/responses"), ("POST", "/v1/audio/transcriptions"),
    ("POST", "/v1/images/generations"), ("GET", "/v1/files"), ("POST", "/v1/moderations"),
])
def test_routes_furca_does_not_serve_are_openai_shaped_404s(engine, method, path):
    (r,) = call(engine, [(method, path, {"input": "x"} if method == "POST" else None)])
    assert r.status_code == 404
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["code"] == "unknown_route"
    assert f"{method} {path} is not served by furca" in err["message"]
    for served in ("/v1/chat/completions", "/v1/completions", "/v1/models", "/generate"):
        assert served in err["message"]


def test_a_wrong_method_is_405_in_the_same_shape(engine):
    (r,) = call(engine, [("GET", CHAT, None)])
    assert r.status_code == 405 and r.json()["error"]["message"] == f"GET {CHAT}: method not allowed"
