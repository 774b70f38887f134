"""Radix-tree prefix cache: token ids -> KV slot indices (a leaf: imports only furca.errors)."""

from furca.radix.radix_cache import MatchResult, Node, RadixCache, RadixCacheError

__all__ = ["MatchResult", "Node", "RadixCache", "RadixCacheError"]
