"""Incremental detokenization, stop conditions and stream hold-back for one request.

- ``IncrementalDetokenizer``: token ids in, text deltas out, O(1) work per token (it
  decodes a small window, the prefix-offset / read-offset technique of vLLM and SGLang),
  never ending a delta inside a UTF-8 character.
- ``StopChecker``: stop token ids / EOS, stop strings (also across token boundaries) and
  stop_regex patterns (`stop_regex.StopRegex`).
- ``OutputTextState``: the two together plus hold-back, so a streaming client never sees
  any part of a stop string or of a stop_regex match. The engine calls ``append`` once
  per output token and ``finish`` when it ends the request itself (length, abort).

The ``tokenizer`` is anything with ``decode(ids, skip_special_tokens=...) -> str``: a
``transformers`` tokenizer, a ``tokenizers.Tokenizer``, or furca's wrapper.
"""

from __future__ import annotations

from typing import Any, Sequence

from furca.runtime.output import finish_abort, finish_stop
from furca.runtime.sampling_params import SamplingParams
from furca.runtime.stop_regex import StopRegex, StopRegexError

REPLACEMENT_CHAR = "\ufffd"
# Prompt tokens decoded as left context, so the first output token gets its leading space
# (SentencePiece) right; SGLang uses the same number.
PROMPT_CONTEXT_TOKENS = 5


class IncrementalDetokenizer:
    """Text deltas for a stream of token ids.

    Invariant: ``prefix_offset <= read_offset <= len(ids)``; the text of
    ``ids[prefix_offset:read_offset]`` has been emitted (it is decoded again only as left
    context), ``ids[read_offset:]`` not yet. ``add`` emits ``decode(ids[prefix:]) -
    decode(ids[prefix:read])`` unless that ends in U+FFFD (an incomplete UTF-8 sequence),
    in which case it holds the tokens back. Without ``prompt_ids``, the concatenation of
    all deltas plus ``flush()`` equals ``decode(output_ids)`` for byte-level BPE
    tokenizers; with them, it is the continuation of the prompt's text.
    """

    def __init__(
        self,
        tokenizer: Any,
        prompt_ids: Sequence[int] | None = None,
        skip_special_tokens: bool = True,
        spaces_between_special_tokens: bool = True,
    ) -> None:
        self._tokenizer = tokenizer
        self._kwargs: dict[str, Any] = {"skip_special_tokens": skip_special_tokens}
        if not spaces_between_special_tokens:  # only slow HF tokenizers know this option
            self._kwargs["spaces_between_special_tokens"] = False
        self._ids: list[int] = list(prompt_ids[-PROMPT_CONTEXT_TOKENS:]) if prompt_ids else []
        self._prefix_offset = 0
        self._read_offset = len(self._ids)
        self._prefix_text: str | None = None  # cached decode(ids[prefix:read])

    def _decode(self, ids: list[int]) -> str:
        if not ids:
            return ""
        try:
            return self._tokenizer.decode(ids, **self._kwargs)
        except TypeError:
            if "spaces_between_special_tokens" not in self._kwargs:
                raise
            del self._kwargs["spaces_between_special_tokens"]
            return self._tokenizer.decode(ids, **self._kwargs)

    def add(self, token_id: int) -> str:
        """Append one token; return the newly completed text (possibly "")."""
        self._ids.append(int(token_id))
        return self._advance(final=False)

    @property
    def has_pending(self) -> bool:
        """Whether tokens were added whose text is not out yet (held back)."""
        return self._read_offset < len(self._ids)

    def reset_context(self, context_ids: Sequence[int]) -> None:
        """Forget the window: ``context_ids`` (the last tokens of the sequence, all of
        them already read) become the left context of the next token (jump-forward
        replaced the tail of the output)."""
        self._ids = list(context_ids)[-PROMPT_CONTEXT_TOKENS:]
        self._prefix_offset = 0
        self._read_offset = len(self._ids)
        self._prefix_text = None

    def flush(self) -> str:
        """Return the held-back rest (may end in U+FFFD if the output ends mid-character)."""
        if self._read_offset == len(self._ids):
            return ""
        return self._advance(final=True)

    def _advance(self, final: bool) -> str:
        if self._prefix_text is None:
            self._prefix_text = self._decode(self._ids[self._prefix_offset : self._read_offset])
        new_text = self._decode(self._ids[self._prefix_offset :])
        if not final and (len(new_text) <= len(self._prefix_text) or new_text.endswith(REPLACEMENT_CHAR)):
            return ""
        delta = new_text[len(self._prefix_text) :]
        # Slide the window: the tokens just read become the next left context.
        del self._ids[: self._read_offset]
        self._prefix_offset, self._read_offset = 0, len(self._ids)
        self._prefix_text = None
        return delta


