"""check.py's view of the row kernel: furca's kernels (furca/constrain/_core_kernels.py,
core_rows.pack) over tables of their own, with a row written into a 256-entry array and
the calls check.py times. Not part of furca."""

from __future__ import annotations

import numpy as np
from numba import njit

from furca.constrain._core_kernels import row as _row
from furca.constrain._core_tables import intern, push
from furca.constrain.core_rows import pack

__all__ = ["Tables", "intern", "noop", "pack", "push", "row", "rows_many"]


class Tables:
    """Kernel stacks and states of their own (core_rows.Core's layout), and a transition
    table of their own (kernel ids)."""

    def __init__(self, n_states=1 << 16, n_stacks=1 << 16, pool=1 << 20):
        self.stk = np.zeros((n_stacks, 4), np.int32)
        self.stk[0] = (-1, -1, 0, 0)
        self.sh = np.full(2 * n_stacks, -1, np.int32)
        self.pool = np.zeros(pool, np.int64)
        self.sinfo = np.zeros((n_states, 3), np.int64)
        self.hh = np.full(2 * n_states, -1, np.int32)
        self.cnt = np.array([1, 0, 1, 0, 0], np.int64)
        self.trans = np.zeros((n_states, 256), np.int32)


@njit(cache=True)
def row(s, P, stk, sh, cnt, pool, sinfo, hh, outrow, buf, ws, rel, seen, sts, cuts, has_need, trans):
    """The kernel's row of s into trans[s], copied to outrow."""
    r = _row(s, P, stk, sh, cnt, pool, sinfo, hh, trans, buf, ws, rel, seen, sts, cuts, has_need)
    outrow[:] = trans[s]
    return r


@njit(cache=True)
def noop(s, P, stk, sh, cnt, pool, sinfo, hh, outrow, buf, ws, rel, seen, sts, cuts, has_need, trans):
    return 0


@njit(cache=True)
def rows_many(states, res, P, stk, sh, cnt, pool, sinfo, hh, outrow, buf, ws, rel, seen, sts, cuts, has_need, trans):
    """row() of each state (one dispatch): res[i] its result."""
    for i in range(states.shape[0]):
        res[i] = _row(states[i], P, stk, sh, cnt, pool, sinfo, hh, trans, buf, ws, rel, seen, sts, cuts, has_need)
