"""The engine's step observers: one `StepStats` per forward pass whose counts add up to what
the requests did; an observer that raises is dropped without hurting the engine; the
periodic batch summary line; `effective_config`."""

from __future__ import annotations

import logging
import random
import threading
from dataclasses import fields

import pytest

from furca.runtime.config import EngineConfig
from furca.runtime.engine import Engine


def _prompts(vocab: int, seed: int = 0) -> list[list[int]]:
    rng = random.Random(seed)
    shared = [rng.randrange(3, vocab) for _ in range(24)]
    return [shared + [rng.randrange(3, vocab) for _ in range(n)] for n in (5, 17, 30)] + \
        [[rng.randrange(3, vocab) for _ in range(9)]]


def _greedy(n: int) -> dict:
    return {"temperature": 0, "max_new_tokens": n, "ignore_eos": True}


class Recorder:
    def __init__(self):
        self.steps, self.threads = [], set()

    def __call__(self, stats):
        self.steps.append(stats)
        self.threads.add(threading.current_thread().name)


def test_step_stats_add_up_to_what_the_requests_did(tiny_engine_model):
    loaded, _ = tiny_engine_model
    prompts = _prompts(loaded.config.vocab_size)
    lengths = [6, 3, 8, 5]
    rec = Recorder()
    with Engine(loaded, max_total_tokens=2048, chunked_prefill_size=16, decode_log_interval=0,
                check_memory=True) as engine:
        engine.add_step_observer(rec)
        outs = engine.generate(input_ids=prompts, sampling_params=[_greedy(n) for n in lengths])
        info = engine.get_server_info()
    steps = rec.steps
    assert rec.threads == {"furca-scheduler"}
    assert [s.step for s in steps] == list(range(1, info["stats"]["steps"] + 1))
    # every prompt token not found in the cache was computed once, in chunks of at most 16
    computed = sum(len(p) - o.meta_info["cached_tokens"] for p, o in zip(prompts, outs))
    assert sum(s.num_prefill_tokens for s in steps) == computed
    assert all(s.num_prefill_tokens <= 16 for s in steps)
    # each output token but the last is computed by one decode row; every output token is sampled
    assert sum(s.num_decode_reqs for s in steps) == sum(n - 1 for n in lengths)
    assert sum(s.num_generated for s in steps) == sum(lengths)
    assert sum(s.num_tokens for s in steps) == computed + sum(n - 1 for n in lengths)
    assert sum(s.num_finished for s in steps) == len(prompts)
    assert sorted(a for s in steps for a in s.admitted) == sorted(
        (o.meta_info["prompt_tokens"], o.meta_info["cached_tokens"]) for o in outs)
    assert sum(s.num_cached_tokens for s in steps) == sum(o.meta_info["cached_tokens"] for o in outs) > 0
    assert max(s.num_reqs for s in steps) >= 2  # batched
    assert all(0 < s.used_tokens <= s.capacity == info["max_total_tokens"] for s in steps[:-1])
    assert all(s.num_running + s.num_waiting <= len(prompts) for s in steps)
    assert (steps[-1].num_running, steps[-1].num_waiting) == (0, 0)
    assert sum(s.num_retracted for s in steps) == 0 and all(s.duration_s >= 0 for s in steps)


def test_retractions_are_counted(tiny_engine_model):
    loaded, _ = tiny_engine_model
    rng = random.Random(5)
    prompts = [[rng.randrange(3, loaded.config.vocab_size) for _ in range(40 + 3 * i)] for i in range(4)]
    rec = Recorder()
    with Engine(loaded, max_total_tokens=200, init_new_token_ratio=0.05, min_new_token_ratio=0.05,
                chunked_prefill_size=32, decode_log_interval=0, check_memory=True) as engine:
        engine.add_step_observer(rec)
        engine.generate(input_ids=prompts, sampling_params=[_greedy(40)] * 4)
        retractions = engine.get_server_info()["stats"]["retractions"]
    assert retractions > 0
    assert sum(s.num_retracted for s in rec.steps) == retractions


