"""A request's state inside the scheduler: `Req` and its parts (`KVRegion`,
`LogprobState`, `StreamBuffer`, `JumpState`), each written by the code that owns it.

KV regions of a running request (``req.kv``: row ``row`` of ``req_to_token``)::

    positions  0 .. tree_len        slots owned by the radix tree, locked through last_node
    positions  tree_len .. kv_len   slots the request owns (computed, not yet in the tree)
    positions  kv_len .. len(fill)  tokens still to compute (the rest of the prompt in a
                                    chunked prefill, or the last sampled token in decode)

``fill`` is prompt + output so far. Prefill and decode are the same operation: each
step computes some of ``fill[kv_len:]`` (a chunk, or the one token sampled last), and
when ``kv_len`` reaches ``len(fill)`` the next token is sampled. A retracted request
drops its row and slots and keeps its output: it re-enters the queue with ``fill`` as
its prompt continuation, so its greedy output is unchanged.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

import torch

from furca.runtime.output import LogprobCursor
from furca.runtime.sampling_params import SamplingParams


class GrammarHook(Protocol):
    """What a constrained-decoding matcher offers the scheduler (see furca.constrain).
    The scheduler calls `fill_bitmask` before sampling a row, `accept_token` after;
    the request stops (finish type "stop") once `is_terminated()`."""

    def fill_bitmask(self, bitmask: torch.Tensor, row: int) -> None: ...

    def accept_token(self, token_id: int) -> bool: ...

    def is_terminated(self) -> bool: ...

    def jump_forward(self) -> str: ...

    # optional (jump-forward re-tokenizes only with it): undo the last n accepted tokens
    def rollback(self, num_tokens: int) -> None: ...


@dataclass(eq=False)
class KVRegion:
    """Where a request's KV lives: row ``row`` of ``req_to_token``, split at ``tree_len``
    and ``kv_len`` as the module docstring draws. The `CacheManager` writes ``row``,
    ``tree_len`` and ``last_node`` (the tree node it keeps locked for the request); the
    scheduler advances ``kv_len`` after each forward pass. ``rollback_to``: set by
    jump-forward when it re-tokenized computed tokens (positions from there on hold KV
    of tokens that are gone); the `CacheManager` drops that KV after the step."""

    row: int | None = None
    kv_len: int = 0
    tree_len: int = 0
    last_node: Any = None
    rollback_to: int | None = None


@dataclass(eq=False)
class LogprobState:
    """A request's logprobs as ``[logprob, token_id]`` pairs (the text is added when an
    output is built), and how far its stream has sent them. Postprocessing appends (prompt,
    sampled and forced tokens), jump-forward deletes the entries of the tokens it drops,
    delivery reads them."""

    input_tokens: list = field(default_factory=list)
    input_top: list = field(default_factory=list)
    output_tokens: list = field(default_factory=list)
    output_top: list = field(default_factory=list)
    cursor: LogprobCursor = field(default_factory=LogprobCursor)  # output entries streamed so far

    def drop_prompt(self) -> None:
        """Forget the prompt's logprobs (recomputed after a retraction cut them short)."""
        self.input_tokens.clear()
        self.input_top.clear()


@dataclass(eq=False)
class StreamBuffer:
    """What a streamed request's next `StreamDelta` carries. Postprocessing and
    jump-forward add to it; delivery empties it into a delta (`clear`)."""

    text: str = ""  # decoded, not yet streamed
    ids: list[int] = field(default_factory=list)
    retract: int = 0  # streamed ids that jump-forward dropped (StreamDelta.retract)
    num_streamed: int = 0  # output ids the stream's consumer holds (its deltas applied)

    def clear(self) -> None:
        self.text, self.ids, self.retract = "", [], 0


@dataclass(eq=False)
class JumpState:
    """Jump-forward's per-request state (jump_forward.py), counted for ``meta_info``."""

    forced_tokens: int = 0  # tokens appended without sampling (meta_info jump_forward_tokens)
    dropped_tokens: int = 0  # earlier output tokens they replaced (jump_forward_retokenized)
    floor: int = 0  # output tokens before this index are never re-tokenized (JumpForward.settled)


