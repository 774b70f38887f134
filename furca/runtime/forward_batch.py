"""The batch a model forward pass sees, in compressed-row (CSR) form, and the attention
interface (`AttentionBackend`) models call through it.

One forward pass runs over a *mixed* batch: some requests extend (prefill, possibly a
chunk of it, possibly after a radix-cache prefix hit), others decode one token. All new
tokens are flattened into one row dimension ``T``; per-request ranges are given by
``indptr`` arrays, as FlashInfer, SGLang and the Triton kernels expect.

Region table for request ``i`` (``B`` requests, ``T`` new tokens in total)::

    new tokens (queries)   rows  qo_indptr[i] : qo_indptr[i+1]          of input_ids/positions
    all its KV slots       kv_indices[kv_indptr[i] : kv_indptr[i+1]]    prefix first, then new
    prefix (cached) slots  the first  prefix_lens[i]  of those
    new tokens' slots      out_cache_loc[qo_indptr[i] : qo_indptr[i+1]] (== the last ones)

so ``seq_lens[i] == prefix_lens[i] + (qo_indptr[i+1] - qo_indptr[i])`` and the new
token at row ``r`` has absolute position ``positions[r]``. The attention backend writes
the new K/V rows into ``out_cache_loc`` before attending, so a request attends to its
full ``kv_indices`` range causally (query ``j`` of request ``i`` sees KV ``0 ..
prefix_lens[i] + j``).

``logits_indices`` selects the rows the LM head is applied to (usually the last new
token of each request; every row where prompt logprobs are wanted).

Passed as an argument to ``model(input_ids, positions, batch)``; never global.

Both types live here so the dependency points one way: the backends in
``furca.runtime.attention`` import this module, this module imports none of them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import torch

if TYPE_CHECKING:
    from furca.runtime.kv_cache import KVCache


class AttentionBackend(Protocol):
    """What models call for attention. Models never touch the KV pool or the batch
    layout themselves; the scheduler never touches attention math. Implementations
    register in `furca.runtime.attention.registry`."""

    def forward(
        self,
        q: torch.Tensor,  # (T, num_heads, head_dim)
        k: torch.Tensor,  # (T, num_kv_heads, head_dim)  new tokens' keys (RoPE applied)
        v: torch.Tensor,  # (T, num_kv_heads, head_dim)
        layer_id: int,
        batch: "ForwardBatch",
        scaling: float,
        kv_stored: bool = False,
    ) -> torch.Tensor:  # (T, num_heads, head_dim)
        """Store the new ``k``/``v`` rows at ``batch.out_cache_loc`` in layer
        ``layer_id`` of ``batch.kv_cache`` (unless ``kv_stored``: the caller wrote them
        there already, in the pool's dtype), then compute causal attention of each
        request's queries over its KV slots ``batch.kv_indices[kv_indptr[i]:kv_indptr[i+1]]``
        (grouped-query: query head ``h`` uses KV head ``h // (num_heads // num_kv_heads)``)."""
        ...


@dataclass
class ForwardBatch:
    qo_indptr: torch.Tensor  # int64 [B+1], on the model device
    kv_indptr: torch.Tensor  # int64 [B+1]
    kv_indices: torch.Tensor  # int64 [kv_indptr[-1]]
    out_cache_loc: torch.Tensor  # int64 [T]
    seq_lens: torch.Tensor  # int64 [B]: prefix + new tokens per request
    prefix_lens: torch.Tensor  # int64 [B]
    logits_indices: torch.Tensor  # int64 [N]: rows of the T new tokens to compute logits for
    kv_cache: "KVCache"
    attn_backend: AttentionBackend
    # Host copies of the small per-request arrays, so backends can loop or plan
    # without device syncs.
    qo_lens_cpu: list[int] | None = None
    seq_lens_cpu: list[int] | None = None

    @property
    def batch_size(self) -> int:
        return int(self.seq_lens.shape[0])

    @property
    def is_decode_only(self) -> bool:
        """Every request contributes exactly one new token."""
        return int(self.qo_indptr[-1]) == self.batch_size

    @classmethod
    def build(
        cls,
        *,
        prefix_lens: list[int],
        qo_lens: list[int],
        kv_indices: torch.Tensor,
        out_cache_loc: torch.Tensor,
        logits_indices: torch.Tensor,
        kv_cache: "KVCache",
        attn_backend: AttentionBackend,
        device: torch.device | str = "cpu",
    ) -> "ForwardBatch":
        """Build from per-request host lists. ``kv_indices`` holds, per request in
        order, its ``prefix_lens[i] + qo_lens[i]`` slots (the last ``qo_lens[i]`` equal
        its part of ``out_cache_loc``)."""
        seq_lens = [p + q for p, q in zip(prefix_lens, qo_lens)]
        qo_indptr = [0]
        kv_indptr = [0]
        for q, s in zip(qo_lens, seq_lens):
            qo_indptr.append(qo_indptr[-1] + q)
            kv_indptr.append(kv_indptr[-1] + s)
        i64 = dict(dtype=torch.int64, device=device)
        return cls(
            qo_indptr=torch.tensor(qo_indptr, **i64),
            kv_indptr=torch.tensor(kv_indptr, **i64),
            kv_indices=kv_indices.to(device=device, dtype=torch.int64),
            out_cache_loc=out_cache_loc.to(device=device, dtype=torch.int64),
            seq_lens=torch.tensor(seq_lens, **i64),
            prefix_lens=torch.tensor(prefix_lens, **i64),
            logits_indices=logits_indices.to(device=device, dtype=torch.int64),
            kv_cache=kv_cache,
            attn_backend=attn_backend,
            qo_lens_cpu=list(qo_lens),
            seq_lens_cpu=seq_lens,
        )
