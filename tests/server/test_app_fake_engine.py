"""The app in-process over a fake engine (no model): grammar compilation runs off the
event loop and has a time limit; admission limits; disconnect-free cleanup."""

from __future__ import annotations

import asyncio
import threading
import time
from types import SimpleNamespace

import httpx
import pytest

from furca.errors import EngineClosedError
from furca.runtime.output import StreamDelta
from furca.server import ServerArgs, create_app
from tests.conftest import async_wait_until


class FakeTokenizer:
    chat_template = None
    eos_token_ids = [0]
    hf = SimpleNamespace(__len__=lambda: 256, bos_token=None, eos_token=None, unk_token=None, pad_token=None)

    def encode(self, text, add_special_tokens=False):
        return [1 + (ord(c) % 250) for c in text]

    def decode(self, ids, skip_special_tokens=True):
        return "".join(chr(i) for i in ids)


class SlowBackend:
    """Compiling takes `delay` s, or (with a `gate`) blocks until the test opens the gate:
    the test then decides the order of events, not the machine's speed. create_matcher
    compiles unless cached."""

    def __init__(self, delay: float, gate: threading.Event | None = None):
        self.delay, self.cache, self.lock = delay, set(), threading.Lock()
        self.gate, self.compiling = gate, threading.Event()
        self.loop_compiles = 0

    def compile(self, params):
        with self.lock:
            if params.constraint in self.cache:
                return
        self.compiling.set()
        if self.gate is not None:
            assert self.gate.wait(600), "the test never opened the gate"
        else:
            time.sleep(self.delay)
        with self.lock:
            self.cache.add(params.constraint)

    def create_matcher(self, params):
        if params.constraint not in self.cache:
            self.loop_compiles += 1
            self.compile(params)
        return object()


class FakeEngine:
    def __init__(self, delay: float = 0.0, token_s: float = 0.005, fail_after: int | None = None):
        self.tokenizer = FakeTokenizer()
        self.context_length, self.capacity = 512, 4096
        self.config = SimpleNamespace(max_running_requests=2)
        self.generation_defaults, self.model_path, self.is_closed = {}, None, False
        self.grammar_backend = SlowBackend(delay)
        self.token_s, self.fail_after = token_s, fail_after
        self.aborted: list[str] = []

    async def async_generate(self, prompt=None, *, input_ids=None, sampling_params=None, rid=None, stream=False):
        p = sampling_params
        if p.has_constraint:
            self.grammar_backend.create_matcher(p)  # as the real engine: on the caller's thread
        engine = self

        async def gen():
            for i in range(p.max_new_tokens):
                await asyncio.sleep(engine.token_s)
                if engine.fail_after is not None and i >= engine.fail_after:
                    raise EngineClosedError("the engine was shut down")
                if rid in engine.aborted:
                    yield StreamDelta(rid, "", [], True, _meta(rid, i, "abort"))
                    return
                last = i == p.max_new_tokens - 1
                yield StreamDelta(rid, "x", [120], last, _meta(rid, i + 1, "length") if last else None)

        return gen()

    def abort(self, rid):
        self.aborted.append(rid)

    def get_server_info(self):
        return {"num_running": 0, "num_waiting": 0, "capacity": 4096, "used_tokens": 0, "stats": {}}


def _meta(rid, n, kind):
    return {"id": rid, "prompt_tokens": 3, "completion_tokens": n, "cached_tokens": 0,
            "finish_reason": {"type": kind}}


async def _with_app(engine, args, fn):
    app = create_app(engine, args=args)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test", timeout=30) as c:
            return await fn(c, app)


CHAT = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}


def test_compile_runs_off_the_loop():
    """/health answers while a compile is blocked (the compile waits for the test to open
    its gate: were it on the event loop, /health could not answer before that)."""
    gate = threading.Event()
    engine = FakeEngine()
    engine.grammar_backend = SlowBackend(0, gate)

    async def fn(c, app):
        task = asyncio.create_task(c.post("/v1/chat/completions", json={**CHAT, "regex": "[a-z]+"}))
        await async_wait_until(engine.grammar_backend.compiling.is_set, "the compile started")
        health = await c.get("/health")
        compiling_when_answered = not gate.is_set()
        gate.set()
        r = await task
        return health, compiling_when_answered, r

    try:
        health, compiling_when_answered, r = asyncio.run(_with_app(engine, ServerArgs(grammar_timeout=600), fn))
    finally:
        gate.set()
    assert health.status_code == 200 and compiling_when_answered  # answered while the grammar compiled
    assert r.status_code == 200, r.text
    assert engine.grammar_backend.loop_compiles == 0  # the engine's own call hit the cache


def test_compile_time_limit_is_400():
    gate = threading.Event()  # the compile ends only once the answer is in: it cannot win the race
    engine = FakeEngine()
    engine.grammar_backend = SlowBackend(0, gate)

    async def fn(c, app):
        try:
            return await c.post("/v1/chat/completions", json={**CHAT, "regex": "[0-9]+"})
        finally:
            gate.set()

    r = asyncio.run(_with_app(engine, ServerArgs(grammar_timeout=0.2), fn))
    assert r.status_code == 400 and "did not compile within 0.2 s" in r.json()["error"]["message"]


