"""The automaton's transition table past its first rows (automaton.LazyAutomaton._grow):
a reserved anonymous mapping, and the pool of dropped automata's tables."""

from __future__ import annotations

import mmap
import threading
import weakref

import numpy as np


def reserved_table(rows: int):
    """A transition table of `rows` rows (256 int32 each), or None where the system refuses the
    reservation (strict overcommit). An anonymous mapping whose pages become resident
    when rows are first written (4 rows a page), or the mapping of a dropped
    automaton's table (_TABLES: its written pages kept, so a long-lived process pays
    no page faults for the next grammar's rows; its old rows are never read: a row is
    read only once its state is walkable, after it was written). Not np.zeros: numpy
    advises huge pages for arrays that large, and the first row written would then
    fault in (zero) 2 MB at once, ~1 ms here."""
    size = rows * 256 * 4
    buf = _TABLES.take(size)
    if buf is None:
        try:
            buf = mmap.mmap(-1, size)
        except (OSError, ValueError):
            return None
    arr = np.frombuffer(buf, dtype=np.int32)  # every view of the table has arr as its base
    # when no view is left: kept for the next table. A weakref with a callback, not
    # weakref.finalize (Python code with a class-wide registry, whose pages a process
    # forked after set-up copies at its first compile); kept alive in _GIVE_BACK until called
    ref = weakref.ref(arr, _giver(buf))
    _GIVE_BACK[id(ref)] = ref
    return arr.reshape(rows, 256)


_GIVE_BACK: dict = {}  # id -> the weakref of each live table (reserved_table; a weakref of an array is unhashable)


def _giver(buf):
    def give(ref):
        _GIVE_BACK.pop(id(ref), None)
        _TABLES.give(buf)

    return give


class _TablePool:
    """The reserved transition tables of dropped automata (at most MAX_KEPT), each
    with its first KEEP_BYTES resident and the rest returned to the system: at most 16
    MB a process. A table is a 1 GB reservation of address space (a 64-bit process has
    128 TB); where the system refuses one (strict overcommit), the table keeps doubling."""

    MAX_KEPT = 4
    KEEP_BYTES = 4 << 20

    def __init__(self):
        self._lock = threading.Lock()
        self._free: list = []

    def take(self, size: int):
        """A kept table of `size` bytes, or None."""
        with self._lock:
            for i, buf in enumerate(self._free):
                if len(buf) == size:
                    return self._free.pop(i)
        return None

    def give(self, buf) -> None:
        try:
            buf.madvise(mmap.MADV_DONTNEED, self.KEEP_BYTES, len(buf) - self.KEEP_BYTES)
        except (OSError, ValueError, AttributeError):
            return  # dropped: unmapped with buf
        with self._lock:
            if len(self._free) < self.MAX_KEPT:
                self._free.append(buf)


_TABLES = _TablePool()
