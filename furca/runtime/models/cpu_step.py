"""A CPU decode step's decoder layers compiled into one call on torch's OpenMP team.

The per-op path of a small decode batch on CPU makes ~15 torch / numba calls a layer
(norms, projections, RoPE, attention), each with its Python, its setup and a wake-up of
the team's threads, while the matmuls themselves run near memory bandwidth: for the
default model that serial work was ~10 ms of a token. llama.cpp runs its whole graph on
one thread pool with barriers between the ops; `CpuStep.run` does the same: one
`omp_team.run` per step, whose threads walk all the layers, splitting each projection's
rows and the attention's (row, KV head) tasks, with a spin barrier between phases
(`cpu_step_kernel` says what each phase does and why it equals the per-op path).

Which models take it (decided once, at load: `plan`), all of:

- fp32 activations and fp32 projections (``dtype`` and ``linear_dtype`` float32: the
  glue's case with fp32 inputs) on CPU, numba installed, torch's OpenMP team reachable;
- every decoder projection a `QuantLinear` without bias whose packed weights are
  ``Int4Dot`` (int4 groups of 32 on VNNI) or ``GroupInt8`` (Q8_0, Q5_K, Q6_K, int8 ...),
  at most three per fused projection, every K a multiple of 32;
- no per-head q/k norm (Qwen3), no forward hooks on a projection (tensor parallelism);
- ``FURCA_CPU_STEP`` unset or not ``0``.

Anything else (torch's Int4Packed layout, bf16 or dense projections, biases, Qwen3, fp8
or bf16 KV pools, no numba or no VNNI) keeps the per-op path. Per step (`applies`): a
decode-only batch of at most ``MAX_ROWS`` rows, an fp32 CPU KV pool, the torch attention
backend, no batch-invariant mode and a team (a forked child has none); other batches
(prefill, extend, mixed) take the per-op path. The embedding, the final norm and the LM
head stay where they are (the head is a team call of its own).
"""

from __future__ import annotations

import logging
import os
import weakref

import numpy as np
import torch

# The kernel's table and arguments (cpu_step_kernel's docstring): segment kinds
INT4_DOT, GROUP_I8, GROUP_U8 = 0, 1, 2
MAX_SEGS = 3
SEG = 8  # kind, rows, groups, offset groups, codes, scale, offset, first output column
PROJ = 5 + MAX_SEGS * SEG  # segments, parts address, parts, N, K, segments
QKV, O, GATE_UP, DOWN = (4 + i * PROJ for i in range(4))
REC = 4 + 4 * PROJ  # input norm, post norm, K pool, V pool, four projections
PHASES = 5
COUNTERS_AT = 8  # the claim counters start one cache line after the barrier counter

# the step's arguments (int64): sizes, then addresses
(_, A_M, A_LAYERS, A_HIDDEN, A_HEADS, A_KV_HEADS, A_HEAD_DIM, A_INTER, A_SLOTS, A_NUM_INDICES,
 A_FLOATS, A_TABLE, A_SYNC, A_H, A_RESIDUAL, A_DELTA, A_COS, A_SIN, A_LOC, A_ROWS, A_KV_START, A_KV_LEN,
 A_KV_INDICES, A_QKV, A_ATTN, A_GATE_UP, A_THREAD_NUM, A_NUM_THREADS, ARGS) = range(29)

MAX_ROWS = 4  # decode rows per step: Int4Dot's kernel serves at most this many rows
_WEIGHTS_PER_PART = 1 << 16  # a part's share of a projection (~32 KB of int4), against a claim's cost


def enabled() -> bool:
    """``FURCA_CPU_STEP`` (read at load): "0" turns the compiled step off (A/B, tests)."""
    value = os.environ.get("FURCA_CPU_STEP", "1").strip()
    if value not in ("0", "1"):
        raise ValueError(f"FURCA_CPU_STEP must be 0 or 1, got {value!r}")
    return value == "1"


