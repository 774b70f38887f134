"""Which replica a request goes to.

`CacheAware` decides as SGLang's router does (its cache-aware policy): while the load is
even, a prompt goes to the replica whose prefix tree holds the longest prefix of it, when
that prefix is more than ``cache_threshold`` of the prompt; otherwise to the replica whose
tree is smallest (the most room for a new prefix). The load is uneven when the busiest
replica has more than ``balance_abs_threshold`` requests in flight over the idlest *and*
more than ``balance_rel_threshold`` times its load; then the idlest replica gets the
request, whatever it caches. Either way the prompt is then recorded in the chosen
replica's tree. `RoundRobin` takes each healthy replica in turn.

Both see only `Replica` objects (``load``, ``tree``, ``index``) and a routing key (the
prompt text, possibly empty: such a request is routed by load alone and recorded nowhere).
"""

from __future__ import annotations

import itertools
from typing import Protocol, Sequence

from furca.router.config import RouterConfig
from furca.router.prefix_tree import PrefixTree


class Routable(Protocol):
    index: int
    load: int
    tree: PrefixTree


class CacheAware:
    def __init__(self, config: RouterConfig):
        self.config = config

    def uneven(self, replicas: Sequence[Routable]) -> bool:
        loads = [r.load for r in replicas]
        hi, lo = max(loads), min(loads)
        return hi - lo > self.config.balance_abs_threshold and hi > self.config.balance_rel_threshold * lo

    def pick(self, replicas: Sequence[Routable], key: str) -> Routable:
        """The replica for a request with routing key `key` (`replicas`: the healthy ones,
        at least one); records `key` in its tree."""
        key = key[:self.config.max_key_chars]
        least_loaded = min(replicas, key=lambda r: (r.load, r.tree.size, r.index))
        if not key or self.uneven(replicas):
            chosen = least_loaded
        else:
            matched = {r.index: r.tree.match(key) for r in replicas}
            best = max(replicas, key=lambda r: (matched[r.index], -r.load, -r.index))
            if matched[best.index] > self.config.cache_threshold * len(key):
                chosen = best
            else:
                chosen = min(replicas, key=lambda r: (r.tree.size, r.load, r.index))
        if key:
            chosen.tree.insert(key)
        return chosen


class RoundRobin:
    def __init__(self, config: RouterConfig):
        self._turn = itertools.count()

    def pick(self, replicas: Sequence[Routable], key: str) -> Routable:
        return replicas[next(self._turn) % len(replicas)]


def make_policy(config: RouterConfig) -> CacheAware | RoundRobin:
    return CacheAware(config) if config.policy == "cache_aware" else RoundRobin(config)
