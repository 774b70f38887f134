"""The cyclic GC paused while a grammar's structures grow (a compile, a new state's mask).

Both allocate 10^3-10^6 small tuples, lists and dicts that all live on. With the GC on,
every 700 allocations start a young collection that traverses them again, and their
growth triggers full collections of the whole process heap (~45 ms each with numba and
the tokenizer loaded): a third of a large mask's time, and most of its worst steps.
Paused, the new objects are traversed once, at the first collection after the pause.

gc.disable() is process-wide: one pause that re-enabled the GC while another still ran
would let the next collection traverse the other's live young objects (a 0.1-0.3 s
pause of every thread, GIL held). So the pause is counted: off when the first pause
starts, on when the last one ends (if it was on before), or at a pause's end once the GC
has been off MAX_PAUSE_S (back-to-back pauses never starve it; it is then left on until
they drain).
"""

from __future__ import annotations

import gc
import threading
import time
from contextlib import contextmanager


class GcPause:
    """enter() / exit(), or ``with GC_PAUSE.paused():`` — counted, thread-safe."""

    MAX_PAUSE_S = 60.0

    def __init__(self):
        self._lock = threading.Lock()
        self._running = 0
        self._restore = False  # turn the GC back on when the last pause ends
        self._since = 0.0

    def enter(self) -> None:
        with self._lock:
            if self._running == 0 and gc.isenabled():
                gc.disable()
                self._restore, self._since = True, time.monotonic()
            self._running += 1

    def exit(self) -> None:
        with self._lock:
            self._running -= 1
            if self._restore and (self._running == 0 or time.monotonic() - self._since > self.MAX_PAUSE_S):
                gc.enable()
                self._restore = False

    @contextmanager
    def paused(self):
        self.enter()
        try:
            yield
        finally:
            self.exit()


GC_PAUSE = GcPause()
