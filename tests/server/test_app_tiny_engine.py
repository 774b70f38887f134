"""The app in-process over a real `Engine` on a tiny random model (no download): the
server uses the engine's grammar backend, /get_model_info tells clients the chat
template and special tokens, and stream deltas reach their choice by their index."""

from __future__ import annotations

import asyncio

import httpx

from furca.server import ServerArgs, create_app




def _run(engine, args, fn):
    async def main():
        app = create_app(engine, args=args)
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://test", timeout=60) as c:
                return await fn(c, app)

    return asyncio.run(main())


def test_the_server_uses_the_engines_grammar_backend(tiny_model):
    import furca.server.grammar as server_grammar
    from furca.runtime.engine import Engine
    from furca.runtime.grammar_backend import ConstrainBackend

    assert not hasattr(server_grammar, "ConstrainBackend")  # one backend: the runtime's
    body = {"input_ids": [5, 6, 7], "sampling_params": {"max_new_tokens": 4, "regex": "[0-9]{2}"}}

    async def fn(c, app):
        r = await c.post("/generate", json=body)
        return r, (await c.get("/metrics")).text

    with Engine(tiny_model, max_total_tokens=1024) as engine:
        backend = engine.grammar_backend
        assert isinstance(backend, ConstrainBackend)
        r, metrics = _run(engine, ServerArgs(), fn)
        assert engine.grammar_backend is backend  # not replaced by the server
    assert r.status_code == 200, r.text
    out = r.json()
    assert len(out["text"]) == 2 and out["text"].isdigit()
    assert "furca_grammar_compile_seconds_count 1.0" in metrics  # precompiled through backend.compile

    # an engine without constrained decoding stays without: the engine rejects the request
    with Engine(tiny_model, max_total_tokens=1024, grammar_backend=False) as engine:
        r, _ = _run(engine, ServerArgs(), fn)
        assert engine.grammar_backend is None
    assert r.status_code == 400 and "constrained decoding not available" in r.json()["error"]["message"]


def test_model_info_has_the_chat_template_and_special_tokens(tiny_model):
    from furca.runtime.engine import Engine

    custom = "{{ bos_token }}{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}{{ eos_token }}"

    async def fn(c, app):
        return (await c.get("/get_model_info")).json()

    with Engine(tiny_model, max_total_tokens=1024) as engine:
        info = _run(engine, ServerArgs(), fn)
        assert info["chat_template"] == engine.tokenizer.chat_template and "<|im_start|>" in info["chat_template"]
        assert (info["bos_token"], info["eos_token"]) == ("<|im_start|>", "<|im_end|>")
        info = _run(engine, ServerArgs(chat_template=custom), fn)  # --chat-template: the one it renders with
        assert info["chat_template"] == custom


def test_chat_template_override_renders_through_the_tokenizer(tiny_model):
    from furca.runtime.engine import Engine

    custom = "{{ bos_token }}{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}"

    async def fn(c, app):
        r = await c.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}],
                                                       "max_tokens": 1})
        return r, app.state.furca.renderer.render([{"role": "user", "content": "hi"}])

    with Engine(tiny_model, max_total_tokens=1024) as engine:
        r, text = _run(engine, ServerArgs(chat_template=custom), fn)
    assert r.status_code == 200, r.text
    assert text == "<|im_start|><user>hi" and r.json()["usage"]["prompt_tokens"] == len(
        tiny_model.tokenizer.encode(text))


def test_n_samples_of_a_batch_map_to_their_outputs(tiny_model):
    from furca.runtime.engine import Engine

    body = {"input_ids": [[5, 6, 7], [8, 9]], "stream": True,
            "sampling_params": [{"max_new_tokens": 3, "n": 2, "temperature": 1.0, "seed": 3, "ignore_eos": True},
                                {"max_new_tokens": 2, "n": 3, "temperature": 1.0, "seed": 4, "ignore_eos": True}]}

    async def fn(c, app):
        r = await c.post("/generate", json=body)
        plain = await c.post("/generate", json={**body, "stream": False})
        return r, plain

    with Engine(tiny_model, max_total_tokens=1024) as engine:
        r, plain = _run(engine, ServerArgs(), fn)
    assert r.status_code == 200 and plain.status_code == 200
    import json

    events = [json.loads(line[6:]) for line in r.text.splitlines() if line.startswith("data: {")]
    last = {}
    for e in events:
        last[e["index"]] = e
    assert sorted(last) == [0, 1, 2, 3, 4]
    assert [len(last[i]["output_ids"]) for i in range(5)] == [3, 3, 2, 2, 2]
    assert [o["output_ids"] for o in plain.json()] == [last[i]["output_ids"] for i in range(5)]
