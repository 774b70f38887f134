"""What a forked child pays per page it writes first: a page it shares with its parent
(copy-on-write), a fresh anonymous page (zero-fill), a fresh mapping populated in bulk
(MADV_POPULATE_WRITE, Linux 5.14+), and one under MADV_HUGEPAGE (where the kernel gives
transparent huge pages).

    .venv/bin/python bench/page_fault_cost.py [--pages 20000]

The shared harness forks a child per schema; each first write there to a page of the
parent's is a copy-on-write fault (bench/constrain_tail.py --touch-parent tells how many
of the steps' faults those are). Figures: bench/results/constrain.md (session 38).
"""

from __future__ import annotations

import argparse
import mmap
import os
import resource
import time

import numpy as np

MADV_POPULATE_WRITE = 23


def child(kind: str, pages: int, parent: np.ndarray) -> None:
    size = pages * 4096
    if kind == "copy-on-write":
        b = parent
    else:
        m = mmap.mmap(-1, size)
        if kind == "huge pages":
            m.madvise(mmap.MADV_HUGEPAGE)
        if kind == "populated":
            t0 = time.perf_counter()
            m.madvise(MADV_POPULATE_WRITE)
            print(f"  populating itself: {1e6 * (time.perf_counter() - t0) / pages:.3f} µs a page")
        b = np.frombuffer(m, np.uint8)
    f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    t0 = time.perf_counter()
    b[::4096] = 2
    t = time.perf_counter() - t0
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0
    print(f"{kind:14s} {1e6 * t / pages:.3f} µs a page written, {faults} faults", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pages", type=int, default=20000)
    a = ap.parse_args()
    parent = np.ones(a.pages * 4096, np.uint8)  # resident in the parent
    for kind in ("copy-on-write", "zero-fill", "populated", "huge pages"):
        pid = os.fork()
        if pid == 0:
            try:
                child(kind, a.pages, parent)
            finally:
                os._exit(0)
        os.waitpid(pid, 0)


if __name__ == "__main__":
    main()
