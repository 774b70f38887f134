"""The scheduler's KV bookkeeping (a mixin of `Scheduler`): slot allocation with eviction,
moving a request's computed KV into the radix tree, rolling KV back after jump-forward,
releasing a request, flushing the cache, and the strict memory check. Every error here
means shared state may be wrong: nothing in this module is isolated per request.

Uses the scheduler's ``allocator`` (`TokenSlotAllocator`), ``req_pool``
(`ReqToTokenPool`), ``tree`` (`RadixCache`), ``running`` and ``capacity``.
"""

from __future__ import annotations

import torch

from furca.runtime.memory import MemoryAccountingError
from furca.runtime.request import Req


class KVBookkeeping:
    # -- KV slots -----------------------------------------------------------------------------

    def _available(self) -> int:
        return self.allocator.num_free + self.tree.evictable_size()

    def _alloc(self, n: int) -> torch.Tensor:
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

    # -- radix cache bookkeeping ------------------------------------------------------------

    def _cache_unfinished(self, req: Req) -> None:
        """Insert fill[:kv_len] into the tree and move the lock to its end, so later
        requests share it while this one keeps running."""
        if self.tree.disabled or req.kv_len == req.tree_len:
            return
        row, kv_len, tree_len = req.row, req.kv_len, req.tree_len
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
        self.tree.unlock(req.last_node)
        req.last_node, req.tree_len = match.node, kv_len

    def _rollback_kv(self, req: Req) -> None:
        """Drop the KV of positions >= req.kv_rollback_to (their tokens were replaced):
        owned slots are freed; where that reaches into the tree, the tree keeps them
        (valid KV of the old tokens) and the request's lock moves back to the new end."""
        new_len, req.kv_rollback_to = req.kv_rollback_to, None
        if new_len >= req.kv_len or req.row is None:
            return
        row, kv_len, tree_len = req.row, req.kv_len, req.tree_len
        table = self.req_pool.table
        if new_len >= tree_len:
            self.allocator.free(table[row, new_len:kv_len].clone())
            req.kv_len = new_len
            return
        if kv_len > tree_len:
            self.allocator.free(table[row, tree_len:kv_len].clone())
        match = self.tree.match_prefix(req.tokens(0, new_len))
        self.tree.lock(match.node)
        self.tree.unlock(req.last_node)
        keep = match.prefix_len
        table[row, :keep] = match.slot_indices.to(table.device)
        req.last_node, req.tree_len, req.kv_len = match.node, keep, keep

    def _release(self, req: Req, cache: bool = True) -> None:
        """Give back everything `req` holds: its computed KV goes into the tree (duplicates
        freed), its lock and row are dropped. With the cache off (or ``cache=False``: a
        failed request) its own slots are freed."""
        if req.row is None:
            return
        row, kv_len, tree_len = req.row, req.kv_len, req.tree_len
        slots = self.req_pool.table[row, :kv_len].clone()
        present = tree_len
        if cache and not self.tree.disabled and kv_len > tree_len:
            present = self.tree.insert(req.tokens(0, kv_len), slots)
            self.allocator.free(slots[tree_len:present])
        elif kv_len > tree_len:
            self.allocator.free(slots[tree_len:kv_len])
        if req.last_node is not None:
            self.tree.unlock(req.last_node)
        self.req_pool.free(row)
        req.row, req.last_node, req.kv_len, req.tree_len = None, None, 0, 0

    # -- cache control and checks -----------------------------------------------------------

    def flush_cache(self) -> bool:
        if self.has_work():
            return False
        self.tree.reset()
        self.allocator.reset()
        return True

    def used_tokens(self) -> int:
        return self.capacity - self._available()

    def check_memory(self, *, idle: bool = False) -> None:
        """Raise MemoryAccountingError unless every slot is exactly one of: free, in the
        tree, or owned by a running request. `idle=True` also wants no lock held."""
        owned = [self.req_pool.table[r.row, r.tree_len : r.kv_len] for r in self.running if r.row is not None]
        num_owned = sum(len(o) for o in owned)
        total = self.allocator.num_free + self.tree.total_size() + num_owned
        if total != self.capacity:
            raise MemoryAccountingError(
                f"KV accounting: free {self.allocator.num_free} + tree {self.tree.total_size()} + "
                f"running {num_owned} = {total} != capacity {self.capacity}"
            )
        self.tree.check_integrity()
        if idle:
            if self.running or self.tree.locked_size() or self.req_pool.num_free != self.req_pool.max_rows:
                raise MemoryAccountingError(
                    f"idle but {len(self.running)} running, {self.tree.locked_size()} tokens locked, "
                    f"{self.req_pool.max_rows - self.req_pool.num_free} rows held"
                )
            every = torch.cat([self.allocator.free_slots(), self.tree.all_slots().cpu()])
            if len(every) != self.capacity or len(torch.unique(every)) != self.capacity:
                raise MemoryAccountingError("idle: free slots and tree slots do not partition the pool")
