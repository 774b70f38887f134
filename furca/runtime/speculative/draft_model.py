"""Draft-model proposals (``speculative_algorithm="draft"``): a smaller model sharing the
target's tokenizer proposes tokens greedily, with its own KV pool and radix cache.

Each drafting request has a `DraftSide`: its row in the draft model's `CacheManager`
(``side.kv``, a `KVRegion` of the draft pool) over the same tokens as the request (its
``fill``). One `propose` call, for the requests of a step that draft:

1. admit new sides (radix match in the draft tree, a row), give up sides whose request is
   gone (finished, aborted, failed or retracted: their KV goes to the draft tree);
2. one forward pass of the draft model computes each side's missing tokens
   ``fill[side.kv_len:]`` (the whole prompt the first time, after a cache hit the rest;
   later the one or two tokens the target appended) and picks ``d0`` (argmax);
3. ``k - 1`` one-token passes pick ``d1 ..``, writing the KV of ``d0 .. d(k-2)``.

Draft tokens are argmaxes, so the proposal is a point mass and `rejection.verify_row`'s
rule is exact. After verification `after_verify` keeps the draft KV of the accepted draft
tokens and rolls the rest back (`CacheManager.rollback_kv` of the draft pool), so the draft
pool's invariant (each slot free, in the draft tree, or a side's) holds between steps.
When jump-forward re-tokenized a request's output (``req.jump.dropped_tokens`` moved),
its side's KV goes back to the tokens that can never change (``jump.floor``), so the
draft pool never keeps (or caches) KV of tokens the request no longer has.
Runs on the scheduler thread only.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from furca.runtime.cache_manager import CacheManager
from furca.runtime.forward_batch import ForwardBatch
from furca.runtime.request import KVRegion, Req
from furca.runtime.sampler import argmax_rows


class DraftSide:
    """A request as the draft pool's `CacheManager` sees it: its own `KVRegion` over the
    request's tokens."""

    __slots__ = ("req", "kv", "rid", "session_id", "dropped_seen")

    def __init__(self, req: Req):
        self.req, self.kv, self.rid, self.session_id = req, KVRegion(), req.rid, None
        self.dropped_seen = req.jump.dropped_tokens  # jump-forward's re-tokenized tokens, as last seen

    def tokens(self, start: int, end: int) -> list[int]:
        return self.req.tokens(start, end)

    @property
    def fill_len(self) -> int:
        return self.req.fill_len

    @property
    def max_prefix_len(self) -> int:
        return max(self.req.fill_len - 1, 0)  # the last token is computed: its logits draft d0


