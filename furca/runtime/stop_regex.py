"""``stop_regex``: stop when the output text matches a pattern, streaming-safe.

Semantics (SGLang's): after each output token (or jump-forward text) the output text is
searched with each pattern, ``re.search``-style; the first step at which a pattern
matches ends the request, the text cut at the start of the leftmost match (the end with
``no_stop_trim``). Patterns use Python's ``re`` syntax, compiled by the `regex` package
(a superset: ``\\p{L}`` works too), whose ``partial=True`` search also says where a match
*could still begin* once more text arrives: text from there on is held back from a
streaming client, so a client never sees text that turns out to be part of a match.

Cost: each pattern is searched only from the leftmost place a match can still begin
(where its last partial match began, or the end of the text), so a step costs the
held-back window, not the whole output. A search is bounded by ``STEP_TIMEOUT`` seconds
per request and step (shared by its patterns); over it, or on any other failure inside
the regex engine, `search` raises `StopRegexError` and the caller aborts that one
request. Patterns are validated (`compile_pattern`) when `SamplingParams` is built.

Edge: a pattern whose match depends on text after a non-consuming assertion at the end
(``a\\B``) may match starting in text already streamed; the cut is then moved to the
end of the streamed text (it cannot be taken back). Such patterns are rare in practice.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass
from typing import Sequence

from furca.errors import FurcaError, SamplingParamsError

MAX_PATTERNS = 32  # SGLang's caps
MAX_PATTERN_BYTES = 256
STEP_TIMEOUT = 0.2  # seconds of regex search per request and step, all its patterns together


class StopRegexError(FurcaError):
    """A stop_regex search failed or ran past its time budget (the request is aborted)."""


@functools.lru_cache(maxsize=1024)
def compile_pattern(pattern: str):
    """The compiled pattern (cached). Raises SamplingParamsError naming the pattern if it
    is not a string, too long, invalid, or matches the empty string (it would stop before
    any output)."""
    import regex

    if not isinstance(pattern, str):
        raise SamplingParamsError(f"sampling parameter stop_regex: {pattern!r} is not a string")
    size = len(pattern.encode("utf-8"))
    if size > MAX_PATTERN_BYTES:
        raise SamplingParamsError(
            f"sampling parameter stop_regex: pattern {pattern!r} is {size} bytes, over the {MAX_PATTERN_BYTES}-byte limit")
    try:
        compiled = regex.compile(pattern)
    except regex.error as e:
        raise SamplingParamsError(f"sampling parameter stop_regex: invalid pattern {pattern!r}: {e}") from None
    except (RecursionError, OverflowError, ValueError) as e:
        raise SamplingParamsError(f"sampling parameter stop_regex: pattern {pattern!r} cannot be compiled: {e}") from None
    try:
        empty = compiled.search("", timeout=STEP_TIMEOUT)
    except TimeoutError:
        empty = None
    if empty is not None:
        raise SamplingParamsError(
            f"sampling parameter stop_regex: pattern {pattern!r} matches the empty string, so it would stop "
            "before any output; anchor it on some text")
    return compiled


def check_patterns(patterns: Sequence[str]) -> None:
    """Validate a request's patterns (count and each pattern); raises SamplingParamsError."""
    if len(patterns) > MAX_PATTERNS:
        raise SamplingParamsError(
            f"sampling parameter stop_regex: at most {MAX_PATTERNS} patterns are allowed, got {len(patterns)}")
    for p in patterns:
        compile_pattern(p)


@dataclass(frozen=True)
class RegexMatch:
    start: int
    end: int
    pattern: str


class StopRegex:
    """The stop_regex state of one request: per pattern, where a match can still begin."""

    def __init__(self, patterns: Sequence[str]):
        self.patterns = tuple(patterns)
        self._compiled = [compile_pattern(p) for p in self.patterns]
        self._pos = [0] * len(self.patterns)

    def skip_to(self, pos: int) -> None:
        """No match may begin before ``pos`` (text streamed while stopping was not allowed)."""
        self._pos = [max(p, pos) for p in self._pos]

    def search(self, text: str) -> tuple[RegexMatch | None, int]:
        """-> (the leftmost full match, longest on a tie; or None, the leftmost place a
        match could still begin: ``len(text)`` if none). Raises StopRegexError."""
        deadline = time.monotonic() + STEP_TIMEOUT
        best: RegexMatch | None = None
        hold = len(text)
        for i, (pattern, compiled) in enumerate(zip(self.patterns, self._compiled)):
            left = deadline - time.monotonic()
            if left <= 0:
                raise StopRegexError(f"stop_regex {pattern!r} was not searched: the step's "
                                     f"{STEP_TIMEOUT:g} s budget for stop_regex ran out")
            try:
                m = compiled.search(text, self._pos[i], partial=True, timeout=left)
            except TimeoutError:
                raise StopRegexError(f"stop_regex {pattern!r} took over {STEP_TIMEOUT:g} s to search "
                                     f"{len(text) - self._pos[i]} characters; simplify the pattern") from None
            except Exception as e:  # noqa: BLE001 - whatever the regex engine raises ends this request only
                raise StopRegexError(f"stop_regex {pattern!r} failed: {type(e).__name__}: {e}") from None
            if m is None:
                self._pos[i] = len(text)
            elif m.partial:
                self._pos[i] = m.start()
                hold = min(hold, m.start())
            elif best is None or (m.start(), -m.end()) < (best.start, -best.end):
                best = RegexMatch(m.start(), m.end(), pattern)
        return best, hold
