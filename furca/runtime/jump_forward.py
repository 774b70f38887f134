"""Jump-forward (SGLang's compressed FSM): where the grammar allows exactly one
continuation, append it without sampling.

After a sampled token is accepted, ``s = matcher.jump_forward()``. If ``s`` is not
empty it is appended as tokens, re-tokenized at the boundary: the last few output
tokens are decoded, ``s`` appended, the text encoded again; the common token prefix is
kept, the old tokens after it are dropped (the matcher rolls them back, the scheduler
frees their KV) and the new tokens accepted. They are the request's extend tokens of
its next forward pass (several tokens in one pass), so the KV always matches the final
token sequence. The text changes only by ``s`` appended, so streamed text stays a
prefix of the final text.

`plan_jump` is the pure part (tokens in, tokens out, checked: the new tail decodes, in
context, to the old text + ``s``); `JumpForward.apply` moves a request (output ids,
matcher, detokenizer, stream buffer, logprobs, and ``kv.rollback_to`` for the cache manager).

Streaming: a dropped token that was already streamed is taken back through the next
`StreamDelta`'s ``retract`` (``req.stream_buf.retract``); one not streamed yet is simply
not sent.

Settled tokens: a jump re-tokenizes at most the last ``window`` output tokens, and never
those before ``req.jump.floor``, the start of the latest jump's window (it only matters
after a jump that shortened the output). So the tokens before ``max(jump.floor, len + 1 -
window)`` can never be dropped again (`JumpForward.settled`): streams that cannot take
entries back send logprobs up to there (``StreamDelta.settled``).

Logprobs (``return_logprob``): the logprobs of dropped tokens are dropped with them (the
request's ``logprobs.cursor`` learns the lowest index, so the next stream delta resends
from there, see ``StreamDelta.logprob_retract``). The
forced tokens are scored like prompt tokens by the pass that computes them (their
predecessors' logits, no mask, no temperature; `Postprocessor._forced_logprobs`), so
``kv.rollback_to`` also moves back to the position whose logits score the first of them
(``Req.first_output_logprob_position``), one position before it when tokens were dropped.
A request that ends on forced tokens (a stop string in them, ``max_new_tokens``) gets
that pass before its result is delivered.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Sequence

from furca.runtime.detokenizer import PROMPT_CONTEXT_TOKENS
from furca.runtime.request import Req

logger = logging.getLogger("furca")

WINDOW = 6  # output tokens re-tokenized together with the forced text
CONTEXT = 4  # tokens before the window decoded as left context for the check


@dataclass
class JumpPlan:
    drop: int  # output tokens removed from the end
    new_ids: list[int]  # tokens appended after the drop


def _decode(tokenizer: Any, ids: Sequence[int]) -> str:
    return tokenizer.decode(list(ids), skip_special_tokens=False) if ids else ""


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def plan_jump(tokenizer: Any, prompt_ids: Sequence[int], output_ids: Sequence[int], text: str,
              vocab_size: int, window: int = WINDOW, context: int = CONTEXT) -> JumpPlan | None:
    """How to append ``text`` to ``output_ids``: re-encode the last ``window`` output
    tokens' text + ``text``, keep the common token prefix. None when it cannot be done
    exactly (the new tokens would not decode, in context, to the old text + ``text``;
    a token outside the model's vocabulary)."""
    if not text:
        return None
    n = len(output_ids)
    w = min(window, n)
    tail_text = _decode(tokenizer, output_ids[n - w:])
    while w > 0 and tail_text.startswith("\ufffd"):  # the window starts inside a character
        w -= 1
        tail_text = _decode(tokenizer, output_ids[n - w:])
    tail = list(output_ids[n - w:])
    ids = tokenizer.encode(tail_text + text, add_special_tokens=False)
    keep = _common_prefix(tail, ids)
    new_ids = list(ids[keep:])
    if not new_ids or any(not 0 <= t < vocab_size for t in new_ids):
        return None
    before = list(prompt_ids) + list(output_ids[: n - w])
    ctx = before[-context:] if context else []
    old = _decode(tokenizer, ctx + tail)
    new = _decode(tokenizer, ctx + tail[:keep] + new_ids)
    if new != old + text:
        return None
    return JumpPlan(drop=w - keep, new_ids=new_ids)


def forced_text(grammar: Any) -> str:
    """The text jump-forward appends: the grammar's forced continuation less trailing
    whitespace. A forced trailing space would become its own token (``" "``) and the
    model would then choose the next word after a token it never sees there (`` Paris``
    is one token); leaving it to sampling keeps the choice natural (the mask forces a
    token that starts with it)."""
    return grammar.jump_forward().rstrip()


class JumpForward:
    """Applies jump-forward to a request right after its sampled token was accepted."""

    def __init__(self, tokenizer: Any, vocab_size: int, window: int = WINDOW):
        self.tokenizer = tokenizer
        self.vocab_size = vocab_size
        self.window = window

    def settled(self, req: Req) -> int:
        """How many leading output tokens of ``req`` no later jump drops: the next jump
        follows at least one more sampled token, so its window starts at ``len + 1 -
        window`` or later, and never before ``jump.floor`` (which only grows)."""
        n = len(req.output_ids)
        if req.grammar is None or req.is_finished:
            return n
        return max(0, min(n, max(req.jump.floor, n + 1 - self.window)))

    def apply(self, req: Req, *, initial: bool = False) -> dict | None:
        """Append the grammar's forced text to ``req`` if any; return a finish reason
        (a stop string inside the forced text, or max_new_tokens reached) or None.
        ``initial``: before the first forward pass (nothing sampled yet; at least one
        token is left to sample)."""
        g = req.grammar
        p = req.params
        if g is None or not req.detok.can_append_forced:
            return None
        if not hasattr(g, "rollback"):
            return None
        try:
            text = forced_text(g)
            if not text:
                return None
            window = min(self.window, len(req.output_ids) - req.jump.floor)
            plan = plan_jump(self.tokenizer, req.origin_input_ids, req.output_ids, text, self.vocab_size, window)
        except Exception:  # noqa: BLE001 - never take the scheduler down: sample instead
            logger.exception("jump-forward failed for request %s; sampling instead", req.rid)
            return None
        if plan is None:
            return None
        drop, new = plan.drop, plan.new_ids
        n = len(req.output_ids)
        total = n - drop + len(new)
        if total > p.max_new_tokens or (initial and total >= p.max_new_tokens):
            return None  # let the model sample the rest; length ends it as usual
        stop_ids = set(p.stop_token_ids) | set(getattr(req.detok.checker, "stop_ids", ()))
        if stop_ids.intersection(new):
            return None
        old_tail = req.output_ids[n - drop:]
        g.rollback(drop)
        for i, t in enumerate(new):
            if not g.accept_token(t):
                g.rollback(i)  # undo: back to the state before the jump
                for o in old_tail:
                    g.accept_token(o)
                return None
        del req.output_ids[n - drop:]
        lp, buf, jump = req.logprobs, req.stream_buf, req.jump
        if len(lp.output_tokens) > n - drop:
            del lp.output_tokens[n - drop:]
            del lp.output_top[n - drop:]
            lp.cursor.deleted_from(n - drop)
        jump.floor = max(jump.floor, n - window)
        req.output_ids.extend(new)
        stale = req.prompt_len + n - drop  # KV positions from here on held the old tokens
        first = req.first_output_logprob_position  # logits that score the first forced token
        if first is not None:
            stale = min(stale, first)
        kv = req.kv
        kv.rollback_to = stale if kv.rollback_to is None else min(kv.rollback_to, stale)
        k = min(drop, len(buf.ids))  # a dropped token not streamed yet is simply not sent
        if k:
            del buf.ids[-k:]
        buf.retract += drop - k  # the rest was streamed: the next delta takes it back
        buf.ids.extend(new)
        jump.forced_tokens += len(new)
        jump.dropped_tokens += drop
        context = req.tokens(max(req.fill_len - PROMPT_CONTEXT_TOKENS, 0), req.fill_len)
        delta, reason = req.detok.append_forced(text, len(new) - drop, context)
        buf.text += delta
        return reason
