"""KV slot bookkeeping: the token-slot allocator, the request-to-token table, and
sizing the pool from a memory budget.

Slot 0 of the KV buffers is reserved (padded writes may target it), so a pool of
capacity N has N + 1 slots and hands out 1..N. Accounting invariant the scheduler
keeps (checked by `CacheManager.check_memory`)::

    allocator.num_free + tree.total_size() + (slots held by requests, not in the tree) == capacity
"""

from __future__ import annotations

import logging
import os

import torch

from furca.errors import ConfigError, FurcaError

logger = logging.getLogger("furca")


class MemoryAccountingError(FurcaError, RuntimeError):
    """A slot was freed twice, or the pool's accounting does not add up (a furca bug)."""


class TokenSlotAllocator:
    """Free list of KV slots 1..capacity. `alloc` returns None when short (the caller
    evicts or retracts first); `free` raises on a double free or a foreign slot."""

    def __init__(self, capacity: int, device: torch.device | str = "cpu"):
        if capacity < 1:
            raise ConfigError(f"KV pool capacity must be >= 1 token, got {capacity}")
        self.capacity = capacity
        self.device = torch.device(device)
        self.reset()

    def reset(self) -> None:
        self._free = torch.arange(1, self.capacity + 1, dtype=torch.int64)
        self._pending: list[torch.Tensor] = []
        self._num_free = self.capacity
        self._is_free = torch.ones(self.capacity + 1, dtype=torch.bool)
        self._is_free[0] = False

    @property
    def num_free(self) -> int:
        return self._num_free

    def alloc(self, n: int) -> torch.Tensor | None:
        """`n` distinct free slots (int64, on the pool's device), or None if fewer are free."""
        if n > self._num_free:
            return None
        if n > len(self._free):
            self._free = torch.cat([self._free, *self._pending])
            self._pending.clear()
        out, self._free = self._free[:n], self._free[n:]
        self._is_free[out] = False
        self._num_free -= n
        return out.to(self.device)

    def free(self, slots: torch.Tensor) -> None:
        if slots.numel() == 0:
            return
        slots = slots.to("cpu", torch.int64).flatten()
        if int(slots.min()) < 1 or int(slots.max()) > self.capacity:
            raise MemoryAccountingError(f"free of slot outside 1..{self.capacity}: {slots.tolist()[:8]}")
        if bool(self._is_free[slots].any()) or len(torch.unique(slots)) != len(slots):
            raise MemoryAccountingError(f"double free of KV slots {slots[self._is_free[slots]].tolist()[:8]}")
        self._is_free[slots] = True
        self._pending.append(slots.clone())
        self._num_free += len(slots)

    def free_slots(self) -> torch.Tensor:
        """The free slots (host tensor); for accounting checks."""
        return torch.nonzero(self._is_free).flatten()


class ReqToTokenPool:
    """`table[row, pos]` = KV slot of the token at position `pos` of the request that
    holds `row`. Rows are handed out per running request."""

    def __init__(self, max_rows: int, max_context: int, device: torch.device | str = "cpu"):
        self.table = torch.zeros((max_rows, max_context), dtype=torch.int64, device=device)
        self.max_rows = max_rows
        self.max_context = max_context
        self._free_rows = list(range(max_rows - 1, -1, -1))

    @property
    def num_free(self) -> int:
        return len(self._free_rows)

    def alloc(self) -> int | None:
        return self._free_rows.pop() if self._free_rows else None

    def free(self, row: int) -> None:
        if row in self._free_rows or not 0 <= row < self.max_rows:
            raise MemoryAccountingError(f"double free of req_to_token row {row}")
        self._free_rows.append(row)

    def reset(self) -> None:
        self._free_rows = list(range(self.max_rows - 1, -1, -1))


def available_memory_bytes(device: torch.device) -> int:
    """Free memory on `device`: CUDA's free bytes, or MemAvailable from /proc/meminfo on CPU."""
    if device.type == "cuda":
        free, _total = torch.cuda.mem_get_info(device)
        return int(free)
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError) as e:
        raise ConfigError("cannot tell free memory here; pass kv_cache_bytes or max_total_tokens") from e


DEFAULT_FRACTION = {"cuda": 0.8, "cpu": 0.1}  # CPU: the buffers are zero-filled, i.e. committed


def pool_capacity_tokens(
    *,
    bytes_per_token: int,
    device: torch.device,
    max_total_tokens: int | None,
    kv_cache_bytes: int | None,
    kv_cache_fraction: float | None,
    default_cap: int | None = None,
) -> int:
    """Capacity of the KV pool in tokens. Precedence: `max_total_tokens`, then
    `kv_cache_bytes`, then `kv_cache_fraction` of free memory (default per device
    type; then also capped at `default_cap`, e.g. max_running_requests * context)."""
    if max_total_tokens is not None:
        return max_total_tokens
    if kv_cache_bytes is not None:
        budget = kv_cache_bytes
    else:
        fraction = kv_cache_fraction if kv_cache_fraction is not None else DEFAULT_FRACTION.get(device.type, 0.1)
        budget = int(available_memory_bytes(device) * fraction)
    tokens = budget // bytes_per_token
    if kv_cache_bytes is None and kv_cache_fraction is None and default_cap is not None:
        tokens = min(tokens, default_cap)
    if tokens < 2:
        raise ConfigError(
            f"KV budget of {budget} bytes holds {tokens} tokens at {bytes_per_token} bytes/token; "
            "raise kv_cache_bytes / kv_cache_fraction"
        )
    return int(tokens)
