"""Rotary position embedding (the "rotate-half"/NeoX layout HF Llama checkpoints use)
with plain, linear and llama3 frequency scaling, or explicit per-frequency factors
(``freq_factors``, from a GGUF's ``rope_freqs.weight``), from a cos/sin cache indexed
by absolute positions."""

from __future__ import annotations

import math
from typing import Any

import torch

from furca.runtime.model_config import FREQ_FACTORS_ROPE_TYPE


def rope_inv_freq(head_dim: int, theta: float, scaling: dict[str, Any] | None) -> torch.Tensor:
    """fp32 ``[head_dim // 2]`` inverse frequencies, computed as transformers does."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
    if scaling is None:
        return inv_freq
    rope_type = scaling["rope_type"]
    if rope_type == FREQ_FACTORS_ROPE_TYPE:
        # as llama.cpp applies rope_freqs.weight (ggml_rope_ext's freq_factors): theta_i / f_i
        return inv_freq / torch.tensor(scaling["freq_factors"], dtype=torch.float32)
    factor = float(scaling["factor"])
    if rope_type == "linear":
        return inv_freq / factor
    if rope_type == "llama3":
        low_freq_factor = float(scaling["low_freq_factor"])
        high_freq_factor = float(scaling["high_freq_factor"])
        old_context_len = scaling["original_max_position_embeddings"]
        low_freq_wavelen = old_context_len / low_freq_factor
        high_freq_wavelen = old_context_len / high_freq_factor
        wavelen = 2 * math.pi / inv_freq
        inv_freq_llama = torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
        smooth = (old_context_len / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
        smoothed = (1 - smooth) * inv_freq_llama / factor + smooth * inv_freq_llama
        is_medium = ~(wavelen < high_freq_wavelen) * ~(wavelen > low_freq_wavelen)
        return torch.where(is_medium, smoothed, inv_freq_llama)
    raise ValueError(f"unknown rope type {rope_type!r}")  # ModelConfig rejects these earlier


class RotaryEmbedding(torch.nn.Module):
    """Holds fp32 cos/sin tables ``[capacity, head_dim // 2]``; grows them on demand.

    ``forward`` does not sync with the device: the caller passes the largest position
    it may index (``max_position``, e.g. from ``ForwardBatch.seq_lens_cpu``), or keeps
    positions below the capacity set at construction.
    """

    def __init__(self, head_dim: int, theta: float, scaling: dict[str, Any] | None,
                 initial_capacity: int, device: torch.device | str = "cpu"):
        super().__init__()
        self.head_dim = head_dim
        self.register_buffer("inv_freq", rope_inv_freq(head_dim, theta, scaling).to(device), persistent=False)
        self.register_buffer("cos", torch.empty(0, head_dim // 2, device=device), persistent=False)
        self.register_buffer("sin", torch.empty(0, head_dim // 2, device=device), persistent=False)
        self.extend_to(initial_capacity)

    @property
    def capacity(self) -> int:
        return int(self.cos.shape[0])

    def extend_to(self, num_positions: int) -> None:
        """Make positions ``0 .. num_positions-1`` available (doubling, so rare)."""
        if num_positions <= self.capacity:
            return
        n = max(num_positions, 2 * self.capacity)
        t = torch.arange(n, dtype=torch.float32, device=self.inv_freq.device)
        freqs = t[:, None] * self.inv_freq[None, :]  # (n, D/2), as HF's fp32 outer product
        self.cos = freqs.cos()
        self.sin = freqs.sin()

    def cos_sin(self, positions: torch.Tensor, dtype: torch.dtype,
                max_position: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """``(cos, sin)``, each ``(T, 1, D/2)`` in ``dtype``, for ``positions`` (T,):
        computed once per forward pass and shared by every layer (``apply_rope``)."""
        if max_position is not None:
            self.extend_to(max_position + 1)
        cos = self.cos.index_select(0, positions).to(dtype)[:, None, :]  # (T, 1, D/2)
        sin = self.sin.index_select(0, positions).to(dtype)[:, None, :]
        return cos, sin

    def forward(self, positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor,
                max_position: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Rotate ``q`` (T, H, D) and ``k`` (T, KV, D) by their rows' ``positions`` (T,)."""
        cos, sin = self.cos_sin(positions, q.dtype, max_position)
        return apply_rope(q, cos, sin), apply_rope(k, cos, sin)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate ``x`` (T, heads, D) by ``cos``/``sin`` (T, 1, D/2) from ``cos_sin``."""
    x1, x2 = x.chunk(2, dim=-1)
    # HF: x * cat(cos, cos) + rotate_half(x) * cat(sin, sin), with rotate_half = cat(-x2, x1)
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)
