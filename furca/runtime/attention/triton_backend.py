"""Attention through furca's Triton kernels (the CUDA path; runs interpreted on CPU
with ``TRITON_INTERPRET=1``, for tests).

Per layer: ``store_kv`` writes the new K/V rows into the pool, then

- a decode-only batch (every request has one new token) runs ``decode_attention``
  (split-KV, grouped-query heads share K/V loads);
- any other batch (prefill, chunked prefill after a radix-cache hit, or prefill mixed
  with decode rows) runs ``extend_attention`` over all of it: prefix gathered from the
  pool, the new tokens causally from the contiguous ``k``/``v`` rows, as SGLang does.

The plan (which kernel, the host-side maxima that size the grids) is made once per
``ForwardBatch`` from its host lists and reused by every layer: no device sync.

Registered as "triton", "auto"'s choice on CUDA when Triton is installed. Importing this
module imports no Triton (the registry imports it to resolve "auto" on a CPU too): the
kernels are imported when a backend is built.
"""

from __future__ import annotations

import torch

from furca.runtime.attention.registry import register_backend
from furca.runtime.forward_batch import ForwardBatch


def _triton_installed() -> bool:
    from furca.kernels._triton import HAS_TRITON

    return HAS_TRITON


class TritonAttentionBackend:
    """``AttentionBackend`` over the Triton kernels in ``furca.kernels``. Building one
    without Triton raises `KernelUnavailableError` (an ImportError), not a later forward."""

    def __init__(self) -> None:
        from furca.kernels._triton import require_triton

        require_triton()
        from furca.kernels.decode_attention import decode_attention
        from furca.kernels.extend_attention import extend_attention
        from furca.kernels.store_kv import store_kv

        self._decode_attention, self._extend_attention, self._store_kv = decode_attention, extend_attention, store_kv
        self._plan_for: ForwardBatch | None = None
        self._plan: tuple[bool, int, int] | None = None  # (is_decode_only, max_seq_len, max_qo_len)

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layer_id: int,
                batch: ForwardBatch, scaling: float, kv_stored: bool = False) -> torch.Tensor:
        cache = batch.kv_cache
        k_buf, v_buf = cache.k[layer_id], cache.v[layer_id]  # (num_slots, KV, D) views of the pool
        if not kv_stored:
            self._store_kv(k_buf, v_buf, batch.out_cache_loc, k, v)
        is_decode_only, max_seq_len, max_qo_len = self._get_plan(batch)
        if is_decode_only:
            return self._decode_attention(q, k_buf, v_buf, batch.kv_indptr, batch.kv_indices, scaling,
                                    max_seq_len=max_seq_len)
        return self._extend_attention(q, k, v, k_buf, v_buf, batch.qo_indptr, batch.kv_indptr, batch.kv_indices,
                                scaling, max_qo_len=max_qo_len)

    def _get_plan(self, batch: ForwardBatch) -> tuple[bool, int, int]:
        if self._plan_for is batch and self._plan is not None:
            return self._plan
        qo_lens = batch.qo_lens_cpu
        if qo_lens is None:
            qo_lens = (batch.qo_indptr[1:] - batch.qo_indptr[:-1]).tolist()
        seq_lens = batch.seq_lens_cpu if batch.seq_lens_cpu is not None else batch.seq_lens.tolist()
        max_qo_len = max(qo_lens, default=0)
        plan = (max_qo_len == 1 and min(qo_lens) == 1, max(seq_lens, default=0), max_qo_len)
        self._plan_for, self._plan = batch, plan
        return plan


register_backend("triton", TritonAttentionBackend, available=_triton_installed, auto_devices=("cuda",),
                 auto_priority=1)