def test_admission_limit_and_release():
    engine = FakeEngine(token_s=0.05)

    async def fn(c, app):
        state = app.state.furca
        long = [asyncio.create_task(c.post("/v1/chat/completions", json={**CHAT, "max_tokens": 400}))
                for _ in range(3)]
        # all three admitted; 400 tokens of 50 ms each: none ends on its own before the abort
        await async_wait_until(lambda: state.num_inflight == 3, "three requests in flight")
        over = await c.post("/v1/chat/completions", json=CHAT)
        for rid in list(state.active_rids):
            engine.abort(rid)
        done = await asyncio.gather(*long)
        after = await c.post("/v1/chat/completions", json=CHAT)
        return over, done, after, state.num_inflight, set(state.active_rids)

    over, done, after, inflight, rids = asyncio.run(
        _with_app(engine, ServerArgs(max_queued_requests=1), fn))
    assert over.status_code == 429 and over.json()["error"]["type"] == "RateLimitError"
    assert all(r.status_code == 200 for r in done) and after.status_code == 200
    assert inflight == 0 and rids == set()


def test_metrics_and_unknown_route():
    async def fn(c, app):
        await c.post("/v1/chat/completions", json=CHAT)
        return await c.get("/metrics"), await c.get("/no/such/route")

    metrics, missing = asyncio.run(_with_app(FakeEngine(), ServerArgs(), fn))
    assert "furca_time_to_first_token_seconds_count 1.0" in metrics.text
    assert missing.status_code == 404 and missing.json()["error"]["type"] == "NotFoundError"


@pytest.mark.parametrize("auth, status", [(None, 401), ("Bearer nope", 401), ("Bearer k1", 200)])
def test_api_key(auth, status):
    async def fn(c, app):
        headers = {"Authorization": auth} if auth else {}
        return await c.get("/v1/models", headers=headers), await c.get("/health")

    r, health = asyncio.run(_with_app(FakeEngine(), ServerArgs(api_key="k1"), fn))
    assert r.status_code == status and health.status_code == 200


def test_request_larger_than_the_admission_limit_is_400():
    async def fn(c, app):
        return await c.post("/v1/chat/completions", json={**CHAT, "n": 5})

    r = asyncio.run(_with_app(FakeEngine(), ServerArgs(max_queued_requests=1), fn))
    assert r.status_code == 400 and r.json()["error"]["param"] == "n"


def test_engine_failure_mid_stream_is_an_error_event():
    async def fn(c, app):
        r = await c.post("/v1/chat/completions", json={**CHAT, "max_tokens": 5, "stream": True})
        return r, app.state.furca.num_inflight

    r, inflight = asyncio.run(_with_app(FakeEngine(fail_after=2), ServerArgs(), fn))
    events = [line[6:] for line in r.text.splitlines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    err = httpx.Response(200, content=events[-2]).json()["error"]
    assert err["code"] == 503 and "shut down" in err["message"] and inflight == 0


class SampleRidEngine(FakeEngine):
    """Spells its sample rids its own way: deltas reach their output by (group_rid, index)."""

    async def async_generate(self, prompt=None, *, input_ids=None, sampling_params=None, rid=None, stream=False):
        batch = isinstance(rid, list)
        rids, params = (rid, sampling_params) if batch else ([rid], [sampling_params])
        engine = self

        async def gen():
            for step in range(3):
                for r, p in zip(rids, params):
                    for j in range(p.n):
                        if step >= p.max_new_tokens:
                            continue
                        await asyncio.sleep(engine.token_s)
                        last = step == p.max_new_tokens - 1
                        yield StreamDelta(f"sample#{j}@{r}", f"{r[-1]}{j}", [100 + j], last,
                                          _meta(r, step + 1, "length") if last else None, index=j, group_rid=r)

        return gen()


def test_stream_deltas_map_to_choices_by_their_index():
    async def fn(c, app):
        chat = await c.post("/v1/chat/completions", json={**CHAT, "n": 3, "max_tokens": 2})
        native = await c.post("/generate", json={"input_ids": [[5], [6]], "rid": ["pa", "pb"],
                                                 "sampling_params": [{"max_new_tokens": 1, "n": 2},
                                                                     {"max_new_tokens": 2}]})
        return chat, native

    chat, native = asyncio.run(_with_app(SampleRidEngine(), ServerArgs(), fn))
    assert chat.status_code == 200, chat.text
    choices = sorted(chat.json()["choices"], key=lambda ch: ch["index"])
    suffix = [ch["message"]["content"][-1] for ch in choices]
    assert suffix == ["0", "1", "2"] and all(len(ch["message"]["content"]) == 4 for ch in choices)
    assert native.status_code == 200, native.text
    assert [o["text"] for o in native.json()] == ["a0", "a1", "b0b0"]
