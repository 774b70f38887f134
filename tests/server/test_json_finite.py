"""Logprobs of tokens a constraint forbids are ``-inf``; JSON has no infinity. Every answer
(JSON and SSE, OpenAI and native) carries them as -9999.0, vLLM's stand-in, never a 500.
schemathesis found this: ``/v1/completions`` with a regex and ``logprobs: 20``."""

from __future__ import annotations

import asyncio
import json
import math

import httpx

from furca.server import ServerArgs, create_app
from furca.server.jsonout import NEG_INF_LOGPROB, json_text


def _numbers(obj):
    if isinstance(obj, float):
        yield obj
    elif isinstance(obj, dict):
        for v in obj.values():
            yield from _numbers(v)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            yield from _numbers(v)


def test_json_text_replaces_non_finite_floats():
    obj = {"a": [float("-inf"), 1.5, {"b": float("inf")}], "c": float("nan"), "d": "x"}
    assert json.loads(json_text(obj)) == {"a": [NEG_INF_LOGPROB, 1.5, {"b": -NEG_INF_LOGPROB}], "c": None, "d": "x"}
    assert json_text({"a": 1.0}) == json.dumps({"a": 1.0})  # finite bodies are left alone


def test_constrained_logprobs_are_finite_in_every_answer(tiny_model):
    from furca.runtime.engine import Engine

    async def fn(c):
        out = {}
        # 20 alternatives, but the regex allows only a few tokens at each position
        body = {"prompt": "hello", "regex": "[ab]{2}", "logprobs": 20, "max_tokens": 4, "temperature": 0}
        out["completions"] = await c.post("/v1/completions", json=body)
        out["completions_stream"] = await c.post("/v1/completions", json={**body, "stream": True})
        chat = {"messages": [{"role": "user", "content": "hi"}], "regex": "[ab]{2}", "logprobs": True,
                "top_logprobs": 20, "max_tokens": 4, "temperature": 0}
        out["chat"] = await c.post("/v1/chat/completions", json=chat)
        native = {"input_ids": [5, 6, 7], "return_logprob": True, "top_logprobs_num": 20,
                  "sampling_params": {"max_new_tokens": 4, "regex": "[ab]{2}", "temperature": 0}}
        out["generate"] = await c.post("/generate", json=native)
        out["generate_stream"] = await c.post("/generate", json={**native, "stream": True})
        return out

    async def main(engine):
        app = create_app(engine, args=ServerArgs())
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://test", timeout=60) as c:
                return await fn(c)

    with Engine(tiny_model, max_total_tokens=1024) as engine:
        answers = asyncio.run(main(engine))
    saw_stand_in = False
    for name, r in answers.items():
        assert r.status_code == 200, (name, r.text)
        if name.endswith("stream"):
            events = [line[len("data: "):] for line in r.text.splitlines() if line.startswith("data: ")]
            assert events[-1] == "[DONE]", (name, r.text[-500:])
            bodies = [json.loads(e) for e in events[:-1]]
            assert not any("error" in b for b in bodies), (name, r.text[-500:])
        else:
            bodies = [r.json()]
        values = [x for b in bodies for x in _numbers(b)]
        assert all(math.isfinite(x) for x in values), name
        saw_stand_in |= NEG_INF_LOGPROB in values
    assert saw_stand_in  # the forbidden alternatives really were there, as the stand-in
