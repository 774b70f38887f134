"""Token-slot KV storage (one slot per token, as SGLang does).

Slot 0 is reserved: it is never handed out, so padded writes and padded reads can
target it.

Layout: each layer's K (and V) lives in one head-major buffer ``(num_kv_heads,
num_slots, head_dim)`` (``k_heads[layer]``), so gathering a request's slots gives
per-head contiguous ``(L, head_dim)`` blocks, the layout attention kernels read
fastest. ``k[layer]`` is the same memory seen slot-major, ``(num_slots, num_kv_heads,
head_dim)``: ``k[layer][slots]`` is the keys of those slots.
"""

from __future__ import annotations

import torch

from furca.errors import ConfigError


class KVCache:
    """Per-layer K and V buffers; see the module docstring for the layout."""

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
        shape = (num_kv_heads, num_slots, head_dim)
        self.k_heads = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(num_layers)]
        self.v_heads = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(num_layers)]
        self.k = [buf.transpose(0, 1) for buf in self.k_heads]  # (num_slots, KV, D) views
        self.v = [buf.transpose(0, 1) for buf in self.v_heads]
        self._arrays: list | None = None

    def arrays(self, layer_id: int) -> tuple:
        """A CPU pool's layer as numpy arrays over the same memory (``numpy_view`` of
        ``k_heads[layer_id]`` and ``v_heads[layer_id]``), made once: the numba kernels
        read them every layer of every step."""
        if self._arrays is None:
            from furca.runtime.cpu_arrays import numpy_view

            self._arrays = [(numpy_view(k), numpy_view(v)) for k, v in zip(self.k_heads, self.v_heads)]
        return self._arrays[layer_id]

    @staticmethod
    def bytes_per_token(num_layers: int, num_kv_heads: int, head_dim: int, dtype: torch.dtype) -> int:
        return 2 * num_layers * num_kv_heads * head_dim * torch.empty((), dtype=dtype).element_size()

    def store(self, layer_id: int, loc: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        """Write ``k``/``v`` (T, KV, D) into slots ``loc`` (T,) of layer ``layer_id``. An
        fp8 (float8_e4m3fn) pool gets ``furca.kernels.fp8.to_e4m3(k)``: saturated to +-448,
        rounded to nearest even (a plain cast would turn out-of-range values into NaN)."""
        if self.dtype == torch.float8_e4m3fn:  # torch has no CPU index_copy_ for fp8: copy the bytes
            from furca.kernels.fp8 import to_e4m3

            for buf, x in ((self.k_heads[layer_id], k), (self.v_heads[layer_id], v)):
                buf.view(torch.uint8).index_copy_(1, loc, to_e4m3(x).transpose(0, 1).view(torch.uint8))
            return
        self.k_heads[layer_id].index_copy_(1, loc, k.transpose(0, 1).to(self.dtype))
        self.v_heads[layer_id].index_copy_(1, loc, v.transpose(0, 1).to(self.dtype))
