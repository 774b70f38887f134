"""Property test: RadixCache driven the way the runtime drives it, against a reference model.

The reference model is a prefix-closed dict {token prefix: slot of its last token}, so
the longest cached prefix of a query and its slots are known without the tree. A fixed
capacity allocator asserts on double frees; requests hold slots outside the tree the way
the scheduler does (matched prefix locked, the rest allocated, inserted on finish).
"""

from dataclasses import dataclass

import torch
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from furca.radix import Node, RadixCache

CAPACITY = 48
token_seqs = st.lists(st.integers(0, 2), min_size=1, max_size=10)


class Allocator:
    def __init__(self, capacity: int):
        self.capacity = capacity
        self.free_set = set(range(capacity))

    def alloc(self, n: int) -> torch.Tensor:
        assert n <= len(self.free_set)
        slots = sorted(self.free_set)[:n]
        self.free_set.difference_update(slots)
        return torch.tensor(slots, dtype=torch.int64)

    def free(self, slots: torch.Tensor) -> None:
        for s in slots.tolist():
            assert 0 <= s < self.capacity, f"slot {s} out of range"
            assert s not in self.free_set, f"double free of slot {s}"
            self.free_set.add(s)


@dataclass
class Request:
    ids: tuple[int, ...]
    node: Node  # locked
    slots: torch.Tensor  # (len(ids),): the cached prefix's slots, then its own
    cached_len: int  # slots[:cached_len] belong to the tree, the rest to the request


