"""Which waiting requests to admit this step, in what order, and whether they fit.

Order (`order_waiting`): retracted requests first (they already waited), then by policy:
``lpm`` sorts by longest radix-cache match (FCFS among equals, and plain FCFS past 128
waiting requests, as SGLang does); ``fcfs`` keeps arrival order.

In-batch prefix sharing (`InBatchDedup`): a request is deferred one step when a request
admitted in this step already covers what it could share (its tree match is short but
>= `min_shared` tokens, or its whole shareable prompt, are common with an admitted one).
Next step it matches those tokens in the tree, so a shared prefix is computed once:
this is also how the `n` samples of one prompt share its KV.

Admission (`fits`): a request is admitted when its extend tokens plus a reserve for
its decode (``min(max_new_tokens, clip) * new_token_ratio``) fit in free + evictable
KV after what running requests have reserved.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch

from furca.radix.radix_cache import RadixCache
from furca.runtime.request import Req

LPM_MAX_WAITING = 128


def order_waiting(waiting: Iterable[Req], policy: str, tree: RadixCache) -> list[Req]:
    reqs = list(waiting)
    retracted = [r for r in reqs if r.num_retractions]
    fresh = [r for r in reqs if not r.num_retractions]
    if policy == "lpm" and not tree.disabled and 1 < len(fresh) <= LPM_MAX_WAITING:
        lens = {id(r): tree.match_prefix(r.tokens(0, r.max_prefix_len)).prefix_len for r in fresh}
        fresh.sort(key=lambda r: -lens[id(r)])  # stable: FCFS among equal matches
    return retracted + fresh


class InBatchDedup:
    """Prompts admitted this step (and prefills still in progress), as a throwaway
    radix tree (slot values unused)."""

    def __init__(self, min_shared: int, enabled: bool):
        self.min_shared = min_shared
        self.enabled = enabled
        self._tree = RadixCache(lambda slots: None) if enabled else None

    def should_defer(self, req: Req, tree_match_len: int) -> bool:
        if not self.enabled:
            return False
        limit = req.max_prefix_len
        shared = self._tree.match_prefix(req.tokens(0, limit)).prefix_len
        gain = shared - tree_match_len
        return gain > 0 and (gain >= self.min_shared or shared >= limit)

    def add(self, req: Req) -> None:
        if self.enabled:
            ids = req.tokens(0, req.fill_len)
            self._tree.insert(ids, torch.zeros(len(ids), dtype=torch.int64))


def decode_reserve(req: Req, ratio: float, clip: int) -> int:
    """Tokens to keep free for the rest of this request's decode."""
    return math.ceil(min(req.remaining_new_tokens, clip) * ratio)
