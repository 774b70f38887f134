"""Token-slot KV storage (one slot per token, as SGLang does) and its allocator.

Slot 0 is reserved: it is never handed out, so padded writes can target it.
"""

from __future__ import annotations

import torch

from furca.errors import ConfigError


class KVCache:
    """Per-layer K and V buffers of shape (num_slots, num_kv_heads, head_dim)."""

    def __init__(
        self,
        num_slots: int,
        num_layers: int,
        num_kv_heads: int,
        head_dim: int,
        dtype: torch.dtype,
        device: torch.device | str = "cpu",
    ):
        if num_slots < 2:
            raise ConfigError(f"KV cache needs at least 2 slots, got {num_slots}")
        self.num_slots = num_slots
        self.num_layers = num_layers
        self.num_kv_heads = num_kv_heads
        self.head_dim = head_dim
        self.dtype = dtype
        self.device = torch.device(device)
        shape = (num_slots, num_kv_heads, head_dim)
        self.k = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(num_layers)]
        self.v = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(num_layers)]

    @staticmethod
    def bytes_per_token(num_layers: int, num_kv_heads: int, head_dim: int, dtype: torch.dtype) -> int:
        return 2 * num_layers * num_kv_heads * head_dim * torch.empty((), dtype=dtype).element_size()

    def store(self, layer_id: int, loc: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        self.k[layer_id][loc] = k.to(self.dtype)
        self.v[layer_id][loc] = v.to(self.dtype)
