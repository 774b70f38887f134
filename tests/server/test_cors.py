"""CORS: off by default (a browser's preflight gets 405); with --allowed-origins the
preflight is answered (before the API-key check: it carries no key), real answers and
401s carry the CORS headers, and other origins get none. The flags' list forms."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from furca.cli import build_parser
from furca.server import ServerArgs, create_app

APP_ORIGIN = "http://app.example"
PREFLIGHT = {"Origin": APP_ORIGIN, "Access-Control-Request-Method": "POST",
             "Access-Control-Request-Headers": "authorization, content-type"}
CHAT = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, "temperature": 0}


@pytest.fixture(scope="module")
def engine(tiny_model):
    from furca.runtime.engine import Engine

    with Engine(tiny_model, max_total_tokens=1024, decode_log_interval=0) as e:
        yield e


def _run(engine, args: ServerArgs, fn):
    async def main():
        app = create_app(engine, args=args)
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://test", timeout=60) as c:
                return await fn(c)

    return asyncio.run(main())


async def _preflight(c, origin: str = APP_ORIGIN):
    return await c.options("/v1/chat/completions", headers={**PREFLIGHT, "Origin": origin})


def test_off_by_default_a_preflight_is_405(engine):
    async def fn(c):
        return await _preflight(c), await c.post("/v1/chat/completions", json=CHAT, headers={"Origin": APP_ORIGIN})

    pre, post = _run(engine, ServerArgs(), fn)
    assert pre.status_code == 405
    assert post.status_code == 200 and "access-control-allow-origin" not in post.headers


def test_allowed_origin_gets_preflight_and_headers(engine):
    async def fn(c):
        return (await _preflight(c), await _preflight(c, "http://evil.example"),
                await c.post("/v1/chat/completions", json=CHAT, headers={"Origin": APP_ORIGIN}),
                await c.post("/v1/chat/completions", json=CHAT, headers={"Origin": "http://evil.example"}))

    pre, evil_pre, post, evil_post = _run(engine, ServerArgs(allowed_origins=(APP_ORIGIN,)), fn)
    assert pre.status_code == 200, pre.text
    assert pre.headers["access-control-allow-origin"] == APP_ORIGIN
    assert "POST" in pre.headers["access-control-allow-methods"]
    assert "authorization" in pre.headers["access-control-allow-headers"].lower()
    assert "access-control-allow-credentials" not in pre.headers
    assert evil_pre.status_code == 400 and "access-control-allow-origin" not in evil_pre.headers
    assert post.status_code == 200 and post.headers["access-control-allow-origin"] == APP_ORIGIN
    assert post.json()["choices"][0]["message"]["role"] == "assistant"
    # the server answers; the browser withholds it from a page of another origin
    assert evil_post.status_code == 200 and "access-control-allow-origin" not in evil_post.headers


def test_preflight_needs_no_api_key_and_a_401_carries_cors_headers(engine):
    async def fn(c):
        return (await _preflight(c),
                await c.post("/v1/chat/completions", json=CHAT, headers={"Origin": APP_ORIGIN}),
                await c.post("/v1/chat/completions", json=CHAT,
                             headers={"Origin": APP_ORIGIN, "Authorization": "Bearer k1"}))

    pre, no_key, with_key = _run(engine, ServerArgs(api_key="k1", allowed_origins=(APP_ORIGIN,)), fn)
    assert pre.status_code == 200 and pre.headers["access-control-allow-origin"] == APP_ORIGIN
    assert no_key.status_code == 401 and no_key.headers["access-control-allow-origin"] == APP_ORIGIN
    assert no_key.json()["error"]["code"] == "invalid_api_key"
    assert with_key.status_code == 200 and with_key.headers["access-control-allow-origin"] == APP_ORIGIN

    # without CORS the key check still lets the preflight through: to a 405, not a 401
    pre, _, _ = _run(engine, ServerArgs(api_key="k1"), fn)
    assert pre.status_code == 405


def test_any_origin_with_credentials_and_restricted_methods(engine):
    args = ServerArgs(allowed_origins=("*",), allow_credentials=True, allowed_methods=("GET", "POST"),
                      allowed_headers=("content-type",))

    async def fn(c):
        put = await c.options("/v1/models", headers={"Origin": "http://x.example",
                                                     "Access-Control-Request-Method": "PUT"})
        return await _preflight(c, "http://x.example"), put

    pre, put = _run(engine, args, fn)
    # credentials forbid "*": the origin is echoed
    assert pre.headers["access-control-allow-origin"] == "http://x.example"
    assert pre.headers["access-control-allow-credentials"] == "true"
    assert pre.status_code == 400  # the authorization header is not among the allowed ones
    assert put.status_code == 400 and "PUT" not in put.headers.get("access-control-allow-methods", "")


@pytest.mark.parametrize("text, expected", [
    ('["http://a.example", "http://b.example"]', ("http://a.example", "http://b.example")),
    ("http://a.example, http://b.example", ("http://a.example", "http://b.example")),
    ("*", ("*",)),
])
def test_list_flags(text, expected):
    ns = build_parser().parse_args(["serve", "--allowed-origins", text, "--allowed-methods", "GET,POST",
                                    "--allow-credentials"])
    assert ns.allowed_origins == expected
    assert (ns.allowed_methods, ns.allowed_headers, ns.allow_credentials) == (("GET", "POST"), ("*",), True)


def test_bad_list_flag_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args(["serve", "--allowed-origins", '["http://a.example", 3]'])
    assert exc.value.code == 2
    assert "--allowed-origins" in capsys.readouterr().err
