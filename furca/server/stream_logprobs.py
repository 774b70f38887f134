"""Per-chunk logprobs of streamed OpenAI answers, built from the engine's stream deltas.

An OpenAI stream cannot take back what it sent, while the engine's deltas may retract
logprob entries (jump-forward re-tokenizing tokens of a constrained request). So
`SettledLogprobs`, one per choice, applies every delta's segment (`StreamDelta.
apply_logprobs`) and releases only entries that no later delta changes (before the
delta's ``settled``; all of them at the end): a constrained request's last few entries
(at most 6) ride on a later chunk, an unconstrained request's go out with their tokens.

- `chat_logprobs_chunk`: ``{"content": [...], "refusal": None}`` of the released entries,
  the items `openai_format.chat_logprob_items` builds for whole answers.
- `CompletionLogprobs`: ``tokens`` / ``token_logprobs`` / ``top_logprobs`` /
  ``text_offset`` of the released entries, the echoed prompt's first (on the chunk that
  carries the echo). Token texts come from one incremental detokenizer per choice, as
  `scoring.completion_logprobs` builds them for whole answers, and offsets continue across
  chunks; a token whose text may still grow at the end (an unfinished character) waits
  for the next chunk, so the held-back rest lands on it as in the whole answer.

Contract: concatenated over a choice's chunks, each list equals the non-streamed answer's.
"""

from __future__ import annotations

from typing import Any, Sequence

from furca.runtime.detokenizer import IncrementalDetokenizer
from furca.runtime.output import StreamDelta
from furca.server import openai_format as fmt
from furca.server.scoring import format_logprobs, token_texts


class SettledLogprobs:
    """One choice's output logprobs so far; `feed` returns the entries released by a delta."""

    def __init__(self, top: bool):
        self.entries: list = []
        self.tops: list | None = [] if top else None
        self.released = 0

    def feed(self, delta: StreamDelta) -> tuple[list, list]:
        """-> (entries, their top alternatives or Nones) that became final with ``delta``."""
        if delta.output_token_logprobs is None:
            return [], []
        if len(self.entries) - delta.logprob_retract < self.released:
            raise RuntimeError(f"the engine took back logprob entries already streamed (request {delta.rid}; "
                               f"settled was {self.released})")
        delta.apply_logprobs(self.entries, self.tops)
        n = len(self.entries)
        settled = n if delta.finished or delta.settled is None else min(delta.settled, n)
        start, end = self.released, max(self.released, settled)
        self.released = end
        tops = self.tops[start:end] if self.tops is not None else [None] * (end - start)
        return self.entries[start:end], tops


def chat_logprobs_chunk(feed: SettledLogprobs, delta: StreamDelta, num_top: int) -> list[dict[str, Any]]:
    """The ``logprobs.content`` items a chat chunk carries for ``delta`` (maybe none)."""
    entries, tops = feed.feed(delta)
    return fmt.chat_logprob_items(entries, tops, num_top)


class CompletionLogprobs:
    """One choice of a streamed completion: `chunk(delta)` -> the chunk's ``logprobs`` or None."""

    def __init__(self, tokenizer: Any, prompt_ids: Sequence[int], num_top: int, echo: bool):
        self.tokenizer, self.prompt_ids, self.num_top = tokenizer, list(prompt_ids), num_top
        self.settled = SettledLogprobs(top=num_top > 0)
        self.detok = IncrementalDetokenizer(tokenizer, prompt_ids=self.prompt_ids or None, skip_special_tokens=True)
        self.prompt_pending = echo
        self.held: list[list] = []  # [entry, top, text]: released, not sent yet
        self.offset = 0

    def needs_prompt(self, delta: StreamDelta) -> bool:
        """Whether `chunk(delta)` decodes the echoed prompt (worth a worker thread)."""
        return self.prompt_pending and delta.input_token_logprobs is not None

    def chunk(self, delta: StreamDelta) -> dict[str, Any] | None:
        parts: list[list] = []
        if self.needs_prompt(delta):
            self.prompt_pending = False
            entries = delta.input_token_logprobs
            if len(entries) != len(self.prompt_ids):
                raise RuntimeError(f"the engine scored {len(entries)} of {len(self.prompt_ids)} prompt tokens (a bug)")
            tops = delta.input_top_logprobs or [None] * len(entries)
            parts += [list(x) for x in zip(entries, tops, token_texts(self.tokenizer, self.prompt_ids))]
        entries, tops = self.settled.feed(delta)
        self.held += [[e, t, self.detok.add(e[1])] for e, t in zip(entries, tops)]
        if delta.finished:
            if self.held:
                self.held[-1][2] += self.detok.flush()
            parts, self.held = parts + self.held, []
        elif self.held and self.detok.has_pending:  # its text may still grow: the last token waits
            parts, self.held = parts + self.held[:-1], self.held[-1:]
        else:
            parts, self.held = parts + self.held, []
        return self._format(parts) if parts else None

    def _format(self, parts: list[list]) -> dict[str, Any]:
        entries, tops, tokens = zip(*parts)
        out = format_logprobs(entries, tops, tokens, self.num_top, self.offset)
        self.offset += sum(len(t) for t in tokens)
        return out
