"""What crosses from rank 0 to the workers each step: the forward pass's token ids and
batch layout, as two broadcasts on the control group.

1. a header, ``HEADER_LEN`` int64: ``[command, T, B, len(kv_indices), N]``;
2. for ``STEP``, one int64 payload of ``3T + 2B + len(kv_indices) + N`` values: input ids,
   positions, out_cache_loc (``T`` each), new-token and prefix counts per request (``B``
   each), kv_indices, logits_indices (``N``).

Slot numbers are the same on every rank: each rank's KV pool has rank 0's capacity, and
only rank 0 allocates (its `CacheManager`); a worker writes its own KV heads into the
slots rank 0 chose. Requests, sampling params, grammars and the radix cache never leave
rank 0.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from furca.runtime.distributed.group import broadcast_control
from furca.runtime.forward_batch import ForwardBatch

HEADER_LEN = 8
STEP, STOP = 1, 2


@dataclass
class WireStep:
    """A step as a worker receives it: the inputs of ``model(input_ids, positions, batch)``."""
    input_ids: torch.Tensor
    positions: torch.Tensor
    qo_lens: list[int]
    prefix_lens: list[int]
    kv_indices: torch.Tensor
    out_cache_loc: torch.Tensor
    logits_indices: torch.Tensor

    def batch(self, kv_cache, attn_backend, device) -> ForwardBatch:
        return ForwardBatch.build(prefix_lens=self.prefix_lens, qo_lens=self.qo_lens, kv_indices=self.kv_indices,
                                  out_cache_loc=self.out_cache_loc, logits_indices=self.logits_indices,
                                  kv_cache=kv_cache, attn_backend=attn_backend, device=device)


def send_step(input_ids: torch.Tensor, positions: torch.Tensor, batch: ForwardBatch) -> None:
    """Rank 0: broadcast one forward pass's inputs."""
    qo_lens = batch.qo_indptr.diff()
    parts = [input_ids, positions, batch.out_cache_loc, qo_lens, batch.prefix_lens, batch.kv_indices,
             batch.logits_indices]
    payload = torch.cat([p.to("cpu", torch.int64) for p in parts])
    header = torch.zeros(HEADER_LEN, dtype=torch.int64)
    header[:5] = torch.tensor([STEP, input_ids.numel(), qo_lens.numel(), batch.kv_indices.numel(),
                               batch.logits_indices.numel()])
    broadcast_control(header)
    broadcast_control(payload)


def send_stop() -> None:
    """Rank 0: tell the workers to exit their loop."""
    header = torch.zeros(HEADER_LEN, dtype=torch.int64)
    header[0] = STOP
    broadcast_control(header)


def receive() -> WireStep | None:
    """A worker: the next step, or None when rank 0 sent ``STOP``."""
    header = broadcast_control(torch.zeros(HEADER_LEN, dtype=torch.int64))
    command, t, b, nkv, n = (int(x) for x in header[:5])
    if command == STOP:
        return None
    if command != STEP:
        raise RuntimeError(f"unknown tensor-parallel command {command}")
    payload = broadcast_control(torch.empty(3 * t + 2 * b + nkv + n, dtype=torch.int64))
    ids, pos, out, qo, prefix, kv, rows = payload.split([t, t, t, b, b, nkv, n])
    return WireStep(input_ids=ids, positions=pos, qo_lens=qo.tolist(), prefix_lens=prefix.tolist(),
                    kv_indices=kv, out_cache_loc=out, logits_indices=rows)
