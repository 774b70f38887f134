"""/openapi.json describes the server: every operation declares the error answers it can
give (OpenAI's error body, no 422: validation errors are 400s) and its success media
types (server-sent events where it streams); every numeric request field states both
bounds; what the schema calls an integer, validation takes only as an integer (no "4",
no true, no 4.5); a wrong method is a 405 whose Allow header lists the declared methods.
In-process over a tiny engine (tests/server/test_schemathesis.py fuzzes the live one)."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from furca.server import ServerArgs, create_app

U = [{"role": "user", "content": "hi"}]
HTTP_METHODS = {"get", "put", "post", "delete", "options", "head", "patch", "trace"}


@pytest.fixture(scope="module")
def engine(tiny_model):
    from furca.runtime.engine import Engine

    with Engine(tiny_model, max_total_tokens=1024) as e:
        yield e


def call(engine, requests, args: ServerArgs | None = None):
    async def main():
        app = create_app(engine, args=args or ServerArgs())
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://test", timeout=120) as c:
                return [await c.request(m, p, json=b) if b is not None else await c.request(m, p)
                        for m, p, b in requests]

    return asyncio.run(main())


@pytest.fixture(scope="module")
def doc(engine):
    (resp,) = call(engine, [("GET", "/openapi.json", None)])
    assert resp.status_code == 200
    return resp.json()


def operations(doc):
    for path, item in doc["paths"].items():
        for method, op in item.items():
            if method in HTTP_METHODS:
                yield path, method, op


def test_every_operation_declares_its_errors(doc):
    ops = list(operations(doc))
    assert len(ops) >= 14
    for path, method, op in ops:
        codes = set(op["responses"])
        assert "422" not in codes, (method, path)
        assert "200" in codes, (method, path)
        if path != "/metrics":  # answers while loading too
            assert "503" in codes, (method, path)  # loading, draining, engine gone
        if path not in ("/health", "/metrics"):  # public even with --api-key
            assert "401" in codes, (method, path)
        if method == "post":
            assert {"400", "413"} <= codes, (method, path)
        for code in codes - {"200"}:
            ref = op["responses"][code]["content"]["application/json"]["schema"]["$ref"]
            assert ref.endswith("/ErrorResponse"), (method, path, code)
    for path in ("/v1/chat/completions", "/v1/completions", "/generate"):
        assert {"404", "429"} <= set(doc["paths"][path]["post"]["responses"]) or path == "/generate"
        content = doc["paths"][path]["post"]["responses"]["200"]["content"]
        assert set(content) == {"application/json", "text/event-stream"}, path
    schemas = doc["components"]["schemas"]
    assert "HTTPValidationError" not in schemas and "ValidationError" not in schemas
    err = schemas["ErrorDetail"]
    assert set(err["properties"]) == {"message", "type", "param", "code"}


def _numbers(schema, defs, where, seen=()):
    """(where, schema) of every integer / number a request schema holds."""
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        if name not in seen:
            yield from _numbers(defs[name], defs, where, (*seen, name))
        return
    for key in ("anyOf", "oneOf", "allOf"):
        for sub in schema.get(key, []):
            yield from _numbers(sub, defs, where, seen)
    if schema.get("type") in ("integer", "number"):
        yield where, schema
    for name, sub in schema.get("properties", {}).items():
        yield from _numbers(sub, defs, f"{where}.{name}", seen)
    if isinstance(schema.get("items"), dict):
        yield from _numbers(schema["items"], defs, f"{where}[]", seen)
    if isinstance(schema.get("additionalProperties"), dict):
        yield from _numbers(schema["additionalProperties"], defs, f"{where}{{}}", seen)


def test_every_numeric_request_field_states_both_bounds(doc):
    defs = doc["components"]["schemas"]
    found = []
    for path, method, op in operations(doc):
        body = op.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema")
        if body is None:
            continue
        for where, schema in _numbers(body, defs, f"{method.upper()} {path}"):
            found.append(where)
            assert "minimum" in schema or "exclusiveMinimum" in schema, (where, schema)
            assert "maximum" in schema or "exclusiveMaximum" in schema, (where, schema)
    assert len(found) > 40  # chat, completions, /generate's sampling_params, token ids...


def test_declared_bounds(doc):
    defs = doc["components"]["schemas"]
    chat = defs["ChatCompletionRequest"]["properties"]
    n = chat["n"]
    assert (n["minimum"], n["maximum"]) == (1, 128)
    temperature = next(s for s in chat["temperature"]["anyOf"] if s.get("type") == "number")
    assert (temperature["minimum"], temperature["maximum"]) == (0, 2)
    native = defs["NativeSamplingParams"]
    assert native["additionalProperties"] is False  # unknown sampling keys are refused
    assert {"max_new_tokens", "stop_token_ids", "json_schema", "sampling_seed"} <= set(native["properties"])


@pytest.mark.parametrize("body, param", [
    ({"messages": U, "max_tokens": "4"}, "max_tokens"),
    ({"messages": U, "max_tokens": 4.5}, "max_tokens"),
    ({"messages": U, "n": True}, "n"),
    ({"messages": U, "stop_token_ids": [True]}, "stop_token_ids[0]"),
    ({"messages": U, "logprobs": 1}, "logprobs"),
    ({"messages": U, "stream": "true"}, "stream"),
    ({"messages": U, "temperature": "0.5"}, "temperature"),
    ({"messages": [{"role": "user", "content": 5}]}, "messages[0].content"),
    ({"messages": U, "model": 5}, "model"),
])
def test_no_lax_types(engine, body, param):
    (resp,) = call(engine, [("POST", "/v1/chat/completions", body)])
    assert resp.status_code == 400, resp.text
    assert resp.json()["error"]["param"] == param, resp.text


def test_json_numbers_are_one_type(engine):
    """JSON has one number type: an integer is a number where a float goes (temperature 0,
    top_p 1), and 1.0 is an integer (JSON Schema's "integer" says so too)."""
    answers = call(engine, [
        ("POST", "/v1/chat/completions", {"messages": U, "max_tokens": 1, "temperature": 0, "top_p": 1}),
        ("POST", "/v1/chat/completions", {"messages": U, "max_tokens": 1.0, "n": 1.0, "stop_token_ids": [0.0]}),
        ("POST", "/v1/completions", {"prompt": [1.0, 2], "max_tokens": 1.0}),
        ("POST", "/generate", {"input_ids": [[1.0]], "sampling_params": {"max_new_tokens": 1.0}}),
        ("POST", "/detokenize", {"tokens": [1.0]}),
    ])
    for resp in answers:
        assert resp.status_code == 200, resp.text


def test_wrong_method_is_405_with_the_declared_methods(engine, doc):
    requests = []
    for path, item in doc["paths"].items():
        declared = {m for m in item if m in HTTP_METHODS}
        concrete = path.replace("{model_id}", "default")
        for method in ({"get", "post", "delete", "options"} - declared):
            requests.append((method.upper(), concrete, None, declared))
    answers = call(engine, [(m, p, b) for m, p, b, _ in requests])
    for (method, path, _, declared), resp in zip(requests, answers):
        assert resp.status_code == 405, (method, path, resp.status_code)
        allow = {m.strip().lower() for m in resp.headers["allow"].split(",")}
        assert allow - {"head"} == declared, (method, path, allow, declared)
        assert set(resp.json()["error"]) == {"message", "type", "param", "code"}


def test_health_answers_as_declared(engine, doc):
    """/health's 200 has no body (declared without content); /metrics is text."""
    health, metrics = call(engine, [("GET", "/health", None), ("GET", "/metrics", None)])
    assert health.status_code == 200 and health.content == b""
    assert "content" not in doc["paths"]["/health"]["get"]["responses"]["200"]
    assert metrics.headers["content-type"].startswith("text/plain")
    assert set(doc["paths"]["/metrics"]["get"]["responses"]["200"]["content"]) == {"text/plain"}
