"""Attention in plain torch: the CPU path and the reference for the Triton kernels.

Per forward pass the backend sorts requests into *decode* rows (one new token) and
*extend* rows (several new tokens, possibly after a cached prefix):

- decode requests are sorted by length and split into a few groups (fewer padded
  positions vs. fewer calls, see ``_split_groups``); each group runs as ONE padded
  computation: its KV slots are gathered (``index_select`` on the head-major pool)
  into ``(B, KV, L_max, D)``, and the ``G = H / KV`` query heads sharing a KV head
  are the ``G`` "queries" of one ``scaled_dot_product_attention`` call, so each KV
  head is read once, with a padding mask only when lengths differ;
- on CPU with an fp32 pool and numba installed, decode requests skip the gather:
  ``cpu_decode``'s kernel reads K/V straight from the pool through ``kv_indices``
  (one plan for all decode rows, whatever their lengths);
- extend requests run one by one with a causal mask shifted by the prefix length
  (query ``j`` sees KV ``0 .. prefix_len + j``); without a prefix the new K/V rows
  are used as they are (no gather).

Only the host lists of ``ForwardBatch`` (``qo_lens_cpu``, ``seq_lens_cpu``) drive the
planning, so no device sync happens (they are read from the tensors when absent).
The plan (gather indices, masks) is computed once per batch and reused by every layer.

Registered as "torch": it runs on every device, and "auto" picks it wherever no
backend of higher priority is available.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from furca.runtime.attention.cpu_decode import get_decode
from furca.runtime.attention.registry import register_backend
from furca.runtime.forward_batch import ForwardBatch

# A decode group's fixed cost (index_selects, one SDPA call, output copy) expressed in
# padded KV positions of work; measured on CPU for a 3-KV-head, 64-dim model.
_GROUP_OVERHEAD_POSITIONS = 256


@dataclass
class _DecodeGroup:
    row_start: int  # rows row_start .. row_start + num_reqs - 1 of q when `rows` is None
    rows: torch.Tensor | None  # (n,) row of each request in q, when not one contiguous run
    num_reqs: int
    max_len: int
    slots: torch.Tensor  # (n * max_len,) KV slot per padded position (padding: slot 0)
    mask: torch.Tensor | None  # (n, 1, 1, max_len) additive (0 / -inf); None = no padding


@dataclass
class _Extend:
    q_start: int
    q_end: int
    prefix_len: int
    slots: torch.Tensor  # (S,) all the request's KV slots, prefix first
    mask: torch.Tensor | None  # (1, 1, Q, S) additive; None = plain causal (no prefix)


@dataclass
class _DirectDecode:
    """All decode rows for ``cpu_decode``'s kernel (numpy views, int64)."""
    rows: np.ndarray  # (n,) row of each request in q
    kv_start: np.ndarray  # (n,) offset of its slots in kv_indices
    kv_len: np.ndarray  # (n,)
    kv_indices: np.ndarray


@dataclass
class _Plan:
    dtype: torch.dtype
    decode_groups: list[_DecodeGroup]
    extends: list[_Extend]
    is_decode_only: bool  # every row is a decode row (one group in order, or direct)
    direct: _DirectDecode | None = None  # set: decode rows go to the numba kernel


