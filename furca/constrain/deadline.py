"""Compile deadlines: a compile's work stops when its time is up.

``with compile_deadline(seconds):`` gives the calling thread a deadline (``time.monotonic()``
+ seconds, or an absolute ``at=``); ``check()`` raises `CompileTimeout` once it has passed.
The compiler's long loops call ``check()`` (the schema translator per schema node and
alternative, the GBNF / IR front ends per rule, the NFA builder per rule, the automaton
per new state and closure, the slice searches per step), so a compile past its deadline
raises within a few milliseconds and its thread is free again. Nothing partial reaches
the compiler's cache: `GrammarCompiler` stores a grammar only after its compile returned.

Contract:
- the deadline is per thread and per block (blocks nest; the earlier deadline wins);
  threads without one (the engine's scheduler computing masks lazily while decoding, an
  offline ``Engine.generate``) are never interrupted;
- ``check()`` costs one thread-local read and a clock read (~0.1 µs): call it once per
  unit of work that costs at least a few µs, never per byte;
- once past the deadline every later ``check()`` raises too, so a caller that swallows
  one exception (a fallback path) meets the next.
"""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from typing import Iterator

from furca.errors import CompileError

__all__ = ["CompileTimeout", "compile_deadline", "check", "remaining"]


class CompileTimeout(CompileError):
    """A compile ran past its deadline; its work stopped there."""


class _Deadline(threading.local):
    at: float | None = None  # time.monotonic() deadline of this thread's compile; None: none
    seconds: float = 0.0     # the limit, for the message


_state = _Deadline()
_clock = time.monotonic


@contextmanager
def compile_deadline(seconds: float | None, *, at: float | None = None) -> Iterator[None]:
    """Within the block, this thread's compile raises `CompileTimeout` past the deadline:
    ``at`` (a ``time.monotonic()`` value) if given, else now + ``seconds``. seconds None
    and at None: no deadline added. ``seconds`` names the limit in the error message."""
    prev_at, prev_s = _state.at, _state.seconds
    if at is None and seconds is not None:
        at = _clock() + seconds
    if at is not None and (prev_at is None or at < prev_at):
        _state.at = at
        _state.seconds = float(seconds if seconds is not None else max(0.0, at - _clock()))
    try:
        yield
    finally:
        _state.at, _state.seconds = prev_at, prev_s


def check() -> None:
    """Raises `CompileTimeout` if this thread's compile deadline has passed."""
    at = _state.at
    if at is not None and _clock() > at:
        raise CompileTimeout(f"did not compile within {_state.seconds:g} s")


def remaining() -> float | None:
    """Seconds left before this thread's deadline (None: no deadline)."""
    at = _state.at
    return None if at is None else at - _clock()
