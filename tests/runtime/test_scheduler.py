"""Scheduling: policy order, in-batch prefix sharing, chunked + mixed batches, limits,
eviction, the memory invariant under random workloads, idle sleep."""

from __future__ import annotations

import random
import threading
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from furca.radix.radix_cache import RadixCache
from furca.runtime.engine import Engine
from furca.runtime.request import Req
from furca.runtime.sampling_params import SamplingParams
from furca.runtime.schedule_policy import InBatchDedup, order_waiting
from tests.conftest import wait_until


def make_req(ids, rid="r", **params) -> Req:
    return Req(rid=rid, group_rid=rid, origin_input_ids=list(ids), params=SamplingParams(**params), emit=lambda o: None)


def test_lpm_orders_by_cached_prefix_and_fcfs_keeps_arrival():
    tree = RadixCache(lambda s: None)
    import torch

    tree.insert([1, 2, 3, 4, 5, 6], torch.arange(1, 7))
    a, b, c = make_req([9, 9, 9], "a"), make_req([1, 2, 3, 7], "b"), make_req([1, 2, 3, 4, 5, 6, 8], "c")
    assert [r.rid for r in order_waiting([a, b, c], "lpm", tree)] == ["c", "b", "a"]
    assert [r.rid for r in order_waiting([a, b, c], "fcfs", tree)] == ["a", "b", "c"]
    a.num_retractions = 1
    assert [r.rid for r in order_waiting([b, c, a], "lpm", tree)] == ["a", "c", "b"]


def test_in_batch_dedup_defers_requests_sharing_an_admitted_prefix():
    dedup = InBatchDedup(min_shared=4, enabled=True)
    first = make_req(list(range(10, 30)))
    dedup.add(first)
    assert dedup.should_defer(make_req(list(range(10, 30))), 0)  # identical prompt (n > 1)
    assert dedup.should_defer(make_req(list(range(10, 16)) + [99]), 0)  # >= 4 shared
    assert not dedup.should_defer(make_req([10, 11, 99, 98, 97, 96]), 0)  # 2 shared, more to compute
    assert not dedup.should_defer(make_req(list(range(10, 30))), 19)  # the tree already has it
    assert not InBatchDedup(4, enabled=False).should_defer(make_req(list(range(10, 30))), 0)


def record_batches(engine: Engine) -> list[list[int]]:
    """Wrap the runner so each forward's per-request new-token counts are recorded."""
    seen: list[list[int]] = []
    forward = engine.scheduler.runner.forward

    def wrapped(step):
        seen.append(list(step.batch.qo_lens_cpu))
        return forward(step)

    engine.scheduler.runner.forward = wrapped
    return seen


def test_chunked_prefill_runs_in_mixed_batches(tiny_engine_model):
    loaded, _ = tiny_engine_model
    with Engine(loaded, max_total_tokens=2048, chunked_prefill_size=8, check_memory=True) as engine:
        batches = record_batches(engine)
        stream = engine.generate(input_ids=[5, 6, 7], sampling_params={"max_new_tokens": 40, "ignore_eos": True},
                                 stream=True)
        next(stream)  # decoding now
        long = engine.generate(input_ids=list(range(3, 53)), sampling_params={"max_new_tokens": 2})
        list(stream)
        engine.check_memory(idle=True)
    assert long.meta_info["completion_tokens"] == 2
    prefill_steps = [b for b in batches if any(q > 1 for q in b)]
    assert all(sum(q for q in b if q > 1) <= 8 for b in batches)  # the per-step budget
    assert sum(q for b in prefill_steps for q in b if q > 1) >= 48  # the 50-token prompt, in chunks
    assert any(1 in b and any(q > 1 for q in b) for b in batches)  # a chunk beside a decode token


def test_chunking_off_prefills_whole_prompt_in_one_step(tiny_engine_model):
    loaded, _ = tiny_engine_model
    with Engine(loaded, max_total_tokens=2048, chunked_prefill_size=None, max_prefill_tokens=20,
                check_memory=True) as engine:
        batches = record_batches(engine)
        engine.generate(input_ids=[list(range(3, 40)), list(range(50, 60)), list(range(70, 80))],
                        sampling_params={"max_new_tokens": 1})
    assert batches[0] == [37]  # over the budget: alone, but whole
    assert sorted(batches[1]) == [10, 10]


