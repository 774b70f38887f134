"""``furca serve --deterministic``: the same requests give bitwise the same tokens and
logprobs over the native ``/generate`` API alone, in one batch and sent at once, on the
default model with its default dtypes (fp32 with bf16 projections and a bf16 KV pool)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from tests.conftest import CLIENT_TIMEOUT
from tests.server.conftest import ServerProcess, assert_idle

pytestmark = pytest.mark.default_model

PROMPTS = [f"Here is a fact about {s}:" for s in ("the sea", "a cat", "Paris", "rain")] + \
          [f"Write one short sentence about {s}." for s in ("chess", "bread", "the moon", "a robot")]


def params(i: int) -> dict:
    base = {"max_new_tokens": 3, "ignore_eos": True}
    return {**base, "temperature": 0} if i % 2 == 0 else {**base, "temperature": 0.9, "top_p": 0.9, "seed": 7 + i}


def signature(item: dict) -> tuple:
    entries = item["meta_info"]["output_token_logprobs"]
    return tuple(e[1] for e in entries), tuple(float(e[0]).hex() for e in entries)


@pytest.fixture(scope="module")
def det_server():
    srv = ServerProcess("--deterministic", max_total_tokens=8192)
    try:
        srv.wait_ready()
        yield srv
    finally:
        srv.stop()


def test_serve_deterministic_alone_batched_and_concurrent_agree(det_server):
    with httpx.Client(base_url=det_server.url, headers=det_server.headers, timeout=CLIENT_TIMEOUT) as c:
        def one(i: int) -> tuple:
            r = c.post("/generate", json={"text": PROMPTS[i], "sampling_params": params(i), "return_logprob": True})
            assert r.status_code == 200, r.text
            return signature(r.json())

        alone = [one(i) for i in range(len(PROMPTS))]
        r = c.post("/generate", json={"text": PROMPTS, "sampling_params": [params(i) for i in range(len(PROMPTS))],
                                      "return_logprob": True})
        assert r.status_code == 200, r.text
        batched = [signature(item) for item in r.json()]
        with ThreadPoolExecutor(len(PROMPTS)) as pool:
            concurrent = list(pool.map(one, range(len(PROMPTS))))
        assert all(len(ids) == 3 for ids, _ in alone)
        assert batched == alone
        assert concurrent == alone
        info = assert_idle(c)
    assert info["effective_config"]["deterministic"] is True
    assert info["effective_config"]["attention_backend"] == "invariant"
