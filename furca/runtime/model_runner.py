"""The model, its KV pool and its attention backend: one forward pass per step.

The runner knows tensors, not requests: the scheduler hands it a `StepInputs` built by
`batch_builder.build_step` and gets fp32 logits for the requested rows back.
"""

from __future__ import annotations

import logging

import torch

from furca.errors import ConfigError
from furca.runtime import batch_invariant
from furca.runtime.attention.registry import make_attention_backend, resolve_backend_name
from furca.runtime.config import EngineConfig
from furca.runtime.kv_cache import KVCache
from furca.runtime.memory import pool_capacity_tokens

logger = logging.getLogger("furca")


def model_dtype(model: torch.nn.Module) -> torch.dtype:
    dtype = getattr(model, "dtype", None)
    if isinstance(dtype, torch.dtype):
        return dtype
    for p in model.parameters():
        return p.dtype
    return torch.float32


def kv_cache_dtype(name: str, model: torch.nn.Module) -> torch.dtype:
    """``EngineConfig.kv_cache_dtype`` for ``model``: "auto" is the dtype its projections
    compute K and V in (``linear_dtype``: with bf16 projections the stored V is exact
    and K differs only by rounding after rope); "fp8_e4m3" and its alias "fp8" are
    ``torch.float8_e4m3fn``; else the named dtype."""
    if name in ("fp8_e4m3", "fp8"):
        return torch.float8_e4m3fn
    if name == "auto":
        linear = getattr(model, "linear_dtype", None)
        return linear if isinstance(linear, torch.dtype) else model_dtype(model)
    from furca.runtime.loader import resolve_dtype

    return resolve_dtype(name)


def check_fp8_kv_cache(capability: tuple[int, int] | None, dtype: torch.dtype, backend: str) -> None:
    """Raise `ConfigError` where an fp8 (e4m3) pool cannot be read: the Triton attention
    kernels need an sm_89+ GPU (``capability``; Triton has no e4m3 before) and fp16 or bf16
    activations (``dtype``: they upcast K/V to it). The torch backend reads an fp8 pool
    anywhere (its gather upcasts to the compute dtype)."""
    if backend != "triton":
        return
    if capability is not None and capability < (8, 9):
        raise ConfigError(f"kv_cache_dtype='fp8_e4m3' with the triton attention backend needs an sm_89+ GPU "
                          f"(Ada, Hopper or newer); this one is sm_{capability[0]}{capability[1]}: use a "
                          "bfloat16 KV cache, or attention_backend='torch' (slower)")
    if dtype not in (torch.float16, torch.bfloat16):
        raise ConfigError(f"kv_cache_dtype='fp8_e4m3' with the triton attention backend reads the pool in "
                          f"float16 or bfloat16 activations; dtype is {dtype}")


def model_device(model: torch.nn.Module) -> torch.device:
    for p in model.parameters():
        return p.device
    return torch.device("cpu")


class ModelRunner:
    def __init__(self, model: torch.nn.Module, model_config, config: EngineConfig, context_length: int):
        self.model = model
        self.model_config = model_config
        self.device = model_device(model)
        self.dtype = model_dtype(model)
        self.kv_dtype = kv_cache_dtype(config.kv_cache_dtype, model)
        backend = resolve_backend_name("invariant" if config.deterministic else config.attention_backend, self.device)
        if self.kv_dtype == torch.float8_e4m3fn:  # before the pool is allocated
            check_fp8_kv_cache(torch.cuda.get_device_capability(self.device) if self.device.type == "cuda" else None,
                               self.dtype, backend)
        self.vocab_size = int(model_config.vocab_size)
        bytes_per_token = KVCache.bytes_per_token(
            model_config.num_hidden_layers, model_config.num_key_value_heads, model_config.head_dim, self.kv_dtype
        )
        self.capacity = pool_capacity_tokens(
            bytes_per_token=bytes_per_token,
            device=self.device,
            max_total_tokens=config.max_total_tokens,
            kv_cache_bytes=config.kv_cache_bytes,
            kv_cache_fraction=config.kv_cache_fraction,
            default_cap=config.max_running_requests * context_length,
        )
        self.kv_cache = KVCache(
            self.capacity + 1,  # slot 0 reserved
            model_config.num_hidden_layers,
            model_config.num_key_value_heads,
            model_config.head_dim,
            self.kv_dtype,
            self.device,
        )
        self.deterministic = config.deterministic
        if self.deterministic:
            batch_invariant.check_model(model, self.device, self.kv_dtype)
        self.attn_backend = make_attention_backend(backend, self.device)
        self.bytes_per_token = bytes_per_token
        if config.log_capacity:
            logger.info(
                "KV pool: %d tokens (%.1f MiB, %d bytes/token, %s, %s)",
                self.capacity, self.capacity * bytes_per_token / 2**20, bytes_per_token, self.kv_dtype, self.device,
            )

    @torch.inference_mode()
    def forward(self, step) -> torch.Tensor:
        """fp32 logits [rows asked for in ``step.batch.logits_indices`` (>= 1), vocab] for
        `step` (a `StepInputs`)."""
        with batch_invariant.mode(self.deterministic):
            return self.model(step.input_ids, step.positions, step.batch)