@dataclass(eq=False)
class Req:
    """One request (one sample of a prompt) inside the engine: what the caller asked for,
    its output so far, and its state in named parts: ``kv`` (`KVRegion`, the cache
    manager's), ``logprobs`` (`LogprobState`), ``stream_buf`` (`StreamBuffer`) and
    ``jump`` (`JumpState`)."""

    rid: str
    group_rid: str  # the rid the caller knows (abort target); == rid unless n > 1
    origin_input_ids: list[int]
    params: SamplingParams
    emit: Callable[[Any], None]  # thread-safe: delivers StreamDelta / Output / Exception
    stream: bool = False
    sample_index: int = 0  # which of its prompt's n samples (StreamDelta.index)
    detok: Any = None  # per-request incremental detokenizer + stop checker
    grammar: GrammarHook | None = None
    generator: torch.Generator | None = None
    output_ids: list[int] = field(default_factory=list)
    created_at: float = field(default_factory=time.perf_counter)
    session_id: str | None = None  # the session (furca/radix/leases.py) whose pin it moves on finishing
    session_meta: dict | None = None  # that pin's meta_info entries (session_id, pinned_tokens, pin_refused)

    # scheduling state
    cached_tokens: int = 0  # prompt tokens the radix cache held at the first admission
    num_retractions: int = 0
    is_admitted_once: bool = False
    finished_reason: dict | None = None

    kv: KVRegion = field(default_factory=KVRegion)
    logprobs: LogprobState = field(default_factory=LogprobState)
    stream_buf: StreamBuffer = field(default_factory=StreamBuffer)
    jump: JumpState = field(default_factory=JumpState)
    spec: Any = None  # speculative decoding's SpecState (furca/runtime/speculative/state.py), when it drafts

    # -- token views -------------------------------------------------------------------

    @property
    def prompt_len(self) -> int:
        return len(self.origin_input_ids)

    @property
    def fill_len(self) -> int:
        return len(self.origin_input_ids) + len(self.output_ids)

    def tokens(self, start: int, end: int) -> list[int]:
        """fill[start:end] without building the whole list."""
        n = len(self.origin_input_ids)
        if start >= n:
            return self.output_ids[start - n : end - n]
        if end <= n:
            return self.origin_input_ids[start:end]
        return self.origin_input_ids[start:] + self.output_ids[: end - n]

    @property
    def extend_len(self) -> int:
        """Tokens left to compute before the next sample."""
        return self.fill_len - self.kv.kv_len

    # -- logprob ranges ----------------------------------------------------------------

    @property
    def wants_prompt_logprobs(self) -> bool:
        return self.params.return_logprob and self.params.logprob_start_len >= 0

    @property
    def max_prefix_len(self) -> int:
        """Longest radix match this request may use: at least one token is always
        computed (its logits give the next token), and prompt logprobs from position s
        need the logits of position s - 1, so that position must be computed."""
        limit = self.fill_len - 1
        if self.wants_prompt_logprobs and len(self.logprobs.input_tokens) < self.num_prompt_logprobs:
            limit = min(limit, max(self.params.logprob_start_len - 1, 0))
        first = self.first_output_logprob_position
        if first is not None:
            limit = min(limit, first)
        return max(limit, 0)

    @property
    def first_output_logprob_position(self) -> int | None:
        """Position whose logits score the first output token without a logprob yet, or
        None. Only jump-forward leaves such tokens (forced, appended without sampling):
        they are scored like prompt tokens when the next forward pass computes them, so
        until then ``kv.kv_len`` must not pass this position (see `JumpForward.apply`)."""
        n = len(self.logprobs.output_tokens)
        if not self.params.return_logprob or n >= len(self.output_ids):
            return None
        return self.prompt_len + n - 1

    @property
    def num_prompt_logprobs(self) -> int:
        if not self.wants_prompt_logprobs:
            return 0
        return max(self.prompt_len - self.params.logprob_start_len, 0)

    @property
    def remaining_new_tokens(self) -> int:
        return max(self.params.max_new_tokens - len(self.output_ids), 0)

    @property
    def is_finished(self) -> bool:
        return self.finished_reason is not None

    @property
    def e2e_latency(self) -> float:
        return time.perf_counter() - self.created_at
