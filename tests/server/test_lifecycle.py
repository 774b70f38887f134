"""A server of its own: 503 while the model loads, 429 past the queue limit, and a
graceful SIGTERM (stop admitting, let running requests finish within the grace
period, abort the rest, exit 0)."""

from __future__ import annotations

import json
import signal
import threading
import time

import httpx
import pytest

from tests.server.conftest import ServerProcess, assert_idle

pytestmark = pytest.mark.default_model

CHAT = {"messages": [{"role": "user", "content": "Count to a million."}], "temperature": 0}


def _stream_in_thread(srv: ServerProcess, body: dict, out: dict, started: threading.Event) -> threading.Thread:
    def run():
        try:
            with httpx.Client(base_url=srv.url, headers=srv.headers, timeout=120) as c:
                with c.stream("POST", "/v1/chat/completions", json={**CHAT, **body, "stream": True}) as r:
                    out["status"] = r.status_code
                    started.set()  # headers are in: the request is admitted
                    for line in r.iter_lines():
                        if line.startswith("data: {"):
                            chunk = json.loads(line[6:])
                            if chunk.get("choices") and chunk["choices"][0]["finish_reason"]:
                                out["finish"] = chunk["choices"][0]["finish_reason"]
                        elif line == "data: [DONE]":
                            out["done"] = True
        except httpx.HTTPError as e:
            out["error"] = repr(e)
        finally:
            started.set()

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


@pytest.fixture(scope="module")
def small_server():
    srv = ServerProcess("--max-running-requests", "2", "--max-queued-requests", "1",
                        "--shutdown-grace-period", "15", max_total_tokens=8192)
    first = None
    deadline = time.monotonic() + 120
    while first is None and time.monotonic() < deadline:  # the first answer comes before the model loads
        try:
            first = httpx.get(f"{srv.url}/health", timeout=2)
            early = httpx.post(f"{srv.url}/v1/chat/completions", headers=srv.headers,
                               json={**CHAT, "max_tokens": 1}, timeout=5)
        except httpx.HTTPError:
            time.sleep(0.05)
    srv.early = (first, early)
    try:
        srv.wait_ready()
        yield srv
    finally:
        srv.stop()


def test_503_while_loading(small_server):
    health, chat = small_server.early
    assert health.status_code == 503
    assert chat.status_code == 503 and chat.json()["error"]["type"] == "ServiceUnavailableError"


def test_429_when_queue_full(small_server):
    srv = small_server
    outs = [{} for _ in range(3)]
    events = [threading.Event() for _ in range(3)]
    threads = [_stream_in_thread(srv, {"max_tokens": 3000, "ignore_eos": True}, o, e)
               for o, e in zip(outs, events)]
    for e in events:
        assert e.wait(60)
    with httpx.Client(base_url=srv.url, headers=srv.headers, timeout=60) as http:
        # 2 running + 1 queued fill max_running_requests + max_queued_requests
        assert http.get("/server_info").json()["server"]["num_inflight"] == 3
        r = http.post("/v1/chat/completions", json={**CHAT, "max_tokens": 1})
        assert r.status_code == 429, r.text
        assert r.json()["error"]["code"] == "overloaded" and "Retry-After" in r.headers
        assert http.post("/generate", json={"text": "a"}).status_code == 429
        _abort_all(srv)
        for t in threads:
            t.join(60)
        assert all(o.get("status") == 200 and o.get("finish") == "abort" for o in outs), outs
        assert_idle(http)
        assert http.post("/v1/chat/completions", json={**CHAT, "max_tokens": 1}).status_code == 200


def _abort_all(srv: ServerProcess) -> None:
    with httpx.Client(base_url=srv.url, headers=srv.headers, timeout=60) as http:
        for rid in http.get("/server_info").json()["server"]["active_rids"]:
            http.post("/abort_request", json={"rid": rid})


def test_sigterm_drains_then_exits_cleanly(small_server):
    srv = small_server
    short, long_ = {}, {}
    e1, e2 = threading.Event(), threading.Event()
    t1 = _stream_in_thread(srv, {"max_tokens": 4}, short, e1)
    t2 = _stream_in_thread(srv, {"max_tokens": 3000, "ignore_eos": True}, long_, e2)
    assert e1.wait(60) and e2.wait(60)
    srv.proc.send_signal(signal.SIGTERM)
    time.sleep(0.5)
    r = httpx.post(f"{srv.url}/v1/chat/completions", headers=srv.headers, json={**CHAT, "max_tokens": 1})
    assert r.status_code == 503  # no longer admitting
    assert httpx.get(f"{srv.url}/health").status_code == 503
    t1.join(60)
    t2.join(60)
    # the short one finished normally within the grace period; the long one was aborted after it
    assert short.get("finish") in ("length", "stop") and short.get("done"), (short, srv.read_log())
    assert long_.get("finish") == "abort" and long_.get("done"), (long_, srv.read_log())
    assert srv.proc.wait(60) == 0
