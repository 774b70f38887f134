"""Radix-tree prefix cache: token ids -> KV slot indices and the sessions that pin it (a leaf: imports only furca.errors)."""

from furca.radix.leases import Lease, LeaseTable, SessionError, SessionLimitError
from furca.radix.radix_cache import MatchResult, Node, RadixCache, RadixCacheError

__all__ = ["Lease", "LeaseTable", "MatchResult", "Node", "RadixCache", "RadixCacheError", "SessionError",
           "SessionLimitError"]
