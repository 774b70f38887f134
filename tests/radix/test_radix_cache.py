"""Unit tests for RadixCache: splits, insert's return value, locks, LRU eviction, disabled mode."""

import pytest
import torch

from furca.errors import FurcaError
from furca.radix import RadixCache, RadixCacheError


class Freed:
    """free_slots callback that records what the cache gave back."""

    def __init__(self):
        self.calls: list[list[int]] = []

    def __call__(self, slots: torch.Tensor) -> None:
        assert slots.dtype == torch.int64 and slots.dim() == 1
        self.calls.append(slots.tolist())

    @property
    def all(self) -> list[int]:
        return [s for call in self.calls for s in call]


def t(xs):
    return torch.tensor(xs, dtype=torch.int64)


@pytest.fixture
def freed():
    return Freed()


@pytest.fixture
def cache(freed):
    return RadixCache(freed)


def test_empty_cache_matches_nothing(cache):
    m = cache.match_prefix([1, 2, 3])
    assert m.prefix_len == 0 and m.slot_indices.tolist() == [] and m.node is cache.root
    assert m.slot_indices.dtype == torch.int64
    assert cache.match_prefix([]).prefix_len == 0
    cache.check_integrity()


def test_insert_returns_existing_prefix_len(cache):
    assert cache.insert([1, 2, 3], t([10, 11, 12])) == 0
    assert cache.insert([1, 2, 3, 4, 5], t([20, 21, 22, 23, 24])) == 3
    assert cache.insert([1, 2, 3], t([30, 31, 32])) == 3
    assert cache.insert([7], t([40])) == 0
    assert cache.total_size() == 6
    # the tree kept its own slots for the shared prefix
    assert cache.match_prefix([1, 2, 3, 4, 5, 6]).slot_indices.tolist() == [10, 11, 12, 23, 24]
    cache.check_integrity()


def test_match_inside_edge_splits(cache):
    cache.insert([1, 2, 3, 4], t([10, 11, 12, 13]))
    m = cache.match_prefix([1, 2, 9])
    assert m.prefix_len == 2 and m.slot_indices.tolist() == [10, 11]
    assert m.node.key == (1, 2) and list(m.node.children) == [3]
    assert m.node.children[3].key == (3, 4) and m.node.children[3].value.tolist() == [12, 13]
    assert cache.total_size() == 4
    cache.check_integrity()
    # a query that ends inside an edge splits it too
    m = cache.match_prefix([1, 2, 3])
    assert m.prefix_len == 3 and m.node.key == (3,)
    cache.check_integrity()


def test_insert_inside_edge_splits(cache):
    cache.insert([1, 2, 3, 4], t([10, 11, 12, 13]))
    assert cache.insert([1, 2, 5, 6], t([20, 21, 22, 23])) == 2
    mid = cache.root.children[1]
    assert mid.key == (1, 2) and sorted(mid.children) == [3, 5]
    assert mid.children[5].value.tolist() == [22, 23]
    # inserting a strict prefix that ends inside an edge splits without a new leaf
    assert cache.insert([1, 2, 3], t([30, 31, 32])) == 3
    assert mid.children[3].key == (3,) and mid.children[3].children[4].key == (4,)
    assert cache.total_size() == 6
    cache.check_integrity()


def test_split_keeps_handle_and_lock(cache):
    cache.insert([1, 2, 3, 4], t([10, 11, 12, 13]))
    m = cache.match_prefix([1, 2, 3, 4])
    cache.lock(m.node)
    assert cache.locked_size() == 4
    cache.match_prefix([1, 2])  # splits the locked edge
    cache.check_integrity()
    assert cache.locked_size() == 4 and cache.evictable_size() == 0
    cache.unlock(m.node)  # the old handle still ends at token 4 and unlocks the whole path
    assert cache.locked_size() == 0 and cache.evictable_size() == 4
    cache.check_integrity()


def test_insert_copies_values(cache):
    slots = t([10, 11])
    cache.insert([1, 2], slots)
    slots[:] = 99
    assert cache.match_prefix([1, 2]).slot_indices.tolist() == [10, 11]


def test_insert_length_mismatch_raises(cache):
    with pytest.raises(RadixCacheError, match="2 token ids"):
        cache.insert([1, 2], t([1]))


def test_lock_unlock_accounting(cache):
    cache.insert([1, 2, 3], t([10, 11, 12]))
    cache.insert([1, 2, 4, 5], t([20, 21, 22, 23]))
    a = cache.match_prefix([1, 2, 3]).node
    b = cache.match_prefix([1, 2, 4, 5]).node
    assert (cache.evictable_size(), cache.locked_size()) == (5, 0)
    cache.lock(a)
    assert (cache.evictable_size(), cache.locked_size()) == (2, 3)
    cache.lock(b)
    cache.lock(b)
    assert (cache.evictable_size(), cache.locked_size()) == (0, 5)
    assert a.parent.lock_ref == 3
    cache.check_integrity()
    cache.unlock(a)
    assert (cache.evictable_size(), cache.locked_size()) == (1, 4)
    cache.unlock(b)
    assert (cache.evictable_size(), cache.locked_size()) == (1, 4)
    cache.unlock(b)
    assert (cache.evictable_size(), cache.locked_size()) == (5, 0)
    cache.check_integrity()
    cache.lock(cache.root)  # the root is always held: a no-op
    cache.unlock(cache.root)
    assert cache.root.lock_ref == 1


