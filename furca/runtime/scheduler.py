"""The scheduler: queues, admission and retraction policy, one step at a time. The KV
pool and the radix cache are its `CacheManager`'s (``self.cache``, cache_manager.py).

Runs on the engine's scheduler thread only (nothing here locks). One `step()`:

1. make room for every running request's next token (evict unlocked cache leaves,
   then retract the newest requests: their KV goes to the tree, they requeue);
2. give the prefill budget to a chunked prefill in progress, then admit waiting
   requests in policy order (radix match + lock, admission check, row + prefix slots);
3. allocate slots for all new tokens, start the grammar masks of the requests that sample
   (`mask_overlap.py`: on worker threads, beside the forward), run ONE forward over the
   mixed batch;
4. postprocess (`postprocess.py`): prompt logprobs, the masks joined, sampling, stop
   checks, streaming; a request whose mask was late runs its last position again next step;
5. `CacheManager.cache_req`: what each prefill computed goes into the tree (kept
   locked); finished requests give everything back (prompt + output cached, unlocked).

Failure isolation (`isolation.py`, docs/runtime.md "Failure isolation"): a request whose
own work raises is failed alone (`_fail`: its KV is freed, not cached, its lock and row
dropped, its caller told). A forward pass that raises is rolled back (the step's slots
freed; nothing it computed is kept) and its requests run again one at a time, so only one
that fails alone is failed. Errors in shared bookkeeping propagate and end the thread.

``max_queue_time``: at the start of each step, requests never admitted that waited longer
are dropped with `QueueTimeoutError` (retracted requests already ran, and are not).
"""

from __future__ import annotations

import logging
import time

from furca.runtime.batch_builder import ScheduledReq, build_step
from furca.runtime.cache_manager import CacheManager
from furca.runtime.config import EngineConfig
from furca.runtime.isolation import RequestFailures, is_fatal
from furca.runtime.jump_forward import JumpForward
from furca.runtime.mask_overlap import MaskFiller
from furca.runtime.model_runner import ModelRunner
from furca.runtime.output import finish_abort
from furca.runtime.postprocess import Postprocessor
from furca.runtime.request import Req
from furca.runtime.schedule_policy import InBatchDedup, decode_reserve, order_waiting
from furca.runtime.step_stats import StepStats

logger = logging.getLogger("furca")


