"""Tensor parallelism (`Engine(tp_size=2)`, furca/runtime/distributed) against one
process: tiny random Llama, Qwen2 and Qwen3 checkpoints with 1, 2 and 4 KV heads (1 KV
head is replicated over the two ranks), fp32, over gloo on this CPU.

Each model gets one TP=2 engine (a process start is the cost) that runs every scenario:
a greedy batch with logprobs, a radix-cache hit, a JSON-schema constraint, and n=2
seeded sampling. Greedy tokens must be identical to TP=1's and logprobs within 1e-4
(the all-reduce sums the partial products in another order).
"""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import threading
import time

import pytest

from furca.errors import EngineClosedError, UnsupportedModelError
from furca.runtime.engine import Engine
from tests.runtime.conftest import build_tiny_hf_model

SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 6},
                                           "ok": {"type": "boolean"}}, "required": ["name", "ok"],
          "additionalProperties": False}
PREFIX = "Hello world! furca runs prompt programs with a radix cache. "
ENGINE_KW = dict(dtype="float32", linear_dtype="float32", max_total_tokens=2048, max_running_requests=8)
# (arch, KV heads, vocabulary over the tokenizer's: an odd size pads the last vocab shard)
CASES = [("llama", 1, 1), ("qwen2", 2, 0), ("qwen3", 4, 0)]


def _run_all(engine: Engine) -> dict:
    greedy = {"temperature": 0, "max_new_tokens": 6, "return_logprob": True, "ignore_eos": True}
    out = {"batch": engine.generate(["The quick brown fox", "def add(a, b):", "Paris is"], sampling_params=greedy)}
    engine.generate(PREFIX + "one", sampling_params=greedy)
    out["cached"] = engine.generate([PREFIX + "two", PREFIX + "three"], sampling_params=greedy)
    out["json"] = engine.generate("Hello", sampling_params={"temperature": 0, "max_new_tokens": 40,
                                                           "json_schema": json.dumps(SCHEMA)})
    out["n2"] = engine.generate("Paris is", sampling_params={"temperature": 0.8, "seed": 7, "n": 2,
                                                            "max_new_tokens": 6, "ignore_eos": True})
    return out


def _logprobs(o) -> list[float]:
    return [e[0] for e in o.meta_info["output_token_logprobs"]]


