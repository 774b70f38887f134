"""``max_queue_time``: a request that waits longer than that to be admitted the first time
is dropped with QueueTimeoutError (the server answers 503 with Retry-After); one admitted
in time runs as usual. The scheduler is held by a step observer while a request queues,
so no test depends on how fast the machine is: only on a wait being longer than a limit."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from furca.errors import QueueTimeoutError
from furca.runtime.engine import Engine

LONG = {"max_new_tokens": 8, "temperature": 0.0, "ignore_eos": True}
SHORT = {"max_new_tokens": 2, "temperature": 0.0, "ignore_eos": True}


class Hold:
    """A step observer that blocks the scheduler thread after its first step until released."""

    def __init__(self):
        self.held, self.release = threading.Event(), threading.Event()

    def __call__(self, stats) -> None:
        if not self.release.is_set():
            self.held.set()
            self.release.wait(120)


def _wait_queued(engine, n: int = 1, deadline: float = 120.0) -> None:
    """Until `n` requests sit in the engine's inbox (the held scheduler cannot take them)."""
    end = time.monotonic() + deadline
    while len(engine._loop.inbox) < n:  # noqa: SLF001 - the test holds the scheduler
        assert time.monotonic() < end, "the request never reached the engine"
        time.sleep(0.01)


def test_a_request_waiting_past_max_queue_time_fails(tiny_engine_model):
    loaded, _ = tiny_engine_model
    with Engine(loaded, max_total_tokens=1024, max_running_requests=1, max_queue_time=0.2) as engine:
        hold = Hold()
        engine.add_step_observer(hold)
        first = engine.generate(input_ids=[5, 6, 7], sampling_params=LONG, stream=True)  # runs
        assert hold.held.wait(120)
        result: dict[str, object] = {}

        def waiter() -> None:
            try:
                result["out"] = engine.generate(input_ids=[8, 9], sampling_params=SHORT, rid="late")
            except Exception as e:  # noqa: BLE001 - checked below
                result["out"] = e

        t = threading.Thread(target=waiter)
        t.start()
        _wait_queued(engine)
        time.sleep(0.3)  # the queued request has now waited longer than 0.2 s
        hold.release.set()
        t.join(120)
        err = result["out"]
        assert isinstance(err, QueueTimeoutError), err
        assert "request late waited" in str(err) and "max_queue_time (0.2 s)" in str(err)
        ids: list[int] = []
        for delta in first:  # the running request is untouched
            delta.apply_ids(ids)
        assert len(ids) == 8
        engine.check_memory(idle=True)
        assert engine.get_server_info()["stats"]["queue_timeouts"] == 1
        out = engine.generate(input_ids=[8, 9], sampling_params=SHORT, rid="late")  # the rid is free again
        assert len(out.output_ids) == 2


def test_a_request_admitted_in_time_runs(tiny_engine_model):
    loaded, _ = tiny_engine_model
    with Engine(loaded, max_total_tokens=1024, max_running_requests=1, max_queue_time=600) as engine:
        outs = engine.generate(input_ids=[[5, 6, 7], [8, 9], [10, 11]], sampling_params=LONG)
        assert [len(o.output_ids) for o in outs] == [8, 8, 8]  # two of them queued behind the first
        assert engine.get_server_info()["stats"]["queue_timeouts"] == 0


def test_the_server_answers_a_queue_timeout_503_with_retry_after(tiny_engine_model):
    import httpx

    from furca.server import ServerArgs, create_app

    loaded, _ = tiny_engine_model
    with Engine(loaded, max_total_tokens=1024, max_running_requests=1, max_queue_time=0.2) as engine:
        hold = Hold()
        engine.add_step_observer(hold)
        first = engine.generate(input_ids=[5, 6, 7], sampling_params=LONG, stream=True)
        assert hold.held.wait(120)

        async def main():
            app = create_app(engine, args=ServerArgs())
            async with app.router.lifespan_context(app):
                transport = httpx.ASGITransport(app=app)
                async with httpx.AsyncClient(transport=transport, base_url="http://test", timeout=120) as c:
                    task = asyncio.ensure_future(
                        c.post("/generate", json={"input_ids": [8, 9], "sampling_params": SHORT}))
                    await asyncio.to_thread(_wait_queued, engine)
                    await asyncio.sleep(0.3)
                    hold.release.set()
                    return await task

        r = asyncio.run(main())
        assert r.status_code == 503, r.text
        assert r.headers["retry-after"] == "5"
        body = r.json()["error"]
        assert body["code"] == "queue_timeout" and "max_queue_time" in body["message"]
        assert sum(1 for _ in first) >= 1
        engine.check_memory(idle=True)


def test_max_queue_time_must_be_positive():
    from furca.errors import ConfigError
    from furca.runtime.config import EngineConfig

    for bad in (0, -1, float("nan"), float("inf"), True, "5"):
        with pytest.raises(ConfigError, match="max_queue_time"):
            EngineConfig(max_queue_time=bad)
    assert EngineConfig(max_queue_time=1.5).max_queue_time == 1.5
