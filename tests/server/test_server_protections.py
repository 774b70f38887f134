"""The server's own protections, against a live ``furca serve`` (default model):

- a request body past ``--max-request-bytes`` gets 413 before it is parsed, with a
  Content-Length and without one (chunked), and the server goes on serving;
- with ``--api-key``, every route but /health and /metrics needs the key, the API docs
  too unless ``--public-docs``; a wrong or malformed key is a 401, never an error;
- every answer carries ``X-Content-Type-Options: nosniff`` and ``X-Frame-Options: DENY``;
- ``/abort_request`` with a batch completion's rid aborts all of it (every prompt, every
  sample of ``n``); an unknown rid is a 404;
- ``GET /flush_cache`` is a 405 (POST only);
- /v1/models, /get_model_info and /server_info name the model, never a directory of the
  server's disk, unless ``--expose-model-path``.

The session server (tests/server/conftest.py) runs with a key and the defaults; one
own server runs with a small body limit, public docs and the model path exposed.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any, Iterator

import httpx
import pytest

from furca.runtime.pull import default_model_dir, furca_home
from tests.conftest import CLIENT_TIMEOUT, wait_until
from tests.server.conftest import API_KEY, MODEL_NAME, ServerProcess, assert_idle

pytestmark = pytest.mark.default_model

LIMIT = 4096


@pytest.fixture(scope="module")
def open_server():
    srv = ServerProcess("--max-request-bytes", str(LIMIT), "--public-docs", "--expose-model-path")
    try:
        srv.wait_ready()
        yield srv
    finally:
        srv.stop()


@pytest.fixture(scope="module")
def open_http(open_server):
    with httpx.Client(base_url=open_server.url, headers=open_server.headers, timeout=CLIENT_TIMEOUT) as c:
        yield c


def _completion(prompt: str = "Hi", **extra: Any) -> dict[str, Any]:
    return {"model": MODEL_NAME, "prompt": prompt, "max_tokens": 2, "temperature": 0, **extra}


def _assert_error(r: httpx.Response, status: int) -> dict[str, Any]:
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/json")
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}, err
    return err


# -- request body size limit ---------------------------------------------------------------


def test_body_past_the_limit_with_content_length_is_413(open_http):
    body = json.dumps(_completion("a" * (LIMIT + 100))).encode()
    r = open_http.post("/v1/completions", content=body, headers={"content-type": "application/json"})
    err = _assert_error(r, 413)
    assert err["code"] == "request_too_large" and str(LIMIT) in err["message"] and str(len(body)) in err["message"]
    assert r.headers["connection"] == "close"
    # the server goes on serving, a body just under the limit included
    under = json.dumps(_completion("b" * (LIMIT - 200))).encode()
    assert len(under) <= LIMIT
    r = open_http.post("/v1/completions", content=under, headers={"content-type": "application/json"})
    assert r.status_code == 200, r.text


def _chunks(data: bytes, size: int) -> Iterator[bytes]:
    for i in range(0, len(data), size):
        yield data[i:i + size]


def test_chunked_body_is_counted_as_it_streams(open_server, open_http):
    over = json.dumps(_completion("c" * (LIMIT * 3))).encode()
    r = open_http.post("/v1/completions", content=_chunks(over, 1000), headers={"content-type": "application/json"})
    assert "content-length" not in r.request.headers and r.request.headers["transfer-encoding"] == "chunked"
    err = _assert_error(r, 413)
    assert err["code"] == "request_too_large" and str(LIMIT) in err["message"]
    # a chunked body under the limit reaches the route whole
    under = json.dumps(_completion("Say hi")).encode()
    r = open_http.post("/v1/completions", content=_chunks(under, 7), headers={"content-type": "application/json"})
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["completion_tokens"] >= 1
    metrics = httpx.get(f"{open_server.url}/metrics", timeout=CLIENT_TIMEOUT).text
    refused = [line for line in metrics.splitlines() if line.startswith('furca_requests_rejected_total{status="413"}')]
    assert refused and float(refused[0].split()[-1]) >= 1, metrics[-2000:]


# -- API key, docs ----------------------------------------------------------------------------


DOCS = ("/openapi.json", "/docs", "/redoc")


def test_docs_need_the_key_health_and_metrics_do_not(server):
    for path in DOCS:
        r = httpx.get(server.url + path, timeout=CLIENT_TIMEOUT)
        _assert_error(r, 401)
        assert r.headers["www-authenticate"] == "Bearer"
        assert httpx.get(server.url + path, headers=server.headers, timeout=CLIENT_TIMEOUT).status_code == 200
    for path in ("/health", "/metrics"):
        assert httpx.get(server.url + path, timeout=CLIENT_TIMEOUT).status_code == 200, path


def test_public_docs_flag_opens_only_the_docs(open_server):
    for path in DOCS:
        assert httpx.get(open_server.url + path, timeout=CLIENT_TIMEOUT).status_code == 200, path
    assert "/v1/completions" in httpx.get(open_server.url + "/openapi.json", timeout=CLIENT_TIMEOUT).json()["paths"]
    _assert_error(httpx.get(open_server.url + "/v1/models", timeout=CLIENT_TIMEOUT), 401)


@pytest.mark.parametrize("headers", [
    {},
    {"Authorization": "Bearer wrong"},
    {"Authorization": "Bearer"},
    {"Authorization": ""},
    {"Authorization": f"Basic {API_KEY}"},
    {"Authorization": f"Bearer {API_KEY}x"},
    {"Authorization": f"Bearer {API_KEY[:-1]}"},
    {"Authorization": f"Bearer {API_KEY.upper()}"},
    {"Authorization": b"Bearer \xff\xfe"},
    {"Authorization": "Bearer " + "k" * 8000},
    {"x-api-key": "wrong"},
    {"x-api-key": b"\xc3\x28"},
    {"x-api-key": ""},
    {"Authorization": "Bearer wrong", "x-api-key": API_KEY},  # the Bearer token is the one presented
], ids=lambda h: ",".join(f"{k}={v[:20]!r}" for k, v in h.items()) or "none")
def test_wrong_or_malformed_key_is_401(server, headers):
    r = httpx.get(server.url + "/v1/models", headers=headers, timeout=CLIENT_TIMEOUT)
    err = _assert_error(r, 401)
    assert err["code"] == "invalid_api_key" and r.headers["www-authenticate"] == "Bearer"


@pytest.mark.parametrize("headers", [{"Authorization": f"bearer {API_KEY}"}, {"x-api-key": API_KEY},
                                     {"Authorization": f"Bearer  {API_KEY}"}])
def test_right_key_in_each_accepted_form(server, headers):
    assert httpx.get(server.url + "/v1/models", headers=headers, timeout=CLIENT_TIMEOUT).status_code == 200


# -- security headers -----------------------------------------------------------------------


def test_every_answer_carries_the_security_headers(server, http):
    answers = [http.get("/v1/models"), httpx.get(server.url + "/v1/models", timeout=CLIENT_TIMEOUT),
               http.get("/no-such-route"), http.post("/v1/completions", json={"prompt": 5}),
               httpx.get(server.url + "/health", timeout=CLIENT_TIMEOUT)]
    with http.stream("POST", "/v1/completions", json=_completion(stream=True)) as r:
        r.read()
        answers.append(r)
    assert [a.status_code for a in answers] == [200, 401, 404, 400, 200, 200]
    for a in answers:
        assert a.headers["x-content-type-options"] == "nosniff", (a.request.url, a.headers)
        assert a.headers["x-frame-options"] == "DENY", (a.request.url, a.headers)


# -- abort ----------------------------------------------------------------------------------


def test_abort_of_a_batch_completion_aborts_every_prompt_and_sample(http):
    assert_idle(http)
    rid = "cmpl-batch-to-abort"
    result: dict[str, Any] = {}

    def run():
        result["r"] = http.post("/v1/completions", json=_completion(
            ["Count to one thousand:", "List every prime number:"], rid=rid, n=2, max_tokens=2000,
            ignore_eos=True))

    t = threading.Thread(target=run)
    t.start()
    try:
        def started():
            info = http.get("/server_info").json()
            active = set(info["server"]["active_rids"])
            return {f"{rid}-p0", f"{rid}-p1"} <= active and info["num_running"] > 0
        wait_until(started, "the batch completion is running", interval=0.2)
        r = http.post("/abort_request", json={"rid": rid})
        assert r.status_code == 200, r.text
    finally:
        t.join(CLIENT_TIMEOUT)
    assert not t.is_alive()
    body = result["r"].json()
    assert result["r"].status_code == 200, body
    assert [c["finish_reason"] for c in body["choices"]] == ["abort"] * 4, body["choices"]
    assert body["usage"]["completion_tokens"] < 4 * 2000
    assert_idle(http)
    _assert_error(http.post("/abort_request", json={"rid": rid}), 404)  # nothing of it is left


def test_abort_all_aborts_every_request_in_flight(http):
    """SGLang's ``{"abort_all": true}``: every request in flight ends with finish reason abort."""
    assert_idle(http)
    results: list[httpx.Response] = []

    def run(i: int):
        results.append(http.post("/v1/completions", json=_completion(
            f"Count to {i} thousand:", rid=f"abort-all-{i}", max_tokens=2000, ignore_eos=True)))

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    try:
        def started():
            info = http.get("/server_info").json()
            return {"abort-all-0", "abort-all-1"} <= {r.split("-p")[0] for r in info["server"]["active_rids"]}
        wait_until(started, "both completions are in flight", interval=0.2)
        r = http.post("/abort_request", json={"abort_all": True})
        assert r.status_code == 200, r.text
    finally:
        for t in threads:
            t.join(CLIENT_TIMEOUT)
    assert [res.status_code for res in results] == [200, 200]
    assert [res.json()["choices"][0]["finish_reason"] for res in results] == ["abort", "abort"]
    assert_idle(http)
    assert http.post("/abort_request", json={"abort_all": True}).status_code == 200  # none left: still 200
    _assert_error(http.post("/abort_request", json={}), 400)  # neither a rid nor abort_all


