"""TritonAttentionBackend against the torch reference backend on the runtime's own
ForwardBatch and KVCache; backend choice through the registry; furca.kernels without Triton."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch
from kernel_cases import DEVICE, DTYPES, IS_INTERPRETED, assert_close

from furca.errors import ConfigError
from furca.runtime.attention.registry import backend_names, config_choices, make_attention_backend
from furca.runtime.attention.torch_backend import TorchAttentionBackend
from furca.runtime.attention.triton_backend import TritonAttentionBackend
from furca.runtime.config import EngineConfig
from furca.runtime.forward_batch import ForwardBatch
from furca.runtime.kv_cache import KVCache
from tests.conftest import CLIENT_TIMEOUT

POOL_DTYPES = ["fp32", "fp16"] if IS_INTERPRETED else ["fp32", "fp16", "bf16"]
NUM_LAYERS, NUM_HEADS, NUM_KV_HEADS, HEAD_DIM = 2, 6, 2, 64


def _run(backend, requests, dtype, seed, pool_dtype=None):
    """Two steps on a fresh pool (``pool_dtype``, default ``dtype``): step 1 prefills
    every request's prefix, step 2 runs ``requests`` ([(prefix_len, new_len)]) as one
    mixed batch; returns step 2's outputs per layer and the pool."""
    gen = torch.Generator().manual_seed(seed)
    total = sum(p + n for p, n in requests)
    cache = KVCache(total + 40, NUM_LAYERS, NUM_KV_HEADS, HEAD_DIM, pool_dtype or dtype, DEVICE)
    slots = (torch.randperm(total + 39, generator=gen)[:total] + 1).tolist()  # shuffled
    per_req, at = [], 0
    for p, n in requests:
        per_req.append((slots[at:at + p], slots[at + p:at + p + n]))
        at += p + n
    outs = []
    steps = [[([], pre) for pre, _ in per_req if pre], per_req]  # [(prefix slots, new slots)] per step
    for step in steps:
        kv_indices = torch.tensor([s for pre, new in step for s in pre + new])
        out_loc = torch.tensor([s for _, new in step for s in new])
        batch = ForwardBatch.build(
            prefix_lens=[len(pre) for pre, _ in step], qo_lens=[len(new) for _, new in step],
            kv_indices=kv_indices, out_cache_loc=out_loc, logits_indices=torch.zeros(1, dtype=torch.int64),
            kv_cache=cache, attn_backend=backend, device=DEVICE)
        num_tokens = len(out_loc)
        outs = []
        for layer in range(NUM_LAYERS):
            q = torch.randn(num_tokens, NUM_HEADS, HEAD_DIM, generator=gen).to(DEVICE, dtype)
            kv = (torch.randn(num_tokens, 2 * NUM_KV_HEADS, HEAD_DIM, generator=gen) * 3).to(DEVICE, dtype)
            outs.append(backend.forward(q, kv[:, :NUM_KV_HEADS], kv[:, NUM_KV_HEADS:], layer, batch, 0.125))
    return outs, cache


@pytest.mark.parametrize("pool_dtype", POOL_DTYPES)
@pytest.mark.parametrize("requests", [
    [(0, 9), (300, 1), (40, 23), (0, 1)],  # mixed: prefills with and without a prefix, decodes
    [(17, 1), (500, 1), (0, 1)],  # decode only
], ids=["mixed", "decode"])
def test_triton_backend_matches_torch_backend(pool_dtype, requests):
    dtype = DTYPES[pool_dtype]
    got, got_cache = _run(TritonAttentionBackend(), requests, dtype, seed=7)
    want, want_cache = _run(TorchAttentionBackend(), requests, dtype, seed=7)
    for g, w in zip(got, want):
        assert_close(g, w, dtype)
    for layer in range(NUM_LAYERS):
        assert torch.equal(got_cache.k_heads[layer], want_cache.k_heads[layer])
        assert torch.equal(got_cache.v_heads[layer], want_cache.v_heads[layer])