def test_unlock_below_zero_raises_and_changes_nothing(cache):
    cache.insert([1, 2], t([10, 11]))
    node = cache.match_prefix([1, 2]).node
    with pytest.raises(RadixCacheError, match="not locked") as info:
        cache.unlock(node)
    assert isinstance(info.value, FurcaError)
    assert node.lock_ref == 0 and cache.evictable_size() == 2
    cache.check_integrity()


def test_eviction_is_lru(cache, freed):
    cache.insert([1, 1], t([10, 11]))
    cache.insert([2, 2], t([20, 21]))
    cache.insert([3, 3], t([30, 31]))
    cache.match_prefix([1, 1])  # touch A: B is now the least recently used
    assert cache.evict(1) == 2
    assert freed.all == [20, 21]
    assert cache.evict(2) == 2
    assert freed.all == [20, 21, 30, 31]
    assert cache.match_prefix([1, 1]).prefix_len == 2
    cache.check_integrity()


def test_evict_never_touches_locked_nodes(cache, freed):
    cache.insert([1, 2, 3], t([10, 11, 12]))
    cache.insert([1, 2, 4], t([20, 21, 22]))
    cache.insert([5], t([30]))
    m = cache.match_prefix([1, 2, 3])
    cache.lock(m.node)
    assert cache.evict(100) == 2  # only [4] and [5]; [1, 2] and [3] are held
    assert sorted(freed.all) == [22, 30]
    assert cache.match_prefix([1, 2, 3]).slot_indices.tolist() == [10, 11, 12]
    cache.unlock(m.node)
    assert cache.evict(100) == 3
    assert sorted(freed.all) == [10, 11, 12, 22, 30]
    assert cache.total_size() == 0
    cache.check_integrity()


def test_evict_pushes_parent_that_becomes_leaf(cache, freed):
    cache.insert([1, 2, 3], t([10, 11, 12]))
    cache.insert([1, 2, 4], t([20, 21, 22]))
    assert cache.evict(3) == 4  # both leaves (1 each), then their parent [1, 2]
    assert sorted(freed.all) == [10, 11, 12, 22]
    assert cache.total_size() == 0 and cache.root.children == {}
    assert len(freed.calls) == 1  # one callback per evict call
    assert cache.evict(5) == 0 and len(freed.calls) == 1


def test_evicted_node_cannot_be_locked(cache):
    cache.insert([1], t([10]))
    node = cache.match_prefix([1]).node
    cache.evict(1)
    with pytest.raises(RadixCacheError, match="not in this cache"):
        cache.lock(node)


def test_disabled_stores_nothing(freed):
    cache = RadixCache(freed, disabled=True)
    assert cache.insert([1, 2, 3], t([10, 11, 12])) == 0
    m = cache.match_prefix([1, 2, 3])
    assert m.prefix_len == 0 and m.node is cache.root and m.slot_indices.numel() == 0
    cache.lock(m.node)
    cache.unlock(m.node)
    assert cache.total_size() == 0 and cache.evict(10) == 0 and freed.calls == []
    cache.check_integrity()


def test_reset_drops_without_freeing(cache, freed):
    cache.insert([1, 2], t([10, 11]))
    node = cache.match_prefix([1, 2]).node
    cache.lock(node)
    cache.reset()
    assert freed.calls == [] and cache.total_size() == 0 and cache.locked_size() == 0
    assert cache.all_slots().numel() == 0
    with pytest.raises(RadixCacheError):
        cache.unlock(node)
    cache.check_integrity()


def test_all_slots_and_pretty_print(cache):
    cache.insert([1, 2], t([10, 11]))
    cache.insert([1, 3], t([20, 21]))
    assert sorted(cache.all_slots().tolist()) == [10, 11, 21]
    text = cache.pretty_print()
    assert "[1] -> [10]" in text and "[3] -> [21]" in text
    assert "evictable=3" in repr(cache)


def test_check_integrity_catches_corruption(cache):
    cache.insert([1, 2, 3], t([10, 11, 12]))
    cache.insert([1, 4], t([20, 21]))
    cache._evictable_size += 1
    with pytest.raises(RadixCacheError, match="sizes"):
        cache.check_integrity()
    cache._evictable_size -= 1
    leaf = cache.root.children[1].children[4]
    leaf.value = t([12])  # same slot as the other branch
    with pytest.raises(RadixCacheError, match="stored twice"):
        cache.check_integrity()
    leaf.value = t([21])
    leaf.lock_ref = 1
    with pytest.raises(RadixCacheError, match="lock_ref below"):
        cache.check_integrity()


def test_accepts_tensor_and_tuple_ids(cache):
    cache.insert(torch.tensor([1, 2, 3]), t([10, 11, 12]))
    assert cache.match_prefix((1, 2, 3, 4)).prefix_len == 3


def test_long_sequences(cache):
    n = 20_000
    ids = list(range(n))
    assert cache.insert(ids, torch.arange(n)) == 0
    assert cache.insert(ids[: n // 2] + [-1] * (n // 2), torch.arange(n, 2 * n)) == n // 2
    m = cache.match_prefix(ids)
    assert m.prefix_len == n and torch.equal(m.slot_indices, torch.arange(n))
    cache.check_integrity()
