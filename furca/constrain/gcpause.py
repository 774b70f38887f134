"""The cyclic GC paused while a grammar's structures grow (a compile, a new state's mask).

Both allocate 10^3-10^6 small tuples, lists and dicts that all live on. With the GC on,
every 700 allocations start a young collection that traverses them again, and their
growth triggers full collections of the whole process heap (~45 ms each with numba and
the tokenizer loaded): a third of a large mask's time, and most of its worst steps.
Paused, the new objects are traversed once, by a young collection run as the pause ends
(left to the allocation counter, the collection after a pause escalates to the older
generations whenever their counters are due, full collections included). Measured
(100 MaskBench schemas, thread CPU time, two rounds: max step 79 / 90 ms without a pause,
65 / 81 ms paused, 26 / 23 ms paused and collected at the end; p99 1.46 / 1.94, 1.48 / 1.60,
1.54 / 1.45 ms; full collections 8, 8, 2).
The young collection runs at every pause's end, even when the young generation is below
its threshold (~10 µs a new mask at the p50): left to the allocation counter, the next
collection then starts inside a later step, outside any pause, and escalates whenever the
older generations' counters are due. Measured (100 MaskBench schemas, one process, by
gc.callbacks): collecting only past the threshold saved 54 ms of young collections in
the fills but moved 44 middle-generation (59 ms) and 3 full collections (198 ms, 66-72
ms each) into them; collecting every time, none of either ran inside a fill.

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


class GcPause:
    """enter() / exit() (in a try / finally) — counted, thread-safe."""

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
            restored = self._restore and (self._running == 0 or time.monotonic() - self._since > self.MAX_PAUSE_S)
            if restored:
                gc.enable()
                self._restore = False
        if restored:
            gc.collect(0)  # the pause's young objects only, in the slow step that made them


GC_PAUSE = GcPause()
