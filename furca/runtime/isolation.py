"""Which exceptions inside a scheduler step fail one request and which kill the scheduler
(docs/runtime.md, "Failure isolation").

Per-request work (logprobs, the grammar matcher, detokenizing and stop checks,
jump-forward, building outputs) is guarded request by request; batched work (the model
forward, sampling) that raises is retried request by request so only the culprit fails.
An exception fails its request unless `is_fatal` says it means shared state may be
broken: KV accounting, the radix tree, the device, the interpreter itself. Those, and
any exception raised outside the guarded regions (admission, slot allocation, KV
release and caching, the retry path), end the scheduler thread.
"""

from __future__ import annotations

import logging

import torch

from furca.errors import RequestFailedError
from furca.radix.radix_cache import RadixCacheError
from furca.runtime.memory import MemoryAccountingError

logger = logging.getLogger("furca")

_FATAL = (MemoryAccountingError, RadixCacheError, MemoryError)
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
