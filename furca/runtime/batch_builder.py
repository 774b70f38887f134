"""Turn a step's scheduled work into the flat tensors of one forward pass.

Each scheduled request computes ``fill[start : start + num_new]`` (a prefill chunk, or
the one token sampled last). Its KV for those positions already has slots in
``req_to_token[row, start : start + num_new]``. Logits are computed only for the rows
that need them: the last row when the request samples next, plus the rows whose next
token is a prompt token, or a forced output token (jump-forward), whose logprob was
asked for.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from furca.runtime.forward_batch import ForwardBatch
from furca.runtime.request import Req


@dataclass
class ScheduledReq:
    req: Req
    start: int  # kv.kv_len before this step
    num_new: int
    logit_positions: list[int] = field(default_factory=list)  # absolute positions, ascending
    samples: bool = False  # the row of position start + num_new - 1 picks the next token
    logit_offset: int = 0  # first row of this request in the step's logits
    draft: list[int] = field(default_factory=list)  # speculative tokens after fill (furca/runtime/speculative)

    @property
    def end(self) -> int:
        return self.start + self.num_new

    @property
    def is_prefill(self) -> bool:
        return self.start < self.req.prompt_len or self.num_new - len(self.draft) > 1


def plan_logits(item: ScheduledReq) -> None:
    """Fill `item.logit_positions` and `item.samples`. An item with a draft (a decoding
    request's last token + its draft tokens) gets every one of its rows."""
    req, start, end = item.req, item.start, item.end
    item.samples = end - len(item.draft) == req.fill_len and req.remaining_new_tokens > 0 and not req.is_finished
    if item.draft:
        item.logit_positions = list(range(start, end))
        return
    positions: list[int] = []
    if req.wants_prompt_logprobs and len(req.logprobs.input_tokens) < req.num_prompt_logprobs:
        # logits at position q score prompt token q + 1, for q + 1 in [logprob_start_len, L)
        lo = max(req.params.logprob_start_len - 1, 0, start)
        hi = min(req.prompt_len - 1, end)
        positions = list(range(lo, hi))
    first = req.first_output_logprob_position
    if first is not None:
        # logits at position q score forced output token q + 1 (jump-forward), q + 1 < fill_len
        positions.extend(range(max(first, start), min(req.fill_len - 1, end)))
    if item.samples and (not positions or positions[-1] != end - 1):
        positions.append(end - 1)
    item.logit_positions = positions


@dataclass
class StepInputs:
    items: list[ScheduledReq]
    input_ids: torch.Tensor  # (T,)
    positions: torch.Tensor  # (T,)
    batch: ForwardBatch


def build_step(items: list[ScheduledReq], req_to_token: torch.Tensor, kv_cache, attn_backend, device) -> StepInputs:
    ids: list[int] = []
    positions: list[int] = []
    kv_parts: list[torch.Tensor] = []
    out_parts: list[torch.Tensor] = []
    logits_rows: list[int] = []
    row_base = 0
    for item in items:
        req = item.req
        ids.extend(req.tokens(item.start, item.end - len(item.draft)))
        ids.extend(item.draft)
        positions.extend(range(item.start, item.end))
        kv = req_to_token[req.kv.row, : item.end]
        kv_parts.append(kv)
        out_parts.append(kv[item.start :])
        plan_logits(item)
        item.logit_offset = len(logits_rows)
        logits_rows.extend(row_base + p - item.start for p in item.logit_positions)
        row_base += item.num_new
    if not logits_rows:  # nothing asks for logits (e.g. max_new_tokens=0, no logprobs)
        logits_rows = [0]
    batch = ForwardBatch.build(
        prefix_lens=[it.start for it in items],
        qo_lens=[it.num_new for it in items],
        kv_indices=torch.cat(kv_parts),
        out_cache_loc=torch.cat(out_parts),
        logits_indices=torch.tensor(logits_rows, dtype=torch.int64),
        kv_cache=kv_cache,
        attn_backend=attn_backend,
        device=device,
    )
    return StepInputs(
        items=items,
        input_ids=torch.tensor(ids, dtype=torch.int64, device=device),
        positions=torch.tensor(positions, dtype=torch.int64, device=device),
        batch=batch,
    )
