"""The model, its KV pool and its attention backend: one forward pass per step.

The runner knows tensors, not requests: the scheduler hands it a `StepInputs` built by
`batch_builder.build_step` and gets fp32 logits for the requested rows back.
"""

from __future__ import annotations

import logging

import torch

from furca.runtime import batch_invariant
from furca.runtime.attention.registry import make_attention_backend
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
    and K differs only by rounding after rope), else the named dtype."""
    if name == "auto":
        linear = getattr(model, "linear_dtype", None)
        return linear if isinstance(linear, torch.dtype) else model_dtype(model)
    from furca.runtime.loader import resolve_dtype

    return resolve_dtype(name)


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
        self.attn_backend = make_attention_backend("invariant" if self.deterministic else config.attention_backend,
                                                   self.device)
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