class TorchAttentionBackend:
    """``AttentionBackend`` in plain torch.

    ``compute_dtype``: q/k/v are cast to it for the attention math (default fp32, so
    softmax and accumulation are fp32 for bf16/fp16 models); ``None`` keeps the
    model's dtype.
    """

    def __init__(self, compute_dtype: torch.dtype | None = torch.float32, direct_decode: bool = True):
        self.compute_dtype = compute_dtype
        self.direct_decode = direct_decode  # use cpu_decode's kernel where it applies
        self._plan_for: ForwardBatch | None = None
        self._plan: _Plan | None = None

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layer_id: int,
                batch: ForwardBatch, scaling: float, kv_stored: bool = False) -> torch.Tensor:
        cache = batch.kv_cache
        if not kv_stored:
            cache.store(layer_id, batch.out_cache_loc, k, v)
        k_buf, v_buf = cache.k_heads[layer_id], cache.v_heads[layer_id]  # (KV, num_slots, D)
        dtype = self.compute_dtype or q.dtype
        plan = self._get_plan(batch, dtype)
        num_tokens, num_heads, head_dim = q.shape
        num_kv_heads = k_buf.shape[0]
        if plan.direct is not None:
            out = torch.empty((num_tokens, num_heads, head_dim), dtype=torch.float32)
            d = plan.direct
            get_decode()(q.to(torch.float32).contiguous().numpy(), *cache.arrays(layer_id), d.rows,
                         d.kv_start, d.kv_len, d.kv_indices, float(scaling), out.numpy())
            if plan.is_decode_only:
                return out.to(q.dtype)
            out = out.to(q.dtype)
        elif plan.is_decode_only:
            return _decode(q, k_buf, v_buf, plan.decode_groups[0], dtype, scaling).to(q.dtype)
        else:
            out = torch.empty_like(q)  # (T, H, D)
        for g in plan.decode_groups:
            od = _decode(q, k_buf, v_buf, g, dtype, scaling).to(q.dtype)
            if g.rows is None:
                out[g.row_start:g.row_start + g.num_reqs] = od
            else:
                out.index_copy_(0, g.rows, od)
        use_new_kv = cache.dtype == k.dtype  # the stored rows equal the new k/v exactly
        for e in plan.extends:
            qe = q[e.q_start:e.q_end].to(dtype).transpose(0, 1).unsqueeze(0)  # (1, H, Q, D)
            if e.prefix_len == 0 and use_new_kv:
                ke = k[e.q_start:e.q_end].to(dtype).transpose(0, 1).unsqueeze(0)  # (1, KV, Q, D)
                ve = v[e.q_start:e.q_end].to(dtype).transpose(0, 1).unsqueeze(0)
            else:
                ke = k_buf.index_select(1, e.slots).to(dtype).unsqueeze(0)  # (1, KV, S, D)
                ve = v_buf.index_select(1, e.slots).to(dtype).unsqueeze(0)
            oe = F.scaled_dot_product_attention(qe, ke, ve, attn_mask=e.mask, is_causal=e.mask is None,
                                                scale=scaling, enable_gqa=num_heads != num_kv_heads)
            out[e.q_start:e.q_end] = oe[0].transpose(0, 1)  # (Q, H, D)
        return out

    # ---------------------------------------------------------------- planning
    def _can_decode_directly(self, batch: ForwardBatch, dtype: torch.dtype) -> bool:
        cache = batch.kv_cache
        return (self.direct_decode and dtype == torch.float32 and cache.dtype in (torch.float32, torch.bfloat16)
                and cache.device.type == "cpu" and batch.kv_indices.dtype == torch.int64
                and get_decode() is not None)

    def _get_plan(self, batch: ForwardBatch, dtype: torch.dtype) -> _Plan:
        if self._plan_for is batch and self._plan is not None and self._plan.dtype == dtype:
            return self._plan
        qo_lens = batch.qo_lens_cpu
        if qo_lens is None:
            qo_lens = (batch.qo_indptr[1:] - batch.qo_indptr[:-1]).tolist()
        seq_lens = batch.seq_lens_cpu if batch.seq_lens_cpu is not None else batch.seq_lens.tolist()
        device = batch.kv_indices.device
        decodes: list[tuple[int, int, int]] = []  # (row, seq_len, kv_start)
        extends: list[_Extend] = []
        q_start = kv_start = 0
        for q_len, s_len in zip(qo_lens, seq_lens):
            if q_len == 1:
                decodes.append((q_start, s_len, kv_start))
            elif q_len > 1:
                prefix_len = s_len - q_len
                mask = None  # no prefix: plain causal (top-left aligned) attention
                if prefix_len > 0:  # query j sees KV 0 .. prefix_len + j
                    kv_pos = torch.arange(s_len, device=device)
                    allowed = kv_pos[None, :] <= kv_pos[prefix_len:, None]  # (Q, S)
                    mask = _additive(allowed, dtype)[None, None]  # (1, 1, Q, S)
                extends.append(_Extend(q_start, q_start + q_len, prefix_len,
                                       batch.kv_indices[kv_start:kv_start + s_len], mask))
            q_start += q_len
            kv_start += s_len
        direct = None
        if decodes and self._can_decode_directly(batch, dtype):
            kv = batch.kv_indices.numpy()
            rows, lens, starts = (np.array(c, dtype=np.int64) for c in zip(*decodes))
            direct = _DirectDecode(rows, starts, lens, kv)
            groups = []
            is_decode_only = not extends
        else:
            groups = [_make_group(part, batch.kv_indices, dtype) for part in _split_groups(decodes)]
            is_decode_only = (not extends and len(groups) == 1 and groups[0].rows is None
                              and groups[0].row_start == 0 and groups[0].num_reqs == q_start)
        plan = _Plan(dtype, groups, extends, is_decode_only, direct)
        self._plan_for, self._plan = batch, plan
        return plan


