"""`LeaseTable` on a bare radix tree (no model): pins lock the tree, shared prefixes count
once against the share, a moved pin releases the old path, TTLs expire on a fake clock,
shedding takes the least recently called lease first."""

from __future__ import annotations

import pytest
import torch

from furca.radix.leases import LeaseTable, SessionError
from furca.radix.radix_cache import RadixCache


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def make(capacity: int = 100, share: float = 0.5, ttl: float = 10.0):
    freed: list[int] = []
    tree = RadixCache(lambda s: freed.extend(s.tolist()))
    clock = Clock()
    return tree, LeaseTable(tree, capacity, share, ttl, clock=clock), clock


_next_slot = [1]


def cache(tree: RadixCache, ids: list[int]) -> None:
    """Cache ``ids`` on fresh slots (the tree keeps its own for what it already holds)."""
    start = _next_slot[0]
    _next_slot[0] += len(ids)
    tree.insert(ids, torch.arange(start, start + len(ids)))


def test_forks_sharing_a_prefix_count_it_once_and_a_moved_pin_releases_the_old_path():
    tree, leases, _ = make()
    a, b = leases.open(), leases.open()
    cache(tree, [1, 2, 3, 4, 5, 6])
    cache(tree, [1, 2, 3, 4, 7, 8])
    assert leases.pin(a, [1, 2, 3, 4, 5, 6])["pinned_tokens"] == 6
    assert leases.pin(b, [1, 2, 3, 4, 7, 8])["pinned_tokens"] == 6
    assert leases.pinned_tokens() == 8 == tree.locked_size()
    tree.check_integrity()
    cache(tree, [1, 2, 3, 4, 5, 6, 9, 9])
    assert leases.pin(a, [1, 2, 3, 4, 5, 6, 9, 9])["pinned_tokens"] == 8
    assert leases.pinned_tokens() == 10 == tree.locked_size()
    assert tree.evict(100) == 0  # every cached token is pinned
    leases.close(b)
    assert leases.pinned_tokens() == 8 == tree.locked_size()
    assert tree.evict(100) == 2  # b's branch only
    leases.close(a)
    assert tree.locked_size() == 0 and leases.info()["open"] == 0


def test_a_pin_past_the_share_is_refused_and_the_previous_pin_stays():
    tree, leases, _ = make(capacity=20, share=0.5)  # 10 tokens
    a = leases.open()
    cache(tree, list(range(1, 9)))
    cache(tree, list(range(1, 13)))
    assert leases.pin(a, list(range(1, 9))) == {"session_id": a, "pinned_tokens": 8, "pin_refused": False}
    assert leases.pin(a, list(range(1, 13))) == {"session_id": a, "pinned_tokens": 8, "pin_refused": True}
    assert tree.locked_size() == 8 and leases.info()["pins_refused"] == 1


def test_leases_expire_after_their_ttl_and_each_call_refreshes_it():
    tree, leases, clock = make(ttl=10.0)
    a, b = leases.open(), leases.open(ttl=30.0)
    cache(tree, [1, 2, 3])
    leases.pin(a, [1, 2, 3])
    clock.now = 8.0
    leases.touch(a)
    assert leases.next_deadline_in() == pytest.approx(10.0)
    clock.now = 17.0
    assert leases.expire() == 0
    clock.now = 18.0
    with pytest.raises(SessionError, match="expired"):
        leases.touch(a)
    assert leases.expire() == 1 and tree.locked_size() == 0
    with pytest.raises(SessionError, match="not open"):
        leases.touch(a)
    leases.touch(b)
    assert leases.info()["sessions_expired"] == 1


def test_shed_releases_the_least_recently_called_pin_and_keeps_the_session():
    tree, leases, clock = make()
    a, b = leases.open(), leases.open()
    cache(tree, [1, 2])
    cache(tree, [5, 6])
    leases.pin(a, [1, 2])
    leases.pin(b, [5, 6])
    clock.now = 1.0
    leases.touch(a)
    assert leases.shed() and tree.locked_size() == 2
    assert tree.evict(100) == 2 and tree.total_size() == 2  # b's tokens went, a's stay
    assert leases.shed() and not leases.shed()
    assert leases.info()["open"] == 2 and leases.info()["pins_shed"] == 2


def test_bad_ids_and_timeouts_raise_session_errors():
    _, leases, _ = make()
    with pytest.raises(SessionError, match="already open"):
        leases.open(leases.open("x"))
    for bad in (0, -1, float("inf"), True, "5"):
        with pytest.raises(SessionError, match="timeout"):
            leases.open(ttl=bad)
    with pytest.raises(SessionError, match="non-empty string"):
        leases.open("")
    with pytest.raises(SessionError):
        leases.close("y")
    assert SessionError("m").param == "session_id"


def test_past_max_sessions_open_refuses_and_a_pin_restarts_the_ttl(monkeypatch):
    import furca.radix.leases as leases_module

    tree, leases, clock = make(ttl=10.0)
    monkeypatch.setattr(leases_module, "MAX_SESSIONS", 2)
    a, b = leases.open(), leases.open()
    with pytest.raises(leases_module.SessionLimitError, match="2 sessions are open"):
        leases.open()
    leases.close(b)
    leases.open()
    cache(tree, [4, 5, 6])
    clock.now = 9.0
    leases.pin(a, [4, 5, 6])  # a call of a ended at 9: the lease lives until 19
    clock.now = 15.0
    assert leases.expire() == 1  # the one opened at 0 and never called
    leases.touch(a)
