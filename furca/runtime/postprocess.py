"""After the forward pass: prompt logprobs, the grammar bitmask, sampling, stop checks,
streaming, and the final `Output` of each request.

The grammar masks are filled by a `MaskFiller` (mask_overlap.py), which the scheduler
starts beside the forward pass; `process` joins them. A request whose mask is late (not
ready within the filler's bound) does not sample: it is listed in ``late`` and the
scheduler runs its last position again next step. ``times`` holds the step's
`MaskTimes` (None when no constrained request sampled).

`process` never frees anything: it marks requests finished and the scheduler releases
their KV *before* calling `emit_final`, so a caller that got its result sees the
memory already given back.

Failure isolation (`isolation.py`): the work of each request is guarded on its own, so
an exception fails that request only (`process` returns it among the failures, with the
stage it failed in; the scheduler releases it and calls `fail`). Batched sampling that
raises is run again one row at a time on fresh logits rows; only a row that fails alone
fails. Fatal exceptions (`is_fatal`) propagate.
"""

from __future__ import annotations

import dataclasses
import time

import torch

from furca.runtime.batch_builder import ScheduledReq, StepInputs
from furca.runtime.isolation import is_fatal
from furca.runtime.logprobs import compute_logprobs
from furca.runtime.mask_apply import apply_bitmask_cpu_
from furca.runtime.mask_overlap import MaskFiller, MaskTimes
from furca.runtime.delivery import Delivery
from furca.runtime.output import finish_abort, finish_length, finish_stop
from furca.runtime.request import Req
from furca.runtime.sampler import SamplingBatch, sample, terminating_token_ids

Failure = tuple[Req, str, Exception]  # (request, stage, exception): one request that failed
_LOGPROB_ROWS = 512  # prompt-logprob rows per log-softmax call


def mask_logits_(logits: torch.Tensor, bitmask: torch.Tensor, indices: list[int]) -> None:
    """In place: rows ``indices`` of ``logits`` get ``-inf`` where their bit in ``bitmask``
    (int32 ``[B, ceil(V / 32)]``, bit set = allowed) is 0. The Triton kernel on CUDA,
    the numba kernel of mask_apply.py on a CPU (float32 rows), furca.constrain's torch
    version elsewhere (both kernels' reference)."""
    if logits.is_cuda:
        from furca.kernels.token_bitmask import apply_token_bitmask_ as kernel

        kernel(logits, bitmask.to(logits.device, non_blocking=True), torch.tensor(indices, device=logits.device))
    elif not apply_bitmask_cpu_(logits, bitmask, indices):
        from furca.constrain import apply_token_bitmask_ as reference

        reference(logits, bitmask, indices)