def plan(model) -> "CpuStep | None":
    """The compiled step for a loaded ``LlamaForCausalLM``, or None where it keeps the
    per-op path (see the module docstring)."""
    from furca.runtime import omp_team
    from furca.runtime.models import cpu_glue

    if not enabled() or model.dtype != torch.float32 or model.linear_dtype != torch.float32:
        return None
    if torch.device(model.device).type != "cpu" or model.glue_dtype != torch.float32 or not cpu_glue.available():
        return None
    funcs = omp_team.team_functions()
    if funcs is None:
        return None
    try:
        table, keep = _layer_table(model)
    except _Unsupported:
        return None
    from furca.runtime.quant import int4_dot

    if not int4_dot.vnni_available():
        # the step kernel links the VNNI int4 kernels, compiled when imported: on a CPU
        # without AVX512_VNNI LLVM cannot select vpdpbusd and aborts the process (no
        # exception to catch), so such a CPU decodes op by op
        return None
    try:
        from furca.runtime.models import cpu_step_kernel
    except Exception as e:  # noqa: BLE001 - numba missing, or a compile / lowering error
        logging.getLogger("furca").warning("compiled CPU step unavailable (%s: %s); per-op decode",
                                           type(e).__name__, e)
        return None
    return CpuStep(model, table, keep, funcs, cpu_step_kernel)


class _Unsupported(Exception):
    """A layer the compiled step does not compute."""


def _segments(proj) -> list[tuple]:
    """(kind, rows, groups, offset groups, codes, scale, offset arrays) per packed weight."""
    from furca.runtime.quant.linear import QuantLinear
    from furca.runtime.quant.packed import GroupInt8

    if not isinstance(proj, QuantLinear) or proj.bias is not None or proj._forward_hooks or proj._forward_pre_hooks:
        raise _Unsupported
    if proj.in_features % 32 or not 1 <= len(proj.packed) <= 3:
        raise _Unsupported
    segs = []
    for p in proj.packed:
        if type(p).__name__ == "Int4Dot" and p.x_bits == 16:  # the step rounds x to int16, as matvec does
            segs.append((INT4_DOT, p.shape[0], p.scale.shape[1], p.scale.shape[1], p.words, p.scale, p.offset))
        elif isinstance(p, GroupInt8) and p.codes.dtype in (np.int8, np.uint8):
            kind = GROUP_I8 if p.codes.dtype == np.int8 else GROUP_U8
            segs.append((kind, p.shape[0], p.scale.shape[1], p.offset.shape[1], p.codes, p.scale, p.offset))
        else:
            raise _Unsupported
    return segs