def test_max_running_requests_is_respected(tiny_engine_model):
    loaded, _ = tiny_engine_model
    with Engine(loaded, max_total_tokens=2048, max_running_requests=3, check_memory=True) as engine:
        batches = record_batches(engine)
        outs = engine.generate(input_ids=[[5 + i, 6, 7] for i in range(7)], sampling_params={"max_new_tokens": 4})
    assert len(outs) == 7 and max(len(b) for b in batches) == 3


def test_eviction_makes_room_for_new_prompts(tiny_engine_model):
    loaded, _ = tiny_engine_model
    rng = random.Random(0)
    with Engine(loaded, max_total_tokens=120, check_memory=True) as engine:
        for _ in range(10):  # 10 x 40 tokens through a 120-token pool
            engine.generate(input_ids=[rng.randrange(3, 250) for _ in range(36)],
                            sampling_params={"max_new_tokens": 4, "ignore_eos": True})
            counts = engine.check_memory(idle=True)
            assert counts["evictable"] == counts["tree"] > 0
        assert engine.get_server_info()["stats"]["finished"] == 10


workload = st.lists(
    st.tuples(st.integers(0, 3), st.integers(1, 30), st.integers(0, 12), st.booleans()),
    min_size=1, max_size=8,
)


@settings(max_examples=12, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(jobs=workload, pool=st.sampled_from([90, 160, 1000]), cache_off=st.booleans(), chunk=st.sampled_from([None, 8]),
       policy=st.sampled_from(["lpm", "fcfs"]))
def test_memory_invariant_under_random_workloads(tiny_engine_model, jobs, pool, cache_off, chunk, policy):
    """Random prompts over 4 shared prefixes, some aborted mid-flight; after everything,
    every slot is free or in the tree and no lock is held."""
    loaded, _ = tiny_engine_model
    prefixes = [[3 + p] * 8 + list(range(10 + p, 20 + p)) for p in range(4)]
    with Engine(loaded, max_total_tokens=pool, disable_radix_cache=cache_off, chunked_prefill_size=chunk,
                schedule_policy=policy, init_new_token_ratio=0.3, min_new_token_ratio=0.1,
                check_memory=True, log_capacity=False) as engine:
        results = []

        def run(i, prefix, extra, new, abort):
            ids = prefixes[prefix] + [100 + i] * extra
            params = {"max_new_tokens": new, "ignore_eos": True, "temperature": 0.0 if i % 2 else 1.0}
            if abort:
                s = engine.generate(input_ids=ids, sampling_params=params, rid=f"j{i}", stream=True)
                engine.abort(f"j{i}")
                results.append(list(s)[-1].meta_info["finish_reason"]["type"])
            else:
                results.append(engine.generate(input_ids=ids, sampling_params=params).meta_info["finish_reason"]["type"])

        threads = [threading.Thread(target=run, args=(i, *job)) for i, job in enumerate(jobs)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(results) == len(jobs)
        counts = engine.check_memory(idle=True)
        assert counts["free"] + counts["tree"] == counts["capacity"] and counts["locked"] == 0


def test_idle_engine_sleeps(tiny_engine_model):
    loaded, _ = tiny_engine_model
    with Engine(loaded, max_total_tokens=256) as engine:
        engine.generate("hi", sampling_params={"max_new_tokens": 2})

        def quiet_window() -> bool:  # half a second in which the process used < 0.1 s of CPU
            start = time.process_time()
            time.sleep(0.5)
            return time.process_time() - start < 0.1

        # torch's OpenMP workers spin a while after the last step (longer in wall time when the
        # machine is loaded): an idle engine gets quiet soon; one that busy-waits never does
        wait_until(quiet_window, "the idle engine stops using the CPU (no busy-wait)", timeout=120, interval=0)
        assert engine._loop.thread.is_alive()


@pytest.mark.parametrize("policy", ["lpm", "fcfs"])
def test_shared_prefix_batch_caches_near_optimum(tiny_engine_model, policy):
    """64-style shared-prefix workload in miniature: all but the first copy of the prefix
    comes from the cache."""
    loaded, _ = tiny_engine_model
    prefix = list(range(3, 103))
    prompts = [prefix + [150 + i, 151 + i] for i in range(12)]
    with Engine(loaded, max_total_tokens=4096, schedule_policy=policy, check_memory=True) as engine:
        outs = engine.generate(input_ids=prompts, sampling_params={"max_new_tokens": 2})
        cached = sum(o.meta_info["cached_tokens"] for o in outs)
        assert cached >= 0.95 * 11 * len(prefix)
        assert engine.get_server_info()["cache_hit_rate"] > 0.85
