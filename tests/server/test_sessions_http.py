"""Sessions over the native API on the shared live server: /open_session, /generate with
``session_id``, /close_session; 4xx for ids not open; leases expire; nothing is held
after close. Pinning under eviction is tests/runtime/test_sessions.py's (a small pool)."""

from __future__ import annotations

import re

import pytest

from tests.conftest import wait_until
from tests.server.conftest import assert_idle

pytestmark = pytest.mark.default_model

GREEDY = {"max_new_tokens": 3, "temperature": 0}


def _sessions(http) -> dict:
    return http.get("/server_info").json()["sessions"]


def test_a_session_pins_its_conversation_and_close_releases_it(http):
    sid = http.post("/open_session", json={"capacity_of_str_len": 1000}).json()
    assert isinstance(sid, str) and sid
    ids = http.post("/tokenize", json={"prompt": "A session keeps this conversation cached:"}).json()["tokens"]
    first = http.post("/generate", json={"input_ids": ids, "sampling_params": GREEDY, "session_id": sid}).json()
    meta = first["meta_info"]
    assert meta["session_id"] == sid and meta["pin_refused"] is False
    assert meta["pinned_tokens"] == len(ids) + 2  # prompt + output but the last sampled token
    assert http.get("/server_info").json()["pinned"] >= meta["pinned_tokens"]
    metrics = http.get("/metrics").text
    assert float(re.search(r"^furca_pinned_tokens (\S+)$", metrics, re.M).group(1)) >= meta["pinned_tokens"]
    assert float(re.search(r"^furca_sessions_open (\S+)$", metrics, re.M).group(1)) >= 1
    context = ids + first["output_ids"]
    second = http.post("/generate", json={"input_ids": context + ids[1:4], "sampling_params": GREEDY,
                                          "session_id": sid}).json()
    assert second["meta_info"]["cached_tokens"] >= len(context) - 1
    assert http.post("/close_session", json={"session_id": sid}).status_code == 200
    info = assert_idle(http)
    assert info["pinned"] == 0


def test_ids_not_open_are_404_naming_session_id_and_lose_nothing(http):
    for body in ({"text": "Hi", "sampling_params": GREEDY, "session_id": "no-such-session"},):
        r = http.post("/generate", json=body)
        assert r.status_code == 404, r.text
        err = r.json()["error"]
        assert err["param"] == "session_id" and err["code"] == "session_not_found"
        assert "'no-such-session' is not open" in err["message"]
    r = http.post("/close_session", json={"session_id": "no-such-session"})
    assert r.status_code == 404 and r.json()["error"]["param"] == "session_id"
    sid = http.post("/open_session", json={"session_id": "twice"}).json()
    assert sid == "twice"
    r = http.post("/open_session", json={"session_id": "twice"})
    assert r.status_code == 400 and r.json()["error"]["code"] == "session_exists"
    for bad in ({"timeout": 0}, {"timeout": "5"}, {"session_id": ""}):
        r = http.post("/open_session", json=bad)
        assert r.status_code == 400, (bad, r.text)
    assert http.post("/close_session", json={}).status_code == 400
    assert http.post("/close_session", json={"session_id": "twice"}).status_code == 200
    assert_idle(http)


def test_a_lease_expires_and_its_id_is_then_404(http):
    before = _sessions(http)["sessions_expired"]
    sid = http.post("/open_session", json={"timeout": 0.5}).json()
    r = http.post("/generate", json={"text": "Expiring soon", "sampling_params": GREEDY, "session_id": sid})
    assert r.status_code == 200
    wait_until(lambda: _sessions(http)["sessions_expired"] > before, "the lease expired", timeout=120)
    r = http.post("/generate", json={"text": "Expiring soon", "sampling_params": GREEDY, "session_id": sid})
    assert r.status_code == 404 and r.json()["error"]["param"] == "session_id", r.text
    assert assert_idle(http)["pinned"] == 0


def test_runtime_endpoint_runs_a_program_in_one_session_and_closes_it(server, http):
    import furca as sgl
    from furca.lang.backends.runtime_endpoint import RuntimeEndpoint

    @sgl.function
    def two_turns(s):
        s += "Q: Name a colour.\nA:" + sgl.gen("a", max_tokens=3, temperature=0)
        s += "\nQ: Name another.\nA:" + sgl.gen("b", max_tokens=3, temperature=0)

    before = _sessions(http)
    endpoint = RuntimeEndpoint(server.url, api_key=server.api_key)
    try:
        state = two_turns.run(backend=endpoint)
    finally:
        endpoint.close()
    a, b = state.get_meta_info("a"), state.get_meta_info("b")
    assert a["session_id"] == b["session_id"] and a["pinned_tokens"] > 0
    assert b["cached_tokens"] >= a["prompt_tokens"]
    after = _sessions(http)
    assert after["open"] == before["open"] and after["sessions_closed"] == before["sessions_closed"] + 1
    assert_idle(http)
