"""/metrics over a real engine (tiny random model, in process): the per-step histograms
(batch size in requests and tokens, running / waiting requests) and the per-request
cached-token fraction add up to what the requests did; the running / queued gauges match
/server_info; the step observer is removed when the app stops. One check on the live
default-model server."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from furca.server import ServerArgs, create_app
from tests.conftest import CLIENT_TIMEOUT, READY_TIMEOUT


def samples(text: str) -> dict[tuple[str, tuple], float]:
    """``{(sample name, sorted labels): value}`` of a /metrics answer."""
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def value(text: str, name: str, **labels: str) -> float:
    return samples(text)[(name, tuple(sorted(labels.items())))]


async def _with_app(engine, fn, args: ServerArgs | None = None):
    app = create_app(engine, args=args or ServerArgs())
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test", timeout=120) as c:
            return await fn(c, app)


def _body(ids: list[int], n: int) -> dict:
    return {"input_ids": ids, "sampling_params": {"max_new_tokens": n, "temperature": 0, "ignore_eos": True}}


def test_step_histograms_add_up_to_the_requests(tiny_model):
    from furca.runtime.engine import Engine

    prompts = [[5 + i % 7 for i in range(40)] + [9, 10 + k] for k in range(3)] + [[20, 21, 22]]
    lengths = [4, 6, 3, 5]

    async def fn(c, app):
        first = await c.post("/generate", json=_body(prompts[0], lengths[0]))  # then the others share its prefix
        # one batch: admitted together, so steps run several requests
        rest = await c.post("/generate", json={
            "input_ids": prompts[1:],
            "sampling_params": [_body(p, n)["sampling_params"] for p, n in zip(prompts[1:], lengths[1:])]})
        again = await c.post("/generate", json=_body(prompts[0], 2))  # all but the last prompt token cached
        metrics = (await c.get("/metrics")).text
        info = (await c.get("/server_info")).json()
        assert [r.status_code for r in (first, rest, again)] == [200] * 3, rest.text
        return [first.json(), *rest.json(), again.json()], metrics, info

    with Engine(tiny_model, max_total_tokens=2048, chunked_prefill_size=32, decode_log_interval=0,
                check_memory=True) as engine:
        answers, text, info = asyncio.run(_with_app(engine, fn))
        assert engine._loop.observers == ()  # the app removed its observer when it stopped
    metas = [a["meta_info"] for a in answers]
    assert [m["completion_tokens"] for m in metas] == [*lengths, 2]
    steps = info["stats"]["steps"]
    assert steps > 0
    # one observation per engine step
    for name in ("furca_iteration_tokens_total", "furca_iteration_requests", "furca_iteration_decode_requests",
                 "furca_iteration_prefill_tokens", "furca_iteration_running_requests",
                 "furca_iteration_waiting_requests", "furca_iteration_seconds"):
        assert value(text, name + "_count") == steps, name
    prefill = sum(m["prompt_tokens"] - m["cached_tokens"] for m in metas)
    decode = sum(m["completion_tokens"] - 1 for m in metas)
    assert value(text, "furca_iteration_prefill_tokens_sum") == prefill
    assert value(text, "furca_iteration_decode_requests_sum") == decode
    assert value(text, "furca_iteration_tokens_total_sum") == prefill + decode
    assert value(text, "furca_iteration_requests_sum") > steps  # some steps batched several requests
    assert value(text, "furca_iteration_requests_bucket", le="1.0") < steps
    # per request: the fraction of its prompt found in the cache
    assert value(text, "furca_request_cached_tokens_fraction_count") == len(metas)
    misses = sum(1 for m in metas if m["cached_tokens"] == 0)
    assert value(text, "furca_request_cached_tokens_fraction_bucket", le="0.0") == misses >= 1
    assert value(text, "furca_request_cached_tokens_fraction_sum") == pytest.approx(
        sum(m["cached_tokens"] / m["prompt_tokens"] for m in metas))
    assert metas[-1]["cached_tokens"] == len(prompts[0]) - 1
    # the gauges at rest, as /server_info says
    assert value(text, "furca_num_requests_running") == info["num_running"] == 0
    assert value(text, "furca_num_requests_waiting") == info["num_waiting"] == 0
    assert value(text, "furca_num_retracted_requests_total") == info["stats"]["retractions"] == 0
    assert value(text, "furca_new_token_ratio") == pytest.approx(info["new_token_ratio"])
    assert value(text, "furca_prefix_cache_hits") == info["stats"]["cached_tokens"] > 0


def test_running_and_queued_match_server_info_under_load(tiny_model):
    """One request runs (max_running_requests=1) while two queue in the engine."""
    from furca.runtime.engine import Engine

    async def stream(c, k):
        body = {**_body([30 + k, 31, 32], 240), "stream": True}
        async with c.stream("POST", "/generate", json=body) as r:
            async for _ in r.aiter_lines():
                pass
            return r.status_code

    def gauges(text):
        return value(text, "furca_num_requests_running"), value(text, "furca_num_requests_waiting")

    async def fn(c, app):
        tasks = [asyncio.create_task(stream(c, k)) for k in range(3)]
        seen = []
        loop = asyncio.get_running_loop()
        deadline = loop.time() + READY_TIMEOUT
        while loop.time() < deadline and not all(t.done() for t in tasks):
            before = gauges((await c.get("/metrics")).text)
            info = (await c.get("/server_info")).json()
            after = gauges((await c.get("/metrics")).text)
            if before == after and sum(before) > 0:  # nothing changed meanwhile
                seen.append((before, (info["num_running"], info["num_waiting"])))
                if before[1] >= 1:
                    break
            await asyncio.sleep(0.01)
        for rid in (await c.get("/server_info")).json()["server"]["active_rids"]:
            await c.post("/abort_request", json={"rid": rid})
        statuses = await asyncio.gather(*tasks)
        await asyncio.sleep(0)
        return seen, statuses, (await c.get("/metrics")).text, (await c.get("/server_info")).json()

    with Engine(tiny_model, max_total_tokens=2048, max_running_requests=1, decode_log_interval=0,
                check_memory=True) as engine:
        seen, statuses, text, info = asyncio.run(_with_app(engine, fn))
    assert statuses == [200, 200, 200]
    assert seen and seen[-1][0][1] >= 1, seen  # a moment with requests queued in the engine
    for metric, server_info in seen:
        assert metric == server_info and metric[0] == 1
    assert value(text, "furca_iteration_waiting_requests_sum") > 0
    assert value(text, "furca_iteration_running_requests_bucket", le="1.0") == \
        value(text, "furca_iteration_running_requests_count")  # never more than one ran
    assert gauges(text) == (info["num_running"], info["num_waiting"])


@pytest.mark.default_model
def test_live_server_metrics_show_batches(http, server):
    from tests.server.conftest import wait_idle

    body = {"messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 3, "temperature": 0}
    assert http.post("/v1/chat/completions", json=body).status_code == 200
    wait_idle(http)
    text = httpx.get(f"{server.url}/metrics", timeout=CLIENT_TIMEOUT).text  # public: no key
    info = http.get("/server_info").json()
    assert value(text, "furca_iteration_tokens_total_count") > 0
    assert value(text, "furca_iteration_requests_sum") > 0
    assert value(text, "furca_request_cached_tokens_fraction_count") > 0
    assert value(text, "furca_num_requests_running") == info["num_running"]
    assert value(text, "furca_num_requests_waiting") == info["num_waiting"]
    assert info["server"]["args"]["api_key"] == "<set>"  # never shown
    assert set(info["effective_config"]) == set(info["config"])


def test_docs_list_every_metric():
    import re
    from pathlib import Path

    from furca.server.metrics import Metrics

    doc = (Path(__file__).resolve().parents[2] / "docs" / "server.md").read_text()
    section = doc[doc.index("## Metrics"):]
    section = section[:section.index("\n## ", 1)] if "\n## " in section[1:] else section
    rows = re.findall(r"^\| (.+?) \| (gauge|histogram|counter) \|", section, re.M)
    documented = {(name, kind) for cell, kind in rows for name in re.findall(r"`(furca_[a-z0-9_]+)", cell)}
    exposed = {(c.name + ("_total" if c.type == "counter" else ""), c.type) for c in Metrics().registry.collect()}
    assert documented == exposed