def _split_groups(decodes: list[tuple[int, int, int]]) -> list[list[tuple[int, int, int]]]:
    """Partition decode requests, sorted by length (longest first), into runs that
    minimise ``sum(overhead + num_reqs * max_len)`` over groups (exact DP, O(B^2))."""
    if len(decodes) <= 1:
        return [decodes] if decodes else []
    order = sorted(decodes, key=lambda d: -d[1])
    lens = [d[1] for d in order]
    n = len(order)
    best = [0.0] + [float("inf")] * n  # best[j]: cost of the first j requests
    cut = [0] * (n + 1)
    for j in range(1, n + 1):
        for i in range(j):  # group order[i:j], padded to lens[i]
            cost = best[i] + _GROUP_OVERHEAD_POSITIONS + (j - i) * lens[i]
            if cost < best[j]:
                best[j], cut[j] = cost, i
    parts, j = [], n
    while j > 0:
        parts.append(order[cut[j]:j])
        j = cut[j]
    parts.reverse()
    if len(parts) == 1:  # one group: keep the batch order (rows may then be a slice)
        return [decodes]
    return parts


def _make_group(part: list[tuple[int, int, int]], kv_indices: torch.Tensor, dtype: torch.dtype) -> _DecodeGroup:
    device = kv_indices.device
    rows = [r for r, _, _ in part]
    lens = [s for _, s, _ in part]
    n, max_len = len(part), max(lens)
    is_run = rows == list(range(rows[0], rows[0] + n))
    pos = torch.arange(max_len, device=device)
    starts = torch.tensor([s for _, _, s in part], dtype=torch.int64, device=device)
    if min(lens) == max_len:
        slots = kv_indices[(starts[:, None] + pos[None, :]).flatten()]
        mask = None
    else:
        valid = pos[None, :] < torch.tensor(lens, device=device)[:, None]  # (n, L)
        idx = torch.where(valid, starts[:, None] + pos[None, :], 0).flatten()
        slots = torch.where(valid.flatten(), kv_indices[idx], 0)
        mask = _additive(valid, dtype)[:, None, None, :]  # (n, 1, 1, L)
    row_tensor = None if is_run else torch.tensor(rows, dtype=torch.int64, device=device)
    return _DecodeGroup(rows[0], row_tensor, n, max_len, slots, mask)


def _additive(allowed: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Bool "may attend" -> additive mask (0 where allowed, -inf elsewhere)."""
    return torch.zeros(allowed.shape, dtype=dtype, device=allowed.device).masked_fill_(~allowed, float("-inf"))


def _decode(q: torch.Tensor, k_buf: torch.Tensor, v_buf: torch.Tensor, g: _DecodeGroup,
            dtype: torch.dtype, scaling: float) -> torch.Tensor:
    """One decode group: -> (n, H, D) in ``dtype``. The G query heads of a KV head act
    as G queries over the same keys (grouped-query attention without repeating K/V)."""
    n, num_heads, head_dim = g.num_reqs, q.shape[1], q.shape[2]
    num_kv_heads = k_buf.shape[0]
    qd = q[g.row_start:g.row_start + n] if g.rows is None else q.index_select(0, g.rows)
    qd = qd.to(dtype).reshape(n, num_kv_heads, num_heads // num_kv_heads, head_dim)  # (n, KV, G, D)
    kd = k_buf.index_select(1, g.slots).view(num_kv_heads, n, g.max_len, head_dim)
    vd = v_buf.index_select(1, g.slots).view(num_kv_heads, n, g.max_len, head_dim)
    kd = kd.to(dtype).transpose(0, 1)  # (n, KV, L, D)
    vd = vd.to(dtype).transpose(0, 1)
    od = F.scaled_dot_product_attention(qd, kd, vd, attn_mask=g.mask, scale=scaling)  # (n, KV, G, D)
    return od.reshape(n, num_heads, head_dim)


register_backend("torch", TorchAttentionBackend)
