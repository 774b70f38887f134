"""The numba kernels of `cpu_glue` (imported only when numba is installed).

Module-level functions, so numba's on-disk cache hits in every process after the first
(see `furca.runtime.attention.cpu_decode_kernel` for why builders defined in functions
never hit it). Arrays are fp32 or bf16 carried as their uint16 bits: ``row_f32`` widens
a bf16 row exactly (a bf16 is the top half of an fp32), ``put_row`` rounds an fp32 row
to nearest even, as torch's ``.to(torch.bfloat16)`` does. Each row is computed alone, in
a fixed order, so a row's result never depends on the other rows of the batch.
"""

from __future__ import annotations

import numpy as np
from numba import njit, types
from numba.extending import overload

from furca.runtime.cpu_math_kernel import exp_nonpositive
from furca.runtime.numba_cache import link_sources

link_sources(__file__, "furca.runtime.cpu_math_kernel")  # its kernels are compiled into ours

# fastmath without "nnan"/"ninf": sums may be reassociated (vectorized), but an inf or NaN
# activation propagates as torch's ops propagate it
_FAST = {"reassoc", "contract", "arcp", "nsz"}


def row_f32(a, t, scratch):
    """Row ``t`` of ``a`` as fp32: the row itself, or (bf16 bits) widened into ``scratch``."""


@overload(row_f32, inline="always")
def _row_f32(a, t, scratch):
    if a.dtype == types.float32:
        return lambda a, t, scratch: a[t]
    if a.dtype == types.uint16:
        def widen(a, t, scratch):
            bits = scratch.view(np.uint32)
            row = a[t]
            for d in range(row.shape[0]):
                bits[d] = np.uint32(row[d]) << np.uint32(16)
            return scratch
        return widen
    return None


def put_row(out, t, src):
    """``out[t] = src`` (an fp32 row), rounded to nearest even into a bf16 ``out``."""


@overload(put_row, inline="always")
def _put_row(out, t, src):
    if out.dtype == types.float32:
        def copy(out, t, src):
            out[t, :] = src
        return copy
    if out.dtype == types.uint16:
        def narrow(out, t, src):
            bits = src.view(np.uint32)
            row = out[t]
            for d in range(row.shape[0]):
                b = bits[d]
                if (b & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000):  # NaN stays a quiet NaN
                    row[d] = np.uint16((b >> np.uint32(16)) | np.uint32(0x40))
                else:
                    row[d] = np.uint16((b + np.uint32(0x7FFF) + ((b >> np.uint32(16)) & np.uint32(1)))
                                       >> np.uint32(16))
        return narrow
    return None


@njit(nogil=True, cache=True, fastmath=_FAST, error_model="numpy")
def add_rms_norm_rows(delta, residual, weight, eps, out, add):
    """Per row t: ``residual[t] += delta[t]`` when ``add``; then
    ``out[t] = weight * (residual[t] * rsqrt(mean(residual[t]^2) + eps))``."""
    rows, dim = residual.shape
    wide = np.empty(dim, np.float32)
    normed = np.empty(dim, np.float32)
    for t in range(rows):
        res = residual[t]
        if add:
            dt = row_f32(delta, t, wide)
            for d in range(dim):
                res[d] += dt[d]
        acc = np.float32(0.0)
        for d in range(dim):
            acc += res[d] * res[d]
        r = np.float32(1.0) / np.sqrt(acc / np.float32(dim) + eps)
        for d in range(dim):
            normed[d] = weight[d] * (res[d] * r)
        put_row(out, t, normed)


@njit(nogil=True, cache=True, fastmath=_FAST, error_model="numpy")
def silu_mul_rows(gate_up, out):
    """``out[t] = silu(gate_up[t, :I]) * gate_up[t, I:]`` with ``I = out.shape[1]``;
    ``silu(g) = g * sigmoid(g)``, the sigmoid from ``e = exp(-|g|)``: 1 / (1 + e) for
    g >= 0, e / (1 + e) below (no overflow either side)."""
    rows, inner = out.shape
    wide = np.empty(2 * inner, np.float32)
    act = np.empty(inner, np.float32)
    neg = np.empty(inner, np.float32)
    e = np.empty(inner, np.float32)
    ebits = np.empty(inner, np.int32)
    for t in range(rows):
        gu = row_f32(gate_up, t, wide)
        for d in range(inner):
            neg[d] = -abs(gu[d])
        exp_nonpositive(neg, e, ebits)
        for d in range(inner):
            g = gu[d]
            num = np.float32(1.0) if g >= np.float32(0.0) else e[d]
            act[d] = g * num / (np.float32(1.0) + e[d]) * gu[inner + d]
        put_row(out, t, act)


@njit(nogil=True, cache=True, fastmath=_FAST, error_model="numpy")
def rope_qkv_rows(qkv, cos, sin, q_out, k_out, v_out, k_cache, v_cache, loc):
    """Split each row of ``qkv`` (T, (H + 2 KV) * D) into q (T, H, D), k and v (T * KV, D),
    rotating q and k by the row's ``cos``/``sin`` (T, D/2): for d < D/2,
    ``x'[d] = x[d] cos - x[d + D/2] sin`` and ``x'[d + D/2] = x[d + D/2] cos + x[d] sin``
    (HF's rotate_half form). When ``loc`` (T,) has entries, row t's k and v heads are also
    written into slot ``loc[t]`` of ``k_cache`` / ``v_cache`` (KV, slots, D), in their dtype
    (that of k_out and v_out): the KV pool's store, done here."""
    rows, num_heads, head_dim = q_out.shape
    num_kv = k_out.shape[0] // rows
    half = head_dim // 2
    store = loc.shape[0] > 0
    wide = np.empty(qkv.shape[1], np.float32)
    rot = np.empty(head_dim, np.float32)
    for t in range(rows):
        row = row_f32(qkv, t, wide)
        c = cos[t]
        s = sin[t]
        for h in range(num_heads + num_kv):
            base = h * head_dim
            for d in range(half):
                x1 = row[base + d]
                x2 = row[base + half + d]
                rot[d] = x1 * c[d] - x2 * s[d]
                rot[half + d] = x2 * c[d] + x1 * s[d]
            if h < num_heads:
                q_out[t, h, :] = rot
            else:
                put_row(k_out, t * num_kv + h - num_heads, rot)
                if store:
                    put_row(k_cache[h - num_heads], loc[t], rot)
        for h in range(num_kv):
            base = (num_heads + num_kv + h) * head_dim
            put_row(v_out, t * num_kv + h, row[base:base + head_dim])
            if store:
                put_row(v_cache[h], loc[t], row[base:base + head_dim])
