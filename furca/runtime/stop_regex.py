"""``stop_regex``: stop when the output text matches a pattern, streaming-safe.

Semantics (SGLang's): after each output token (or jump-forward text) the output text is
searched with each pattern, ``re.search``-style; the first step at which a pattern
matches ends the request, the text cut at the start of the leftmost match (the end with
``no_stop_trim``). Patterns use Python's ``re`` syntax (checked with ``re``'s parser) and
run on the `regex` package, whose ``partial=True`` search also says where a match
*could still begin* once more text arrives: text from there on is held back from a
streaming client, so a client never sees text that turns out to be part of a match.

Compiling is bounded too: a pattern must parse as Python ``re`` syntax, and its fixed
repeats may expand to at most ``MAX_EXPANSION`` units (the `regex` package unrolls the
lower bound of a count, so ``(?:a{1000}){1000}`` would take gigabytes to compile).

Cost: each pattern is searched only from the leftmost place a match can still begin
(where its last partial match began, or the end of the text), so a step costs the
held-back window, not the whole output. A search is bounded by ``STEP_TIMEOUT`` seconds
per request and step (shared by its patterns) and ``TOTAL_TIMEOUT`` over the request's
life (a pattern just under the step limit cannot slow every step); over either, or on
any other failure inside
the regex engine, `search` raises `StopRegexError` and the caller aborts that one
request. Patterns are validated (`compile_pattern`) when `SamplingParams` is built.

Edge: a pattern whose match depends on text after a non-consuming assertion at the end
(``a\\B``) may match starting in text already streamed; the cut is then moved to the
end of the streamed text (it cannot be taken back). Such patterns are rare in practice.
"""

from __future__ import annotations

import functools
import re
import time
from dataclasses import dataclass
from typing import Sequence

from furca.errors import FurcaError, SamplingParamsError

try:  # Python 3.11+
    import re._constants as _sre_constants
    import re._parser as _sre_parse
except ImportError:  # pragma: no cover - Python 3.10
    import sre_constants as _sre_constants
    import sre_parse as _sre_parse

MAX_PATTERNS = 32  # SGLang's caps
MAX_PATTERN_BYTES = 256
MAX_EXPANSION = 2_000  # elements after unrolling counted repeats' lower bounds (~0.5 MB compiled)
STEP_TIMEOUT = 0.2  # seconds of regex search per request and step, all its patterns together
TOTAL_TIMEOUT = 2.0  # seconds of regex search per request, over its whole life


class StopRegexError(FurcaError):
    """A stop_regex search failed or ran past its time budget (the request is aborted)."""


@functools.lru_cache(maxsize=256)  # at most ~128 MB of compiled patterns
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
            f"sampling parameter stop_regex: pattern {pattern!r} is {size} bytes, "
            f"over the {MAX_PATTERN_BYTES}-byte limit")
    try:
        parsed = _sre_parse.parse(pattern)
    except re.error as e:
        raise SamplingParamsError(f"sampling parameter stop_regex: invalid pattern {pattern!r}: {e} "
                                  "(Python re syntax)") from None
    except (RecursionError, OverflowError) as e:
        raise SamplingParamsError(f"sampling parameter stop_regex: pattern {pattern!r} cannot be parsed: {e}") from None
    size = _expanded_size(parsed)
    if size > MAX_EXPANSION:
        raise SamplingParamsError(
            f"sampling parameter stop_regex: pattern {pattern!r} unrolls to over {MAX_EXPANSION} elements "
            "(counted repeats multiply); use smaller counts")
    try:
        compiled = regex.compile(pattern)
    except regex.error as e:
        raise SamplingParamsError(f"sampling parameter stop_regex: invalid pattern {pattern!r}: {e}") from None
    except (RecursionError, OverflowError, ValueError, MemoryError) as e:
        raise SamplingParamsError(
            f"sampling parameter stop_regex: pattern {pattern!r} cannot be compiled: {e}") from None
    try:
        empty = compiled.search("", timeout=STEP_TIMEOUT)
    except TimeoutError:
        empty = None
    if empty is not None:
        raise SamplingParamsError(
            f"sampling parameter stop_regex: pattern {pattern!r} matches the empty string, so it would stop "
            "before any output; anchor it on some text")
    return compiled


_REPEATS = {_sre_constants.MAX_REPEAT, _sre_constants.MIN_REPEAT, getattr(_sre_constants, "POSSESSIVE_REPEAT", None)}


def _expanded_size(parsed) -> int:
    """Elements of a parsed pattern once every count's lower bound is unrolled (an
    overestimate: branches add up). Stops counting past MAX_EXPANSION."""
    total = 0
    for op, av in parsed:
        if op in _REPEATS:
            lo, _hi, sub = av
            total += max(lo, 1) * _expanded_size(sub)
        elif op == _sre_constants.SUBPATTERN:
            total += _expanded_size(av[-1])
        elif op == _sre_constants.BRANCH:
            total += sum(_expanded_size(b) for b in av[1])
        elif op in (_sre_constants.ASSERT, _sre_constants.ASSERT_NOT):
            total += _expanded_size(av[1])
        elif op == getattr(_sre_constants, "ATOMIC_GROUP", None):
            total += _expanded_size(av)
        elif op == _sre_constants.GROUPREF_EXISTS:
            total += _expanded_size(av[1]) + (_expanded_size(av[2]) if av[2] else 0)
        else:
            total += 1
        if total > MAX_EXPANSION:
            return total
    return total


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
        self.seconds = 0.0  # spent searching so far

    def skip_to(self, pos: int) -> None:
        """No match may begin before ``pos`` (text streamed while stopping was not allowed)."""
        self._pos = [max(p, pos) for p in self._pos]

    def search(self, text: str) -> tuple[RegexMatch | None, int]:
        """-> (the leftmost full match, longest on a tie; or None, the leftmost place a
        match could still begin: ``len(text)`` if none). Raises StopRegexError."""
        start = time.monotonic()
        budget = min(STEP_TIMEOUT, TOTAL_TIMEOUT - self.seconds)
        what = (f"the step's {STEP_TIMEOUT:g} s" if budget == STEP_TIMEOUT
                else f"the request's {TOTAL_TIMEOUT:g} s")
        best: RegexMatch | None = None
        hold = len(text)
        for i, (pattern, compiled) in enumerate(zip(self.patterns, self._compiled)):
            left = start + budget - time.monotonic()
            try:
                if left <= 0:
                    raise TimeoutError
                m = compiled.search(text, self._pos[i], partial=True, timeout=left)
            except TimeoutError:
                raise StopRegexError(f"stop_regex {pattern!r} ran past {what} search budget on "
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
        self.seconds += time.monotonic() - start
        return best, hold
