"""Batched token sampling: penalties, min-new-tokens blocking, greedy / top-k / top-p /
min-p sampling with per-request generators, and logprobs.

One step, for the ``B`` rows that sample (``logits`` fp32 ``[B, V]``, already masked by
constraints)::

    raw       = logits                                  # the model's distribution
    logits    = repetition_penalty(logits, prompt + output tokens)      # HF semantics
    logits   -= frequency * count(output) + presence * (count(output) > 0)  # OpenAI
    logits[logit_bias ids] += logit_bias values        # OpenAI; -inf (masked) stays -inf
    logits[eos_ids] = -inf   while len(output) < min_new_tokens
    greedy rows:  argmax(logits)
    other rows:   x = logits / T;  top-k;  top-p (renormalised after top-k);
                  p = softmax(x);  min-p (drop p < min_p * max(p));
                  inverse CDF: first i with cumsum(p)[i] > u * sum(p), u ~ U[0, 1)
    logprob   = log_softmax(raw)[chosen]

Each sampled row consumes exactly one uniform. A row whose request has a seed draws it
from its own ``torch.Generator`` and always samples in vocabulary order (top-k / top-p
work in sorted order, then scatter back), so its tokens depend only on its own logits and
generator: same seed, prompt and parameters give the same output whatever else is in the
batch. Rows without a seed share the device's default generator. (The inverse CDF costs a
softmax and a cumsum; the Gumbel-max trick needs ``V`` random numbers per row, ~50x slower
on a CPU.)

All work is vectorised over rows and the vocabulary; the only Python loop runs over the
*seeded* rows (one ``torch.rand(1)`` each), and nothing syncs with the device unless top
logprobs are asked for. Work no row needs is skipped: an all-greedy batch without
penalties is one ``argmax`` plus the logprob gather; when every sampled row has a top-k,
``topk(k_max)`` replaces the full sort; with ``requested_logprobs_only`` the log-softmax
runs over the rows that ask for logprobs only. On a CPU the argmaxes of fp32 rows go
through numpy (`argmax_rows`). A constrained batch's rows are mostly ``-inf``; these two
are most of a greedy step's sampling cost there.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import chain
from typing import Sequence

import numpy as np
import torch

from furca.runtime.logprobs import logprobs_of_rows
from furca.runtime.sampling_params import SamplingParams

_NEG_INF = float("-inf")


def make_generator(seed: int | None, device: torch.device | str) -> torch.Generator | None:
    """The per-request generator the engine keeps for a seeded request (None without a seed).

    Create it once when the request is admitted and pass the same object every step.
    """
    if seed is None:
        return None
    g = torch.Generator(device=device)
    g.manual_seed(seed)
    return g


def terminating_token_ids(params: SamplingParams, model_eos_ids: Sequence[int]) -> tuple[int, ...]:
    """Token ids that end a request: ``stop_token_ids``, plus the model's EOS ids unless
    ``ignore_eos``. This is the per-row ``eos_ids`` ``SamplingBatch.build`` wants (blocked
    before ``min_new_tokens``) and what ``OutputTextState`` stops on.

    Unlike SGLang (where ``ignore_eos`` also disables ``stop_token_ids``), explicit
    ``stop_token_ids`` always stop, as in vLLM: the caller asked for them.
    """
    ids = dict.fromkeys(params.stop_token_ids)
    if not params.ignore_eos:
        ids.update(dict.fromkeys(model_eos_ids))
    return tuple(ids)


@dataclass
class SamplingBatch:
    """Per-step sampling state for ``B`` rows, built once per step by the scheduler.

    Tensors named ``*_s`` are indexed by sampled (non-greedy) row, ``sample_rows`` maps them
    to batch rows. Optional parts are None when no row needs them.
    """

    batch_size: int
    vocab_size: int
    device: torch.device
    is_all_greedy: bool
    sample_rows: torch.Tensor | None  # int64 [S]
    temperatures_s: torch.Tensor | None  # fp32 [S, 1]
    top_ks_s: torch.Tensor | None  # int64 [S, 1]; V where off
    top_k_max: int | None  # max top-k when every sampled row has one (then topk, not sort)
    top_ps_s: torch.Tensor | None  # fp32 [S, 1]; inf where off
    min_ps_s: torch.Tensor | None  # fp32 [S, 1]
    generators_s: list[torch.Generator | None]
    repetition: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None  # rows, ids, penalty [B,1]
    freq_presence: tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor] | None
    blocked: tuple[torch.Tensor, torch.Tensor] | None  # rows, ids set to -inf
    top_logprobs_nums: list[int]
    bias: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None  # rows, ids, logit_bias values
    logprob_rows: list[int] | None = None  # the rows whose logprobs are computed; None: every row

    @property
    def modifies_logits(self) -> bool:
        return any(x is not None for x in (self.repetition, self.freq_presence, self.blocked, self.bias))

    @classmethod
    def build(
        cls,
        params: Sequence[SamplingParams],
        output_ids: Sequence[Sequence[int]],
        generators: Sequence[torch.Generator | None],
        eos_ids: Sequence[Sequence[int]],
        vocab_size: int,
        device: torch.device | str,
        *,
        prompt_ids: Sequence[Sequence[int]] | None = None,
        requested_logprobs_only: bool = False,
    ) -> SamplingBatch:
        """Gather the ``B`` rows' parameters into tensors on ``device``.

        - ``output_ids[i]``: the tokens row ``i`` has generated so far (not the prompt).
        - ``generators[i]``: the request's ``make_generator(seed)`` (kept across steps), or None.
        - ``eos_ids[i]``: ``terminating_token_ids(params[i], model_eos)``; blocked while
          ``len(output_ids[i]) < min_new_tokens``.
        - ``prompt_ids[i]``: the prompt, needed only by rows with ``repetition_penalty != 1``
          (HF/vLLM semantics count prompt and output tokens); required when any row has one.
        - ``vocab_size``: the logits width ``V``; ids outside ``[0, V)`` are ignored.
        - ``requested_logprobs_only``: compute logprobs only for the rows whose params ask
          for them (``return_logprob`` or ``top_logprobs_num``); see `sample` for the
          others' value. The log-softmax over a whole row is the sampler's largest cost
          on a greedy batch (~3x its argmax over a masked row on a CPU).
        """
        n = len(params)
        if not (len(output_ids) == len(generators) == len(eos_ids) == n):
            raise ValueError("params, output_ids, generators and eos_ids must have one entry per row")
        device = torch.device(device)
        rows_s = [i for i in range(n) if not params[i].is_greedy]
        batch = cls(
            batch_size=n, vocab_size=vocab_size, device=device,
            is_all_greedy=not rows_s,
            sample_rows=None, temperatures_s=None, top_ks_s=None, top_k_max=None,
            top_ps_s=None, min_ps_s=None,
            generators_s=[generators[i] for i in rows_s],
            repetition=None, freq_presence=None, blocked=None,
            top_logprobs_nums=[p.top_logprobs_num for p in params],
        )
        if requested_logprobs_only:
            batch.logprob_rows = [i for i, p in enumerate(params) if p.return_logprob or p.top_logprobs_num > 0]
        if rows_s:
            ps = [params[i] for i in rows_s]
            col = lambda values, dtype: torch.tensor(values, dtype=dtype, device=device).view(-1, 1)  # noqa: E731
            batch.sample_rows = torch.tensor(rows_s, dtype=torch.int64, device=device)
            batch.temperatures_s = col([p.temperature for p in ps], torch.float32)
            if any(p.top_k > 1 and p.top_k < vocab_size for p in ps):
                ks = [p.top_k if 1 <= p.top_k < vocab_size else vocab_size for p in ps]
                batch.top_ks_s = col(ks, torch.int64)
                if max(ks) < vocab_size:
                    batch.top_k_max = max(ks)
            if any(p.top_p < 1 for p in ps):
                batch.top_ps_s = col([p.top_p if p.top_p < 1 else float("inf") for p in ps], torch.float32)
            if any(p.min_p > 0 for p in ps):
                batch.min_ps_s = col([p.min_p for p in ps], torch.float32)

        rep = [i for i in range(n) if params[i].repetition_penalty != 1.0]
        if rep:
            if prompt_ids is None:
                raise ValueError("SamplingBatch.build needs prompt_ids when a row has repetition_penalty != 1")
            seqs = [list(chain(prompt_ids[i], output_ids[i])) for i in rep]
            rows, ids = _pairs(rep, seqs, vocab_size, device)
            penalty = torch.ones(n, 1, dtype=torch.float32, device=device)
            penalty[rep, 0] = torch.tensor([params[i].repetition_penalty for i in rep], device=device)
            batch.repetition = (rows, ids, penalty)

        fp = [i for i in range(n) if params[i].frequency_penalty != 0 or params[i].presence_penalty != 0]
        if fp:
            rows, ids = _pairs(fp, [output_ids[i] for i in fp], vocab_size, device)
            freq = torch.zeros(n, 1, dtype=torch.float32, device=device)
            pres = torch.zeros(n, 1, dtype=torch.float32, device=device)
            freq[fp, 0] = torch.tensor([params[i].frequency_penalty for i in fp], device=device)
            pres[fp, 0] = torch.tensor([params[i].presence_penalty for i in fp], device=device)
            batch.freq_presence = (rows, ids, freq, pres)

        biased = [i for i in range(n) if params[i].logit_bias]
        if biased:
            rows, ids = _pairs(biased, [[t for t, _ in params[i].logit_bias] for i in biased], vocab_size, device)
            values = [b for i in biased for t, b in params[i].logit_bias if t < vocab_size]
            batch.bias = (rows, ids, torch.tensor(values, dtype=torch.float32, device=device))

        blk = [i for i in range(n) if len(output_ids[i]) < params[i].min_new_tokens and eos_ids[i]]
        if blk:
            batch.blocked = _pairs(blk, [eos_ids[i] for i in blk], vocab_size, device)
        return batch


@dataclass
class SampleOutput:
    next_token_ids: torch.Tensor  # int64 [B]
    logprobs: torch.Tensor  # fp32 [B]: log_softmax(raw logits)[next_token_ids]
    top_logprobs: list[list[tuple[float, int]]] | None  # per row (empty where not asked); None if no row asks
    is_dead_end: torch.Tensor  # bool [B]: no token survived the masks (see ``sample``)


def sample(logits: torch.Tensor, batch: SamplingBatch) -> SampleOutput:
    """Pick one token per row. ``logits``: fp32 ``[B, V]`` (constraint mask already applied,
    ``-inf`` where disallowed); it may be modified in place.

    Logprobs are those of the raw ``logits`` as passed in (the model's distribution after
    the constraint mask; before penalties, logit_bias, min-new-tokens blocking and
    temperature), as vLLM's default raw logprobs. A row outside ``batch.logprob_rows``
    gets NaN, or ``-inf`` where its chosen raw logit is ``-inf`` (nothing was allowed), so
    the dead-end test below reads the same with or without its logprob.

    Dead end: a row with no finite logit left after penalties and blocking does not raise.
    Its ``is_dead_end`` is True and its token is the argmax of the logits *as passed in*:
    when only ``min_new_tokens`` blocking emptied the row (a grammar that must end now),
    that is the model's best allowed token, typically EOS; when the constraint mask itself
    allowed nothing it is 0, with logprob ``-inf``. The caller decides (finish or abort).
    """
    if logits.dim() != 2 or tuple(logits.shape) != (batch.batch_size, batch.vocab_size):
        raise ValueError(
            f"logits must be [B={batch.batch_size}, V={batch.vocab_size}], got {tuple(logits.shape)}"
        )
    if logits.dtype != torch.float32:
        logits = logits.float()
    raw = logits.clone() if batch.modifies_logits else logits
    _apply_penalties(logits, batch)

    argmax_ids = argmax_rows(logits)
    next_ids = argmax_ids
    if not batch.is_all_greedy:
        rows = batch.sample_rows
        x = logits[rows] / batch.temperatures_s if rows.numel() < batch.batch_size else logits / batch.temperatures_s
        next_ids = argmax_ids.clone()
        next_ids[rows] = _sample_from(x, batch)

    # A live row never picks a -inf token (argmax and the inverse CDF both avoid them).
    is_dead_end = torch.isneginf(logits.gather(1, next_ids[:, None]).squeeze(1))
    fallback = argmax_rows(raw) if batch.modifies_logits else argmax_ids
    next_ids = torch.where(is_dead_end, fallback, next_ids)
    chosen, top = logprobs_of_rows(raw, next_ids, batch.top_logprobs_nums, batch.logprob_rows)
    return SampleOutput(next_ids, chosen, top, is_dead_end)


def argmax_rows(x: torch.Tensor) -> torch.Tensor:
    """``x.argmax(dim=-1)`` of a 2-D tensor (int64; the first maximum on ties, NaN counts
    as the maximum, 0 for an all ``-inf`` row). An fp32 CPU tensor goes through numpy,
    whose argmax is ~10x faster than torch's CPU kernel over a vocabulary-wide row (0.3 vs
    3.3 ms for 32 rows of 49k on one core) with the same answer."""
    if x.device.type == "cpu" and x.dtype == torch.float32 and x.dim() == 2 and x.shape[1] > 0 \
            and not x.requires_grad:
        return torch.from_numpy(x.numpy().argmax(axis=-1).astype(np.int64, copy=False))
    return x.argmax(dim=-1)


# -- internals ----------------------------------------------------------------------------


def _pairs(rows: list[int], seqs: Sequence[Sequence[int]], vocab_size: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """Flatten ``(row, token_id)`` pairs for index_put; drops ids outside ``[0, V)``."""
    lengths = torch.tensor([len(s) for s in seqs], dtype=torch.int64)
    r = torch.repeat_interleave(torch.tensor(rows, dtype=torch.int64), lengths)
    ids = torch.tensor(list(chain.from_iterable(seqs)), dtype=torch.int64)
    keep = (ids >= 0) & (ids < vocab_size)
    return r[keep].to(device), ids[keep].to(device)


def _apply_penalties(logits: torch.Tensor, b: SamplingBatch) -> None:
    if b.repetition is not None:
        rows, ids, penalty = b.repetition
        seen = torch.zeros_like(logits, dtype=torch.bool)
        seen[rows, ids] = True
        penalised = torch.where(logits > 0, logits / penalty, logits * penalty)
        torch.where(seen, penalised, logits, out=logits)
    if b.freq_presence is not None:
        rows, ids, freq, pres = b.freq_presence
        counts = torch.zeros_like(logits)
        counts.index_put_((rows, ids), torch.ones_like(ids, dtype=logits.dtype), accumulate=True)
        logits -= freq * counts + pres * (counts > 0)
    if b.bias is not None:
        rows, ids, values = b.bias
        logits.index_put_((rows, ids), values, accumulate=True)
    if b.blocked is not None:
        rows, ids = b.blocked
        logits[rows, ids] = _NEG_INF


def _sample_from(x: torch.Tensor, b: SamplingBatch) -> torch.Tensor:
    """One draw per row from softmax(x) after top-k, top-p, min-p. ``x``: [S, V], owned."""
    return _inverse_cdf(filtered_probs(x, b), _uniforms(b.generators_s, x.device))


def filtered_probs(x: torch.Tensor, b: SamplingBatch) -> torch.Tensor:
    """The distribution a sampled row draws from: softmax(x) after top-k, top-p and min-p
    (not renormalised after min-p). ``x``: the sampled rows' penalised logits divided by
    their temperatures, [S, V], owned (overwritten). Speculative verification
    (furca/runtime/speculative/rejection.py) accepts draft tokens against it."""
    if b.top_ks_s is not None or b.top_ps_s is not None:
        if b.top_k_max is not None:  # every row has a top-k: only its k_max best can survive
            sorted_x, order = x.topk(b.top_k_max, dim=-1, sorted=True)
        else:
            sorted_x, order = x.sort(dim=-1, descending=True, stable=True)
        if b.top_ks_s is not None:
            ranks = torch.arange(sorted_x.shape[-1], device=x.device)
            sorted_x.masked_fill_(ranks >= b.top_ks_s, _NEG_INF)
        if b.top_ps_s is not None:
            probs = sorted_x.softmax(dim=-1)  # renormalised over the top-k
            mass_before = probs.cumsum(dim=-1) - probs
            sorted_x.masked_fill_(mass_before >= b.top_ps_s, _NEG_INF)  # keeps the top token
        # Back to vocabulary order, so a seeded row's draw never depends on the path taken.
        x = x.fill_(_NEG_INF).scatter_(1, order, sorted_x)
    probs = x.softmax(dim=-1)
    if b.min_ps_s is not None:
        probs.masked_fill_(probs < probs.amax(dim=-1, keepdim=True) * b.min_ps_s, 0.0)
    return probs


def _inverse_cdf(probs: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Index ``i`` with ``cdf[i-1] <= u * total < cdf[i]``: never a zero-probability token.
    ``probs`` need not be normalised. One uniform per row, no device sync."""
    cdf = probs.cumsum(dim=-1)
    total = cdf[:, -1:]
    target = torch.minimum(u.view(-1, 1) * total, torch.nextafter(total, torch.zeros_like(total)))
    idx = torch.searchsorted(cdf, target, right=True).clamp_(max=probs.shape[-1] - 1)
    # A parallel scan may step up across a zero-probability token; never return one.
    is_zero = probs.gather(1, idx) <= 0
    return torch.where(is_zero, argmax_rows(probs).view(-1, 1), idx).squeeze(1)


def _uniforms(generators: list[torch.Generator | None], device: torch.device) -> torch.Tensor:
    """One U[0, 1) per row: from the row's own generator if it has one, else the default."""
    u = torch.rand(len(generators), device=device)
    for j, g in enumerate(generators):
        if g is not None:
            u[j] = torch.rand(1, generator=g, device=device)[0]
    return u
