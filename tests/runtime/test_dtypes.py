"""How the engine picks the model's dtypes: ``resolve_dtypes`` and the CPU check behind
``linear_dtype="auto"``; ``EngineConfig`` rejects unknown names."""

from __future__ import annotations

import pytest

from furca.errors import ConfigError
from furca.runtime import cpu_features
from furca.runtime.config import EngineConfig
from furca.runtime.engine import resolve_dtypes

X86_BF16 = "processor\t: 0\nvendor_id\t: GenuineIntel\nflags\t\t: fpu sse2 avx2 avx512f avx512_bf16 avx512_vnni\n"
X86_AMX = "processor\t: 0\nflags\t\t: fpu avx2 avx512f amx_tile amx_bf16 amx_int8\n"
X86_AVX2 = "processor\t: 0\nflags\t\t: fpu sse2 avx2 fma f16c\n"
ARM_BF16 = "processor\t: 0\nBogoMIPS\t: 2100.00\nFeatures\t: fp asimd sve bf16 i8mm\n"
ARM_PLAIN = "processor\t: 0\nFeatures\t: fp asimd evtstrm aes crc32\n"


@pytest.mark.parametrize("text, want", [(X86_BF16, True), (X86_AMX, True), (X86_AVX2, False),
                                        (ARM_BF16, True), (ARM_PLAIN, False), ("", False)])
def test_cpuinfo_bf16(text, want):
    assert cpu_features.cpuinfo_has_native_bf16(text) is want


def test_cpuinfo_reads_only_whole_flags():
    assert not cpu_features.cpuinfo_has_native_bf16("flags\t\t: avx512_bf16x avx2\n")


@pytest.mark.parametrize("native", [True, False])
def test_resolve_dtypes(native, monkeypatch):
    monkeypatch.setattr(cpu_features, "has_native_bf16", lambda: native)
    auto_linear = "bfloat16" if native else "float32"
    assert resolve_dtypes("auto", "auto", "cpu") == ("float32", auto_linear)
    # an explicit dtype is honoured throughout; an explicit linear_dtype always
    assert resolve_dtypes("float32", "auto", "cpu") == ("float32", "float32")
    assert resolve_dtypes("auto", "float32", "cpu") == ("float32", "float32")
    assert resolve_dtypes("float32", "bfloat16", "cpu") == ("float32", "bfloat16")
    assert resolve_dtypes("bfloat16", "auto", "cpu") == ("bfloat16", "bfloat16")
    # CUDA: bf16 throughout, whatever the host CPU
    assert resolve_dtypes("auto", "auto", "cuda") == ("bfloat16", "bfloat16")
    assert resolve_dtypes("auto", "auto", "cuda:1") == ("bfloat16", "bfloat16")


def test_config_rejects_unknown_dtypes():
    with pytest.raises(ConfigError, match="linear_dtype must be one of"):
        EngineConfig(linear_dtype="int4")
    with pytest.raises(ConfigError, match="kv_cache_dtype must be one of"):
        EngineConfig(kv_cache_dtype="fp4")


def test_kv_cache_dtype_follows_the_projections(make_tiny_model_dir):
    """"auto": the dtype K and V are computed in; a named dtype wins; the pool is sized
    with it (bf16 halves the bytes per token)."""
    import torch

    from furca.runtime.loader import load_model
    from furca.runtime.model_runner import ModelRunner, kv_cache_dtype

    model_dir, _ = make_tiny_model_dir("llama")
    fp32 = load_model(model_dir, dtype="float32")
    mixed = load_model(model_dir, dtype="float32", linear_dtype="bfloat16")
    assert kv_cache_dtype("auto", fp32.model) == torch.float32
    assert kv_cache_dtype("auto", mixed.model) == torch.bfloat16
    assert kv_cache_dtype("float32", mixed.model) == torch.float32
    sizes = {}
    for name, loaded in (("fp32", fp32), ("mixed", mixed)):
        runner = ModelRunner(loaded.model, loaded.config, EngineConfig(max_total_tokens=64, log_capacity=False), 128)
        assert runner.kv_cache.dtype == kv_cache_dtype("auto", loaded.model)
        sizes[name] = runner.bytes_per_token
    assert sizes["fp32"] == 2 * sizes["mixed"]
