"""EngineConfig: every knob of the runtime in one frozen, validated dataclass.

`Engine(model, **config)` builds one with `EngineConfig.from_kwargs`, which rejects
unknown keys by name. Nothing here touches a device; sizing happens in `memory.py`.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from furca.errors import ConfigError

_DTYPES = ("auto", "float32", "float16", "bfloat16")
_POLICIES = ("lpm", "fcfs")


@dataclass(frozen=True)
class EngineConfig:
    # model
    dtype: str = "auto"  # weights and KV cache: auto = bfloat16 on CUDA, float32 elsewhere
    # the decoder layers' linear projections (weights and products): auto = bfloat16 where dtype is
    # auto and resolves to float32 on a CPU with native bf16 dot products, else dtype
    linear_dtype: str = "auto"
    # the KV cache: auto = the projections' dtype (K and V come out of them): bfloat16 with
    # bf16 projections, else dtype
    kv_cache_dtype: str = "auto"
    device: str = "auto"  # auto = cuda if available, else cpu
    context_length: int | None = None  # None = the model's; may only shrink it
    attention_backend: str = "auto"  # auto = triton on CUDA (when installed), torch elsewhere
    # KV pool: exactly one of these decides its size (max_total_tokens wins)
    max_total_tokens: int | None = None  # capacity in tokens
    kv_cache_bytes: int | None = None
    kv_cache_fraction: float | None = None  # of free device memory (CPU: MemAvailable)
    # scheduling
    max_running_requests: int = 64
    chunked_prefill_size: int | None = 2048  # per-step prefill token budget; None/-1 = off
    max_prefill_tokens: int = 16384  # per-step prefill budget when chunking is off
    schedule_policy: str = "lpm"
    disable_radix_cache: bool = False
    in_batch_prefix_min: int = 32  # defer a request sharing this many tokens with one admitted this step
    init_new_token_ratio: float = 0.7  # fraction of max_new_tokens reserved for admitted requests
    min_new_token_ratio: float = 0.1
    new_token_ratio_decay: float = 0.001  # per decode step
    decode_reserve_clip: int = 4096  # reserve at most this many decode tokens per request
    # constrained decoding: append a grammar's forced text without sampling (SGLang's
    # compressed FSM), re-tokenized at the boundary
    enable_jump_forward: bool = True
    # sampling / misc
    random_seed: int | None = None  # seeds torch's global generator (requests without a seed) at start
    check_memory: bool = True  # strict accounting check whenever the engine goes idle (as SGLang)
    log_capacity: bool = True

    def __post_init__(self) -> None:
        def positive(name: str, value: Any, allow_none: bool = True) -> None:
            if value is None and allow_none:
                return
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ConfigError(f"{name} must be a positive int, got {value!r}")

        for name in ("dtype", "linear_dtype", "kv_cache_dtype"):
            if getattr(self, name) not in _DTYPES:
                raise ConfigError(f"{name} must be one of {_DTYPES}, got {getattr(self, name)!r}")
        if not isinstance(self.device, str) or not self.device:
            raise ConfigError(f"device must be a string like 'cpu', 'cuda', 'cuda:1' or 'auto', got {self.device!r}")
        if self.attention_backend not in ("auto", "torch", "triton"):
            raise ConfigError(f"attention_backend must be 'auto', 'torch' or 'triton', got {self.attention_backend!r}")
        positive("context_length", self.context_length)
        if self.max_total_tokens is not None:
            positive("max_total_tokens", self.max_total_tokens)
            if self.max_total_tokens < 2:
                raise ConfigError(f"max_total_tokens must be >= 2, got {self.max_total_tokens}")
        positive("kv_cache_bytes", self.kv_cache_bytes)
        if self.kv_cache_fraction is not None and not (0.0 < float(self.kv_cache_fraction) <= 1.0):
            raise ConfigError(f"kv_cache_fraction must be in (0, 1], got {self.kv_cache_fraction!r}")
        if self.kv_cache_bytes is not None and self.kv_cache_fraction is not None:
            raise ConfigError("give kv_cache_bytes or kv_cache_fraction, not both")
        positive("max_running_requests", self.max_running_requests, allow_none=False)
        if self.chunked_prefill_size == -1:
            object.__setattr__(self, "chunked_prefill_size", None)
        positive("chunked_prefill_size", self.chunked_prefill_size)
        positive("max_prefill_tokens", self.max_prefill_tokens, allow_none=False)
        if self.schedule_policy not in _POLICIES:
            raise ConfigError(f"schedule_policy must be one of {_POLICIES}, got {self.schedule_policy!r}")
        positive("in_batch_prefix_min", self.in_batch_prefix_min, allow_none=False)
        positive("decode_reserve_clip", self.decode_reserve_clip, allow_none=False)
        for name in ("init_new_token_ratio", "min_new_token_ratio"):
            value = getattr(self, name)
            if not (0.0 <= value <= 1.0):
                raise ConfigError(f"{name} must be in [0, 1], got {value!r}")
        if self.min_new_token_ratio > self.init_new_token_ratio:
            raise ConfigError("min_new_token_ratio must not exceed init_new_token_ratio")
        if self.new_token_ratio_decay < 0:
            raise ConfigError(f"new_token_ratio_decay must be >= 0, got {self.new_token_ratio_decay!r}")
        if not isinstance(self.enable_jump_forward, bool):
            raise ConfigError(f"enable_jump_forward must be true or false, got {self.enable_jump_forward!r}")
        if self.random_seed is not None and not isinstance(self.random_seed, int):
            raise ConfigError(f"random_seed must be an int, got {self.random_seed!r}")

    @property
    def prefill_budget(self) -> int:
        """Most new prompt tokens one step computes."""
        return self.chunked_prefill_size or self.max_prefill_tokens

    @property
    def is_chunked(self) -> bool:
        return self.chunked_prefill_size is not None

    @classmethod
    def from_kwargs(cls, **kwargs: Any) -> "EngineConfig":
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(kwargs) - known)
        if unknown:
            raise ConfigError(f"unknown engine option(s) {unknown}; known: {sorted(known)}")
        return cls(**kwargs)