class Scheduler(RequestFailures):
    """Runs ``runner``'s model over the requests it is given, with ``cache`` (a
    `CacheManager` sized for ``runner``'s KV pool) for every KV slot and tree lock."""

    def __init__(self, runner: ModelRunner, cache: CacheManager, config: EngineConfig, tokenizer, eos_ids):
        self.runner = runner
        self.cache = cache
        self.config = config
        self.post = Postprocessor(tokenizer, eos_ids, runner.device)
        self.post.masks = MaskFiller(runner.vocab_size, overlap=config.overlap_masks,
                                     wait_s=config.mask_wait_ms / 1e3, early=config.early_masks)
        if config.enable_jump_forward:
            self.post.jump_forward = JumpForward(tokenizer, runner.vocab_size)
        self.spec = None  # a Speculator (furca/runtime/speculative) with speculative_algorithm
        self.waiting: list[Req] = []
        self.running: list[Req] = []
        self.live: set[Req] = set()  # every request not yet given its final result
        self.new_token_ratio = config.init_new_token_ratio
        self.stats = {"steps": 0, "prompt_tokens": 0, "cached_tokens": 0, "generated_tokens": 0,
                      "retractions": 0, "finished": 0, "aborted": 0, "failed": 0, "queue_timeouts": 0}
        self.faults = None  # a FaultInjector (faults.py) in tests; `set_faults`
        self.last_step: StepStats | None = None  # of the last step that ran a forward pass
        self._admitted: list[tuple[int, int]] = []  # (prompt, cached) of first admissions this step
        if config.speculative_algorithm is not None:
            from furca.runtime.speculative import Speculator, make_proposer

            self.spec = self.post.speculative = Speculator(
                make_proposer(config, runner, cache.table.shape[1]), config.speculative_num_draft_tokens,
                config.speculative_ngram_min, config.speculative_ngram_max, runner.vocab_size, self.stats,
                ngram=config.speculative_algorithm == "ngram")

    # -- requests in and out ---------------------------------------------------------------

    def set_faults(self, injector) -> None:
        """Install a `FaultInjector` (or None) for the scheduler and postprocessing."""
        self.faults = self.post.faults = self.post.masks.faults = injector

    def add_request(self, req: Req) -> None:
        if req.grammar is not None and self.post.jump_forward is not None and not req.output_ids:
            # text the grammar forces from its start is computed with the prompt
            try:
                reason = self.post.jump_forward.apply(req, initial=True)
                req.kv.rollback_to = None  # nothing computed yet
                if reason is not None and req.first_output_logprob_position is None:
                    self._finish(req, reason)  # a stop string inside the forced text
                    self.stats["finished"] += 1
                    return
                if reason is not None:
                    # its forced tokens (and prompt) still need their logprobs: one pass
                    # scores them, then postprocessing delivers it
                    self.post.end(req, reason)
            except Exception as e:  # noqa: BLE001 - fails this request only (unless fatal)
                self._fail(req, "jump-forward", e)
                return
        self.waiting.append(req)
        self.live.add(req)

    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    def abort(self, rid: str) -> int:
        """Abort every request whose rid or group rid is `rid`; returns how many."""
        hits = [r for r in self.waiting + self.running if rid in (r.rid, r.group_rid)]
        for req in hits:
            if req in self.running:
                self.running.remove(req)
                self.cache.cache_req(req, finished=True)
            else:
                self.waiting.remove(req)
            self.live.discard(req)
            self._finish(req, finish_abort("aborted by abort()"))
            self.stats["aborted"] += 1
        return len(hits)

    def flush_cache(self) -> bool:
        """Empty the radix cache; only when no request is queued or running. Returns whether
        it did."""
        if self.has_work():
            return False
        self.cache.flush()
        return True

    def check_memory(self, *, idle: bool = False) -> None:
        """`CacheManager.check_memory` over the running requests (and a draft model's pool)."""
        self.cache.check_memory(self.running, idle=idle)
        if self.spec is not None:
            self.spec.check_memory(self.running, idle=idle)

    def fail_all(self, exc: BaseException) -> None:
        """Deliver `exc` to every request not yet answered (the engine is going down);
        frees nothing."""
        for req in list(self.live):
            try:
                req.emit(exc)
            except Exception:  # a dead asyncio loop must not stop the others
                pass
        self.live.clear()
        self.waiting.clear()
        self.running.clear()

    # -- one step --------------------------------------------------------------------------

    def step(self) -> bool:
        """Run one forward pass if there is work; returns whether anything ran. After a
        forward pass ``last_step`` describes it (else it is None)."""
        began, retractions = time.perf_counter(), self.stats["retractions"]
        self.last_step, self._admitted = None, []
        expired = 0
        self.cache.leases.expire()
        if self.config.max_queue_time is not None and self.waiting:
            expired = self._expire_waiting(self.config.max_queue_time)
        self._make_room_for_decode()
        items = self._schedule()
        if not items:
            if self.running:  # nothing fits next to what runs: give memory back, retry next step
                self._retract(self.running[-1])
                return True
            if self.waiting and self.cache.leases.shed():  # a session's pin blocks the queue
                return True
            return expired > 0
        if self.spec is not None:  # drafts for decoding requests, in the free KV slots left
            self.spec.propose(items, self.cache.available() - sum(it.num_new for it in items),
                              self.cache.table.shape[1], self.post.masks, self.running)
        finished = self._run(items)
        self.stats["steps"] += 1
        generated = sum(1 for it in items if it.samples) - len(self.post.late)
        if self.spec is not None:
            generated += self.spec.step_extra
        self.stats["generated_tokens"] += generated
        if all(not it.is_prefill for it in items):
            self.new_token_ratio = max(
                self.config.min_new_token_ratio, self.new_token_ratio - self.config.new_token_ratio_decay
            )
        prefill = [it for it in items if it.is_prefill]
        self.last_step = StepStats(
            step=self.stats["steps"], num_prefill_reqs=len(prefill),
            num_prefill_tokens=sum(it.num_new for it in prefill), num_decode_reqs=len(items) - len(prefill),
            num_running=len(self.running), num_waiting=len(self.waiting), used_tokens=self.cache.used_tokens(),
            capacity=self.cache.capacity, admitted=tuple(self._admitted), num_generated=generated,
            num_finished=len(finished), num_retracted=self.stats["retractions"] - retractions,
            new_token_ratio=self.new_token_ratio, duration_s=time.perf_counter() - began, masks=self.post.times,
            num_draft_tokens=sum(len(it.draft) for it in items))
        return True

    def _run(self, items: list[ScheduledReq]) -> list[Req]:
        """Allocate, run one forward pass over `items`, postprocess, do the KV bookkeeping;
        returns the requests that finished. A forward pass that raises is rolled back and
        its requests are run one at a time (`_run_one_by_one`)."""
        try:
            step, logits = self._forward(items)
        except Exception as e:  # noqa: BLE001 - find the request it fails for
            if is_fatal(e):
                raise
            if len(items) > 1:
                return self._run_one_by_one(items, e)
            self._fail(items[0].req, "model forward", e)
            return []
        return self._after_forward(items, step, logits)

    def _forward(self, items: list[ScheduledReq]):
        """Slots for the new tokens, then the forward pass: ``(StepInputs, logits)``. If it
        raises, the step's slots are freed first (the KV written is never read)."""
        slots = self.cache.alloc_step(items)
        try:
            if self.faults is not None:
                self.faults.check("forward", [it.req for it in items])
            step = build_step(items, self.cache.table, self.runner.kv_cache, self.runner.attn_backend,
                              self.runner.device)
            self.post.masks.start([it.req for it in step.items if it.samples and not it.draft])
            return step, self.runner.forward(step)
        except BaseException:
            self.cache.free(slots)
            raise

    def _run_one_by_one(self, items: list[ScheduledReq], first: Exception) -> list[Req]:
        """The batched forward raised `first`: run each request's part alone; fail those
        that raise alone. If every one does, the fault is not any request's: it is raised
        (the scheduler dies)."""
        logger.warning("a forward pass over %d requests raised %s: %s; running them one at a time",
                       len(items), type(first).__name__, first)
        done, culprits = [], []
        for it in items:
            try:
                done.append((it, *self._forward([it])))
            except Exception as e:  # noqa: BLE001
                if is_fatal(e):
                    raise
                culprits.append((it.req, e))
        if not done:
            raise RuntimeError(f"the model forward raised for each of the {len(items)} requests of a batch run "
                               f"alone, so no request is to blame: {type(first).__name__}: {first}") from first
        for req, exc in culprits:
            self._fail(req, "model forward", exc)
        return [req for it, step, logits in done for req in self._after_forward([it], step, logits)]

    def _after_forward(self, items: list[ScheduledReq], step, logits) -> list[Req]:
        """Postprocess the logits of `items`' forward pass (failing the requests whose own
        work raises), then the KV bookkeeping; returns the requests that finished."""
        for it in items:
            it.req.kv.kv_len = it.end
        finished, failures = self.post.process(step, logits)
        for req, stage, exc in failures:
            self._fail(req, stage, exc)
        for req in self.post.late:  # its mask was late: its last position runs again next step
            req.kv.rollback_to = req.kv.kv_len - 1
        failed = {id(req) for req, _, _ in failures}
        items = [it for it in items if id(it.req) not in failed]
        for it in items:
            if it.req.kv.rollback_to is not None:  # jump-forward re-tokenized computed tokens
                self.cache.rollback_kv(it.req)
        for it in items:
            req = it.req
            if req in finished:
                self.running.remove(req)
                self.cache.cache_req(req, finished=True)
                self.live.discard(req)
                self._deliver(req)
                self.stats["finished"] += 1
            elif it.is_prefill:
                if self.faults is not None:
                    self.faults.check("cache", req)
                self.cache.cache_req(req, finished=False)
        return finished

    def _make_room_for_decode(self) -> None:
        while self.running:
            need = sum(1 for r in self.running if r.extend_len == 1)
            if need <= self.cache.available():
                return
            if len(self.running) == 1:  # the last request outranks the sessions' pins
                if not self.cache.leases.shed():
                    return
                continue
            self._retract(self.running[-1])

    def _schedule(self) -> list[ScheduledReq]:
        cfg = self.config
        ratio, clip = self.new_token_ratio, cfg.decode_reserve_clip
        items: list[ScheduledReq] = []
        avail = self.cache.available()
        # this step's tokens and the future of everything running are spoken for
        reserved = sum(r.extend_len + decode_reserve(r, ratio, clip) for r in self.running)
        budget = cfg.prefill_budget
        used = 0
        for req in self.running:
            if req.extend_len == 1:
                items.append(ScheduledReq(req, req.kv.kv_len, 1))
                used += 1
        for req in self.running:
            if req.extend_len > 1 and budget > 0:
                chunk = min(req.extend_len, budget, avail - used)
                if chunk > 0:
                    items.append(ScheduledReq(req, req.kv.kv_len, chunk))
                    budget -= chunk
                    used += chunk
        if not self.waiting or budget <= 0:
            return items
        tree = self.cache.tree
        dedup = InBatchDedup(cfg.in_batch_prefix_min, enabled=not tree.disabled)
        for req in self.running:
            if req.extend_len > 1:  # a prefill in progress will cache more of its prompt
                dedup.add(req)
        num_prefill = sum(1 for it in items if it.num_new > 1)
        for req in order_waiting(self.waiting, cfg.schedule_policy, tree):
            if budget <= 0 or len(self.running) >= cfg.max_running_requests or not self.cache.has_free_row():
                break
            match = self.cache.match_prefix(req)
            if dedup.should_defer(req, match.prefix_len):
                continue
            self.cache.lock(match)
            extend = req.fill_len - match.prefix_len
            need = extend + decode_reserve(req, ratio, clip)
            if extend > budget and (cfg.is_chunked or num_prefill > 0):
                chunk = budget if cfg.is_chunked else 0
            else:
                chunk = extend  # an over-budget prompt runs alone when chunking is off
            if chunk <= 0 or need > self.cache.available() - reserved:
                self.cache.unlock(match)
                break
            self._admit(req, match)
            items.append(ScheduledReq(req, req.kv.kv_len, chunk))
            dedup.add(req)
            budget -= chunk
            reserved += need
            num_prefill += 1
        return items

    def _admit(self, req: Req, match) -> None:
        self.cache.admit(req, match)
        prefix_len = match.prefix_len
        if not req.is_admitted_once:
            req.is_admitted_once = True
            req.cached_tokens = prefix_len
            self._admitted.append((req.prompt_len, prefix_len))
            self.stats["prompt_tokens"] += req.prompt_len
            self.stats["cached_tokens"] += prefix_len
        self.waiting.remove(req)
        self.running.append(req)

    def _retract(self, req: Req) -> None:
        self.running.remove(req)
        self.cache.cache_req(req, finished=True)
        req.num_retractions += 1
        if len(req.logprobs.input_tokens) < req.num_prompt_logprobs:
            req.logprobs.drop_prompt()
        self.waiting.insert(0, req)
        self.new_token_ratio = self.config.init_new_token_ratio
        self.stats["retractions"] += 1
        logger.debug("retracted %s (%d tokens)", req.rid, req.fill_len)