class StopChecker:
    """Stop conditions of one request.

    - Token: ``token_id`` in ``stop_token_ids``, or in ``eos_ids`` unless ``ignore_eos``;
      only for a token at index ``>= min_new_tokens`` (the sampler blocks those before).
    - String: the earliest occurrence of any ``stop`` string, once at least
      ``min_new_tokens`` tokens are out (SGLang's rule).
    - Regex: ``regex`` (a `StopRegex` over ``stop_regex``, or None), under the same rule.
    """

    def __init__(
        self,
        stop: Sequence[str] = (),
        stop_token_ids: Sequence[int] = (),
        eos_ids: Sequence[int] = (),
        ignore_eos: bool = False,
        min_new_tokens: int = 0,
        stop_regex: Sequence[str] = (),
    ) -> None:
        self.stop = tuple(s for s in stop if s)
        self.regex = StopRegex(stop_regex) if stop_regex else None
        self.stop_ids = frozenset(stop_token_ids) | (frozenset() if ignore_eos else frozenset(eos_ids))
        self.min_new_tokens = min_new_tokens

    def check_token(self, token_id: int, num_tokens: int) -> dict | None:
        """``num_tokens``: output tokens so far, this one included."""
        if token_id in self.stop_ids and num_tokens > self.min_new_tokens:
            return finish_stop(int(token_id))
        return None

    def can_stop_on_string(self, num_tokens: int) -> bool:
        return (bool(self.stop) or self.regex is not None) and num_tokens >= self.min_new_tokens

    def find_stop_string(self, text: str, start: int) -> tuple[int, str] | None:
        """Earliest ``(position, stop_string)`` with position ``>= start``, or None."""
        best: tuple[int, str] | None = None
        for s in self.stop:
            pos = text.find(s, start)
            if pos >= 0 and (best is None or pos < best[0] or (pos == best[0] and len(s) > len(best[1]))):
                best = (pos, s)
        return best

    def holdback_len(self, text: str, start: int) -> int:
        """Length of the longest suffix of ``text[start:]`` that is a proper prefix of a
        stop string: text that must not be streamed yet."""
        tail_len = len(text) - start
        best = 0
        for s in self.stop:
            for k in range(min(len(s) - 1, tail_len), best, -1):
                if text.endswith(s[:k]):
                    best = k
                    break
        return best


