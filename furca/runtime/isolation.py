"""Which exceptions inside a scheduler step fail one request and which kill the scheduler
(docs/runtime.md, "Failure isolation").

Per-request work (logprobs, the grammar matcher, detokenizing and stop checks,
jump-forward, building outputs) is guarded request by request; batched work (the model
forward, sampling) that raises is retried request by request so only the culprit fails.
An exception fails its request unless `is_fatal` says it means shared state may be
broken: KV accounting, the radix tree, the device, the interpreter itself, the
tensor-parallel ranks' lockstep. Those, and
any exception raised outside the guarded regions (admission, slot allocation, KV
release and caching, the retry path), end the scheduler thread.
"""

from __future__ import annotations

import logging
import time

import torch

from furca.errors import QueueTimeoutError, RequestFailedError, TensorParallelError
from furca.radix.radix_cache import RadixCacheError
from furca.runtime.memory import MemoryAccountingError
from furca.runtime.output import finish_abort
from furca.runtime.request import Req

logger = logging.getLogger("furca")

_FATAL = (MemoryAccountingError, RadixCacheError, MemoryError, TensorParallelError)
_ACCELERATOR_ERROR = getattr(torch, "AcceleratorError", None)  # torch >= 2.8: CUDA errors


def is_fatal(exc: BaseException) -> bool:
    """Whether ``exc`` may have corrupted state other requests share: anything that is not
    an ``Exception`` (KeyboardInterrupt, SystemExit), KV accounting and radix-tree errors,
    host out-of-memory, and CUDA errors (a device-side assert or an illegal access leaves
    the context unusable). A CUDA out-of-memory error is not fatal: the retry runs smaller
    batches."""
    if not isinstance(exc, Exception) or isinstance(exc, _FATAL):
        return True
    if _ACCELERATOR_ERROR is not None and isinstance(exc, _ACCELERATOR_ERROR):
        return True
    return isinstance(exc, RuntimeError) and "CUDA error" in str(exc)


def request_failed(rid: str, stage: str, exc: BaseException) -> RequestFailedError:
    """The error a failed request's caller gets (its ``__cause__`` is ``exc``); logs the
    traceback once, so the bug behind it is visible."""
    logger.error("request %s failed in the %s (the engine goes on): %s: %s", rid, stage,
                 type(exc).__name__, exc, exc_info=exc)
    err = RequestFailedError(f"request {rid} failed in the {stage}: {type(exc).__name__}: {exc}", stage=stage)
    err.__cause__ = exc
    return err


class RequestFailures:
    """The scheduler's side of failing one request (a mixin of `Scheduler`: it uses its
    ``post``, ``cache``, ``running``, ``waiting``, ``live`` and ``stats``)."""

    def _finish(self, req: Req, reason: dict) -> None:
        """End `req` (not queued or running any more) for `reason` and deliver its result."""
        try:
            self.post.end(req, reason)
        except Exception as e:  # noqa: BLE001
            self._fail(req, "detokenizer", e)
            return
        self._deliver(req)

    def _deliver(self, req: Req) -> None:
        """Send `req`'s final result (released already); if building it raises, its
        caller gets the failure instead."""
        try:
            self.post.emit_final(req)
        except Exception as e:  # noqa: BLE001
            self._fail(req, "output", e)

    def _fail(self, req: Req, stage: str, exc: BaseException) -> None:
        """`req` failed in `stage`: drop everything it holds (its KV is freed, never
        cached: its tokens may not match it) and tell its caller. Fatal errors re-raise."""
        if is_fatal(exc):
            raise exc
        err = request_failed(req.rid, stage, exc)
        if req in self.running:
            self.running.remove(req)
            self.cache.free_req(req)
        elif req in self.waiting:
            self.waiting.remove(req)
        self.live.discard(req)
        self.stats["failed"] += 1
        self.post.fail(req, err)

    def _expire_waiting(self, limit: float) -> int:
        """Drop the requests never admitted that waited longer than `limit` seconds; returns
        how many."""
        now = time.perf_counter()
        expired = [r for r in self.waiting if not r.is_admitted_once and now - r.created_at > limit]
        for req in expired:
            self.waiting.remove(req)
            self.live.discard(req)
            self.stats["queue_timeouts"] += 1
            waited = now - req.created_at
            req.finished_reason = finish_abort("queue timeout")
            req.emit(QueueTimeoutError(
                f"request {req.rid} waited {waited:.1f} s without being admitted, longer than max_queue_time "
                f"({limit:g} s): the engine is saturated; retry later"))
        return len(expired)
