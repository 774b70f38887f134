"""The elementwise glue between a CPU decoder layer's matmuls, each step one numba call.

On a CPU, a small batch's decode step is dominated by the number of torch ops, not by
their arithmetic: a 576-wide RMSNorm is eight dispatched ops (~2-5 µs each), and a Llama
layer spends more time in its norms, residual adds, dtype casts and SiLU than in its four
quantized matmuls. Here the residual add and the RMSNorm after it are one call, and so
are SiLU(gate) * up; both read fp32 or bf16 and write the projections' dtype directly, so
the casts around each projection disappear too. Semantics, per row, in torch::

    add_rms_norm(delta, residual, weight, eps, dtype):   # residual updated in place
        residual += delta.float()                        # skipped when delta is None
        return (weight * (residual * rsqrt(mean(residual^2) + eps))).to(dtype)
    silu_mul(gate_up, dtype):
        gate, up = gate_up.float().chunk(2, -1)
        return (silu(gate) * up).to(dtype)

which is what the torch path computes for an fp32 model (HF's RMSNorm upcasts to fp32;
the projections' outputs are widened to fp32 before they are added or activated), up to
the order of the fp32 sums. Rows are independent (batch-invariant).

available() -> False where numba is missing (or FURCA_NO_NUMBA=1): the model then keeps
its torch ops. numba is imported on the first
call, and the kernels are compiled (or loaded from numba's disk cache) then.
"""

from __future__ import annotations

import logging
import os
import threading

import numpy as np
import torch

from furca.runtime.cpu_arrays import numpy_view

_LOCK = threading.Lock()
_KERNELS: list = []  # [module or None] once resolved
DTYPES = (torch.float32, torch.bfloat16)  # what the glue reads and writes
_NO_SLOTS = np.zeros(0, np.int64)
_LAST_STEP: list = [None]  # (cos, sin, loc, their arrays) of the last rope_qkv call


def _empty(shape: tuple[int, int], dtype: torch.dtype) -> tuple[torch.Tensor, np.ndarray]:
    """A new (tensor, array) pair over the same memory. Allocated by torch, so 64-byte
    aligned: torch's int8 matmul faults on the 16-byte alignment of numpy's own buffers."""
    t = torch.empty(shape, dtype=dtype)
    return t, numpy_view(t)


def add_rms_norm(delta: torch.Tensor | None, residual: torch.Tensor, weight: np.ndarray, eps: float,
                 dtype: torch.dtype) -> torch.Tensor:
    """``residual`` (T, D) fp32, contiguous, updated in place; ``weight`` (D,) fp32 as an
    array (the caller keeps it: it is read by every call); returns the normed rows in ``dtype``."""
    out, out_arr = _empty(tuple(residual.shape), dtype)
    res = residual.numpy()
    _KERNELS[0].add_rms_norm_rows(res if delta is None else numpy_view(delta.contiguous()), res, weight,
                                  np.float32(eps), out_arr, delta is not None)
    return out


def silu_mul(gate_up: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``gate_up`` (T, 2I) fp32 or bf16 -> (T, I) in ``dtype``."""
    rows, width = gate_up.shape
    out, out_arr = _empty((rows, width // 2), dtype)
    _KERNELS[0].silu_mul_rows(numpy_view(gate_up.contiguous()), out_arr)
    return out


def rope_qkv(qkv: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, num_heads: int, num_kv_heads: int,
             kv_dtype: torch.dtype, store: tuple[np.ndarray, np.ndarray, torch.Tensor] | None = None,
             ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``qkv`` (T, (H + 2 KV) * D) fp32 or bf16, ``cos``/``sin`` (T, 1, D/2) fp32 ->
    q (T, H, D) fp32 and k, v (T, KV, D) in ``kv_dtype``, q and k rotated (``apply_rope``).
    ``store`` = (k_heads, v_heads, loc): a layer's KV pool buffers (KV, slots, D) in
    ``kv_dtype`` as arrays (``KVCache.arrays``) and the slots (T,) int64 the rows' k and v
    are also written to (``KVCache.store``'s effect, without its two index copies)."""
    rows, width = qkv.shape
    head_dim = width // (num_heads + 2 * num_kv_heads)
    q = torch.empty((rows, num_heads, head_dim), dtype=torch.float32)
    k, k_arr = _empty((rows * num_kv_heads, head_dim), kv_dtype)
    v, v_arr = _empty((rows * num_kv_heads, head_dim), kv_dtype)
    cos_arr, sin_arr, loc = _step_arrays(cos, sin, None if store is None else store[2])
    if store is None:
        k_cache, v_cache = k_arr.reshape(1, *k_arr.shape), v_arr.reshape(1, *v_arr.shape)
    else:
        k_cache, v_cache = store[0], store[1]
    _KERNELS[0].rope_qkv_rows(numpy_view(qkv.contiguous()), cos_arr, sin_arr, q.numpy(), k_arr, v_arr, k_cache,
                              v_cache, loc)
    return q, k.view(rows, num_kv_heads, head_dim), v.view(rows, num_kv_heads, head_dim)


def _step_arrays(cos: torch.Tensor, sin: torch.Tensor, loc: torch.Tensor | None) -> tuple:
    """(cos, sin, loc) as the kernel reads them. Every layer of a step passes the same
    tensors: the arrays of the last call are kept and reused while they are."""
    last = _LAST_STEP[0]
    if last is not None and last[0] is cos and last[1] is sin and last[2] is loc:
        return last[3]
    arrays = (cos.numpy()[:, 0], sin.numpy()[:, 0], _NO_SLOTS if loc is None else loc.numpy())
    _LAST_STEP[0] = (cos, sin, loc, arrays)  # one assignment: another thread sees the old or the new
    return arrays


def available() -> bool:
    """Whether the kernels are compiled (or loaded from numba's cache) and usable."""
    if not _KERNELS:
        with _LOCK:
            if not _KERNELS:
                _KERNELS.append(_build())
    return _KERNELS[0] is not None


def _build():
    if os.environ.get("FURCA_NO_NUMBA", "") not in ("", "0"):
        return None
    try:
        from furca.runtime.models import cpu_glue_kernel
    except ImportError:  # numba missing from this install: the model keeps its torch ops
        return None
    try:  # compile now (or load the cached build) for fp32 and bf16 arguments
        w = np.ones(4, np.float32)
        for dt in (np.float32, np.uint16):
            res = np.ones((1, 4), np.float32)
            cpu_glue_kernel.add_rms_norm_rows(np.ones((1, 4), dt), res, w, np.float32(1e-5), np.empty((1, 4), dt),
                                              True)
            cpu_glue_kernel.add_rms_norm_rows(res, res, w, np.float32(1e-5), np.empty((1, 4), dt), False)
            cpu_glue_kernel.silu_mul_rows(np.ones((1, 8), dt), np.empty((1, 4), dt))
            cs = np.ones((1, 2), np.float32)
            for loc in (np.zeros(0, np.int64), np.zeros(1, np.int64)):
                cpu_glue_kernel.rope_qkv_rows(np.ones((1, 12), dt), cs, cs, np.empty((1, 1, 4), np.float32),
                                              np.empty((1, 4), dt), np.empty((1, 4), dt), np.empty((1, 1, 4), dt),
                                              np.empty((1, 1, 4), dt), loc)
    except Exception as e:  # noqa: BLE001 - any compile or lowering error
        logging.getLogger("furca").warning("CPU glue kernels unavailable (%s: %s); the model uses torch ops",
                                           type(e).__name__, e)
        return None
    return cpu_glue_kernel