def test_abort_of_an_unknown_rid_is_404(http):
    err = _assert_error(http.post("/abort_request", json={"rid": "no-such-request"}), 404)
    assert err["param"] == "rid" and "no-such-request" in err["message"]


# -- flush_cache ----------------------------------------------------------------------------


def test_flush_cache_is_post_only(http):
    r = http.get("/flush_cache")
    _assert_error(r, 405)
    assert r.headers["allow"] == "POST"
    assert_idle(http)
    assert http.post("/flush_cache").status_code == 200
    assert "get" not in http.get("/openapi.json").json()["paths"]["/flush_cache"]


# -- model path -----------------------------------------------------------------------------


def _model_answers(http: httpx.Client) -> dict[str, Any]:
    return {path: http.get(path).json() for path in ("/v1/models", "/get_model_info", "/server_info")}


def _strings(obj: Any) -> Iterator[str]:
    if isinstance(obj, str):
        yield obj
    elif isinstance(obj, dict):
        for k, v in obj.items():
            yield from _strings(k)
            yield from _strings(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from _strings(v)


def test_no_filesystem_path_in_the_model_routes(http):
    answers = _model_answers(http)
    model_id = default_model_dir().name
    assert answers["/v1/models"]["data"][0]["root"] == model_id
    assert answers["/get_model_info"]["model_path"] == answers["/get_model_info"]["tokenizer_path"] == model_id
    assert answers["/server_info"]["model_path"] == model_id
    home = str(furca_home())
    for path, answer in answers.items():
        for s in _strings(answer):
            assert home not in s, (path, s)
            assert not (s.startswith(os.sep) and Path(s).exists()), (path, s)  # no path of this disk


def test_expose_model_path_shows_it(open_http):
    answers = _model_answers(open_http)
    shown = [answers["/v1/models"]["data"][0]["root"], answers["/get_model_info"]["model_path"],
             answers["/server_info"]["model_path"]]
    for path in shown:
        assert os.path.isabs(path) and os.path.samefile(path, default_model_dir()), shown