class Postprocessor(Delivery):
    def __init__(self, tokenizer, eos_ids, device: torch.device):
        self.tokenizer = tokenizer
        self.eos_ids = tuple(eos_ids)
        self.device = device
        self.jump_forward = None  # a JumpForward (jump_forward.py) when enabled; set by the scheduler
        self.speculative = None  # a Speculator (furca/runtime/speculative) when enabled; set by the scheduler
        self.faults = None  # a FaultInjector (faults.py) in tests; set by the scheduler
        self.masks = MaskFiller(0, overlap=False)  # the scheduler installs one of the model's width
        self.late: list[Req] = []  # this step's requests whose mask was late (they sample next step)
        self.times: MaskTimes | None = None  # this step's constrained-decoding costs
        self._accept_s = 0.0
        self._stage = ""  # what the current request's guarded work is doing (for its error)

    # -- per step ------------------------------------------------------------------------

    def process(self, step: StepInputs, logits: torch.Tensor) -> tuple[list[Req], list[Failure]]:
        """Consume one step's logits; return the requests that finished in it and those
        that failed (each with its stage and exception; their state is to be dropped)."""
        finished: list[Req] = []
        failed: list[Failure] = []
        sampling: list[ScheduledReq] = []
        drafted: list[ScheduledReq] = []
        self.late, self.times, self._accept_s = [], None, 0.0
        for item in step.items:
            req = item.req
            try:
                if req.wants_prompt_logprobs:
                    self._stage = "prompt logprobs"
                    self._prompt_logprobs(item, logits)
                if req.first_output_logprob_position is not None:
                    self._stage = "forced-token logprobs"
                    self._forced_logprobs(item, logits)
                if item.samples:
                    (drafted if item.draft else sampling).append(item)
                elif req.is_finished:
                    if req.kv.kv_len == req.fill_len:  # its forced tokens are scored: deliver it now
                        finished.append(req)
                elif req.kv.kv_len == req.fill_len and req.remaining_new_tokens == 0:
                    # max_new_tokens == 0: the prompt is scored, nothing to generate
                    self._stage = "detokenizer"
                    self.end(req, finish_length(req.params.max_new_tokens))
                    finished.append(req)
            except Exception as e:  # noqa: BLE001 - fails this request only (unless fatal)
                failed.append(self._failure(req, self._stage, e))
        if sampling:
            finished.extend(self._sample(sampling, logits, failed))
        if drafted:
            finished.extend(self.speculative.verify(self, drafted, logits, failed))
        return finished, failed

    def mask_row_(self, req: Req, x: torch.Tensor) -> None:
        """Mask row ``x`` (``[1, V]``) with ``req``'s matcher's current mask, filled now on
        this thread (speculative verification: the matcher moves between its rows)."""
        bitmask = torch.full((1, self.masks.words), -1, dtype=torch.int32)
        if self.faults is not None:
            self.faults.check("grammar", req)
        req.grammar.fill_bitmask(bitmask, 0)
        mask_logits_(x, bitmask, [0])

    def _failure(self, req: Req, stage: str, exc: Exception) -> Failure:
        if is_fatal(exc):
            raise exc
        return (req, stage or "postprocessing", exc)

    def _prompt_logprobs(self, item: ScheduledReq, logits: torch.Tensor) -> None:
        req = item.req
        lp = req.logprobs
        if len(lp.input_tokens) >= req.num_prompt_logprobs:
            return
        if not lp.input_tokens and req.params.logprob_start_len == 0:
            lp.input_tokens.append([None, req.origin_input_ids[0]])
            lp.input_top.append(None)
        qs = [q for q in item.logit_positions if q <= req.prompt_len - 2]
        k = req.params.top_logprobs_num
        for lo in range(0, len(qs), _LOGPROB_ROWS):
            part = qs[lo : lo + _LOGPROB_ROWS]
            rows = logits[item.logit_offset + lo : item.logit_offset + lo + len(part)]
            ids = torch.tensor([req.origin_input_ids[q + 1] for q in part], device=rows.device)
            chosen, top = compute_logprobs(rows, ids, [k] * len(part))
            lp.input_tokens.extend([v, t] for v, t in zip(chosen.tolist(), ids.tolist()))
            if k > 0:
                lp.input_top.extend(top)

    def _forced_logprobs(self, item: ScheduledReq, logits: torch.Tensor) -> None:
        """Logprobs of forced output tokens (jump-forward), from the rows this pass computed
        them in, exactly as prompt tokens': the model's distribution, no mask, no
        temperature. Appended in order after the tokens already scored."""
        req = item.req
        first = req.first_output_logprob_position
        base = item.logit_offset
        pairs = [(base + i, q) for i, q in enumerate(item.logit_positions) if first <= q < req.fill_len - 1]
        if not pairs:
            return
        if pairs[0][1] != first or pairs[-1][1] - first != len(pairs) - 1:  # kv_len passed `first`
            raise RuntimeError(f"request {req.rid}: forced-token logit rows {[q for _, q in pairs]} "
                               f"do not continue at position {first} (scheduler bug)")
        k = req.params.top_logprobs_num
        rows = logits[pairs[0][0] : pairs[-1][0] + 1]
        ids = torch.tensor([req.output_ids[q + 1 - req.prompt_len] for _, q in pairs], device=rows.device)
        chosen, top = compute_logprobs(rows, ids, [k] * len(pairs))
        req.logprobs.output_tokens.extend([v, t] for v, t in zip(chosen.tolist(), ids.tolist()))
        if k > 0:
            req.logprobs.output_top.extend(top)

    def _sample(self, items: list[ScheduledReq], logits: torch.Tensor, failed: list[Failure]) -> list[Req]:
        reqs = [it.req for it in items]
        bitmask, fill_s, wait_s, num_early = self._fill_masks(reqs, failed)
        if bitmask is not None and len(reqs) < len(items):  # a matcher failed or is late: drop its row
            keep = {id(r) for r in reqs}
            bitmask = bitmask[[i for i, it in enumerate(items) if id(it.req) in keep]]
            items = [it for it in items if id(it.req) in keep]
        if bitmask is not None:
            self.times = MaskTimes(len(self.late) + sum(r.grammar is not None for r in reqs), len(self.late),
                                   num_early, fill_s, wait_s, 0.0, 0.0)
        if not items:
            return []
        rows = torch.tensor([it.logit_offset + len(it.logit_positions) - 1 for it in items], device=logits.device)
        masked = [i for i, r in enumerate(reqs) if r.grammar is not None]
        apply_s = 0.0

        def rows_to_sample() -> torch.Tensor:  # (B, V) fp32, owned; `sample` may write into it
            nonlocal apply_s
            x = logits.index_select(0, rows).float()
            if masked:
                began = time.perf_counter()
                mask_logits_(x, bitmask, masked)
                apply_s += time.perf_counter() - began
            return x

        try:
            picks = self._sample_rows(reqs, rows_to_sample())
        except Exception as e:  # noqa: BLE001 - find the row that fails, fail it alone
            if is_fatal(e):
                raise
            picks = []
            x = rows_to_sample()  # the failed attempt may have written into its rows
            for i, req in enumerate(reqs):
                try:
                    picks.extend(self._sample_rows([req], x[i : i + 1].clone()))
                except Exception as e1:  # noqa: BLE001
                    failed.append(self._failure(req, "sampler", e1))
        finished = []
        for req, token, logprob, top, dead in picks:
            try:
                if self._append(req, token, logprob, top, dead):
                    finished.append(req)
                elif not req.is_finished:  # its matcher is settled: its next mask may start
                    self.masks.start_early(req)
            except Exception as e:  # noqa: BLE001
                failed.append(self._failure(req, self._stage, e))
        if self.times is not None:
            self.times = dataclasses.replace(self.times, apply_s=apply_s, accept_s=self._accept_s)
        return finished

    def _fill_masks(self, reqs: list[Req], failed: list[Failure]):
        """``(bitmask, fill_s, wait_s, num_early)``: the constrained rows' token masks (None when no
        row has a grammar) from the `MaskFiller`. A request whose matcher raises is failed,
        one whose mask is late goes to ``self.late``; both leave ``reqs`` (in place)."""
        bitmask, late, errors, fill_s, wait_s, num_early = self.masks.collect(reqs)
        if bitmask is None:
            return None, 0.0, 0.0, 0
        for req, e in errors:
            failed.append(self._failure(req, "grammar matcher", e))
        self.late = late
        drop = {id(r) for r in late} | {id(r) for r, _ in errors}
        if drop:
            reqs[:] = [r for r in reqs if id(r) not in drop]
        return bitmask, fill_s, wait_s, num_early

    def _sample_rows(self, reqs: list[Req], x: torch.Tensor) -> list[tuple]:
        """Sample one token for each of ``reqs`` from its row of ``x``: ``(req, token,
        logprob, top logprobs, is_dead_end)`` per request."""
        if self.faults is not None:
            self.faults.check("sampler", reqs)
        params = [r.params for r in reqs]
        needs_prompt = any(p.repetition_penalty != 1.0 for p in params)
        batch = SamplingBatch.build(
            params,
            [r.output_ids for r in reqs],
            [r.generator for r in reqs],
            [terminating_token_ids(p, self.eos_ids) for p in params],
            x.shape[-1],
            x.device,
            prompt_ids=[r.origin_input_ids for r in reqs] if needs_prompt else None,
            requested_logprobs_only=True,
        )
        out = sample(x, batch)
        ids = out.next_token_ids.tolist()
        lps = out.logprobs.tolist()
        dead = out.is_dead_end.tolist()
        tops = out.top_logprobs
        return [(req, ids[i], lps[i], tops[i] if tops else None, dead[i]) for i, req in enumerate(reqs)]

    def _append(self, req: Req, token: int, logprob: float, top, is_dead_end: bool) -> bool:
        req.output_ids.append(token)
        if req.params.return_logprob:
            req.logprobs.output_tokens.append([logprob, token])
            if req.params.top_logprobs_num > 0:
                req.logprobs.output_top.append(top)
        reason = None
        if req.grammar is not None:
            self._stage = "grammar matcher"
            began = time.perf_counter()
            if is_dead_end and logprob == float("-inf"):
                reason = finish_abort("the constraint allows no token here")
            elif not req.grammar.accept_token(token):
                reason = finish_abort(f"the constraint rejected token {token}")
            self._accept_s += time.perf_counter() - began
        self._stage = "detokenizer"
        if self.faults is not None:
            self.faults.check("detokenizer", req)
        delta, stop = req.detok.append(token)
        req.stream_buf.text += delta
        req.stream_buf.ids.append(token)
        if reason is None:
            reason = stop
        self._stage = "grammar matcher"
        if reason is None and req.grammar is not None and req.grammar.is_terminated():
            reason = finish_stop(token)
        if reason is None and len(req.output_ids) >= req.params.max_new_tokens:
            reason = finish_length(req.params.max_new_tokens)
        if reason is None and req.grammar is not None and self.jump_forward is not None:
            self._stage = "jump-forward"
            began = time.perf_counter()
            reason = self.jump_forward.apply(req)  # forced text, appended without sampling
            self._accept_s += time.perf_counter() - began
            if reason is None and len(req.output_ids) >= req.params.max_new_tokens:
                reason = finish_length(req.params.max_new_tokens)
        self._stage = "detokenizer"
        if reason is not None:
            self.end(req, reason)
            # forced tokens without logprobs yet: one more pass scores them, then it is delivered
            return req.first_output_logprob_position is None
        # with logprobs, forced tokens wait (ids and text) for the pass that scores them
        if req.stream and req.stream_buf.text and req.first_output_logprob_position is None:
            self._stage = "stream output"
            req.emit(self._delta(req))
        return False
