"""`CacheManager`'s contract on its own (no model): admission rows, caching a running and a
finished request, freeing a failed one, eviction, jump-forward's KV rollback, and the
memory check that every slot is free, in the tree, or owned by a running request."""

from __future__ import annotations

import pytest
import torch

from furca.runtime.batch_builder import ScheduledReq
from furca.runtime.cache_manager import CacheManager
from furca.runtime.memory import MemoryAccountingError
from tests.runtime.test_scheduler import make_req


def compute(cache: CacheManager, req, n: int) -> torch.Tensor:
    """What a step does for `req`: slots for its next `n` tokens, then kv_len moves on.
    Admits it first (radix match, lock) when it has no row."""
    if req.kv.row is None:
        match = cache.match_prefix(req)
        cache.lock(match)
        cache.admit(req, match)
    slots = cache.alloc_step([ScheduledReq(req, req.kv.kv_len, n)])
    req.kv.kv_len += n
    return slots


def test_a_running_request_shares_its_prefix_and_a_finished_one_leaves_it_cached():
    cache = CacheManager(64, 4, 32, "cpu")
    a = make_req(range(10, 20), "a")
    slots = compute(cache, a, 10)
    cache.check_memory([a])
    assert cache.counts()["tree"] == 0 and cache.used_tokens() == 10
    cache.cache_req(a, finished=False)
    assert (a.kv.tree_len, a.kv.kv_len) == (10, 10)
    assert cache.counts()["locked"] == 10 and cache.counts()["evictable"] == 0
    b = make_req(list(range(10, 20)) + [7, 8], "b")
    match = cache.match_prefix(b)
    assert match.prefix_len == 10
    cache.lock(match)
    cache.admit(b, match)
    assert torch.equal(cache.table[b.kv.row, :10], slots)  # b reads a's KV
    assert (b.kv.kv_len, b.kv.tree_len) == (10, 10)
    cache.check_memory([a, b])
    cache.cache_req(a, finished=True)
    cache.cache_req(b, finished=True)  # nothing computed beyond the tree: only lock and row go
    assert a.kv.row is None and a.kv.last_node is None and (a.kv.kv_len, a.kv.tree_len) == (0, 0)
    cache.check_memory([], idle=True)
    assert cache.counts() == {"capacity": 64, "free": 54, "tree": 10, "evictable": 10, "locked": 0, "pinned": 0}


def test_finishing_caches_prompt_and_output_and_frees_what_another_request_cached_first():
    cache = CacheManager(64, 4, 32, "cpu")
    a, b = make_req(range(30, 38), "a"), make_req(range(30, 38), "b")
    compute(cache, a, 8)
    compute(cache, b, 8)  # the same tokens computed twice (both admitted before either cached)
    a.output_ids.append(5)
    compute(cache, a, 1)
    cache.cache_req(a, finished=True)
    assert cache.counts()["tree"] == 9
    cache.cache_req(b, finished=True)  # b's 8 slots duplicate the tree's: freed
    assert cache.counts()["tree"] == 9 and cache.counts()["free"] == 64 - 9
    cache.check_memory([], idle=True)


def test_a_failed_request_is_freed_never_cached():
    cache = CacheManager(32, 2, 32, "cpu")
    req = make_req(range(3, 15))
    compute(cache, req, 12)
    cache.free_req(req)
    assert cache.counts() == {"capacity": 32, "free": 32, "tree": 0, "evictable": 0, "locked": 0, "pinned": 0}
    assert req.kv.row is None
    cache.check_memory([], idle=True)
    cache.free_req(req)  # holds nothing any more: a no-op


def test_without_the_radix_tree_a_finished_request_frees_its_slots():
    cache = CacheManager(32, 2, 32, "cpu", radix=False)
    req = make_req(range(3, 15))
    compute(cache, req, 12)
    cache.cache_req(req, finished=False)  # nothing to share
    assert req.kv.tree_len == 0
    cache.cache_req(req, finished=True)
    assert cache.counts()["free"] == 32 and cache.counts()["tree"] == 0
    cache.check_memory([], idle=True)


def test_alloc_evicts_unlocked_leaves_and_raises_when_even_that_is_short():
    cache = CacheManager(16, 2, 32, "cpu")
    req = make_req(range(40, 50))
    compute(cache, req, 10)
    cache.cache_req(req, finished=True)
    assert cache.available() == 16 and cache.counts()["free"] == 6
    slots = cache.alloc(12)  # evicts the cached prompt
    assert len(slots) == 12 and cache.counts()["tree"] < 10
    cache.free(slots)
    cache.check_memory([], idle=True)
    held = cache.alloc(16)
    with pytest.raises(MemoryAccountingError, match="need 1 KV slots"):
        cache.alloc(1)
    cache.free(held)


def test_rollback_frees_owned_kv_and_moves_the_lock_back_inside_the_tree():
    cache = CacheManager(64, 2, 32, "cpu")
    req = make_req(range(60, 70))
    compute(cache, req, 10)
    req.kv.rollback_to = 7  # owned positions only: freed
    cache.rollback_kv(req)
    assert (req.kv.kv_len, req.kv.tree_len, req.kv.rollback_to) == (7, 0, None)
    assert cache.used_tokens() == 7
    cache.check_memory([req])
    compute(cache, req, 3)
    cache.cache_req(req, finished=False)
    req.output_ids.extend([1, 2])
    compute(cache, req, 2)
    req.kv.rollback_to = 4  # reaches into the tree: the tree keeps its slots
    cache.rollback_kv(req)
    assert (req.kv.kv_len, req.kv.tree_len) == (4, 4)
    assert cache.counts()["tree"] == 10 and cache.counts()["locked"] == 4
    cache.check_memory([req])
    req.kv.rollback_to = 9  # past kv_len: nothing to drop
    cache.rollback_kv(req)
    assert req.kv.kv_len == 4 and req.kv.rollback_to is None
    cache.cache_req(req, finished=True)
    cache.check_memory([], idle=True)


def test_admit_without_a_free_row_raises():
    cache = CacheManager(64, 1, 32, "cpu")
    compute(cache, make_req([5, 6, 7], "a"), 3)
    assert not cache.has_free_row()
    late = make_req([8, 9], "b")
    with pytest.raises(MemoryAccountingError, match="no free request row for b"):
        cache.admit(late, cache.match_prefix(late))


def test_check_memory_finds_a_leaked_slot_and_a_lock_held_at_idle():
    cache = CacheManager(32, 2, 32, "cpu")
    leaked = cache.alloc(3)
    with pytest.raises(MemoryAccountingError, match="running 0 = 29 != capacity 32"):
        cache.check_memory([])
    cache.free(leaked)
    req = make_req(range(3, 9))
    compute(cache, req, 6)
    cache.cache_req(req, finished=False)
    with pytest.raises(MemoryAccountingError, match="idle but 0 running, 6 tokens locked, 1 rows held"):
        cache.check_memory([], idle=True)
    cache.cache_req(req, finished=True)
    cache.check_memory([], idle=True)
    cache.flush()
    assert cache.counts() == {"capacity": 32, "free": 32, "tree": 0, "evictable": 0, "locked": 0, "pinned": 0}
