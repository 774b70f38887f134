"""The attention-backend interface models call. Models never touch the KV pool or
the batch layout themselves; the scheduler never touches attention math."""

from __future__ import annotations

from typing import Protocol

import torch

from furca.runtime.forward_batch import ForwardBatch


class AttentionBackend(Protocol):
    def forward(
        self,
        q: torch.Tensor,  # (T, num_heads, head_dim)
        k: torch.Tensor,  # (T, num_kv_heads, head_dim)  new tokens' keys (RoPE applied)
        v: torch.Tensor,  # (T, num_kv_heads, head_dim)
        layer_id: int,
        batch: ForwardBatch,
        scaling: float,
    ) -> torch.Tensor:  # (T, num_heads, head_dim)
        """Store the new ``k``/``v`` rows at ``batch.out_cache_loc`` in layer
        ``layer_id`` of ``batch.kv_cache``, then compute causal attention of each
        request's queries over its KV slots ``batch.kv_indices[kv_indptr[i]:kv_indptr[i+1]]``
        (grouped-query: query head ``h`` uses KV head ``h // (num_heads // num_kv_heads)``)."""
        ...
