"""A server of its own: 503 while the model loads, 429 past the queue limit, and a
graceful SIGTERM (stop admitting, let running requests finish within the grace
period, abort the rest, exit 0).

Time is the subject here, so the tests assert the order of events and the state they
leave, never a duration: each waits for the state it needs (a request decoding, the
signal handled) by polling, with generous deadlines (tests/conftest.py)."""

from __future__ import annotations

import json
import signal
import threading
import time

import httpx
import pytest

from tests.conftest import CLIENT_TIMEOUT, READY_TIMEOUT, wait_until
from tests.server.conftest import ServerProcess, assert_idle

pytestmark = pytest.mark.default_model

CHAT = {"messages": [{"role": "user", "content": "Count to a million."}], "temperature": 0}
GRACE_S = 20  # --shutdown-grace-period: far more than the short request's few steps take under load
LONG_TOKENS = 7000  # what the long request asks for: far more than any machine decodes in GRACE_S


def _stream_in_thread(srv: ServerProcess, body: dict, out: dict, started: threading.Event) -> threading.Thread:
    def run():
        try:
            with httpx.Client(base_url=srv.url, headers=srv.headers, timeout=CLIENT_TIMEOUT) as c:
                with c.stream("POST", "/v1/chat/completions", json={**CHAT, **body, "stream": True}) as r:
                    out["status"] = r.status_code
                    started.set()  # headers are in: the request is admitted
                    for line in r.iter_lines():
                        if line.startswith("data: {"):
                            chunk = json.loads(line[6:])
                            if chunk.get("choices") and chunk["choices"][0]["delta"].get("content"):
                                out["tokens"] = out.get("tokens", 0) + 1  # it is decoding
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
                        "--shutdown-grace-period", str(GRACE_S), max_total_tokens=8192)
    srv.early = None
    deadline = time.monotonic() + READY_TIMEOUT
    while srv.early is None and time.monotonic() < deadline:  # the first answer comes before the model loads
        if srv.proc.poll() is not None:
            break
        try:
            first = httpx.get(f"{srv.url}/health", timeout=CLIENT_TIMEOUT)
            early = httpx.post(f"{srv.url}/v1/chat/completions", headers=srv.headers,
                               json={**CHAT, "max_tokens": 1}, timeout=CLIENT_TIMEOUT)
            srv.early = (first, early)
        except httpx.ConnectError:  # not listening yet
            time.sleep(0.05)
    try:
        srv.wait_ready()
        yield srv
    finally:
        srv.stop()


def test_503_while_loading(small_server):
    assert small_server.early is not None, small_server.read_log()
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
        assert e.wait(CLIENT_TIMEOUT)
    with httpx.Client(base_url=srv.url, headers=srv.headers, timeout=CLIENT_TIMEOUT) as http:
        # 2 running + 1 queued fill max_running_requests + max_queued_requests
        assert http.get("/server_info").json()["server"]["num_inflight"] == 3
        r = http.post("/v1/chat/completions", json={**CHAT, "max_tokens": 1})
        assert r.status_code == 429, r.text
        assert r.json()["error"]["code"] == "overloaded" and "Retry-After" in r.headers
        assert http.post("/generate", json={"text": "a"}).status_code == 429
        _abort_all(srv)
        for t in threads:
            t.join(CLIENT_TIMEOUT)
        assert not any(t.is_alive() for t in threads), outs
        assert all(o.get("status") == 200 and o.get("finish") == "abort" for o in outs), outs
        assert_idle(http)
        assert http.post("/v1/chat/completions", json={**CHAT, "max_tokens": 1}).status_code == 200


def _abort_all(srv: ServerProcess) -> None:
    with httpx.Client(base_url=srv.url, headers=srv.headers, timeout=CLIENT_TIMEOUT) as http:
        for rid in http.get("/server_info").json()["server"]["active_rids"]:
            http.post("/abort_request", json={"rid": rid})


def test_sigterm_drains_then_exits_cleanly(small_server):
    """In this order: both requests decode; SIGTERM; /health and new requests get 503; the
    short request finishes normally; the long one (it cannot finish within the grace
    period on any machine: thousands of tokens) ends in an abort; the server exits 0."""
    srv = small_server
    short, long_ = {}, {}
    e1, e2 = threading.Event(), threading.Event()
    t2 = _stream_in_thread(srv, {"max_tokens": LONG_TOKENS, "ignore_eos": True}, long_, e2)
    t1 = _stream_in_thread(srv, {"max_tokens": 4}, short, e1)
    assert e1.wait(CLIENT_TIMEOUT) and e2.wait(CLIENT_TIMEOUT)
    wait_until(lambda: short.get("tokens") or short.get("finish"), f"the short request decodes: {short}")
    wait_until(lambda: long_.get("tokens") or long_.get("finish"), f"the long request decodes: {long_}")
    srv.proc.send_signal(signal.SIGTERM)
    wait_until(lambda: httpx.get(f"{srv.url}/health", timeout=CLIENT_TIMEOUT).status_code == 503,
               "/health says 503 once the signal is handled")
    r = httpx.post(f"{srv.url}/v1/chat/completions", headers=srv.headers, json={**CHAT, "max_tokens": 1},
                   timeout=CLIENT_TIMEOUT)
    assert r.status_code == 503  # no longer admitting
    t1.join(CLIENT_TIMEOUT)
    t2.join(CLIENT_TIMEOUT)
    assert not t1.is_alive() and not t2.is_alive(), (short, long_)
    # the short one finished normally within the grace period; the long one was aborted after it
    assert short.get("finish") in ("length", "stop") and short.get("done"), (short, srv.read_log())
    assert long_.get("finish") == "abort" and long_.get("done"), (long_, srv.read_log())
    assert long_["tokens"] < LONG_TOKENS
    assert srv.proc.wait(CLIENT_TIMEOUT) == 0
