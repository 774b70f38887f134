"""What one scheduler step did (`StepStats`), and the periodic batch summary in the log (`StepLog`).

The scheduler fills a `StepStats` after every step that ran a forward pass; the engine's
scheduler loop hands it to each step observer (`Engine.add_step_observer`) on the
scheduler thread. Observers must be quick (they delay the next step) and must not block;
one that raises is logged once and removed, and the engine goes on.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from furca.runtime.mask_overlap import MaskTimes


@dataclass(frozen=True, slots=True)
class StepStats:
    """One forward pass. Request counts are of this step's batch; ``num_running`` /
    ``num_waiting`` / ``used_tokens`` are the engine's state after it."""

    step: int  # 1 for the engine's first forward pass
    num_prefill_reqs: int  # requests computing prompt tokens (or more than one token)
    num_prefill_tokens: int
    num_decode_reqs: int  # requests computing the one token they sampled last
    num_running: int
    num_waiting: int
    used_tokens: int  # KV slots neither free nor evictable
    capacity: int  # KV slots in the pool
    # (prompt tokens, of which found in the radix cache) of each request admitted for the
    # first time in this step
    admitted: tuple[tuple[int, int], ...]
    num_generated: int  # tokens sampled
    num_finished: int
    num_retracted: int  # requests retracted (their KV given back) during the step
    new_token_ratio: float
    duration_s: float  # wall time of the step: scheduling, forward pass, sampling
    # constrained decoding's costs (mask_overlap.MaskTimes), None when no constrained request sampled
    masks: MaskTimes | None = None
    num_draft_tokens: int = 0  # speculative draft tokens the decoding requests also computed (furca/runtime/speculative)

    @property
    def num_reqs(self) -> int:
        """Requests in the batch."""
        return self.num_prefill_reqs + self.num_decode_reqs

    @property
    def num_tokens(self) -> int:
        """Tokens the forward pass computed (vLLM's iteration tokens)."""
        return self.num_prefill_tokens + self.num_decode_reqs + self.num_draft_tokens

    @property
    def num_cached_tokens(self) -> int:
        """Prompt tokens of the newly admitted requests found in the cache."""
        return sum(cached for _, cached in self.admitted)


class StepLog:
    """A step observer: every ``interval`` steps, one info line summing them up, as SGLang's
    "Decode batch. #running-req: ..." line."""

    def __init__(self, interval: int, logger: logging.Logger):
        if interval <= 0:
            raise ValueError(f"interval must be > 0, got {interval}")
        self.interval, self.logger = interval, logger
        self._reset(time.perf_counter())

    def _reset(self, now: float) -> None:
        self.since, self.steps, self.prefill_tokens, self.generated = now, 0, 0, 0
        self.new_reqs, self.cached_tokens = 0, 0

    def __call__(self, s: StepStats) -> None:
        self.steps += 1
        self.prefill_tokens += s.num_prefill_tokens
        self.generated += s.num_generated
        self.new_reqs += len(s.admitted)
        self.cached_tokens += s.num_cached_tokens
        if self.steps < self.interval:
            return
        now = time.perf_counter()
        elapsed = max(now - self.since, 1e-9)
        self.logger.info(
            "Batch [step %d]: %d steps in %.2f s, #running-req: %d, #queue-req: %d, #new-seq: %d, "
            "#prefill-token: %d, #cached-token: %d, token usage: %.2f, gen throughput (token/s): %.1f",
            s.step, self.steps, elapsed, s.num_running, s.num_waiting, self.new_reqs, self.prefill_tokens,
            self.cached_tokens, s.used_tokens / s.capacity if s.capacity else 0.0, self.generated / elapsed)
        self._reset(now)