@pytest.mark.parametrize("q_dtype", ["fp16"] if IS_INTERPRETED else ["fp16", "bf16"])
def test_triton_backend_matches_torch_backend_on_an_fp8_pool(q_dtype):
    """store_kv and KVCache.store write the same e4m3 values; both backends read them."""
    dtype, requests = DTYPES[q_dtype], [(0, 9), (300, 1), (40, 23), (0, 1)]
    got, got_cache = _run(TritonAttentionBackend(), requests, dtype, seed=8, pool_dtype=torch.float8_e4m3fn)
    want, want_cache = _run(TorchAttentionBackend(), requests, dtype, seed=8, pool_dtype=torch.float8_e4m3fn)
    for g, w in zip(got, want):
        assert_close(g, w, dtype)
    for layer in range(NUM_LAYERS):  # values: the interpreter writes +0 where torch writes -0
        assert torch.equal(got_cache.k_heads[layer].float(), want_cache.k_heads[layer].float())
        assert torch.equal(got_cache.v_heads[layer].float(), want_cache.v_heads[layer].float())


def test_auto_backend_is_triton_on_cuda_and_torch_on_cpu():
    assert isinstance(make_attention_backend("auto", torch.device("cpu")), TorchAttentionBackend)
    assert isinstance(make_attention_backend("auto", torch.device("cuda")), TritonAttentionBackend)
    assert isinstance(make_attention_backend("triton"), TritonAttentionBackend)
    assert isinstance(make_attention_backend("torch", torch.device("cuda")), TorchAttentionBackend)


def test_registry_names_are_the_backend_modules_and_the_config_choices():
    """Every ``<name>_backend`` module is a name; EngineConfig and the CLI accept exactly
    those and "auto", and refuse anything else naming them."""
    assert backend_names() == ("invariant", "torch", "triton")
    assert config_choices() == ("auto", "invariant", "torch", "triton")
    assert EngineConfig.__dataclass_fields__["attention_backend"].metadata["choices"] == config_choices()
    for name in config_choices():
        assert EngineConfig(attention_backend=name).attention_backend == name
    with pytest.raises(ConfigError, match=r"attention_backend must be 'auto', 'invariant', 'torch' or 'triton', got 'flash'"):
        EngineConfig(attention_backend="flash")
    with pytest.raises(ConfigError, match="attention_backend must be"):
        make_attention_backend("flash")


def _python(code: str) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh interpreter with compiled (not interpreted) Triton."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=CLIENT_TIMEOUT)


def test_registry_reads_names_without_importing_a_backend():
    """Validating a config imports no backend module (no torch), and importing the Triton
    backend or resolving "auto" on a CPU imports no Triton."""
    code = (
        "import sys\n"
        "from furca.runtime.config import EngineConfig\n"
        "EngineConfig(attention_backend='triton')\n"
        "assert 'torch' not in sys.modules, 'config imported torch'\n"
        "import torch\n"
        "from furca.runtime.attention.registry import resolve_backend_name\n"
        "import furca.runtime.attention.triton_backend\n"
        "assert resolve_backend_name('auto', torch.device('cpu')) == 'torch'\n"
        "assert 'triton' not in sys.modules, 'triton imported'\n"
        "assert resolve_backend_name('auto', torch.device('cuda')) == 'triton'\n"
        "print('ok')\n"
    )
    run = _python(code)
    assert run.returncode == 0 and run.stdout.strip() == "ok", run.stderr


def test_kernels_import_without_triton():
    """With triton unimportable, the kernel modules import, the references run, and a
    launch says what is missing."""
    code = (
        "import sys; sys.modules['triton'] = None\n"
        "import torch, furca.kernels\n"
        "from furca.kernels import decode_attention as d, extend_attention, store_kv, token_bitmask\n"
        "from furca.kernels._triton import HAS_TRITON, KernelUnavailableError\n"
        "assert not HAS_TRITON\n"
        "q = torch.randn(1, 2, 8); kb = torch.randn(4, 1, 8)\n"
        "ip = torch.tensor([0, 2]); ix = torch.tensor([1, 3])\n"
        "d.decode_attention_ref(q, kb, kb, ip, ix, 1.0)\n"
        "try:\n"
        "    d.decode_attention(q, kb, kb, ip, ix, 1.0)\n"
        "except KernelUnavailableError as e:\n"
        "    print('unavailable:', e)\n"
        "from furca.errors import ConfigError\n"
        "from furca.runtime.attention.registry import make_attention_backend\n"
        "assert type(make_attention_backend('auto', torch.device('cuda'))).__name__ == 'TorchAttentionBackend'\n"
        "try:\n"
        "    make_attention_backend('triton')\n"
        "except ConfigError as e:\n"
        "    print('config error:', e)\n"
    )
    run = _python(code)
    assert run.returncode == 0, run.stderr
    assert "unavailable: " in run.stdout and "pip install triton" in run.stdout
    assert "config error: attention_backend='triton' is not available" in run.stdout
