"""The router's approximate prefix tree: matching, edge splits, and bounded memory."""

from __future__ import annotations

import random

import pytest

from furca.router.prefix_tree import EVICT_TO, PrefixTree


def _naive_match(texts: list[str], query: str) -> int:
    best = 0
    for t in texts:
        n = 0
        while n < min(len(t), len(query)) and t[n] == query[n]:
            n += 1
        best = max(best, n)
    return best


def test_match_is_the_longest_common_prefix_with_any_inserted_text():
    rng = random.Random(0)
    tree, texts = PrefixTree(max_chars=10**9), []
    for _ in range(300):
        base = rng.choice(texts) if texts and rng.random() < 0.7 else ""
        text = base[:rng.randrange(len(base) + 1)] + "".join(rng.choice("abc") for _ in range(rng.randrange(1, 12)))
        tree.insert(text)
        texts.append(text)
        query = rng.choice(texts)[:rng.randrange(1, 20)] + rng.choice("abcd")
        assert tree.match(query) == _naive_match(texts, query)
    # size counts each distinct character position of the trie once
    prefixes = {t[:i] for t in texts for i in range(1, len(t) + 1)}
    assert tree.size == len(prefixes)


def test_split_keeps_both_branches():
    tree = PrefixTree(max_chars=1000)
    tree.insert("system: be brief. user: hi")
    tree.insert("system: be brief. user: bye")
    assert tree.match("system: be brief. user: hi there") == len("system: be brief. user: hi")
    assert tree.match("system: be brief. user: bye now") == len("system: be brief. user: bye")
    assert tree.match("system: be verbose") == len("system: be ")
    assert tree.size == len("system: be brief. user: hi") + len("bye")


def test_memory_is_bounded_and_the_least_recently_used_text_goes_first():
    tree = PrefixTree(max_chars=1000)
    old, hot = "A" * 300, "B" * 300
    tree.insert(old)
    tree.insert(hot)
    for i in range(20):
        tree.match(hot)  # keeps `hot` recent
        tree.insert(f"{i:03d}" + "C" * 200)
        assert tree.size <= 1000
    assert tree.match(hot) == 300
    assert tree.match(old) == 0
    assert tree.size <= 1000


def test_eviction_shrinks_leaves_before_shared_prefixes():
    tree = PrefixTree(max_chars=100)
    tree.insert("P" * 50 + "x" * 20)
    tree.insert("P" * 50 + "y" * 20)
    tree.insert("P" * 50 + "z" * 20)  # 110 chars: evicts the oldest leaf ("x...")
    assert tree.size <= int(100 * EVICT_TO)
    assert tree.match("P" * 50 + "z" * 20) == 70
    assert tree.match("P" * 50 + "x" * 20) == 50


def test_bad_bound_is_refused():
    with pytest.raises(ValueError, match="max_chars"):
        PrefixTree(max_chars=0)
