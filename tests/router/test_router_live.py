"""DP=2 on the default model: two `furca serve` replicas behind `furca router`.

The tests run in file order: the last one kills a replica.
"""

from __future__ import annotations

import json
import random
import signal
import threading
from concurrent.futures import ThreadPoolExecutor

import httpx
import openai
import pytest

from tests.conftest import CLIENT_TIMEOUT, wait_until
from tests.router.conftest import RouterProcess
from tests.server.conftest import API_KEY, MODEL_NAME, ServerProcess, assert_idle

AUTH = {"Authorization": f"Bearer {API_KEY}"}


@pytest.fixture(scope="module")
def replicas():
    procs = [ServerProcess(), ServerProcess()]
    try:
        for p in procs:
            p.wait_ready()
        yield procs
    finally:
        for p in procs:
            p.stop()


@pytest.fixture(scope="module")
def router(replicas):
    proc = RouterProcess([r.url for r in replicas], api_key=API_KEY)  # the replicas' key, checked at the router too
    try:
        proc.wait_healthy(2)
        yield proc
    finally:
        proc.stop()


def _client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key=API_KEY, max_retries=0, timeout=CLIENT_TIMEOUT)


def _programs(seed: int) -> list[str]:
    """4 system prompts of ~300 tokens, each its own (random facts, so no replica has them)."""
    rng = random.Random(seed)
    words = ["river", "copper", "lantern", "meadow", "violet", "harbor", "quartz", "ember", "willow", "cobalt"]
    return [f"You are assistant {p}. Facts: " + ", ".join(f"{rng.choice(words)} {rng.randrange(10**4)}"
                                                          for _ in range(60)) for p in range(4)]


ORDER = [0, 1, 2, 3, 1, 0, 3, 2, 2, 1, 0, 3]  # interleaved; round-robin would split each program


def _run_sequence(client: openai.OpenAI, systems: list[str]) -> tuple[list[int], list[str]]:
    cached, served_by = [], []
    for turn, p in enumerate(ORDER):
        raw = client.chat.completions.with_raw_response.create(
            model=MODEL_NAME, max_tokens=2, temperature=0,
            messages=[{"role": "system", "content": systems[p]}, {"role": "user", "content": f"Question {turn}?"}])
        answer = raw.parse()
        cached.append(answer.usage.prompt_tokens_details.cached_tokens)
        served_by.append(raw.headers.get("x-furca-replica", ""))
    return cached, served_by


def test_cache_aware_routing_keeps_each_prefix_on_one_replica(replicas, router):
    systems = _programs(seed=1)
    alone, _ = _run_sequence(_client(replicas[0].url), systems)  # one replica, the same sequence
    for r in replicas:
        assert httpx.post(f"{r.url}/flush_cache", headers=AUTH, timeout=CLIENT_TIMEOUT).status_code == 200
    routed, served_by = _run_sequence(_client(router.url), systems)
    homes = {p: {served_by[i] for i, q in enumerate(ORDER) if q == p} for p in range(4)}
    assert all(len(h) == 1 for h in homes.values()), homes
    assert set.union(*homes.values()) == {r.url for r in replicas}  # both replicas got programs
    assert sum(alone) > 0
    assert sum(routed) >= 0.9 * sum(alone), (routed, alone)