def test_a_raising_observer_is_logged_once_and_dropped(tiny_engine_model, caplog):
    loaded, _ = tiny_engine_model
    calls = []

    def bad(stats):
        calls.append(stats.step)
        raise RuntimeError("observer bug")

    rec = Recorder()
    with Engine(loaded, max_total_tokens=1024, decode_log_interval=0, check_memory=True) as engine:
        engine.add_step_observer(bad)
        engine.add_step_observer(rec)
        with caplog.at_level(logging.ERROR, logger="furca"):
            out = engine.generate(input_ids=[5, 6, 7, 8], sampling_params=_greedy(6))
            again = engine.generate(input_ids=[5, 6, 7, 9], sampling_params=_greedy(4))
        # observers run after the step that delivered the result; a command runs after them
        told = engine.get_server_info()["stats"]["steps"]
        engine.remove_step_observer(rec)
        engine.generate(input_ids=[9, 9], sampling_params=_greedy(2))
        assert engine.get_server_info()["stats"]["steps"] == told + 2
        assert not engine.is_closed
    assert out.meta_info["completion_tokens"] == 6 and again.meta_info["completion_tokens"] == 4
    assert calls == [1]  # called once, then removed
    assert len([r for r in caplog.records if "observer bug" in (r.exc_text or "")
                or "raised; it is removed" in r.getMessage()]) == 1
    assert len(rec.steps) == told  # the others were still told of every step until removed


def test_batch_summary_is_logged_every_n_steps(tiny_engine_model, caplog):
    loaded, _ = tiny_engine_model
    with caplog.at_level(logging.INFO, logger="furca"):
        with Engine(loaded, max_total_tokens=1024, decode_log_interval=3) as engine:
            engine.generate(input_ids=[[5, 6, 7], [8, 9]], sampling_params=_greedy(10))
            steps = engine.get_server_info()["stats"]["steps"]
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("Batch [step")]
    assert len(lines) == steps // 3 and steps >= 9
    assert lines[0].startswith("Batch [step 3]: 3 steps in ") and "#running-req: 2" in lines[0]
    assert "#queue-req: 0" in lines[0] and "#new-seq: 2" in lines[0] and "gen throughput (token/s): " in lines[0]
    with caplog.at_level(logging.INFO, logger="furca"):
        caplog.clear()
        with Engine(loaded, max_total_tokens=1024, decode_log_interval=0) as engine:
            engine.generate(input_ids=[5, 6, 7], sampling_params=_greedy(8))
    assert not [r for r in caplog.records if r.getMessage().startswith("Batch [step")]


def test_decode_log_interval_is_validated():
    from furca.errors import ConfigError

    with pytest.raises(ConfigError, match="decode_log_interval"):
        EngineConfig(decode_log_interval=-1)


def test_effective_config_resolves_auto_values(tiny_engine_model):
    loaded, _ = tiny_engine_model
    with Engine(loaded, max_total_tokens=777, decode_log_interval=0) as engine:
        info = engine.get_server_info()
    eff, cfg = info["effective_config"], info["config"]
    names = [f.name for f in fields(EngineConfig)]
    assert list(eff) == names and list(cfg) == names
    assert (cfg["dtype"], cfg["device"], cfg["attention_backend"], cfg["context_length"]) == \
        ("auto", "auto", "auto", None)
    assert (eff["dtype"], eff["device"], eff["attention_backend"]) == ("float32", "cpu", "torch")
    assert eff["context_length"] == info["context_length"] == loaded.context_length
    assert eff["max_total_tokens"] == info["max_total_tokens"] == 777
    assert eff["kv_cache_dtype"] in ("float32", "bfloat16") and eff["kv_cache_bytes"] > 0
    assert eff["max_running_requests"] == 64 and eff["decode_log_interval"] == 0
