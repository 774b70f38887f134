"""Verification of one draft token against the target model's row of logits.

Greedy rows: the target's token is the normal sampler's (`furca.runtime.sampler.sample`
on the same row), and the draft token is accepted when it is that token, so greedy
output is the non-speculative output.

Sampled rows (temperature > 0): the draft is a point mass on token ``d`` (n-gram
drafting proposes one token with certainty), so speculative sampling (Leviathan et al.
2023; Chen et al. 2023) reduces to: accept ``d`` with probability ``p(d)``; on rejection
draw from ``p`` with ``d`` removed, renormalised (the residual ``max(p - q, 0)`` for
``q = onehot(d)``). The token is then distributed exactly as ``p``. ``p`` is the
distribution the normal sampler draws from: the row after the grammar mask, penalties,
logit_bias, min-new-tokens blocking, temperature, top-k, top-p and min-p
(`furca.runtime.sampler.filtered_probs`). Each uniform comes from the request's own
generator when it has a seed, as the sampler's do.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from furca.runtime.logprobs import logprobs_of_rows
from furca.runtime.sampler import SamplingBatch, _apply_penalties, _inverse_cdf, _uniforms, filtered_probs, sample


class Verdict(NamedTuple):
    token: int
    logprob: float  # of the raw (masked) row, as the sampler reports it
    top: list | None  # top logprobs, when asked
    is_dead_end: bool  # no token was allowed (see `sample`)
    accepted: bool  # token is the draft token


def residual(probs: torch.Tensor, draft: int) -> torch.Tensor:
    """What a rejected point-mass draft leaves to draw from: ``probs`` without ``draft``
    (``probs``: [V], unnormalised; returned unnormalised, a new tensor)."""
    out = probs.clone()
    out[draft] = 0.0
    return out


def verify_row(x: torch.Tensor, batch: SamplingBatch, draft: int | None) -> Verdict:
    """The next token from row ``x`` (fp32 ``[1, V]``, grammar mask applied, owned: it is
    written into) of a one-row ``batch``, checking ``draft`` against it (None: sample
    as usual, e.g. the bonus token after an accepted draft)."""
    if draft is None or batch.is_all_greedy:
        out = sample(x, batch)
        token = int(out.next_token_ids[0])
        dead = bool(out.is_dead_end[0])
        top = out.top_logprobs[0] if out.top_logprobs else None
        return Verdict(token, float(out.logprobs[0]), top, dead, draft == token and not dead)
    raw = x.clone()
    _apply_penalties(x, batch)
    if bool(torch.isneginf(x).all()):  # a dead end: the sampler's fallback decides
        return verify_row(raw, batch, None)
    probs = filtered_probs(x / batch.temperatures_s, batch)[0]
    total = float(probs.sum())
    u = float(_uniforms(batch.generators_s, x.device)[0])
    accepted = u * total < float(probs[draft])
    if accepted:
        token = draft
    else:
        rest = residual(probs, draft)
        token = int(_inverse_cdf(rest.view(1, -1), _uniforms(batch.generators_s, x.device))[0])
    chosen, top = logprobs_of_rows(raw, torch.tensor([token], device=raw.device), batch.top_logprobs_nums,
                                   batch.logprob_rows)
    return Verdict(token, float(chosen[0]), top[0] if top else None, False, accepted)
