"""Client disconnects abort their requests, and load leaks nothing: afterwards
/server_info shows no running request and every KV slot free or evictable."""

from __future__ import annotations

import asyncio
import json
import socket

import httpx
import pytest

from tests.conftest import CLIENT_TIMEOUT, wait_until
from tests.server.conftest import MODEL_NAME, assert_idle

pytestmark = pytest.mark.default_model

LONG = {"max_tokens": 3000, "ignore_eos": True, "temperature": 0}


def _aborted(http) -> int:
    return http.get("/server_info").json()["stats"]["aborted"]


def _wait_aborted(http, before: int) -> None:
    wait_until(lambda: _aborted(http) > before, "the request is aborted after the client left", interval=0.1)


@pytest.mark.parametrize("path, body", [
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "Count to a million."}], **LONG}),
    ("/v1/completions", {"prompt": "1, 2, 3,", **LONG}),
    ("/generate", {"text": "1, 2, 3,", "sampling_params": {"max_new_tokens": 3000, "ignore_eos": True}}),
])
def test_disconnect_mid_stream_aborts(server, http, path, body):
    before = _aborted(http)
    with httpx.Client(base_url=server.url, headers=server.headers, timeout=CLIENT_TIMEOUT) as c:
        with c.stream("POST", path, json={**body, "stream": True}) as resp:
            assert resp.status_code == 200
            lines = resp.iter_lines()
            got = [next(lines) for _ in range(4)]  # a few events, then hang up
            assert any(line.startswith("data: ") for line in got)
    _wait_aborted(http, before)
    assert_idle(http)


def test_disconnect_non_streaming_aborts(server, http):
    """The client hangs up once its request is running (not after a fixed time, which on
    a loaded machine can come before the server has even read the request)."""
    before = _aborted(http)
    body = json.dumps({"messages": [{"role": "user", "content": "Count to a million."}], **LONG}).encode()
    head = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\n"
            f"Authorization: Bearer {server.api_key}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode()
    with socket.create_connection(("127.0.0.1", server.port), timeout=CLIENT_TIMEOUT) as sock:
        sock.sendall(head + body)
        wait_until(lambda: http.get("/server_info").json()["num_running"] == 1, "the request runs", interval=0.1)
    _wait_aborted(http, before)
    assert_idle(http)


def test_200_concurrent_streams(server, http):
    async def one(client: httpx.AsyncClient, i: int) -> tuple[int, str, int]:
        body = {"model": MODEL_NAME, "stream": True, "max_tokens": 3, "temperature": 0,
                "stream_options": {"include_usage": True},
                "messages": [{"role": "system", "content": "You are terse."},
                             {"role": "user", "content": f"Say the number {i}."}]}
        text, done, usage = "", False, 0
        async with client.stream("POST", "/v1/chat/completions", json=body) as resp:
            assert resp.status_code == 200, await resp.aread()
            async for line in resp.aiter_lines():
                if line == "data: [DONE]":
                    done = True
                elif line.startswith("data: "):
                    chunk = httpx.Response(200, content=line[6:]).json()
                    assert "error" not in chunk, chunk
                    if chunk["choices"]:
                        text += chunk["choices"][0]["delta"].get("content") or ""
                    else:
                        usage = chunk["usage"]["completion_tokens"]
        assert done
        return i, text, usage

    async def run():
        limits = httpx.Limits(max_connections=250, max_keepalive_connections=250)
        async with httpx.AsyncClient(base_url=server.url, headers=server.headers, timeout=600,
                                     limits=limits) as client:
            return await asyncio.gather(*(one(client, i) for i in range(200)))

    results = asyncio.run(run())
    assert len(results) == 200 and all(1 <= usage <= 3 for _, _, usage in results)
    info = assert_idle(http)
    assert info["cache_hit_rate"] > 0  # the shared system prompt was reused