class OutputTextState:
    """Detokenizer + stop checking + stream hold-back for one request's output.

    ``append(token_id) -> (delta, finish_reason | None)``: ``delta`` is text the client may
    see now. Text that could be the start of a stop string or of a stop_regex match is held
    back until it is resolved. On a stop string or regex match the visible text ends just
    before it (``no_stop_trim``: just after it); the earliest wins (a stop string on a
    tie). On a stop token the token's text is left out (``no_stop_trim``: kept). A
    stop_regex search that fails or runs out of time ends the request with an abort.
    ``finish(reason)`` (length / abort, decided by the engine) returns the held-back rest.
    ``text`` is all text decoded so far; after finishing, the final visible text.
    """

    def __init__(
        self,
        tokenizer: Any,
        params: SamplingParams,
        *,
        eos_ids: Sequence[int] = (),
        prompt_ids: Sequence[int] | None = None,
    ) -> None:
        self.detokenizer = IncrementalDetokenizer(
            tokenizer, prompt_ids, params.skip_special_tokens, params.spaces_between_special_tokens
        )
        self.checker = StopChecker(
            params.stop, params.stop_token_ids, eos_ids, params.ignore_eos, params.min_new_tokens,
            params.stop_regex,
        )
        self.no_stop_trim = params.no_stop_trim
        self.num_tokens = 0
        self.finish_reason: dict | None = None
        self._text = ""
        self._emitted = 0

    @property
    def text(self) -> str:
        return self._text

    @property
    def is_finished(self) -> bool:
        return self.finish_reason is not None

    def append(self, token_id: int) -> tuple[str, dict | None]:
        if self.finish_reason is not None:
            raise RuntimeError(f"append after the request finished ({self.finish_reason})")
        self.num_tokens += 1
        reason = self.checker.check_token(token_id, self.num_tokens)
        if reason is not None:
            if self.no_stop_trim:
                self._text += self.detokenizer.add(token_id)
            self._text += self.detokenizer.flush()
            return self._end(reason, len(self._text))

        self._text += self.detokenizer.add(token_id)
        return self._visible()

    @property
    def can_append_forced(self) -> bool:
        """Whether `append_forced` may run now: not finished, nothing held back in the
        detokenizer (the text so far is exactly the decoded output)."""
        return self.finish_reason is None and not self.detokenizer.has_pending

    def append_forced(self, text: str, num_tokens_delta: int, context_ids: Sequence[int]) -> tuple[str, dict | None]:
        """Jump-forward: the output's tail was re-tokenized so that the output now decodes
        to the old text + ``text`` (the caller checked that); ``num_tokens_delta`` tokens
        more than before; ``context_ids``: the sequence's last tokens, left context of the
        next one. Stop strings are checked over ``text`` as over sampled text; stop
        token ids are the caller's business (it keeps them out of forced tokens)."""
        if not self.can_append_forced:
            raise RuntimeError("append_forced while the detokenizer holds text back or after the end")
        self.num_tokens += num_tokens_delta
        self.detokenizer.reset_context(context_ids)
        self._text += text
        return self._visible()

    def _visible(self) -> tuple[str, dict | None]:
        text, regex = self._text, self.checker.regex
        end = len(text)
        if self.checker.can_stop_on_string(self.num_tokens):
            cut = None  # (start, end, matched) of the earliest stop string / regex match
            match = self.checker.find_stop_string(text, self._emitted)
            if match is not None:
                cut = (match[0], match[0] + len(match[1]), match[1])
            if regex is not None:
                try:
                    found, could_begin = regex.search(text)
                except StopRegexError as e:
                    return self._end(finish_abort(str(e)), len(text))
                if found is not None and (cut is None or found.start < cut[0]):
                    # never cut into text a client already has (see stop_regex.py, "Edge")
                    cut = (max(found.start, self._emitted), max(found.end, self._emitted), found.pattern)
                end = could_begin
            if cut is not None:
                return self._end(finish_stop(cut[2]), cut[1] if self.no_stop_trim else cut[0])
            end = min(end, len(text) - self.checker.holdback_len(text, self._emitted))
        elif regex is not None:
            regex.skip_to(len(text))  # streamed before stopping was allowed: no match begins there
        end = max(end, self._emitted)
        delta = text[self._emitted : end]
        self._emitted = end
        return delta, None

    def finish(self, reason: dict) -> str:
        """End the request for ``reason`` (e.g. ``finish_length(n)``); return the rest of
        the text to stream. A no-op returning "" if it already finished."""
        if self.finish_reason is not None:
            return ""
        self._text += self.detokenizer.flush()
        return self._end(reason, len(self._text))[0]

    def _end(self, reason: dict, text_end: int) -> tuple[str, dict]:
        self._text = self._text[:text_end]
        delta = self._text[self._emitted :]
        self._emitted = len(self._text)
        self.finish_reason = reason
        return delta, reason
