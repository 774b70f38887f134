"""SGLang's native API over raw HTTP on a live server with the default model."""

from __future__ import annotations

import json
import re

import httpx
import pytest

from tests.conftest import CLIENT_TIMEOUT, wait_until
from tests.server.conftest import assert_idle

pytestmark = pytest.mark.default_model

GREEDY = {"max_new_tokens": 4, "temperature": 0}


def sse_events(resp: httpx.Response) -> list:
    events = []
    for line in resp.iter_lines():
        if line.startswith("data: "):
            data = line[len("data: "):]
            events.append(data if data == "[DONE]" else json.loads(data))
    return events


def test_generate_single_and_ids(http):
    r = http.post("/generate", json={"text": "The capital of France is", "sampling_params": GREEDY}).json()
    assert set(r) == {"text", "output_ids", "meta_info"}
    meta = r["meta_info"]
    assert meta["completion_tokens"] == len(r["output_ids"]) == 4
    assert meta["finish_reason"] == {"type": "length", "length": 4}
    assert meta["prompt_tokens"] > 0 and "cached_tokens" in meta
    ids = http.post("/tokenize", json={"prompt": "The capital of France is"}).json()["tokens"]
    # a text prompt heals by default (its last token " is" could grow), input_ids only on request
    same = http.post("/generate", json={"input_ids": ids, "sampling_params": {**GREEDY, "token_healing": True}}).json()
    assert same["output_ids"] == r["output_ids"] and same["text"] == r["text"]
    assert same["meta_info"]["cached_tokens"] > 0
    plain_text = http.post("/generate", json={"text": "The capital of France is",
                                              "sampling_params": {**GREEDY, "token_healing": False}}).json()
    plain_ids = http.post("/generate", json={"input_ids": ids, "sampling_params": GREEDY}).json()
    assert plain_text["output_ids"] == plain_ids["output_ids"] and plain_text["text"] == plain_ids["text"]


def test_generate_batch_and_n(http):
    r = http.post("/generate", json={"text": ["1, 2, 3,", "a, b, c,"],
                                     "sampling_params": [GREEDY, {**GREEDY, "max_new_tokens": 2}]}).json()
    assert isinstance(r, list) and [x["meta_info"]["completion_tokens"] for x in r] == [4, 2]
    n2 = http.post("/generate", json={"text": "Hi", "sampling_params": {"max_new_tokens": 3, "n": 2,
                                                                        "temperature": 0.7, "seed": 1}}).json()
    assert isinstance(n2, list) and len(n2) == 2


def test_generate_logprobs(http):
    r = http.post("/generate", json={"text": "Paris is the capital of", "sampling_params": GREEDY,
                                     "return_logprob": True, "logprob_start_len": 0, "top_logprobs_num": 2,
                                     "return_text_in_logprobs": True}).json()
    meta = r["meta_info"]
    out = meta["output_token_logprobs"]
    assert [e[1] for e in out] == r["output_ids"] and all(e[0] <= 0 and isinstance(e[2], str) for e in out)
    assert len(meta["input_token_logprobs"]) == meta["prompt_tokens"]
    assert all(len(top) == 2 for top in meta["output_top_logprobs"])


def test_generate_constraints(http):
    r = http.post("/generate", json={"text": "Answer:", "sampling_params": {
        "max_new_tokens": 10, "temperature": 0, "regex": "(yes|no)"}}).json()
    assert r["text"] in ("yes", "no")
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"],
              "additionalProperties": False}
    r = http.post("/generate", json={"text": "JSON:", "sampling_params": {
        "max_new_tokens": 20, "temperature": 0, "json_schema": json.dumps(schema)}}).json()
    assert json.loads(r["text"]) in ({"ok": True}, {"ok": False})