@pytest.mark.parametrize("arch,kv_heads,extra_vocab", CASES)
def test_tp2_matches_tp1(arch, kv_heads, extra_vocab, tmp_path, tiny_hf_tokenizer):
    model = build_tiny_hf_model(arch, len(tiny_hf_tokenizer) + extra_vocab, num_key_value_heads=kv_heads)
    model.save_pretrained(tmp_path)
    tiny_hf_tokenizer.save_pretrained(tmp_path)
    with Engine(tmp_path, **ENGINE_KW) as e1:
        ref = _run_all(e1)
    with Engine(tmp_path, tp_size=2, **ENGINE_KW) as e2:
        got = _run_all(e2)
        assert e2.effective_config()["tp_size"] == 2
        e2.check_memory()  # every slot and lock returned on rank 0
    for key in ("batch", "cached"):
        for a, b in zip(ref[key], got[key], strict=True):
            assert b.output_ids == a.output_ids
            assert max(abs(x - y) for x, y in zip(_logprobs(a), _logprobs(b), strict=True)) < 1e-4
    assert all(o.meta_info["cached_tokens"] >= len(PREFIX) // 4 for o in got["cached"])
    assert got["json"].output_ids == ref["json"].output_ids
    json.loads(got["json"].text)
    assert [o.output_ids for o in got["n2"]] == [o.output_ids for o in ref["n2"]]


def _workers() -> list:
    return [p for p in multiprocessing.active_children() if p.name.startswith("furca-tp-rank")]


def test_killed_worker_fails_requests_and_closes_engine(tmp_path, tiny_hf_tokenizer):
    build_tiny_hf_model("llama", len(tiny_hf_tokenizer)).save_pretrained(tmp_path)
    tiny_hf_tokenizer.save_pretrained(tmp_path)
    engine = Engine(tmp_path, tp_size=2, **ENGINE_KW)
    try:
        (worker,) = _workers()
        errors: list[BaseException] = []
        first_token = threading.Event()

        def run():
            try:
                for delta in engine.generate("Paris is", stream=True, sampling_params={
                        "temperature": 0, "max_new_tokens": 200, "ignore_eos": True}):
                    first_token.set()
            except BaseException as e:  # noqa: BLE001
                errors.append(e)

        t = threading.Thread(target=run)
        t.start()
        assert first_token.wait(120)
        os.kill(worker.pid, signal.SIGKILL)
        t.join(60)
        assert not t.is_alive(), "the request hung after its worker died"
        assert len(errors) == 1 and isinstance(errors[0], EngineClosedError)
        assert "tensor-parallel rank 1" in str(errors[0])  # names the rank that died
        deadline = time.monotonic() + 60
        while not engine.is_closed and time.monotonic() < deadline:
            time.sleep(0.1)
        assert engine.is_closed
        with pytest.raises(EngineClosedError):
            engine.generate("Hello")
    finally:
        engine.shutdown()
    assert not _workers()


def test_quantized_weights_are_refused_under_tp(tmp_path, tiny_hf_tokenizer):
    build_tiny_hf_model("qwen2", len(tiny_hf_tokenizer)).save_pretrained(tmp_path)
    tiny_hf_tokenizer.save_pretrained(tmp_path)
    with pytest.raises(UnsupportedModelError) as info:
        Engine(tmp_path, tp_size=2, quantization="int8", **ENGINE_KW)
    assert "quantization='int8'" in str(info.value)
    assert not _workers()


def test_two_nodes_on_one_machine(tmp_path, tiny_hf_tokenizer):
    """``--nnodes 2``: node 1 is ``furca serve --node-rank 1`` in a subprocess (ranks only,
    no server), node 0 the engine here; the rendezvous address is given, not chosen."""
    import subprocess
    import sys

    from tests.server.conftest import free_port

    build_tiny_hf_model("qwen2", len(tiny_hf_tokenizer)).save_pretrained(tmp_path)
    tiny_hf_tokenizer.save_pretrained(tmp_path)
    addr = f"127.0.0.1:{free_port()}"
    multi = dict(tp_size=2, nnodes=2, dist_init_addr=addr)
    node1 = subprocess.Popen([sys.executable, "-m", "furca.server", str(tmp_path), "--tp", "2", "--nnodes", "2",
                              "--node-rank", "1", "--dist-init-addr", addr, "--dtype", "float32",
                              "--linear-dtype", "float32"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        greedy = {"temperature": 0, "max_new_tokens": 6, "ignore_eos": True}
        with Engine(tmp_path, **multi, **ENGINE_KW) as e2:
            assert not _workers()  # node 0 holds rank 0 only
            got = e2.generate(["The quick brown fox", "Paris is"], sampling_params=greedy)
        assert node1.wait(60) == 0, node1.stdout.read()
    finally:
        if node1.poll() is None:
            node1.kill()
    with Engine(tmp_path, **ENGINE_KW) as e1:
        ref = e1.generate(["The quick brown fox", "Paris is"], sampling_params=greedy)
    assert [o.output_ids for o in got] == [o.output_ids for o in ref]


def test_a_model_that_does_not_split_is_refused_before_any_rank_starts(tmp_path, tiny_hf_tokenizer):
    build_tiny_hf_model("llama", len(tiny_hf_tokenizer)).save_pretrained(tmp_path)  # 4 heads, 2 KV heads
    tiny_hf_tokenizer.save_pretrained(tmp_path)
    with pytest.raises(UnsupportedModelError, match="tp_size=3 does not split this model: num_attention_heads 4"):
        Engine(tmp_path, tp_size=3, **ENGINE_KW)
    assert not _workers()