def _parts(segs: list[tuple], k: int) -> np.ndarray:
    """(segment, lo, hi) rows: each segment's units (16-row blocks of Int4Dot, rows of
    GroupInt8) cut into contiguous runs of about ``_WEIGHTS_PER_PART`` weights."""
    rows = []
    for s, seg in enumerate(segs):
        unit = 16 if seg[0] == INT4_DOT else 1
        units = -(-seg[1] // unit)
        step = max(1, _WEIGHTS_PER_PART // (unit * k))
        rows += [(s, lo, min(units, lo + step)) for lo in range(0, units, step)]
    return np.array(rows, np.int64)


def _layer_table(model) -> tuple[np.ndarray, list]:
    """The int64 table of `cpu_step_kernel` (K / V pool fields left 0) and the arrays
    whose addresses it holds (kept alive with it)."""
    layers = model.model.layers
    table = np.zeros((len(layers), REC), np.int64)
    keep: list = []
    for i, layer in enumerate(layers):
        attn, mlp = layer.self_attn, layer.mlp
        if attn.q_norm is not None:
            raise _Unsupported
        rec = table[i]
        for at, norm in ((0, layer.input_layernorm), (1, layer.post_attention_layernorm)):
            w = norm.weight.detach().numpy()
            keep.append(w)
            rec[at] = w.ctypes.data
        for base, proj in ((QKV, attn.qkv_proj), (O, attn.o_proj), (GATE_UP, mlp.gate_up_proj),
                           (DOWN, mlp.down_proj)):
            segs = _segments(proj)
            parts = _parts(segs, proj.in_features)
            keep.append(parts)
            rec[base:base + 5] = (len(segs), parts.ctypes.data, len(parts), sum(proj.shard_sizes),
                                  proj.in_features)
            col = 0
            for s, (kind, n, groups, off_groups, codes, scale, offset) in enumerate(segs):
                for arr in (codes, scale, offset):
                    if not arr.flags.c_contiguous:
                        raise _Unsupported
                keep.extend((codes, scale, offset))
                at = base + 5 + s * SEG
                rec[at:at + SEG] = (kind, n, groups, off_groups, codes.ctypes.data, scale.ctypes.data,
                                        offset.ctypes.data, col)
                col += n
    return table, keep


class CpuStep:
    """The decoder layers of a decode step as one team call (see the module docstring)."""

    def __init__(self, model, table: np.ndarray, keep: list, funcs: tuple[int, int], kernel):
        cfg = model.config
        self.kernel = kernel
        self._arrays = [table, *keep]  # the table and every array whose address it holds: alive with the step
        self.funcs = funcs
        self.num_layers, self.hidden = len(model.model.layers), cfg.hidden_size
        self.num_heads, self.num_kv_heads, self.head_dim = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        self.intermediate = cfg.intermediate_size
        self.floats = np.array([cfg.rms_norm_eps, cfg.head_dim ** -0.5], np.float32)
        self._cache = None  # a weak reference to the KV pool the table's K / V fields point into
        self._cache_table: np.ndarray | None = None

    @property
    def table(self) -> np.ndarray:
        """The layers' int64 table (`cpu_step_kernel`), K / V pool fields 0."""
        return self._arrays[0]

    def applies(self, batch, h: torch.Tensor) -> bool:
        """Whether this step's batch takes the compiled path (module docstring)."""
        from furca.runtime import batch_invariant, omp_team
        from furca.runtime.attention.torch_backend import TorchAttentionBackend

        rows = h.shape[0]
        if rows > MAX_ROWS or rows != batch.batch_size or h.dtype != torch.float32:
            return False
        cache = batch.kv_cache
        return (cache.dtype == torch.float32 and cache.device.type == "cpu"
                and batch.kv_indices.dtype == batch.out_cache_loc.dtype == batch.kv_indptr.dtype == torch.int64
                and isinstance(batch.attn_backend, TorchAttentionBackend) and batch.attn_backend.direct_decode
                and not batch_invariant.enabled() and omp_team.available())

    def _table_for(self, cache) -> np.ndarray:
        if self._cache is None or self._cache() is not cache:
            table = self.table.copy()
            for layer in range(self.num_layers):
                k, v = cache.arrays(layer)
                table[layer, 2], table[layer, 3] = k.ctypes.data, v.ctypes.data
            self._cache, self._cache_table = weakref.ref(cache), table  # the pool's memory is not held here
        return self._cache_table

    def run(self, h: torch.Tensor, cos_sin: tuple[torch.Tensor, torch.Tensor], batch
            ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(delta, residual)`` after the last decoder layer, as the per-op loop returns
        them, for ``h`` (M, hidden) fp32 embeddings; the new tokens' K / V are in the pool."""
        from furca.runtime import omp_team

        m = h.shape[0]
        h = h.contiguous()
        cos, sin = (t.reshape(m, -1).contiguous() for t in cos_sin)
        loc = batch.out_cache_loc.contiguous()
        kv_indptr = batch.kv_indptr
        kv_start = kv_indptr[:-1].contiguous()
        kv_len = (kv_indptr[1:] - kv_indptr[:-1]).contiguous()
        kv_indices = batch.kv_indices.contiguous()
        rows = torch.arange(m, dtype=torch.int64)
        residual, delta = torch.empty_like(h), torch.empty_like(h)
        qkv = torch.empty((m, (self.num_heads + 2 * self.num_kv_heads) * self.head_dim))
        attn = torch.empty((m, self.num_heads * self.head_dim))
        gate_up = torch.empty((m, 2 * self.intermediate))
        sync = np.zeros(COUNTERS_AT + PHASES * self.num_layers, np.int64)
        table = self._table_for(batch.kv_cache)
        args = np.array([0, m, self.num_layers, self.hidden, self.num_heads, self.num_kv_heads, self.head_dim,
                         self.intermediate, batch.kv_cache.num_slots, kv_indices.shape[0], self.floats.ctypes.data,
                         table.ctypes.data, sync.ctypes.data, h.data_ptr(), residual.data_ptr(), delta.data_ptr(),
                         cos.data_ptr(), sin.data_ptr(), loc.data_ptr(), rows.data_ptr(), kv_start.data_ptr(),
                         kv_len.data_ptr(), kv_indices.data_ptr(), qkv.data_ptr(), attn.data_ptr(),
                         gate_up.data_ptr(), *self.funcs], np.int64)
        omp_team.run(self.kernel.step_team, args)
        return delta, residual
