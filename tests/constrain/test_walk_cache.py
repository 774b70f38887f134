"""The compiled trie walks load from numba's on-disk cache in a process after the first.
Defined inside a builder function, the walks referenced a helper kernel that was a new
object in every process; numba keys a cached kernel also by the values it closes over, so
the cache never hit: every process compiled the walks again (~1.2 s) and added entries to
the cache (1,347 files in one working tree)."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from furca.constrain import _walk

PROBE = """
import json
from furca.constrain import _walk
walk = _walk.get_walk()
walk_range, walk_roots = _walk.get_walk_range()
stats = [f.stats for f in (walk, walk_range, walk_roots)]
print(json.dumps([sum(s.cache_hits.values()) for s in stats] + [sum(s.cache_misses.values()) for s in stats]))
"""


@pytest.mark.skipif(_walk.get_walk() is None, reason="the compiled walks (numba)")
def test_a_second_process_loads_the_walks_from_the_cache():
    runs = []
    for _ in range(2):  # the first may compile (a fresh checkout); the second must not
        out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=600, check=True)
        runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
    hits, misses = runs[1][:3], runs[1][3:]
    assert misses == [0, 0, 0], runs
    assert all(h > 0 for h in hits), runs
