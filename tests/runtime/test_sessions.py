"""Sessions (furca/radix/leases.py) on a tiny engine: a program's KV stays pinned between
its calls while other traffic evicts, within ``pinned_share`` of the pool; leases expire;
a pin never blocks a request that needs its memory; closing frees everything."""

from __future__ import annotations

import random
import threading
import time

import pytest

from furca.radix.leases import SessionError
from furca.runtime.engine import Engine

POOL = 600
GREEDY = {"max_new_tokens": 4, "temperature": 0.0, "ignore_eos": True}


def _ids(rng: random.Random, n: int, lo: int, hi: int) -> list[int]:
    return [rng.randrange(lo, hi) for _ in range(n)]


def _flood(engine: Engine, rng: random.Random, total: int) -> None:
    """Prompts of unrelated tokens, ``total`` tokens in all: more than the pool evicts
    every unlocked leaf cached before them (LRU)."""
    prompts = [_ids(rng, 150, 150, 299) for _ in range(total // 150)]
    engine.generate(input_ids=prompts, sampling_params={"max_new_tokens": 1, "temperature": 0.0})


def _six_turns(engine: Engine, session_id: str | None, seed: int) -> list[tuple[int, int]]:
    """A 6-turn conversation while two threads send other long prompts and, between turns,
    more than a pool's worth of them. Returns (previous context, cached tokens) of turns 2-6."""
    rng = random.Random(seed)
    stop = threading.Event()

    def traffic(k: int) -> None:
        r = random.Random(seed * 100 + k)
        while not stop.is_set():
            engine.generate(input_ids=_ids(r, 120, 150, 299), sampling_params={"max_new_tokens": 2})

    threads = [threading.Thread(target=traffic, args=(k,), daemon=True) for k in range(2)]
    for t in threads:
        t.start()
    seen = []
    try:
        prompt = _ids(rng, 30, 3, 150)
        previous = None
        for _ in range(6):
            out = engine.generate(input_ids=prompt, sampling_params=GREEDY, session_id=session_id)
            if previous is not None:
                seen.append((previous, out.meta_info["cached_tokens"]))
            context = prompt + out.output_ids
            previous = len(context)
            _flood(engine, rng, POOL + 150)
            prompt = context + _ids(rng, 20, 3, 150)
    finally:
        stop.set()
        for t in threads:
            t.join(120)
    return seen


def test_a_session_keeps_its_context_cached_under_eviction_and_without_one_it_is_lost(tiny_engine_model):
    loaded, _ = tiny_engine_model
    with Engine(loaded, max_total_tokens=POOL, pinned_share=0.5, chunked_prefill_size=64) as engine:
        sid = engine.open_session()
        pinned = _six_turns(engine, sid, seed=1)
        assert len(pinned) == 5
        for previous, cached in pinned:
            assert cached >= 0.95 * previous, pinned
        info = engine.get_server_info()
        assert 0 < info["pinned"] <= info["sessions"]["pinned_limit"]
        assert info["sessions"]["pins_refused"] == 0
        engine.close_session(sid)
        counts = engine.check_memory(idle=True)
        assert counts["locked"] == counts["pinned"] == 0
        assert counts["free"] + counts["evictable"] == POOL

        unpinned = _six_turns(engine, None, seed=2)
        assert all(cached < 0.5 * previous for previous, cached in unpinned), unpinned
        engine.check_memory(idle=True)


def test_meta_info_reports_the_pin_and_the_share_refuses_what_does_not_fit(tiny_engine_model):
    loaded, _ = tiny_engine_model
    rng = random.Random(3)
    with Engine(loaded, max_total_tokens=POOL, pinned_share=0.1) as engine:  # 60 tokens
        big, small = engine.open_session(), engine.open_session("mine")
        assert small == "mine"
        out = engine.generate(input_ids=_ids(rng, 100, 3, 299), sampling_params=GREEDY, session_id=big)
        assert out.meta_info["session_id"] == big
        assert out.meta_info["pin_refused"] is True and out.meta_info["pinned_tokens"] == 0
        assert len(out.output_ids) == 4  # it ran all the same
        out = engine.generate(input_ids=_ids(rng, 40, 3, 299), sampling_params=GREEDY, session_id=small)
        assert out.meta_info["pin_refused"] is False and out.meta_info["pinned_tokens"] == 43
        other = engine.open_session()
        out = engine.generate(input_ids=_ids(rng, 40, 3, 299), sampling_params=GREEDY, session_id=other)
        assert out.meta_info["pin_refused"] is True
        counts = engine.check_memory(idle=True)
        assert counts["pinned"] == counts["locked"] == 43
        info = engine.get_server_info()["sessions"]
        assert info["open"] == 3 and info["pins_refused"] == 2 and info["pinned_limit"] == 60
        for sid in (big, small, other):
            engine.close_session(sid)
        assert engine.check_memory(idle=True)["locked"] == 0


def test_a_lease_expires_after_its_timeout_without_a_call(tiny_engine_model):
    loaded, _ = tiny_engine_model
    rng = random.Random(4)
    with Engine(loaded, max_total_tokens=POOL) as engine:
        sid = engine.open_session(timeout=0.5)
        engine.generate(input_ids=_ids(rng, 30, 3, 299), sampling_params=GREEDY, session_id=sid)
        deadline = time.monotonic() + 120
        while engine.get_server_info()["sessions"]["open"] and time.monotonic() < deadline:
            time.sleep(0.2)
        info = engine.get_server_info()
        assert info["sessions"]["open"] == 0 and info["sessions"]["sessions_expired"] == 1
        assert info["pinned"] == 0
        with pytest.raises(SessionError, match="session_id"):
            engine.generate(input_ids=[5, 6, 7], sampling_params=GREEDY, session_id=sid)
        with pytest.raises(SessionError):
            engine.close_session(sid)
        engine.check_memory(idle=True)


def test_a_pin_gives_way_to_a_request_that_cannot_run_beside_it(tiny_engine_model):
    loaded, _ = tiny_engine_model
    rng = random.Random(5)
    with Engine(loaded, max_total_tokens=300, pinned_share=0.5) as engine:
        sid = engine.open_session()
        out = engine.generate(input_ids=_ids(rng, 130, 3, 299), sampling_params=GREEDY, session_id=sid)
        assert out.meta_info["pinned_tokens"] == 133
        out = engine.generate(input_ids=_ids(rng, 200, 3, 299), sampling_params=GREEDY)
        assert len(out.output_ids) == 4
        info = engine.get_server_info()
        assert info["sessions"]["pins_shed"] == 1 and info["pinned"] == 0 and info["sessions"]["open"] == 1
        engine.close_session(sid)
        engine.check_memory(idle=True)


def test_bad_session_ids_raise_and_lose_nothing(tiny_engine_model):
    loaded, _ = tiny_engine_model
    with Engine(loaded, max_total_tokens=POOL) as engine:
        with pytest.raises(SessionError, match="'nope' is not open"):
            engine.generate(input_ids=[5, 6, 7], sampling_params=GREEDY, session_id="nope")
        with pytest.raises(SessionError):
            engine.close_session("nope")
        sid = engine.open_session("dup")
        with pytest.raises(SessionError, match="already open"):
            engine.open_session("dup")
        with pytest.raises(SessionError, match="timeout"):
            engine.open_session(timeout=0)
        engine.close_session(sid)
        counts = engine.check_memory(idle=True)
        assert counts["free"] + counts["evictable"] == POOL and counts["locked"] == 0


def test_flush_cache_drops_the_pins_and_keeps_the_sessions(tiny_engine_model):
    loaded, _ = tiny_engine_model
    rng = random.Random(6)
    with Engine(loaded, max_total_tokens=POOL) as engine:
        sid = engine.open_session()
        engine.generate(input_ids=_ids(rng, 30, 3, 299), sampling_params=GREEDY, session_id=sid)
        assert engine.get_server_info()["pinned"] == 33
        assert engine.flush_cache()
        counts = engine.check_memory(idle=True)
        assert counts["free"] == POOL and counts["pinned"] == counts["locked"] == 0
        out = engine.generate(input_ids=_ids(rng, 20, 3, 299), sampling_params=GREEDY, session_id=sid)
        assert out.meta_info["pinned_tokens"] == 23
        engine.close_session(sid)
        engine.check_memory(idle=True)
