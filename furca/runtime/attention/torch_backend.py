"""Attention in plain torch: the CPU path and the reference for the Triton kernels.

Per forward pass the backend sorts requests into *decode* rows (one new token) and
*extend* rows (several new tokens, possibly after a cached prefix):

- decode rows run as ONE padded computation: their KV slots are gathered into
  ``(B, L_max)`` with a padding mask, then ``scaled_dot_product_attention``;
- extend requests run one by one with a causal mask shifted by the prefix length
  (query ``j`` sees KV ``0 .. prefix_len + j``).

Only the host lists of ``ForwardBatch`` (``qo_lens_cpu``, ``seq_lens_cpu``) drive the
planning, so no device sync happens (they are read from the tensors when absent).
The plan is computed once per batch and reused by every layer.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from furca.runtime.forward_batch import ForwardBatch


@dataclass
class _Plan:
    decode_reqs: list[int]
    decode_rows: torch.Tensor | None  # (Bd,) row of each decode request in q
    decode_slots: torch.Tensor | None  # (Bd, L_max) KV slot per padded position
    decode_mask: torch.Tensor | None  # (Bd, 1, 1, L_max) bool, True = attend
    # (q_start, q_end, kv_start, kv_end, causal mask or None when there is no prefix)
    extends: list[tuple[int, int, int, int, torch.Tensor | None]]


class TorchAttentionBackend:
    """``AttentionBackend`` in plain torch.

    ``compute_dtype``: q/k/v are cast to it for the attention math (default fp32, so
    softmax and accumulation are fp32 for bf16/fp16 models); ``None`` keeps the
    model's dtype.
    """

    def __init__(self, compute_dtype: torch.dtype | None = torch.float32):
        self.compute_dtype = compute_dtype
        self._plan_for: ForwardBatch | None = None
        self._plan: _Plan | None = None

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layer_id: int,
                batch: ForwardBatch, scaling: float) -> torch.Tensor:
        cache = batch.kv_cache
        cache.store(layer_id, batch.out_cache_loc, k, v)
        k_buf, v_buf = cache.k[layer_id], cache.v[layer_id]  # (num_slots, KV, D)
        plan = self._get_plan(batch)
        dtype = self.compute_dtype or q.dtype
        out = torch.empty_like(q)  # (T, H, D)

        if plan.decode_reqs:
            qd = q[plan.decode_rows].to(dtype).unsqueeze(2)  # (Bd, H, 1, D)
            kd = k_buf[plan.decode_slots].to(dtype).transpose(1, 2)  # (Bd, KV, L, D)
            vd = v_buf[plan.decode_slots].to(dtype).transpose(1, 2)
            od = _sdpa(qd, kd, vd, plan.decode_mask, scaling)  # (Bd, H, 1, D)
            out[plan.decode_rows] = od.squeeze(2).to(out.dtype)

        for q_start, q_end, kv_start, kv_end, mask in plan.extends:
            slots = batch.kv_indices[kv_start:kv_end]
            qe = q[q_start:q_end].to(dtype).transpose(0, 1).unsqueeze(0)  # (1, H, Q, D)
            ke = k_buf[slots].to(dtype).transpose(0, 1).unsqueeze(0)  # (1, KV, S, D)
            ve = v_buf[slots].to(dtype).transpose(0, 1).unsqueeze(0)
            oe = _sdpa(qe, ke, ve, mask, scaling)  # (1, H, Q, D)
            out[q_start:q_end] = oe[0].transpose(0, 1).to(out.dtype)
        return out

    def _get_plan(self, batch: ForwardBatch) -> _Plan:
        if self._plan_for is batch and self._plan is not None:
            return self._plan
        qo_lens = batch.qo_lens_cpu
        if qo_lens is None:
            qo_lens = (batch.qo_indptr[1:] - batch.qo_indptr[:-1]).tolist()
        seq_lens = batch.seq_lens_cpu if batch.seq_lens_cpu is not None else batch.seq_lens.tolist()
        decode_reqs, decode_rows, extends = [], [], []
        q_start = kv_start = 0
        for i, (q_len, s_len) in enumerate(zip(qo_lens, seq_lens)):
            if q_len == 1:
                decode_reqs.append(i)
                decode_rows.append(q_start)
            elif q_len > 1:
                mask = None  # no prefix: plain causal (top-left aligned) attention
                if s_len > q_len:  # query j sees KV 0 .. prefix_len + j
                    kv_pos = torch.arange(s_len, device=batch.kv_indices.device)
                    mask = (kv_pos[None, :] <= kv_pos[s_len - q_len:, None])[None, None]  # (1, 1, Q, S)
                extends.append((q_start, q_start + q_len, kv_start, kv_start + s_len, mask))
            q_start += q_len
            kv_start += s_len
        plan = _Plan(decode_reqs, None, None, None, extends)
        if decode_reqs:
            device = batch.kv_indices.device
            lens = [seq_lens[i] for i in decode_reqs]
            max_len = max(lens)
            req = torch.tensor(decode_reqs, dtype=torch.int64, device=device)
            plan.decode_rows = torch.tensor(decode_rows, dtype=torch.int64, device=device)
            pos = torch.arange(max_len, device=device)
            valid = pos[None, :] < torch.tensor(lens, device=device)[:, None]  # (Bd, L)
            idx = torch.where(valid, batch.kv_indptr[req][:, None] + pos[None, :], 0)
            plan.decode_slots = torch.where(valid, batch.kv_indices[idx], 0)
            plan.decode_mask = valid[:, None, None, :]
        self._plan_for, self._plan = batch, plan
        return plan


def _sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None,
          scaling: float) -> torch.Tensor:
    """Grouped-query attention: ``q`` (B, H, Q, D), ``k``/``v`` (B, KV, S, D); causal
    when ``mask`` is None (then Q == S)."""
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=mask is None, scale=scaling,
                                          enable_gqa=q.shape[1] != k.shape[1])
