"""Batch-invariant attention on CPU: every query row, prefill or decode, through one
routine with one reduction order.

The torch backend computes a prefill (extend) with SDPA over the whole chunk and a
decode row with the numba kernel (or a padded SDPA group): the same query over the
same keys gets different last bits depending on whether it came in a prompt, in a
chunk of a prompt, after a cache hit, or as a decode step. Here each query row ``j``
of request ``i`` is one task of `cpu_decode`'s kernel over its causal KV range
``kv_indices[kv_indptr[i] : kv_indptr[i] + prefix_lens[i] + j + 1]``, read from the
pool after the new K/V rows are stored. The kernel reduces each (row, head) over the
keys in key order with fp32 arithmetic, in one thread, whatever the other tasks are
(`cpu_decode` says so and splits only between tasks), so a row's output depends on
its query and its keys alone: the same whatever the batch, the chunk boundaries or
the cache state. This is the fixed-KV-split attention of SGLang's and vLLM's
batch-invariant modes, on a CPU.

Supports CPU pools in float32 or bfloat16 and needs numba (``available`` is false
without it, and building the backend then raises `ConfigError`). "auto" never picks
it; ``EngineConfig.deterministic`` does. A prefill costs more than SDPA's (each row
is its own pass over its keys); see docs/runtime.md for figures.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from furca.errors import ConfigError
from furca.runtime.attention.cpu_decode import get_decode
from furca.runtime.attention.registry import register_backend
from furca.runtime.forward_batch import ForwardBatch


@dataclass(frozen=True)
class _RowPlan:
    """One kernel task list for a batch: every query row with its causal KV range."""

    rows: np.ndarray  # (T,) int64: 0 .. T-1
    kv_start: np.ndarray  # (T,) offset of the row's request in kv_indices
    kv_len: np.ndarray  # (T,) keys the row sees
    kv_indices: np.ndarray


def plan_rows(qo_lens: list[int], seq_lens: list[int], kv_indices: np.ndarray) -> _RowPlan:
    """Row ``j`` of a request with ``q`` new tokens and ``s`` keys sees ``s - q + j + 1``
    keys starting at the request's first slot."""
    q = np.asarray(qo_lens, dtype=np.int64)
    s = np.asarray(seq_lens, dtype=np.int64)
    kv_begin = np.concatenate(([0], np.cumsum(s)[:-1])).astype(np.int64)
    q_begin = np.concatenate(([0], np.cumsum(q)[:-1])).astype(np.int64)
    total = int(q.sum())
    rows = np.arange(total, dtype=np.int64)
    within = rows - np.repeat(q_begin, q)  # j: index of the row inside its request
    kv_len = np.repeat(s - q, q) + within + 1
    return _RowPlan(rows, np.repeat(kv_begin, q), kv_len, kv_indices)


class InvariantAttentionBackend:
    """``AttentionBackend`` whose output rows are batch-invariant (bitwise)."""

    def __init__(self):
        self._decode = get_decode()
        if self._decode is None:
            raise ConfigError("attention_backend='invariant' needs numba's CPU kernel (numba missing or "
                              "FURCA_NO_NUMBA set)")
        self._plan_for: ForwardBatch | None = None
        self._plan: _RowPlan | None = None

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layer_id: int,
                batch: ForwardBatch, scaling: float, kv_stored: bool = False) -> torch.Tensor:
        cache = batch.kv_cache
        if cache.device.type != "cpu" or cache.dtype not in (torch.float32, torch.bfloat16):
            raise ConfigError(f"attention_backend='invariant' needs a CPU KV pool in float32 or bfloat16, got "
                              f"{cache.dtype} on {cache.device}")
        if not kv_stored:
            cache.store(layer_id, batch.out_cache_loc, k, v)
        plan = self._get_plan(batch)
        out = torch.empty(q.shape, dtype=torch.float32)
        self._decode(q.to(torch.float32).contiguous().numpy(), *cache.arrays(layer_id), plan.rows, plan.kv_start,
                     plan.kv_len, plan.kv_indices, float(scaling), out.numpy())
        return out.to(q.dtype)

    def _get_plan(self, batch: ForwardBatch) -> _RowPlan:
        if self._plan_for is not batch or self._plan is None:
            qo_lens = batch.qo_lens_cpu
            if qo_lens is None:
                qo_lens = (batch.qo_indptr[1:] - batch.qo_indptr[:-1]).tolist()
            seq_lens = batch.seq_lens_cpu if batch.seq_lens_cpu is not None else batch.seq_lens.tolist()
            kv_indices = batch.kv_indices.to(torch.int64).numpy()
            self._plan_for, self._plan = batch, plan_rows(qo_lens, seq_lens, kv_indices)
        return self._plan


def _available() -> bool:
    return get_decode() is not None


register_backend("invariant", InvariantAttentionBackend, available=_available, auto_devices=())
