"""Native /generate over a real `Engine` on a tiny random model (no download), where
jump-forward re-tokenization takes back token ids that were already streamed: the
server applies each delta's ``retract``, so every SSE event's cumulative
``output_ids`` is the output so far and the last one equals the engine's final
``output_ids`` (as does the non-streamed answer, built from the same deltas)."""

from __future__ import annotations

import asyncio
import json

import httpx

from furca.server import ServerArgs, create_app

SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string", "maxLength": 8},
                   "version": {"type": "integer", "minimum": 0, "maximum": 999},
                   "tags": {"type": "array", "items": {"enum": ["llm", "json"]}, "maxItems": 3},
                   "ok": {"type": "boolean"}},
    "required": ["name", "version", "tags", "ok"],
    "additionalProperties": False,
}
PROMPTS = ["Hello", "The quick brown fox", "Paris is"]




def _events(text: str) -> list[dict]:
    return [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: {")]


def test_native_stream_output_ids_follow_retractions(tiny_model):
    from furca.runtime.engine import Engine

    params = [{"json_schema": SCHEMA, "temperature": 1.0 if i else 0.0, "seed": i, "max_new_tokens": 80}
              for i in range(len(PROMPTS))]

    async def fn(c):
        streamed, plain = [], []
        for prompt, p in zip(PROMPTS, params):
            body = {"text": prompt, "sampling_params": p}
            streamed.append(await c.post("/generate", json={**body, "stream": True}))
            plain.append(await c.post("/generate", json=body))
        return streamed, plain

    async def main(engine):
        app = create_app(engine, args=ServerArgs())
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://test", timeout=120) as c:
                return await fn(c)

    with Engine(tiny_model, max_total_tokens=2048, check_memory=True) as engine:
        streamed, plain = asyncio.run(main(engine))
        # the engine's own view of the same requests: final outputs, and the retractions
        finals = [engine.generate(prompt, sampling_params=p) for prompt, p in zip(PROMPTS, params)]
        retracted = sum(d.retract for prompt, p in zip(PROMPTS, params)
                        for d in engine.generate(prompt, sampling_params=p, stream=True))
        engine.check_memory(idle=True)
    assert retracted > 0  # ids really were taken back mid-stream
    for r, q, final in zip(streamed, plain, finals):
        assert r.status_code == 200 and q.status_code == 200, (r.text, q.text)
        events = _events(r.text)
        last = events[-1]
        assert last["text"] == final.text and last["output_ids"] == final.output_ids
        assert last["meta_info"]["completion_tokens"] == len(final.output_ids)
        for e in events[:-1]:  # each event: the output so far, counted right
            assert e["meta_info"]["completion_tokens"] == len(e["output_ids"])
            assert final.text.startswith(e["text"])
        assert q.json()["output_ids"] == final.output_ids and q.json()["text"] == final.text
