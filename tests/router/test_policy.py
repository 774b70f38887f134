"""Routing policies on replica stand-ins (the policy reads only index, load and tree)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from furca.errors import ConfigError
from furca.router.config import RouterConfig
from furca.router.keys import routing_key
from furca.router.policy import CacheAware, RoundRobin
from furca.router.prefix_tree import PrefixTree


@dataclass(eq=False)
class R:
    index: int
    load: int = 0
    tree: PrefixTree = field(default_factory=lambda: PrefixTree(1 << 20))


def _programs(n: int = 4, length: int = 400) -> list[str]:
    return [f"program {p}: " + " ".join(f"fact{p}-{i}" for i in range(length // 8)) for p in range(n)]


def test_cache_aware_keeps_each_prefix_on_one_replica_and_spreads_the_prefixes():
    policy, replicas = CacheAware(RouterConfig()), [R(0), R(1)]
    prefixes = _programs()
    placed: dict[int, set[int]] = {p: set() for p in range(4)}
    order = [0, 1, 2, 3, 1, 0, 3, 2, 2, 0, 1, 3]
    for turn, p in enumerate(order):
        chosen = policy.pick(replicas, prefixes[p] + f" question {turn}?")
        placed[p].add(chosen.index)
    assert all(len(v) == 1 for v in placed.values()), placed
    assert {next(iter(v)) for v in placed.values()} == {0, 1}  # both replicas get prefixes


def test_round_robin_splits_the_same_prefixes():
    policy, replicas = RoundRobin(RouterConfig(policy="round_robin")), [R(0), R(1)]
    prefixes = _programs()
    placed: dict[int, set[int]] = {p: set() for p in range(4)}
    for turn, p in enumerate([0, 1, 2, 3, 1, 0, 3, 2]):
        placed[p].add(policy.pick(replicas, prefixes[p] + f" q{turn}").index)
    assert all(len(v) == 2 for v in placed.values()), placed


def test_uneven_load_sends_to_the_idlest_replica_whatever_it_caches():
    config = RouterConfig(balance_abs_threshold=4, balance_rel_threshold=1.5)
    policy, replicas = CacheAware(config), [R(0), R(1)]
    first, second = _programs(2)
    home = policy.pick(replicas, first)
    other = replicas[1 - home.index]
    home.load = 5  # 5 - 0 > 4 and 5 > 1.5 * 0: uneven
    assert policy.pick(replicas, first + " again") is other
    home.load = 0
    home2 = policy.pick(replicas, second)
    home2.load = 4  # 4 - 0 is within the absolute threshold: the cache wins
    assert policy.pick(replicas, second + " once more") is home2
    # 6 - 3 > 2, but 6 <= 2.5 * 3: even by the relative rule, so the cache wins
    home2.load, replicas[1 - home2.index].load = 6, 3
    relaxed = CacheAware(RouterConfig(balance_abs_threshold=2, balance_rel_threshold=2.5))
    assert relaxed.pick(replicas, second + "!") is home2
    assert relaxed.uneven(replicas) is False and CacheAware(RouterConfig(balance_abs_threshold=2,
                                                                        balance_rel_threshold=1.5)).uneven(replicas)


def test_a_short_match_goes_to_the_smallest_tree():
    policy, replicas = CacheAware(RouterConfig(cache_threshold=0.5)), [R(0), R(1)]
    replicas[0].tree.insert("x" * 1000)
    replicas[1].tree.insert("common start " + "y" * 10)
    # matches 13 chars on replica 1 (< half the prompt): goes to the smaller tree, replica 1
    assert policy.pick(replicas, "common start " + "z" * 100).index == 1
    replicas[1].tree.insert("w" * 5000)
    assert policy.pick(replicas, "unrelated " * 20).index == 0


def test_an_empty_key_is_routed_by_load_and_recorded_nowhere():
    policy, replicas = CacheAware(RouterConfig()), [R(0, load=3), R(1, load=1)]
    assert policy.pick(replicas, "").index == 1
    assert replicas[0].tree.size == replicas[1].tree.size == 0


@pytest.mark.parametrize("path, body, key", [
    ("/v1/chat/completions", {"messages": [{"role": "system", "content": "S"},
                                           {"role": "user", "content": [{"type": "text", "text": "U"}]}]},
     "<system>S\n<user>U\n"),
    ("/v1/completions", {"prompt": "abc"}, "abc"),
    ("/v1/completions", {"prompt": ["first", "second"]}, "first"),
    ("/generate", {"text": "hello"}, "hello"),
    ("/generate", {"input_ids": [[1, 2], [3]]}, "1 2"),
    ("/generate", {"input_ids": [5, 6, 7]}, "5 6 7"),
    ("/v1/chat/completions", {"messages": "not a list"}, ""),
    ("/generate", ["not", "a", "dict"], ""),
])
def test_routing_key(path, body, key):
    assert routing_key(path, body) == key


@pytest.mark.parametrize("kwargs, word", [
    ({"workers": ("localhost:1",)}, "workers"), ({"workers": ("http://a", "http://a/")}, "distinct"),
    ({"policy": "random"}, "policy"), ({"cache_threshold": 1.5}, "cache_threshold"),
    ({"balance_rel_threshold": 0.5}, "balance_rel_threshold"), ({"max_tree_chars": 0}, "max_tree_chars"),
    ({"health_interval": 0}, "health_interval"),
])
def test_config_is_validated(kwargs, word):
    with pytest.raises(ConfigError, match=word):
        RouterConfig(**kwargs)


def test_the_router_loads_no_runtime_and_no_torch():
    import subprocess
    import sys

    code = ("import sys, furca.router.app, furca.router.launch; "
            "bad = [m for m in sys.modules if m == 'torch' or m.startswith(('furca.runtime', 'furca.server'))]; "
            "print(bad)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
