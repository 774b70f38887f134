"""One session per program run (furca/lang/program_session.py): opened at the first gen,
passed on every gen of the run and its forks, closed when the last executor ends; a
backend without sessions (or whose open fails) runs the program without one. On a tiny
in-process engine the run's KV is pinned between its gens and nothing is held after."""

from __future__ import annotations

import random

import pytest

import furca as sgl
from furca.lang.backends.local import LocalBackend
from tests.conftest import wait_until
from tests.lang.fakes import FakeBackend


class SessionBackend(FakeBackend):
    def __init__(self, fail_open: bool = False):
        super().__init__()
        self.fail_open = fail_open
        self.opened: list[str] = []
        self.closed: list[str] = []

    def open_session(self) -> str:
        if self.fail_open:
            raise RuntimeError("no sessions here")
        sid = f"s{len(self.opened)}"
        self.opened.append(sid)
        return sid

    def close_session(self, session_id: str) -> None:
        self.closed.append(session_id)


@sgl.function
def turns_and_forks(s):
    s += "Q: one" + sgl.gen("a", max_tokens=2)
    forks = s.fork(2)
    for i, f in enumerate(forks):
        f += f" branch {i}" + sgl.gen("b", max_tokens=2)
    forks.join()
    s += " Q: two" + sgl.gen("c", max_tokens=2)


@sgl.function
def no_gen(s):
    s += "just text"


def test_a_run_opens_one_session_its_forks_share_and_the_end_closes():
    be = SessionBackend()
    turns_and_forks.run(backend=be)
    gens = [r for r in be.requests if hasattr(r, "session_id")]
    assert len(gens) == 4
    assert {r.session_id for r in gens} == {"s0"}
    # the last executor to end closes it: a fork's, a moment after the run returns
    wait_until(lambda: be.closed == ["s0"], "the run's session closed", timeout=60)
    turns_and_forks.run(backend=be)
    wait_until(lambda: be.closed == ["s0", "s1"], "the second run's session closed", timeout=60)
    assert be.opened == ["s0", "s1"]
    no_forks = SessionBackend()
    three_turns.run(["a", "b", "c"], backend=no_forks)
    assert no_forks.opened == no_forks.closed == ["s0"]  # without forks, closed when run() returns


def test_no_gen_opens_nothing_and_a_backend_without_sessions_runs_without_one():
    be = SessionBackend()
    no_gen.run(backend=be)
    assert be.opened == [] and be.closed == []
    failing = SessionBackend(fail_open=True)
    state = turns_and_forks.run(backend=failing)
    assert state["c"] and {r.session_id for r in failing.requests} == {None} and failing.closed == []
    plain = FakeBackend()
    turns_and_forks.run(backend=plain)
    assert {r.session_id for r in plain.requests} == {None}


@pytest.fixture(scope="module")
def tiny_engine(tmp_path_factory):
    from furca.runtime.engine import Engine
    from furca.runtime.loader import load_model
    from tests.runtime.conftest import build_tiny_hf_model, build_tiny_hf_tokenizer

    tok = build_tiny_hf_tokenizer()
    out = tmp_path_factory.mktemp("sessions") / "tiny-llama"
    build_tiny_hf_model("llama", len(tok), seed=1).save_pretrained(out)
    tok.save_pretrained(out)
    with Engine(load_model(out, dtype="float32", device="cpu"), max_total_tokens=2048) as engine:
        yield engine


@sgl.function
def three_turns(s, words):
    for i in range(3):
        s += f" Q{i}: " + words[i] + sgl.gen(f"a{i}", max_tokens=3, temperature=0, ignore_eos=True)


def test_a_local_run_pins_its_context_between_gens_and_releases_it_at_the_end(tiny_engine):
    rng = random.Random(0)
    words = [" ".join(rng.choice(["fox", "dog", "radix", "cache", "json"]) for _ in range(12)) for _ in range(3)]
    before = tiny_engine.get_server_info()["sessions"]
    state = three_turns.run(words, backend=LocalBackend.for_engine(tiny_engine))
    metas = [state.get_meta_info(f"a{i}") for i in range(3)]
    assert len({m["session_id"] for m in metas}) == 1
    assert all(m["pinned_tokens"] > 0 and m["pin_refused"] is False for m in metas)
    assert metas[1]["cached_tokens"] >= metas[0]["prompt_tokens"]  # turn 1's prompt came back from the cache
    after = tiny_engine.get_server_info()["sessions"]
    assert after["open"] == before["open"] == 0  # no fork: closed when run() returned
    assert after["sessions_closed"] == before["sessions_closed"] + 1
    counts = tiny_engine.check_memory(idle=True)
    assert counts["locked"] == counts["pinned"] == 0


def test_runtime_endpoint_without_open_session_sends_no_session_id(monkeypatch):
    import json

    import httpx

    from furca.lang.backends.runtime_endpoint import RuntimeEndpoint

    bodies, opens = [], []

    def server(request: httpx.Request) -> httpx.Response:  # a server without sessions
        if request.url.path == "/get_model_info":
            return httpx.Response(200, json={"model_path": "m", "chat_template": None})
        if request.url.path == "/open_session":
            opens.append(1)
            return httpx.Response(404, json={"detail": "Not Found"})
        bodies.append(json.loads(request.content))
        return httpx.Response(200, json={"text": "x", "output_ids": [1], "meta_info": {}})

    real_client = httpx.Client
    monkeypatch.setattr(httpx, "Client", lambda **kw: real_client(transport=httpx.MockTransport(server), **kw))
    endpoint = RuntimeEndpoint("http://server.test")
    for _ in range(2):
        turns_and_forks.run(backend=endpoint)
    gens = [b for b in bodies if b["sampling_params"].get("max_new_tokens") != 0]  # not the fork's prefix
    assert len(gens) == 8 and all("session_id" not in b for b in bodies)
    assert len(opens) == 1  # asked once, remembered
