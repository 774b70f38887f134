"""Log-softmax at chosen tokens plus per-row top-k: the logprobs of sampled tokens
(`sampler.sample`, through `logprobs_of_rows`), of prompt tokens and of jump-forward
tokens (`postprocess`)."""

from __future__ import annotations

from typing import Sequence

import torch

_NEG_INF = float("-inf")


def compute_logprobs(
    logits: torch.Tensor, token_ids: torch.Tensor, top_k_per_row: Sequence[int]
) -> tuple[torch.Tensor, list[list[tuple[float, int]]] | None]:
    """Log-softmax of ``logits`` (``[N, V]``) at ``token_ids`` (``[N]``) and, per row, the
    ``top_k_per_row[i]`` most likely ``(logprob, token_id)`` pairs, best first.

    Also used for prompt logprobs; ``[N, V]`` fp32 is materialised, so the caller chunks
    long prompts. Rows whose logits are all ``-inf`` get ``-inf`` (never NaN). ``top`` is
    None when every entry of ``top_k_per_row`` is 0; otherwise rows with 0 get ``[]``.
    """
    logits = logits.float()
    # log_softmax reduces every row alone, in the same order for one row or 64, so a row's
    # logprobs do not depend on the batch (deterministic engines need that bitwise);
    # logsumexp does not: its sum over a lone row is split differently.
    lp = torch.log_softmax(logits, dim=-1)
    chosen = lp.gather(1, token_ids.view(-1, 1).long()).squeeze(1)
    chosen = torch.where(torch.isneginf(logits.amax(dim=-1)), torch.full_like(chosen, _NEG_INF), chosen)
    k_max = min(max(top_k_per_row, default=0), logits.shape[-1])
    if k_max <= 0:
        return chosen, None
    rows = [i for i, k in enumerate(top_k_per_row) if k > 0]
    _, ids = logits[rows].topk(k_max, dim=-1)
    vals = lp[rows].gather(1, ids).tolist()
    ids = ids.tolist()
    top: list[list[tuple[float, int]]] = [[] for _ in top_k_per_row]
    for j, i in enumerate(rows):
        k = top_k_per_row[i]
        top[i] = list(zip(vals[j][:k], ids[j][:k]))
    return chosen, top


def logprobs_of_rows(
    raw: torch.Tensor, token_ids: torch.Tensor, top_k_per_row: Sequence[int], rows: Sequence[int] | None
) -> tuple[torch.Tensor, list[list[tuple[float, int]]] | None]:
    """`compute_logprobs` over ``rows`` of ``raw`` only (every row when None). The other
    rows get NaN, or ``-inf`` where ``raw`` at their token is ``-inf`` (a row where nothing
    was allowed gets ``-inf`` either way); their top entries are ``[]``."""
    n = raw.shape[0]
    if rows is None or len(rows) == n:
        return compute_logprobs(raw, token_ids, top_k_per_row)
    picked = raw.gather(1, token_ids.view(-1, 1).long()).squeeze(1).float()
    chosen = torch.where(torch.isneginf(picked), picked, torch.full_like(picked, float("nan")))
    if not rows:
        return chosen, None
    index = torch.tensor(list(rows), dtype=torch.int64, device=raw.device)
    part, part_top = compute_logprobs(raw.index_select(0, index), token_ids.index_select(0, index),
                                      [top_k_per_row[i] for i in rows])
    chosen.index_copy_(0, index, part)
    if part_top is None:
        return chosen, None
    top: list[list[tuple[float, int]]] = [[] for _ in range(n)]
    for j, i in enumerate(rows):
        top[i] = part_top[j]
    return chosen, top
