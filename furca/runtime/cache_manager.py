"""`CacheManager`: the KV pool and the radix cache as the scheduler sees them. It owns
the slot allocator, the request-to-token table and the radix tree, and every change to
a request's `KVRegion` (``req.kv``) except ``kv_len``, which the scheduler advances after
a forward pass.

Each KV slot is exactly one of: free, in the tree, or owned by a running request
(positions ``kv.tree_len .. kv.kv_len`` of its row); `check_memory` proves it. Every
error raised here means this shared state may be wrong (`MemoryAccountingError`,
`RadixCacheError`): the scheduler does not isolate them per request, it dies.

Sessions (``self.leases``, furca/radix/leases.py) pin a program's KV in the tree between
its calls: a finished request of a session moves the session's pin to what it cached.

Runs on the scheduler thread only (nothing here locks; the lease table guards its own
session table for callers on other threads).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch

from furca.radix.leases import LeaseTable
from furca.radix.radix_cache import MatchResult, RadixCache
from furca.runtime.memory import MemoryAccountingError, ReqToTokenPool, TokenSlotAllocator
from furca.runtime.request import Req

if TYPE_CHECKING:
    from furca.runtime.batch_builder import ScheduledReq


class CacheManager:
    """KV slots, request rows and the radix tree of one engine: ``capacity`` tokens,
    ``max_rows`` running requests of at most ``context_length`` tokens, on ``device``.
    With ``radix=False`` the tree stays empty (nothing is shared or cached, nothing pinned).
    Sessions pin at most ``pinned_share`` of the pool, each for ``session_ttl`` seconds
    after its last call."""

    def __init__(self, capacity: int, max_rows: int, context_length: int, device, *, radix: bool = True,
                 pinned_share: float = 0.5, session_ttl: float = 300.0):
        self.capacity = capacity
        self.allocator = TokenSlotAllocator(capacity, device)
        self.req_pool = ReqToTokenPool(max_rows, context_length, device)
        self.tree = RadixCache(self.allocator.free, disabled=not radix, device=device)
        self.leases = LeaseTable(self.tree, capacity, pinned_share, session_ttl)

    # -- sizes ------------------------------------------------------------------------------

    @property
    def table(self) -> torch.Tensor:
        """``req_to_token``: ``table[row, pos]`` is the KV slot of position ``pos``."""
        return self.req_pool.table

    def available(self) -> int:
        """Tokens that can be allocated now: free slots plus unlocked (evictable) tree slots."""
        return self.allocator.num_free + self.tree.evictable_size()

    def used_tokens(self) -> int:
        return self.capacity - self.available()

    def has_free_row(self) -> bool:
        return self.req_pool.num_free > 0

    def counts(self) -> dict[str, int]:
        """``capacity``, ``free``, ``tree``, ``evictable``, ``locked`` and ``pinned`` (locked
        by sessions) tokens."""
        tree = self.tree
        return {"capacity": self.capacity, "free": self.allocator.num_free, "tree": tree.total_size(),
                "evictable": tree.evictable_size(), "locked": tree.locked_size(),
                "pinned": self.leases.pinned_tokens()}

    # -- admission ----------------------------------------------------------------------------

    def match_prefix(self, req: Req) -> MatchResult:
        """The longest cached prefix ``req`` may use (`Req.max_prefix_len`); locks nothing."""
        return self.tree.match_prefix(req.tokens(0, req.max_prefix_len))

    def lock(self, match: MatchResult) -> None:
        """Keep ``match``'s slots from eviction while its request is being admitted; the
        caller then `admit`s the request with it or `unlock`s it."""
        self.tree.lock(match.node)

    def unlock(self, match: MatchResult) -> None:
        """Undo `lock` for a request that was not admitted."""
        self.tree.unlock(match.node)

    def admit(self, req: Req, match: MatchResult) -> None:
        """Give ``req`` a row whose first ``match.prefix_len`` positions are the matched
        tree slots (its lock, from `lock`, passes to the request). The caller checked
        `has_free_row`; without one this raises `MemoryAccountingError`."""
        row = self.req_pool.alloc()
        if row is None:
            raise MemoryAccountingError(f"no free request row for {req.rid} (the scheduler admits only with one)")
        prefix_len = match.prefix_len
        if prefix_len:
            self.req_pool.table[row, :prefix_len] = match.slot_indices.to(self.req_pool.table.device)
        kv = req.kv
        kv.row, kv.kv_len, kv.tree_len, kv.last_node = row, prefix_len, prefix_len, match.node

    # -- a step -------------------------------------------------------------------------------

    def alloc(self, n: int) -> torch.Tensor:
        """``n`` free slots, evicting unlocked tree leaves (LRU) when short. Raises
        `MemoryAccountingError` when even eviction cannot give them: admission promised
        space that is not there."""
        short = n - self.allocator.num_free
        if short > 0:
            self.tree.evict(short)
        slots = self.allocator.alloc(n)
        if slots is None:
            raise MemoryAccountingError(
                f"need {n} KV slots but only {self.allocator.num_free} free after eviction "
                f"(evictable {self.tree.evictable_size()}): admission accounting is wrong"
            )
        return slots

    def alloc_step(self, items: Sequence[ScheduledReq]) -> torch.Tensor:
        """`alloc` the slots of a step's new tokens and write each item's into its
        request's row at ``[start, end)``; returns them, for `free` if the step is dropped."""
        slots = self.alloc(sum(it.num_new for it in items))
        table = self.req_pool.table
        pos = 0
        for it in items:
            table[it.req.kv.row, it.start : it.end] = slots[pos : pos + it.num_new]
            pos += it.num_new
        return slots

    def free(self, slots: torch.Tensor) -> None:
        """Return slots from `alloc` that no request keeps (a forward pass that raised)."""
        self.allocator.free(slots)

    def cache_req(self, req: Req, *, finished: bool) -> None:
        """Put the KV ``req`` computed (``fill[:kv_len]``) into the tree; slots that hold
        what another request cached meanwhile are freed (the tree keeps its own).

        ``finished=False`` (a prefill chunk ran, the request goes on): the request's lock
        moves to the end of what it inserted, so requests admitted later share it, and its
        row now points at the tree's slots. ``finished=True`` (it finished, was aborted or
        retracted): its lock and row are dropped, ``req.kv`` is reset. A request without a
        row is left alone. With the tree off, its own slots are freed instead."""
        if finished:
            self._release(req, cache=True)
        else:
            self._cache_unfinished(req)

    def free_req(self, req: Req) -> None:
        """Drop everything a failed request holds: its own KV is freed, never cached (its
        tokens may not match it), its lock and row are dropped, ``req.kv`` is reset."""
        self._release(req, cache=False)

    def rollback_kv(self, req: Req) -> None:
        """Drop the KV of positions >= ``req.kv.rollback_to`` (set, not None: jump-forward
        replaced those tokens) and clear it. Slots the request owns are freed; where the
        rollback reaches into the tree, the tree keeps its slots (valid KV of the old
        tokens) and the request's lock moves back to the longest prefix still cached."""
        kv = req.kv
        new_len, kv.rollback_to = kv.rollback_to, None
        if new_len >= kv.kv_len or kv.row is None:
            return
        row, kv_len, tree_len = kv.row, kv.kv_len, kv.tree_len
        table = self.req_pool.table
        if new_len >= tree_len:
            self.allocator.free(table[row, new_len:kv_len].clone())
            kv.kv_len = new_len
            return
        if kv_len > tree_len:
            self.allocator.free(table[row, tree_len:kv_len].clone())
        match = self.tree.match_prefix(req.tokens(0, new_len))
        self.tree.lock(match.node)
        self.tree.unlock(kv.last_node)
        keep = match.prefix_len
        table[row, :keep] = match.slot_indices.to(table.device)
        kv.last_node, kv.tree_len, kv.kv_len = match.node, keep, keep

    def _cache_unfinished(self, req: Req) -> None:
        kv = req.kv
        if self.tree.disabled or kv.kv_len == kv.tree_len:
            return
        row, kv_len, tree_len = kv.row, kv.kv_len, kv.tree_len
        ids = req.tokens(0, kv_len)
        slots = self.req_pool.table[row, :kv_len]
        present = self.tree.insert(ids, slots)
        if present > tree_len:  # computed again what another request cached meanwhile
            self.allocator.free(slots[tree_len:present].clone())
        match = self.tree.match_prefix(ids)
        if match.prefix_len != kv_len:
            raise MemoryAccountingError(f"re-match after insert found {match.prefix_len} of {kv_len} tokens")
        self.req_pool.table[row, tree_len:kv_len] = match.slot_indices[tree_len:].to(slots.device)
        self.tree.lock(match.node)
        self.tree.unlock(kv.last_node)
        kv.last_node, kv.tree_len = match.node, kv_len

    def _release(self, req: Req, *, cache: bool) -> None:
        kv = req.kv
        if kv.row is None:
            return
        row, kv_len, tree_len = kv.row, kv.kv_len, kv.tree_len
        slots = self.req_pool.table[row, :kv_len].clone()
        if cache and not self.tree.disabled and kv_len > tree_len:
            present = self.tree.insert(req.tokens(0, kv_len), slots)
            self.allocator.free(slots[tree_len:present])
        elif kv_len > tree_len:
            self.allocator.free(slots[tree_len:kv_len])
        if cache and req.session_id is not None and kv_len:
            req.session_meta = self.leases.pin(req.session_id, req.tokens(0, kv_len))
        if kv.last_node is not None:
            self.tree.unlock(kv.last_node)
        self.req_pool.free(row)
        kv.row, kv.last_node, kv.kv_len, kv.tree_len = None, None, 0, 0

    # -- control and checks ---------------------------------------------------------------------

    def flush(self) -> None:
        """Empty the tree and free every slot; only when no request holds any (the caller
        checks). Sessions stay open and lose their pins."""
        self.leases.drop_pins()
        self.tree.reset()
        self.allocator.reset()

    def check_memory(self, running: Sequence[Req], *, idle: bool = False) -> None:
        """Raise `MemoryAccountingError` unless every slot is exactly one of: free, in the
        tree, or owned by one of ``running``; the tree's own integrity check raises
        `RadixCacheError`. ``idle=True`` (nothing runs) also wants no lock but the sessions'
        pins and no row held, and the free and tree slots to partition the pool."""
        table = self.req_pool.table
        owned = [table[r.kv.row, r.kv.tree_len : r.kv.kv_len] for r in running if r.kv.row is not None]
        num_owned = sum(len(o) for o in owned)
        total = self.allocator.num_free + self.tree.total_size() + num_owned
        if total != self.capacity:
            raise MemoryAccountingError(
                f"KV accounting: free {self.allocator.num_free} + tree {self.tree.total_size()} + "
                f"running {num_owned} = {total} != capacity {self.capacity}"
            )
        self.tree.check_integrity()
        if idle:
            pinned = self.leases.pinned_tokens()
            if running or self.tree.locked_size() != pinned or self.req_pool.num_free != self.req_pool.max_rows:
                by_sessions = f" ({pinned} pinned by sessions)" if pinned else ""
                raise MemoryAccountingError(
                    f"idle but {len(running)} running, {self.tree.locked_size()} tokens locked{by_sessions}, "
                    f"{self.req_pool.max_rows - self.req_pool.num_free} rows held"
                )
            if pinned > self.leases.limit:
                raise MemoryAccountingError(f"sessions pin {pinned} tokens, over their limit {self.leases.limit}")
            every = torch.cat([self.allocator.free_slots(), self.tree.all_slots().cpu()])
            if len(every) != self.capacity or len(torch.unique(every)) != self.capacity:
                raise MemoryAccountingError("idle: free slots and tree slots do not partition the pool")