class RadixMachine(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.alloc = Allocator(CAPACITY)
        self.cache = RadixCache(self._on_free)
        self.model: dict[tuple[int, ...], int] = {}  # prefix -> slot of its last token
        self.slot_prefix: dict[int, tuple[int, ...]] = {}
        self.requests: list[Request] = []
        self.handles: list[tuple[Node, tuple[int, ...]]] = []  # extra locks (node, prefix)

    # ---- reference model -------------------------------------------------------------
    def _model_match_len(self, ids) -> int:
        n = 0
        while n < len(ids) and tuple(ids[: n + 1]) in self.model:
            n += 1
        return n

    def _model_slots(self, ids, n) -> list[int]:
        return [self.model[tuple(ids[: i + 1])] for i in range(n)]

    def _locked_slots(self) -> set[int]:
        held = set()
        for r in self.requests:
            held.update(r.slots[: r.cached_len].tolist())
        for _, prefix in self.handles:
            held.update(self._model_slots(prefix, len(prefix)))
        return held

    def _on_free(self, slots: torch.Tensor) -> None:
        assert slots.dtype == torch.int64 and slots.dim() == 1
        freed = slots.tolist()
        assert not set(freed) & self._locked_slots(), "evicted a locked slot"
        self.alloc.free(slots)
        for s in freed:
            del self.model[self.slot_prefix.pop(s)]
        for prefix in self.model:  # eviction removes whole suffixes only
            assert len(prefix) == 1 or prefix[:-1] in self.model

    def _insert(self, ids, slots, owned_from: int) -> int:
        """Insert as the runtime does; the caller owns slots[owned_from:]. Frees duplicates."""
        expected = self._model_match_len(ids)
        prefix_len = self.cache.insert(ids, slots)
        assert prefix_len == expected
        assert prefix_len >= owned_from
        self.alloc.free(slots[owned_from:prefix_len])
        for i in range(prefix_len, len(ids)):
            self.model[tuple(ids[: i + 1])] = int(slots[i])
            self.slot_prefix[int(slots[i])] = tuple(ids[: i + 1])
        return prefix_len

    def _alloc_evicting(self, n: int) -> torch.Tensor | None:
        short = n - len(self.alloc.free_set)
        if short > 0:
            evictable = self.cache.evictable_size()
            freed = self.cache.evict(short)
            assert freed >= short if evictable >= short else freed == evictable
        if n > len(self.alloc.free_set):
            return None
        return self.alloc.alloc(n)

    def _check_match(self, ids):
        m = self.cache.match_prefix(ids)
        n = self._model_match_len(ids)
        assert m.prefix_len == n
        assert m.slot_indices.dtype == torch.int64
        assert m.slot_indices.tolist() == self._model_slots(ids, n)
        return m

    # ---- rules -----------------------------------------------------------------------
    @rule(ids=token_seqs)
    def insert(self, ids):
        slots = self._alloc_evicting(len(ids))
        if slots is not None:
            self._insert(ids, slots, owned_from=0)

    @rule(ids=token_seqs)
    def match(self, ids):
        self._check_match(ids)

    @rule(ids=token_seqs)
    def lock(self, ids):
        m = self._check_match(ids)
        self.cache.lock(m.node)
        self.handles.append((m.node, tuple(ids[: m.prefix_len])))

    @precondition(lambda self: self.handles)
    @rule(data=st.data())
    def unlock(self, data):
        node, _ = self.handles.pop(data.draw(st.integers(0, len(self.handles) - 1)))
        self.cache.unlock(node)

    @rule(ids=token_seqs)
    def start_request(self, ids):
        m = self._check_match(ids)
        self.cache.lock(m.node)
        new = self._alloc_evicting(len(ids) - m.prefix_len)
        if new is None:
            self.cache.unlock(m.node)
            return
        self.requests.append(Request(tuple(ids), m.node, torch.cat([m.slot_indices, new]), m.prefix_len))

    @precondition(lambda self: self.requests)
    @rule(data=st.data())
    def finish_request(self, data):
        r = self.requests.pop(data.draw(st.integers(0, len(self.requests) - 1)))
        self._insert(r.ids, r.slots, owned_from=r.cached_len)
        self.cache.unlock(r.node)

    @precondition(lambda self: self.requests)
    @rule(data=st.data())
    def cache_unfinished_request(self, data):
        """Chunked prefill: insert what is filled, re-match, move the lock to the new node."""
        r = self.requests[data.draw(st.integers(0, len(self.requests) - 1))]
        self._insert(r.ids, r.slots, owned_from=r.cached_len)
        m = self._check_match(r.ids)
        assert m.prefix_len == len(r.ids)
        assert torch.equal(m.slot_indices[: r.cached_len], r.slots[: r.cached_len])
        self.cache.lock(m.node)
        self.cache.unlock(r.node)
        r.node, r.slots, r.cached_len = m.node, m.slot_indices, len(r.ids)

    @precondition(lambda self: self.requests)
    @rule(data=st.data())
    def abort_request(self, data):
        r = self.requests.pop(data.draw(st.integers(0, len(self.requests) - 1)))
        self.cache.unlock(r.node)
        self.alloc.free(r.slots[r.cached_len :])

    @rule(num_tokens=st.integers(0, CAPACITY + 4))
    def evict(self, num_tokens):
        evictable = self.cache.evictable_size()
        freed = self.cache.evict(num_tokens)
        assert freed >= num_tokens if evictable >= num_tokens else freed == evictable
        assert self.cache.evictable_size() == evictable - freed

    # ---- invariants ------------------------------------------------------------------
    @invariant()
    def integrity(self):
        self.cache.check_integrity()

    @invariant()
    def conservation(self):
        held = sum(len(r.slots) - r.cached_len for r in self.requests)
        c = self.cache
        assert c.evictable_size() + c.locked_size() + len(self.alloc.free_set) + held == CAPACITY
        assert c.total_size() == len(self.model)
        assert sorted(c.all_slots().tolist()) == sorted(self.model.values())

    def teardown(self):
        for r in self.requests:
            self.cache.unlock(r.node)
            self.alloc.free(r.slots[r.cached_len :])
        for node, _ in self.handles:
            self.cache.unlock(node)
        self.requests, self.handles = [], []
        c = self.cache
        assert c.locked_size() == 0 and c.root.lock_ref == 1
        assert all(n.lock_ref == 0 for n in c._nodes())
        c.check_integrity()
        num_cached = len(self.model)
        assert c.evict(CAPACITY) == num_cached
        assert len(self.alloc.free_set) == CAPACITY and not self.model and c.total_size() == 0


RadixMachine.TestCase.settings = settings(max_examples=300, stateful_step_count=40, deadline=None)
TestRadixMachine = RadixMachine.TestCase