def test_generate_stream_cumulative(http):
    with http.stream("POST", "/generate", json={"text": "The capital of France is", "stream": True,
                                                "sampling_params": GREEDY}) as resp:
        assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/event-stream")
        events = sse_events(resp)
    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    texts = [c["text"] for c in chunks]
    assert all(b.startswith(a) for a, b in zip(texts, texts[1:]))  # cumulative
    assert chunks[-1]["meta_info"]["finish_reason"]["type"] == "length"
    full = http.post("/generate", json={"text": "The capital of France is", "sampling_params": GREEDY}).json()
    assert texts[-1] == full["text"] and chunks[-1]["output_ids"] == full["output_ids"]
    with http.stream("POST", "/generate", json={"text": ["a", "b"], "stream": True,
                                                "sampling_params": {**GREEDY, "max_new_tokens": 2}}) as resp:
        events = sse_events(resp)[:-1]
    assert {e["index"] for e in events} == {0, 1}


def test_tokenize_detokenize_model_info(http):
    t = http.post("/tokenize", json={"prompt": "hello world", "add_special_tokens": False}).json()
    assert t["count"] == len(t["tokens"]) and t["max_model_len"] == 8192
    assert http.post("/detokenize", json={"tokens": t["tokens"]}).json()["text"] == "hello world"
    info = http.get("/get_model_info").json()
    assert info["is_generation"] and info["model_path"].endswith("SmolLM2-135M-Instruct")
    assert "<|im_start|>" in info["chat_template"]  # what clients render roles with
    assert (info["bos_token"], info["eos_token"]) == ("<|im_start|>", "<|im_end|>")


def test_server_info_flush_abort_health(http, server):
    assert_idle(http)
    assert http.get("/health").status_code == 200
    assert http.get("/health_generate").status_code == 200
    assert http.post("/flush_cache").status_code == 200
    info = http.get("/server_info").json()
    assert info["evictable"] == 0 and info["free"] == info["capacity"]
    assert http.post("/abort_request", json={"rid": "no-such-rid"}).status_code == 404


def test_abort_request_mid_flight(http):
    import threading

    result = {}

    def run():
        result["r"] = http.post("/generate", json={"text": "Count:", "rid": "to-abort", "sampling_params": {
            "max_new_tokens": 2000, "ignore_eos": True, "temperature": 0}}).json()

    t = threading.Thread(target=run)
    t.start()
    wait_until(lambda: http.get("/server_info").json()["num_running"], "the request runs", interval=0.05)
    http.post("/abort_request", json={"rid": "to-abort"})
    t.join(CLIENT_TIMEOUT)
    assert not t.is_alive()
    assert result["r"]["meta_info"]["finish_reason"]["type"] == "abort"
    assert result["r"]["meta_info"]["completion_tokens"] < 2000
    assert_idle(http)


@pytest.mark.parametrize("body", [
    {},
    {"text": "a", "input_ids": [1]},
    {"text": ""},
    {"input_ids": []},
    {"input_ids": [10 ** 9]},
    {"text": "a", "sampling_params": {"no_such_param": 1}},
    {"text": "a", "sampling_params": {"temperature": -1}},
    {"text": "a", "sampling_params": {"max_new_tokens": 100000}},
    {"text": "a", "sampling_params": {"regex": "(", "max_new_tokens": 2}},
    {"text": ["a", "b"], "sampling_params": [{}]},
    {"text": ["a", "b"], "rid": "same"},
])
def test_generate_errors_are_400(http, body):
    r = http.post("/generate", json=body)
    assert r.status_code == 400, r.text
    assert set(r.json()["error"]) == {"message", "type", "param", "code"}


def test_metrics(http):
    http.post("/generate", json={"text": "Hello", "sampling_params": GREEDY})
    text = http.get("/metrics").text
    for name in ("furca_num_requests_running", "furca_num_requests_waiting", "furca_kv_cache_usage_perc",
                 "furca_prefix_cache_hit_rate", "furca_time_to_first_token_seconds_bucket",
                 "furca_inter_token_latency_seconds_bucket", "furca_e2e_request_latency_seconds_count",
                 "furca_prompt_tokens_total", "furca_generation_tokens_total",
                 "furca_grammar_compile_seconds_count"):
        assert name in text, name
    count = float(re.search(r"^furca_e2e_request_latency_seconds_count (\S+)$", text, re.M).group(1))
    assert count >= 1
