"""Batch-invariant matrix products for ``EngineConfig.deterministic``.

A row's result must not depend on the other rows of its forward pass. On a CPU the
matrix products break that: MKL / oneDNN pick a kernel and a blocking (a GEMV for one
row, a GEMM with another K split for 16, 64, ...) from the shapes, so row 0 of
``x[:m] @ W.T`` changes in its last bits as ``m`` changes (fp32: for most ``m`` below
~60 with the default model's shapes; bf16 through the LM head). Elementwise steps and
the per-row reductions (RMSNorm, softmax, log-softmax, argmax) read one row each and
do not vary.

The fix, as in the "Defeating Nondeterminism in LLM Inference" write-up and SGLang's /
vLLM's batch-invariant modes (fixed reduction splits, never chosen from the batch size):
every product is computed in tiles of exactly ``TILE_ROWS`` rows (the last one padded
with zeros), one ``torch.mm`` per tile. Every call then has the same shape, so the
library runs the same kernel with the same reduction order for every row, wherever the
row sits and however many rows the pass has. Attention has its own invariant routine
(``attention/invariant_backend.py``).

Contract: inside ``mode(True)`` on a thread, `furca.runtime.models.llama.linear` (every
float projection and the LM head) calls `linear` here; outside it, nothing changes. The
mode is thread-local, so one process may run a deterministic engine and a normal one
over the same weights (each engine forwards on its own scheduler thread).
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Iterator

import torch

from furca.errors import ConfigError

# Rows per product call. 16 keeps a one-row decode step close to a GEMV's cost (the
# weights are read once per tile either way) while prefill tiles are still GEMMs.
TILE_ROWS = 16

_STATE = threading.local()


def enabled() -> bool:
    """Whether this thread is inside ``mode(True)``."""
    return getattr(_STATE, "on", False)


@contextmanager
def mode(on: bool) -> Iterator[None]:
    """Run the enclosed forward pass with batch-invariant products (``on``) or the
    library's own choice (not ``on``); restores the previous mode on exit."""
    before = enabled()
    _STATE.on = on
    try:
        yield
    finally:
        _STATE.on = before


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``F.linear(x, weight, bias)`` computed in ``weight``'s dtype and returned in ``x``'s,
    row ``i`` of the result depending only on row ``i`` of ``x`` (bitwise): the rows go
    through ``torch.mm`` in zero-padded tiles of ``TILE_ROWS``."""
    lead, k = x.shape[:-1], x.shape[-1]
    rows = x.reshape(-1, k).to(weight.dtype)
    m = rows.shape[0]
    padded = -(-m // TILE_ROWS) * TILE_ROWS
    if padded != m or not rows.is_contiguous():
        buf = rows.new_zeros((padded, k))
        buf[:m] = rows
        rows = buf
    out = torch.empty((padded, weight.shape[0]), dtype=weight.dtype, device=weight.device)
    wt = weight.t()
    for start in range(0, padded, TILE_ROWS):
        torch.mm(rows[start:start + TILE_ROWS], wt, out=out[start:start + TILE_ROWS])
    out = out[:m]
    if bias is not None:
        out = out + bias
    return out.reshape(*lead, weight.shape[0]).to(x.dtype)


def check_model(model: torch.nn.Module, device: torch.device, kv_dtype: torch.dtype) -> None:
    """Raise `ConfigError` unless ``deterministic=True`` supports this loaded model:
    a CPU device, float (unquantized) weights in float32 or bfloat16 and a float32 or
    bfloat16 KV cache (what the invariant attention kernel reads)."""
    from furca.runtime.quant.linear import quantization_summary

    if device.type != "cpu":
        raise ConfigError(f"deterministic=True runs on a CPU only; device is {device}")
    quant = quantization_summary(model)
    if quant != "none":
        raise ConfigError(f"deterministic=True needs float weights; the model is quantized ({quant}): "
                          "use quantization='none' and a float checkpoint")
    dtypes = {p.dtype for p in model.parameters()}
    for name, dt in (("weights", dtypes), ("kv_cache_dtype", {kv_dtype})):
        bad = sorted(str(d) for d in dt - {torch.float32, torch.bfloat16})
        if bad:
            raise ConfigError(f"deterministic=True supports float32 and bfloat16 {name}, got {', '.join(bad)}")
