"""A dead engine is reported and the server exits (issue 12): when the scheduler dies (a
fault injected in shared bookkeeping, the radix-cache insert), the request in flight and
every later one get 503 "the engine died: <cause>", /health says "not ready: the engine
died: <cause>", and `furca serve` logs one line with the cause and exits with status 70
on its own, so a supervisor restarts it. A tiny random model keeps the served checks cheap."""

from __future__ import annotations

import asyncio
import signal

import httpx
import pytest

from tests.server.conftest import ServerProcess, _runtime_fixtures

EXIT_ENGINE_DIED = 70
DIE = {"input_ids": [5, 6, 7], "sampling_params": {"max_new_tokens": 4, "temperature": 0.0}, "rid": "die-1"}


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory):
    fx = _runtime_fixtures()
    tok = fx.build_tiny_hf_tokenizer()
    out = tmp_path_factory.mktemp("engine-death") / "tiny-llama"
    fx.build_tiny_hf_model("llama", len(tok), seed=1).save_pretrained(out)
    tok.save_pretrained(out)
    return out


def test_a_dead_engine_answers_503_and_health_says_why(tiny_model):
    from furca.runtime.engine import Engine
    from furca.runtime.faults import FaultInjector
    from furca.server import ServerArgs, create_app

    async def main(engine):
        app = create_app(engine, args=ServerArgs())
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://test", timeout=120) as c:
                assert (await c.get("/health")).status_code == 200
                died = await c.post("/generate", json=DIE)
                health = await c.get("/health")
                later = await c.post("/generate", json={**DIE, "rid": "after"})
                completion = await c.post("/v1/completions", json={"model": "default", "prompt": "hi",
                                                                   "max_tokens": 2})
                return died, health, later, completion

    with Engine(tiny_model, max_total_tokens=1024) as engine:
        engine.set_fault_injector(FaultInjector("cache", "die-"))
        died, health, later, completion = asyncio.run(main(engine))
    assert died.status_code == 503, died.text
    assert "the engine died: InjectedFault" in died.json()["error"]["message"]
    assert health.status_code == 503
    message = health.json()["error"]["message"]
    assert message.startswith("not ready: the engine died: InjectedFault: injected fault in the cache stage"), message
    for r in (later, completion):
        assert r.status_code == 503, r.text
        assert "the engine died: InjectedFault" in r.json()["error"]["message"]


def _kill_engine(srv: ServerProcess) -> None:
    r = httpx.post(f"{srv.url}/generate", json=DIE, headers=srv.headers, timeout=120)
    assert r.status_code == 503, r.text
    assert "the engine died: InjectedFault" in r.json()["error"]["message"]


def _wait_exit(srv: ServerProcess, timeout: float = 120.0) -> int:
    try:
        return srv.proc.wait(timeout)
    finally:
        srv.stop()


def test_the_server_exits_with_status_70_when_its_engine_dies(tiny_model_dir, monkeypatch):
    monkeypatch.setenv("FURCA_FAULT_INJECT", "cache:die-")
    srv = ServerProcess(str(tiny_model_dir), max_total_tokens=1024)
    try:
        srv.wait_ready()
        _kill_engine(srv)
        code = _wait_exit(srv)  # on its own: nobody signals it
    finally:
        srv.stop()
    log = srv.log_path.read_text()
    assert code == EXIT_ENGINE_DIED, log[-3000:]
    lines = [line for line in log.splitlines() if "the engine died (InjectedFault" in line]
    assert len(lines) == 1 and f"exits with status {EXIT_ENGINE_DIED}" in lines[0], log[-3000:]


def test_sigterm_around_a_dead_engine_still_exits_70(tiny_model_dir, monkeypatch):
    """SIGTERM sent as soon as the engine died: however the server ends (its own exit or
    the drain), the status says the engine died, never 0."""
    monkeypatch.setenv("FURCA_FAULT_INJECT", "cache:die-")
    srv = ServerProcess(str(tiny_model_dir), max_total_tokens=1024)
    try:
        srv.wait_ready()
        _kill_engine(srv)
        if srv.proc.poll() is None:
            srv.proc.send_signal(signal.SIGTERM)
        code = _wait_exit(srv)
    finally:
        srv.stop()
    assert code == EXIT_ENGINE_DIED, srv.log_path.read_text()[-3000:]
