"""The batched, cached engine gives the same greedy output as transformers decoding one
request at a time with no cache (up to the first near-tie step)."""

from __future__ import annotations

import random
import threading

import pytest

from engine_reference import assert_greedy_match, reference_greedy
from furca.runtime.engine import Engine

_REF_CACHE: dict[tuple, tuple] = {}


def ref(hf_model, ids, n):
    key = (tuple(ids), n)
    if key not in _REF_CACHE:
        _REF_CACHE[key] = reference_greedy(hf_model, ids, n)
    return _REF_CACHE[key]


def make_prompts(vocab: int, seed: int = 0) -> list[list[int]]:
    """Mixed lengths; several share a 40-token prefix, two share a shorter one."""
    rng = random.Random(seed)
    toks = lambda n: [rng.randrange(3, vocab) for _ in range(n)]  # noqa: E731  (ids 0-2 are specials)
    shared = toks(40)
    short = toks(6)
    return [
        shared + toks(1),
        toks(3),
        shared + toks(17),
        shared + toks(60),
        short + toks(4),
        toks(90),
        short + toks(30),
        shared + toks(5),
    ]


def greedy(n: int) -> dict:
    return {"temperature": 0, "max_new_tokens": n, "ignore_eos": True}


def check_against_reference(engine: Engine, hf_model, prompts, lengths) -> list:
    outs = engine.generate(input_ids=prompts, sampling_params=[greedy(n) for n in lengths])
    for ids, n, out in zip(prompts, lengths, outs):
        tokens, margins = ref(hf_model, ids, n)
        assert_greedy_match(out.output_ids, tokens, margins)
        assert out.meta_info["completion_tokens"] == n
    engine.check_memory(idle=True)
    return outs


@pytest.mark.parametrize("chunked_prefill_size", [None, 16])
@pytest.mark.parametrize("policy", ["lpm", "fcfs"])
def test_batched_cached_equals_unbatched_reference(tiny_engine_model, chunked_prefill_size, policy):
    loaded, hf_model = tiny_engine_model
    prompts = make_prompts(loaded.config.vocab_size)
    lengths = [24, 30, 8, 16, 20, 12, 28, 10]
    with Engine(loaded, max_total_tokens=4096, chunked_prefill_size=chunked_prefill_size,
                schedule_policy=policy, check_memory=True) as engine:
        outs = check_against_reference(engine, hf_model, prompts, lengths)
        # the shared 40-token prefix was computed once: later requests hit the cache
        assert sum(o.meta_info["cached_tokens"] for o in outs) >= 3 * 39
        # a second round is served mostly from the cache and gives the same tokens
        again = engine.generate(input_ids=prompts, sampling_params=[greedy(n) for n in lengths])
        assert [o.output_ids for o in again] == [o.output_ids for o in outs]
        assert all(o.meta_info["cached_tokens"] >= len(p) - 1 for o, p in zip(again, prompts))
        engine.check_memory(idle=True)


def test_cache_disabled_equals_reference(tiny_engine_model):
    loaded, hf_model = tiny_engine_model
    prompts = make_prompts(loaded.config.vocab_size, seed=1)
    with Engine(loaded, max_total_tokens=4096, disable_radix_cache=True, chunked_prefill_size=32,
                check_memory=True) as engine:
        outs = check_against_reference(engine, hf_model, prompts, [12] * len(prompts))
        assert all(o.meta_info["cached_tokens"] == 0 for o in outs)
        counts = engine.check_memory(idle=True)
        assert counts["free"] == counts["capacity"] and counts["tree"] == 0


@pytest.mark.parametrize("disable_radix_cache", [False, True])
def test_retraction_keeps_greedy_output(tiny_engine_model, disable_radix_cache):
    """A tiny KV pool and an optimistic decode reserve force retraction with recompute."""
    loaded, hf_model = tiny_engine_model
    rng = random.Random(5)
    prompts = [[rng.randrange(3, loaded.config.vocab_size) for _ in range(40 + 3 * i)] for i in range(4)]
    with Engine(loaded, max_total_tokens=200, init_new_token_ratio=0.05, min_new_token_ratio=0.05,
                disable_radix_cache=disable_radix_cache, chunked_prefill_size=32, check_memory=True) as engine:
        check_against_reference(engine, hf_model, prompts, [40] * 4)
        assert engine.get_server_info()["stats"]["retractions"] > 0


def test_requests_join_and_leave_mid_flight(tiny_engine_model):
    """Requests submitted from threads while others decode join the running batch."""
    loaded, hf_model = tiny_engine_model
    prompts = make_prompts(loaded.config.vocab_size, seed=2)
    results: dict[int, list[int]] = {}
    with Engine(loaded, max_total_tokens=4096, chunked_prefill_size=8, check_memory=True) as engine:
        stream = engine.generate(input_ids=prompts[5], sampling_params=greedy(40), stream=True)
        first = next(stream)  # the long request is running now

        def run(i: int) -> None:
            results[i] = engine.generate(input_ids=prompts[i], sampling_params=greedy(12)).output_ids

        threads = [threading.Thread(target=run, args=(i,)) for i in (0, 2, 3, 4)]
        for t in threads:
            t.start()
        tokens = list(first.token_ids)
        for delta in stream:
            tokens += delta.token_ids
        for t in threads:
            t.join()
        assert engine.get_server_info()["stats"]["steps"] < 40 + 4 * 12  # they shared steps
        engine.check_memory(idle=True)
    assert_greedy_match(tokens, *ref(hf_model, prompts[5], 40))
    for i, got in results.items():
        assert_greedy_match(got, *ref(hf_model, prompts[i], 12))