def test_openai_client_streams_through_the_router(router):
    client = _client(router.url)
    messages = [{"role": "user", "content": "Name a color."}]
    whole = client.chat.completions.create(model=MODEL_NAME, messages=messages, max_tokens=4, temperature=0)
    chunks = list(client.chat.completions.create(model=MODEL_NAME, messages=messages, max_tokens=4,
                                                 temperature=0, stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == whole.choices[0].message.content
    assert chunks[-1].choices[0].finish_reason == whole.choices[0].finish_reason
    text = "".join(c.choices[0].text for c in client.completions.create(
        model=MODEL_NAME, prompt="The sky is", max_tokens=3, temperature=0, stream=True))
    assert text == client.completions.create(model=MODEL_NAME, prompt="The sky is", max_tokens=3,
                                             temperature=0).choices[0].text
    assert [m.id for m in client.models.list()] == [MODEL_NAME]


def test_native_generate_stream_and_errors_pass_through(router):
    with httpx.Client(base_url=router.url, headers=AUTH, timeout=CLIENT_TIMEOUT) as http:
        events = []
        with http.stream("POST", "/generate", json={"text": "Once upon a time", "stream": True,
                                                     "sampling_params": {"max_new_tokens": 3, "temperature": 0}}) as resp:
            assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/event-stream")
            events = [line[len("data: "):] for line in resp.iter_lines() if line.startswith("data: ")]
        assert events[-1] == "[DONE]"
        last = json.loads(events[-2])
        assert last["meta_info"]["completion_tokens"] == 3
        whole = http.post("/generate", json={"text": "Once upon a time", "sampling_params": {"max_new_tokens": 3, "temperature": 0}})
        assert whole.json()["text"] == last["text"]
        bad = http.post("/v1/chat/completions", json={"model": MODEL_NAME, "max_tokens": "4",
                                                      "messages": [{"role": "user", "content": "hi"}]})
        assert bad.status_code == 400 and bad.json()["error"]["param"] == "max_tokens"
        assert httpx.post(f"{router.url}/generate", json={"text": "hi"}, timeout=30).status_code == 401


def test_health_workers_and_metrics_are_aggregated(replicas, router):
    from prometheus_client.parser import text_string_to_metric_families

    assert httpx.get(f"{router.url}/health", timeout=30).status_code == 200
    workers = router.workers()
    assert [w["url"] for w in workers] == [r.url for r in replicas] and all(w["healthy"] for w in workers)
    for text in ("one", "two"):
        answer = httpx.post(f"{router.url}/generate", headers=AUTH, timeout=CLIENT_TIMEOUT,
                            json={"text": text, "sampling_params": {"max_new_tokens": 1}})
        assert answer.status_code == 200
    merged = {f.name: f for f in text_string_to_metric_families(httpx.get(f"{router.url}/metrics", timeout=60).text)}
    for r in replicas:  # each replica's samples, labelled with its URL
        own = {f.name: f for f in text_string_to_metric_families(httpx.get(f"{r.url}/metrics", timeout=60).text)}
        for name in ("furca_prompt_tokens", "furca_requests"):
            mine = [(s.name, s.labels, s.value) for s in own[name].samples]
            theirs = [(s.name, {k: v for k, v in s.labels.items() if k != "replica"}, s.value)
                      for s in merged[name].samples if s.labels["replica"] == r.url]
            assert mine == theirs and mine
    healthy = {s.labels["replica"]: s.value for s in merged["furca_router_replica_healthy"].samples}
    assert healthy == {r.url: 1.0 for r in replicas}
    routed = {s.labels["replica"]: s.value for s in merged["furca_router_requests"].samples
              if s.name == "furca_router_requests_total"}
    assert set(routed) == {r.url for r in replicas} and sum(routed.values()) >= 2


def test_the_router_refuses_a_request_without_the_key_before_routing_it(router):
    before = router.workers()
    for path, call in (("/generate", httpx.post), ("/v1/chat/completions", httpx.post), ("/workers", httpx.get),
                       ("/flush_cache", httpx.post)):
        kwargs = {"json": {"text": "a prompt no replica sees " * 20}} if call is httpx.post else {}
        answer = call(f"{router.url}{path}", headers={"Authorization": "Bearer wrong"}, timeout=CLIENT_TIMEOUT,
                      **kwargs)
        assert answer.status_code == 401, (path, answer.text)
        assert answer.json()["error"]["code"] == "invalid_api_key" and answer.headers["www-authenticate"] == "Bearer"
    after = router.workers()  # nothing was routed, nothing entered a prefix tree
    assert [(w["routed"], w["tree_chars"]) for w in after] == [(w["routed"], w["tree_chars"]) for w in before]
    assert httpx.get(f"{router.url}/health", timeout=30).status_code == 200  # probes and scrapers need no key
    assert httpx.get(f"{router.url}/metrics", timeout=60).status_code == 200


def test_a_session_stays_on_its_replica_and_a_program_runs_through_the_router(router):
    import furca as sgl
    from furca.lang.backends.runtime_endpoint import RuntimeEndpoint

    with httpx.Client(base_url=router.url, headers=AUTH, timeout=CLIENT_TIMEOUT) as http:
        opened = http.post("/open_session", json={})
        assert opened.status_code == 200
        session, home = opened.json(), opened.headers["x-furca-replica"]
        for turn in range(3):
            answer = http.post("/generate", json={"text": f"Turn {turn}: hello", "session_id": session,
                                                  "sampling_params": {"max_new_tokens": 1}})
            assert answer.status_code == 200 and answer.headers["x-furca-replica"] == home
            assert answer.json()["meta_info"]["session_id"] == session
        assert http.post("/close_session", json={"session_id": session}).status_code == 200

    @sgl.function
    def qa(s, question):
        s += sgl.user(question)
        s += sgl.assistant(sgl.gen("answer", max_tokens=3, temperature=0))

    backend = RuntimeEndpoint(router.url, api_key=API_KEY)
    try:
        state = qa.run(question="What is 2 + 2?", backend=backend)
        assert state["answer"] and state.get_meta_info("answer")["completion_tokens"] <= 3
    finally:
        backend.close()


def test_a_client_that_leaves_aborts_its_request_at_the_replica(replicas, router):
    """A JSON request whose client disconnects: the router closes its request to the
    replica, which aborts it (without that the replica would decode 4,000 tokens)."""
    import asyncio

    def running() -> int:
        return sum(httpx.get(f"{r.url}/server_info", headers=AUTH, timeout=60).json()["num_running"]
                   for r in replicas)

    async def leave() -> None:
        async with httpx.AsyncClient(base_url=router.url, headers=AUTH, timeout=CLIENT_TIMEOUT) as http:
            task = asyncio.ensure_future(http.post("/generate", json={
                "text": "Write forever", "sampling_params": {"max_new_tokens": 4000, "ignore_eos": True}}))
            while not await asyncio.to_thread(running):
                assert not task.done(), task.result().text
                await asyncio.sleep(0.1)
            task.cancel()

    asyncio.run(leave())
    for r in replicas:
        with httpx.Client(base_url=r.url, headers=AUTH, timeout=CLIENT_TIMEOUT) as direct:
            assert_idle(direct, timeout=120)
    wait_until(lambda: all(w["load"] == 0 for w in router.workers()), "the router's load back to 0")


def test_a_hung_replica_fails_its_requests_and_comes_back(replicas, router):
    """Replica 0 stopped (SIGSTOP) behind a router of its own with short health checks: its
    in-flight requests end with a 503 naming it (not a hang), /health says no replica;
    once it runs again (SIGCONT) it serves again."""
    hung = replicas[0]
    solo = RouterProcess([hung.url], "--health-timeout", "2", "--health-failures", "3")
    http = httpx.Client(base_url=solo.url, headers=AUTH, timeout=CLIENT_TIMEOUT)
    pool = ThreadPoolExecutor(1)
    try:
        solo.wait_healthy(1)
        long = {"max_new_tokens": 2000, "ignore_eos": True}
        cm = http.stream("POST", "/generate", json={"text": "Keep going", "stream": True, "sampling_params": long})
        lines = (line for line in cm.__enter__().iter_lines() if line.startswith("data: "))
        assert next(lines)  # the stream runs
        plain = pool.submit(http.post, "/generate", json={"text": "And this", "sampling_params": long})
        wait_until(lambda: solo.workers()[0]["load"] == 2, "both requests in flight")
        hung.proc.send_signal(signal.SIGSTOP)
        try:
            answer = plain.result()
            assert answer.status_code == 503 and hung.url in answer.json()["error"]["message"], answer.text
            tail = list(lines)
            assert tail[-1] == "data: [DONE]" and json.loads(tail[-2][6:])["error"]["code"] == 503
            cm.__exit__(None, None, None)
            assert httpx.get(f"{solo.url}/health", timeout=30).status_code == 503
            refused = http.post("/generate", json={"text": "hi", "sampling_params": {"max_new_tokens": 1}})
            assert refused.status_code == 503 and refused.headers["retry-after"]
        finally:
            hung.proc.send_signal(signal.SIGCONT)
        solo.wait_healthy(1)
        router.wait_healthy(2)  # the module's router saw it hang too
        answer = http.post("/generate", json={"text": "Back", "sampling_params": {"max_new_tokens": 1}})
        assert answer.status_code == 200
        assert_idle(httpx.Client(base_url=hung.url, headers=AUTH, timeout=CLIENT_TIMEOUT))
    finally:
        pool.shutdown()
        http.close()
        solo.stop()


def test_a_killed_replica_fails_only_its_own_requests(replicas, router):
    """Through a round-robin router (fresh: its turns start at replica 0): two streams and
    two plain requests in flight on each replica; replica 1 is killed. Its requests end
    with a router error at once; replica 0's keep going; new requests go to replica 0."""
    rr = RouterProcess([r.url for r in replicas], "--policy", "round_robin")
    try:
        rr.wait_healthy(2)
        http = httpx.Client(base_url=rr.url, headers=AUTH, timeout=CLIENT_TIMEOUT)
        long = {"max_new_tokens": 2000, "ignore_eos": True}
        streams, lines = [], []
        for i in range(2):
            cm = http.stream("POST", "/generate", json={"text": f"Count: {i}", "stream": True, "sampling_params": long})
            resp = cm.__enter__()
            streams.append((cm, resp))
            lines.append(resp.iter_lines())
            assert next(line for line in lines[i] if line.startswith("data: "))  # running
        assert [r.headers["x-furca-replica"] for _, r in streams] == [replicas[0].url, replicas[1].url]
        pool = ThreadPoolExecutor(2)
        plain = [pool.submit(http.post, "/generate", json={"text": "Say hi", "sampling_params": {"max_new_tokens": 4}}),
                 None]
        wait_until(lambda: rr.workers()[0]["load"] == 1 or plain[0].done(), "the plain request on replica 0")
        plain[1] = pool.submit(http.post, "/generate", json={"text": "Go on", "sampling_params": long})
        wait_until(lambda: rr.workers()[1]["load"] == 2, "the second plain request in flight on replica 1")

        replicas[1].proc.send_signal(signal.SIGKILL)
        replicas[1].proc.wait()

        failed = plain[1].result()
        assert failed.status_code in (502, 503), failed.text
        assert replicas[1].url in failed.json()["error"]["message"]
        tail = [line for line in lines[1] if line.startswith("data: ")]
        assert tail[-1] == "data: [DONE]"
        error = json.loads(tail[-2][len("data: "):])["error"]
        assert error["code"] in (502, 503) and replicas[1].url in error["message"]

        ok = plain[0].result()
        assert ok.status_code == 200 and ok.json()["meta_info"]["completion_tokens"] == 4
        more = [json.loads(line[6:]) for line, _ in zip((x for x in lines[0] if x.startswith("data: ")), range(5))]
        assert len(more) == 5 and all(m["meta_info"]["finish_reason"] is None for m in more)
        for cm, _ in streams:
            cm.__exit__(None, None, None)

        for url in (rr.url, router.url):  # both routers keep serving, on replica 0
            answer = httpx.post(f"{url}/generate", headers=AUTH, timeout=CLIENT_TIMEOUT,
                                json={"text": "After the crash", "sampling_params": {"max_new_tokens": 2}})
            assert answer.status_code == 200 and answer.headers["x-furca-replica"] == replicas[0].url
        wait_until(lambda: not rr.workers()[1]["healthy"], "replica 1 marked down")
        assert httpx.get(f"{rr.url}/health", timeout=30).status_code == 200
        with httpx.Client(base_url=replicas[0].url, headers=AUTH, timeout=CLIENT_TIMEOUT) as direct:
            assert_idle(direct)  # the closed stream's request was aborted on replica 0
        http.close()
        pool.shutdown()
    finally:
        rr.stop()
