"""`Speculator`: the scheduler's and postprocessor's hooks for speculative decoding.

A step with speculation (the scheduler calls `propose` after scheduling, the
postprocessor calls `verify` with the logits)::

    propose   each decoding request (one token to compute, output begun) may get a draft:
              up to ``state.length`` tokens from the proposer (its n-gram index, or
              the draft model: proposers.py), cut to its
              max_new_tokens - 1, the free KV slots and the context; a constrained
              request's draft is cut at the first token its matcher rejects (the matcher
              is rolled back at once). The item then computes its last token + the draft
              (``ScheduledReq.draft``; one extend pass for the whole mixed batch).
    verify    row j of the item scores draft[j] (row 0 follows the last token); tokens
              are taken in order through the postprocessor's normal append (grammar
              accept, detokenizer, stop strings, EOS, max_new_tokens, jump-forward),
              each from its row after the mask of the matcher's current state
              (`rejection.verify_row`). It stops after the first token that is not the
              draft token, at the request's end, or when jump-forward appended; after
              a fully accepted draft the last row gives one more token. So the matcher
              holds exactly the accepted tokens, and the output is what decoding token
              by token gives (the same tokens when greedy, the same distribution when
              sampled).
    KV        positions ``start + 1 + accepted`` onwards hold rejected draft tokens:
              ``kv.rollback_to`` moves there and the `CacheManager` frees their slots
              after the step (`rollback_kv`), before any finished request is cached.

The n-gram index and the adaptive draft length live in ``req.spec`` (`SpecState`); a
draft model's KV follows the kept tokens (``proposer.after_verify``).
Runs on the scheduler thread only.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from furca.runtime.batch_builder import ScheduledReq
from furca.runtime.request import Req
from furca.runtime.sampler import SamplingBatch, terminating_token_ids
from furca.runtime.speculative.ngram import NgramIndex
from furca.runtime.speculative.rejection import verify_row
from furca.runtime.speculative.state import SpecState


class Speculator:
    """Drafts of at most ``max_draft`` tokens per request and step from ``proposer``
    (proposers.py); n-gram indexes (``req.spec.index``) over suffix matches of ``min_n``
    to ``max_n`` tokens when ``ngram``; a target of ``vocab_size``. Its counters
    (``spec_verify_ct``, ``spec_draft_tokens``, ``spec_accepted_tokens``) are kept in
    ``stats`` (the scheduler's)."""

    def __init__(self, proposer, max_draft: int, min_n: int, max_n: int, vocab_size: int, stats: dict, *,
                 ngram: bool = True):
        self.proposer, self.ngram = proposer, ngram
        self.max_draft, self.min_n, self.max_n, self.vocab_size = max_draft, min_n, max_n, vocab_size
        self.step_extra = 0  # tokens this step's verifications appended beyond one per request
        self.stats = stats
        for key in ("spec_verify_ct", "spec_draft_tokens", "spec_accepted_tokens"):
            stats.setdefault(key, 0)

    # -- before the forward pass ---------------------------------------------------------

    def propose(self, items: Sequence[ScheduledReq], spare: int, context: int, masks,
                running: Sequence[Req]) -> None:
        """Give drafts to the decoding ``items`` (in place: ``draft`` and ``num_new``),
        using at most ``spare`` KV slots beyond the step's, never past position
        ``context``. ``masks`` (the `MaskFiller`) gives up a constrained request's mask
        fill before its matcher is moved. ``running``: the scheduler's running requests
        (the proposer gives up the state of the others)."""
        self.step_extra = 0
        self.proposer.release_stale(running)
        wants: list[tuple[ScheduledReq, int]] = []
        for it in items:
            if spare <= 0:
                break
            req = it.req
            if it.num_new != 1 or it.start < req.prompt_len or it.end != req.fill_len or req.is_finished \
                    or req.first_output_logprob_position is not None:
                continue
            state = self._state(req)
            if state.cooldown > 0:
                state.cooldown -= 1
                continue
            k = min(state.length, req.remaining_new_tokens - 1, spare, context - it.end)
            if k <= 0:
                continue
            wants.append((it, k))
            spare -= k
        if not wants:
            return
        drafts = self.proposer.propose([(it.req, k) for it, k in wants])
        for (it, k), draft in zip(wants, drafts):
            req = it.req
            bad = next((i for i, t in enumerate(draft) if not 0 <= t < self.vocab_size), len(draft))
            draft = draft[: min(bad, k)]
            if draft and req.grammar is not None:
                draft = self._grammar_prefix(req, draft, masks)
            if draft:
                it.draft = draft
                it.num_new += len(draft)
            else:
                self.proposer.after_verify(req, it.start, 0)  # nothing to verify: drop what was drafted

    def check_memory(self, running: Sequence[Req], *, idle: bool) -> None:
        """The proposer's own KV accounting (a draft model's pool)."""
        self.proposer.check_memory(running, idle=idle)

    def _state(self, req: Req) -> SpecState:
        state = req.spec
        if state is None:
            index = NgramIndex(self.min_n, self.max_n) if self.ngram else None
            state = req.spec = SpecState(index, self.max_draft)
        if state.index is not None and req.jump.dropped_tokens != state.dropped_seen:
            state.dropped_seen = req.jump.dropped_tokens  # jump-forward re-tokenized output
            state.index.rebuild()
        return state

    @staticmethod
    def _grammar_prefix(req: Req, draft: list[int], masks) -> list[int]:
        """The longest prefix of ``draft`` that ``req``'s matcher accepts; the matcher is
        left as it was."""
        g = req.grammar
        if not hasattr(g, "rollback"):
            return []
        masks.discard(req)  # no fill may read the matcher while it moves
        n = 0
        for t in draft:
            if not g.accept_token(t):
                break
            n += 1
        g.rollback(n)  # also clears the error state a rejected token set
        return draft[:n]

    # -- after the forward pass ----------------------------------------------------------

    def verify(self, post, items: Sequence[ScheduledReq], logits: torch.Tensor, failed: list) -> list[Req]:
        """Verify the draft ``items`` of a step (see the module docstring) with the
        `Postprocessor` ``post``; returns the requests that finished, appends those that
        failed to ``failed`` as ``post`` does."""
        finished = []
        for it in items:
            try:
                if self._verify_one(post, it, logits):
                    finished.append(it.req)
            except Exception as e:  # noqa: BLE001 - fails this request only (unless fatal)
                failed.append(post._failure(it.req, post._stage or "speculative verification", e))
        return finished

    def _verify_one(self, post, it: ScheduledReq, logits: torch.Tensor) -> bool:
        req, draft = it.req, it.draft
        accepted, appended, done = 0, 0, False
        for j in range(len(draft) + 1):
            post._stage = "speculative verification"
            x = logits[it.logit_offset + j : it.logit_offset + j + 1].float().clone()
            if req.grammar is not None:
                post._stage = "grammar matcher"
                post.mask_row_(req, x)
            params = req.params
            batch = SamplingBatch.build(
                [params], [req.output_ids], [req.generator], [terminating_token_ids(params, post.eos_ids)],
                x.shape[-1], x.device, prompt_ids=[req.origin_input_ids] if params.repetition_penalty != 1.0 else None,
                requested_logprobs_only=True)
            v = verify_row(x, batch, draft[j] if j < len(draft) else None)
            before = len(req.output_ids)
            done = post._append(req, v.token, v.logprob, v.top, v.is_dead_end)
            appended += 1
            accepted += v.accepted
            if not v.accepted or req.is_finished or len(req.output_ids) != before + 1:
                break
        keep = it.start + 1 + accepted  # positions from here hold rejected draft tokens
        kv = req.kv
        if keep < kv.kv_len:
            kv.rollback_to = keep if kv.rollback_to is None else min(kv.rollback_to, keep)
        self.proposer.after_verify(req, it.start, accepted)
        self._state(req).record(len(draft), accepted)
        self.step_extra += appended - 1
        self.stats["spec_verify_ct"] += 1
        self.stats["spec_draft_tokens"] += len(draft)
        self.stats["spec_accepted_tokens"] += accepted
        return done
