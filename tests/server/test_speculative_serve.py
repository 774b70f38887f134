"""``furca serve --speculative-algorithm ngram``: the native ``/generate`` answer's
``meta_info`` carries the request's accepted draft tokens, ``/metrics`` the acceptance
counters, and the engine is idle with every KV slot back afterwards."""

from __future__ import annotations

import re

import httpx
import pytest

from tests.conftest import CLIENT_TIMEOUT
from tests.server.conftest import MODEL_NAME, ServerProcess, assert_idle

pytestmark = pytest.mark.default_model

DOC = "Invoice 48213 was issued on March 3, 2024 to Maria Lopez, 12 Harbor Street, Portland."


@pytest.fixture(scope="module")
def spec_server():
    srv = ServerProcess("--speculative-algorithm", "ngram", "--speculative-num-draft-tokens", "4",
                        max_total_tokens=8192)
    try:
        srv.wait_ready()
        yield srv
    finally:
        srv.stop()


def metric(text: str, name: str) -> float:
    m = re.search(rf"^{name} ([0-9.e+-]+)$", text, re.M)
    assert m, f"{name} missing from /metrics"
    return float(m.group(1))


def test_serve_reports_accepted_drafts(spec_server):
    with httpx.Client(base_url=spec_server.url, headers=spec_server.headers, timeout=CLIENT_TIMEOUT) as c:
        r = c.post("/generate", json={"text": f"{DOC}\nThe same text again:\n{DOC[:24]}",
                                      "sampling_params": {"max_new_tokens": 16, "temperature": 0}})
        assert r.status_code == 200, r.text
        meta = r.json()["meta_info"]
        assert 0 < meta["spec_num_correct_drafts"] <= meta["spec_num_proposed_drafts"]
        assert meta["spec_accept_rate"] == meta["spec_num_correct_drafts"] / meta["spec_num_proposed_drafts"]
        r = c.post("/v1/chat/completions", json={"model": MODEL_NAME, "max_tokens": 16, "temperature": 0,
                                                 "messages": [{"role": "user", "content": f"Repeat exactly: {DOC}"}]})
        assert r.status_code == 200, r.text
        details = r.json()["usage"]["completion_tokens_details"]
        assert details["accepted_prediction_tokens"] > 0 and details["rejected_prediction_tokens"] >= 0
        info = assert_idle(c)
        assert info["config"]["speculative_algorithm"] == "ngram"
        text = c.get("/metrics").text
        assert metric(text, "furca_spec_accepted_tokens") >= meta["spec_num_correct_drafts"]
        assert metric(text, "furca_spec_draft_tokens") >= meta["spec_num_proposed_drafts"]
        assert 0 < metric(text, "furca_spec_accept_rate") <= 1
