"""kv_cache_dtype="fp8_e4m3" (alias "fp8") on the CPU torch backend: the pool holds
float8_e4m3fn (1 byte per element: twice bf16's tokens for the same bytes), stores
saturate to +-448, and the engine's greedy tokens equal transformers decoding with the
same K/V rounding (every key and value rounded to e4m3 by ``fp8.to_e4m3``)."""

from __future__ import annotations

import copy

import pytest
import torch

from engine_reference import assert_greedy_match, reference_greedy
from furca.errors import ConfigError
from furca.kernels.fp8 import to_e4m3
from furca.runtime.config import EngineConfig
from furca.runtime.engine import Engine
from furca.runtime.kv_cache import KVCache
from furca.runtime.model_runner import ModelRunner, check_fp8_kv_cache, kv_cache_dtype

FP8 = torch.float8_e4m3fn


def test_config_accepts_fp8_and_names_the_field_for_bad_values():
    assert EngineConfig(kv_cache_dtype="fp8").kv_cache_dtype == "fp8"
    assert kv_cache_dtype("fp8", torch.nn.Linear(2, 2)) == kv_cache_dtype("fp8_e4m3", torch.nn.Linear(2, 2)) == FP8
    for bad in ("e4m3", "fp8_e5m2", "int8", 8):
        with pytest.raises(ConfigError, match="kv_cache_dtype must be one of"):
            EngineConfig(kv_cache_dtype=bad)


def test_store_saturates_and_rounds_as_to_e4m3():
    cache = KVCache(16, 1, 2, 8, FP8)
    gen = torch.Generator().manual_seed(0)
    k = torch.randn(3, 2, 8, generator=gen) * 300  # many beyond +-448
    k[0, 0, :3] = torch.tensor([1e4, -1e4, float("inf")])
    v = torch.randn(3, 2, 8, generator=gen)
    loc = torch.tensor([5, 2, 9])
    cache.store(0, loc, k, v)
    assert cache.k_heads[0].dtype == FP8
    assert torch.equal(cache.k[0][loc].float(), to_e4m3(k).float())
    assert torch.equal(cache.v[0][loc].float(), to_e4m3(v).float())
    assert cache.k[0][loc].float().abs().max() == 448.0 and not cache.k[0].float().isnan().any()
    assert cache.k[0][torch.tensor([0, 1, 3])].float().abs().sum() == 0  # other slots untouched


def test_fp8_pool_holds_twice_bf16s_tokens_for_the_same_bytes(tiny_engine_model):
    loaded, _ = tiny_engine_model
    runners = {name: ModelRunner(loaded.model, loaded.config,
                                 EngineConfig(kv_cache_dtype=name, kv_cache_bytes=1 << 20, log_capacity=False), 256)
               for name in ("bfloat16", "fp8_e4m3")}
    bf16, fp8 = runners["bfloat16"], runners["fp8_e4m3"]
    assert fp8.kv_cache.dtype == FP8 and fp8.kv_cache.k_heads[0].element_size() == 1
    assert bf16.bytes_per_token == 2 * fp8.bytes_per_token
    assert fp8.capacity == 2 * bf16.capacity


def test_triton_reads_fp8_only_on_sm89_with_half_precision_queries():
    check_fp8_kv_cache((9, 0), torch.bfloat16, "triton")
    check_fp8_kv_cache((8, 9), torch.float16, "triton")
    check_fp8_kv_cache((8, 0), torch.float32, "torch")  # the gather path upcasts anywhere
    check_fp8_kv_cache(None, torch.float32, "torch")
    with pytest.raises(ConfigError, match="sm_89\\+ GPU.*sm_80.*attention_backend='torch'"):
        check_fp8_kv_cache((8, 0), torch.bfloat16, "triton")
    with pytest.raises(ConfigError, match="float16 or bfloat16 activations"):
        check_fp8_kv_cache((9, 0), torch.float32, "triton")


def _fp8_kv_attention(module, query, key, value, attention_mask, **kwargs):
    """transformers' sdpa attention over K/V rounded to e4m3 as furca's pool stores them."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    return sdpa_attention_forward(module, query, to_e4m3(key).to(key.dtype), to_e4m3(value).to(value.dtype),
                                  attention_mask, **kwargs)


@pytest.fixture(scope="module")
def fp8_reference_model(tiny_engine_model):
    from transformers import AttentionInterface

    AttentionInterface.register("furca_fp8_kv", _fp8_kv_attention)
    model = copy.deepcopy(tiny_engine_model[1])
    model.set_attn_implementation("furca_fp8_kv")
    return model


def _logprobs(model, ids: list[int]) -> torch.Tensor:
    """log p(ids[p] | ids[:p]) for p >= 1."""
    with torch.no_grad():
        logp = torch.log_softmax(model(torch.tensor([ids])).logits[0].float(), -1)
    return logp[torch.arange(len(ids) - 1), torch.tensor(ids[1:])]


def test_engine_equals_a_reference_with_the_same_e4m3_rounding(tiny_engine_model, fp8_reference_model):
    """Greedy tokens (batched, with a shared cached prefix) and prompt logprobs equal
    transformers with K/V rounded to e4m3; the unrounded fp32 reference is measurably
    further away, so the pool really is fp8 and the rounding is the one compared."""
    loaded, hf_model = tiny_engine_model
    shared = [5, 9, 17, 33, 40, 41, 7, 8] * 3
    prompts = [shared + [11, 12], shared + [60, 61, 62], [70, 71, 72, 73, 74]]
    n = 12
    with Engine(loaded, kv_cache_dtype="fp8_e4m3", max_total_tokens=512, attention_backend="torch") as engine:
        assert engine.effective_config()["kv_cache_dtype"] == "fp8_e4m3"  # a value EngineConfig takes
        outs = engine.generate(input_ids=prompts, sampling_params=[
            {"temperature": 0, "max_new_tokens": n, "ignore_eos": True}] * len(prompts))
        for ids, out in zip(prompts, outs):
            tokens, margins = reference_greedy(fp8_reference_model, ids, n)
            assert_greedy_match(out.output_ids, tokens, margins, tie=1e-3)
        scored = engine.generate(input_ids=prompts[1], sampling_params={
            "max_new_tokens": 0, "return_logprob": True, "logprob_start_len": 1})
        got = torch.tensor([e[0] for e in scored.meta_info["input_token_logprobs"]])
        engine.check_memory(idle=True)
    fp8_err = (got - _logprobs(fp8_reference_model, prompts[1])).abs().max()
    fp32_err = (got - _logprobs(hf_model, prompts[1])).abs().max()
    print(f"max |logprob - reference|: e4m3-rounded reference {fp8_err:.2e}, fp32 reference {fp32_err:.2e}")
    assert fp8_err < 2e-4 and fp32_err > 10 * fp8_err


def test_deterministic_mode_refuses_an_fp8_pool(tiny_engine_model):
    with pytest.raises(ConfigError, match="kv_cache_dtype"):
        Engine(tiny_engine_model[0], kv_cache_dtype="fp8", deterministic=True, max_total_tokens=64)