class DraftModelProposer:
    """Greedy drafts from ``loaded`` (a `LoadedModel` on ``device``) with a pool of
    ``capacity`` tokens, at most ``max_rows`` requests of ``context`` tokens; logits
    beyond ``vocab_size`` (the target's width) are ignored."""

    def __init__(self, loaded, capacity: int, max_rows: int, context: int, vocab_size: int, attn_backend: str,
                 device):
        from furca.runtime.attention.registry import make_attention_backend
        from furca.runtime.kv_cache import KVCache
        from furca.runtime.model_runner import kv_cache_dtype

        cfg = loaded.config
        self.model = loaded.model
        self.device = device
        self.vocab_size = min(int(vocab_size), int(cfg.vocab_size))
        self.kv_cache = KVCache(capacity + 1, cfg.num_hidden_layers, cfg.num_key_value_heads, cfg.head_dim,
                                kv_cache_dtype("auto", loaded.model), device)
        self.attn_backend = make_attention_backend(attn_backend, device)
        self.cache = CacheManager(capacity, max_rows, context, device)
        self.sides: dict[Req, DraftSide] = {}

    # -- lifecycle --------------------------------------------------------------------------

    def release_stale(self, running: Sequence[Req]) -> None:
        """Give up the sides of requests no longer running (their KV goes to the draft tree)."""
        live = set(running)
        for req in [r for r in self.sides if r not in live or r.kv.row is None or r.is_finished]:
            side = self.sides.pop(req)
            self._sync(side)
            self.cache.cache_req(side, finished=True)

    def check_memory(self, running: Sequence[Req], *, idle: bool) -> None:
        """The draft pool's `CacheManager.check_memory` (stale sides given up first)."""
        self.release_stale(running)
        self.cache.check_memory(list(self.sides.values()), idle=idle)

    # -- a step -----------------------------------------------------------------------------

    @torch.inference_mode()
    def propose(self, wants: Sequence[tuple[Req, int]]) -> list[list[int]]:
        """Greedy drafts of ``k`` tokens for each ``(req, k)`` (``k >= 1``); a request the
        draft pool has no room or row for gets []."""
        drafts: list[list[int]] = [[] for _ in wants]
        sides, ks, rows = [], [], []
        budget = self.cache.available()
        for i, (req, k) in enumerate(wants):
            side = self.sides.get(req) or self._admit(req)
            if side is None:
                continue
            self._sync(side)
            need = side.fill_len - side.kv.kv_len + k - 1
            if need > budget:
                continue
            budget -= need
            sides.append(side)
            ks.append(k)
            rows.append(i)
        if not sides:
            return drafts
        # catch-up pass: each side's missing tokens, d0 from its last row
        last = self._forward([(s, s.kv.kv_len, s.tokens(s.kv.kv_len, s.fill_len)) for s in sides])
        for j, s in enumerate(sides):
            s.kv.kv_len = s.fill_len
            drafts[rows[j]].append(last[j])
        for step in range(1, max(ks)):
            active = [j for j, k in enumerate(ks) if k > step]
            picks = self._forward([(sides[j], sides[j].kv.kv_len, [drafts[rows[j]][-1]]) for j in active])
            for j, t in zip(active, picks):
                sides[j].kv.kv_len += 1
                drafts[rows[j]].append(t)
        return drafts

    def _admit(self, req: Req) -> DraftSide | None:
        if not self.cache.has_free_row():
            return None
        side = DraftSide(req)
        match = self.cache.match_prefix(side)
        self.cache.lock(match)
        self.cache.admit(side, match)
        self.sides[req] = side
        return side

    def _forward(self, work: list[tuple[DraftSide, int, list[int]]]) -> list[int]:
        """One draft-model pass: side ``s`` computes ``ids`` at positions ``start ..``;
        returns the argmax after each side's last token."""
        slots = self.cache.alloc(sum(len(ids) for _, _, ids in work))
        table = self.cache.table
        input_ids, positions, kv_parts, logit_rows, pos = [], [], [], [], 0
        for s, start, ids in work:
            end = start + len(ids)
            table[s.kv.row, start:end] = slots[pos : pos + len(ids)]
            pos += len(ids)
            input_ids.extend(ids)
            positions.extend(range(start, end))
            kv_parts.append(table[s.kv.row, :end])
            logit_rows.append(pos - 1)
        batch = ForwardBatch.build(
            prefix_lens=[start for _, start, _ in work], qo_lens=[len(ids) for _, _, ids in work],
            kv_indices=torch.cat(kv_parts), out_cache_loc=slots, logits_indices=torch.tensor(logit_rows),
            kv_cache=self.kv_cache, attn_backend=self.attn_backend, device=self.device)
        logits = self.model(torch.tensor(input_ids, device=self.device), torch.tensor(positions, device=self.device),
                            batch)
        return argmax_rows(logits[:, : self.vocab_size].float().contiguous()).tolist()

    def after_verify(self, req: Req, start: int, accepted: int) -> None:
        """The target kept ``accepted`` draft tokens from position ``start + 1`` on (0 when
        the draft was dropped before verification): the draft KV of accepted draft tokens
        stays, the rest is rolled back (also below where the target rolled its own KV
        back: jump-forward)."""
        side = self.sides.get(req)
        if side is None:
            return
        keep = start + 1 + accepted
        if req.kv.rollback_to is not None:
            keep = min(keep, req.kv.rollback_to)
        self._roll_back(side, min(keep, req.fill_len - 1))

    def _sync(self, side: DraftSide) -> None:
        """After jump-forward re-tokenized the request's output, keep only the KV of tokens
        that never change (before ``jump.floor``)."""
        req = side.req
        if side.dropped_seen != req.jump.dropped_tokens:
            side.dropped_seen = req.jump.dropped_tokens
            self._roll_back(side, req.prompt_len + req.jump.floor)

    def _roll_back(self, side: DraftSide, keep: int) -> None:
        if keep < side.kv.kv_len:
            side.kv.rollback_to = keep
            self.cache.rollback_kv(side)
